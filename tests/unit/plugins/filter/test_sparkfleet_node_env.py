"""sparkfleet_node_env: fabric env + policy flags + per-node overrides."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.vllm.plugins.filter.sparkfleet_node_env import FilterModule, sparkfleet_node_env

FABRIC = {
    "interface": "enp1s0f1np1",
    "ip": "192.168.200.12",
    "env": {
        "VLLM_HOST_IP": "192.168.200.12",
        "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
        "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
        "NCCL_IB_GID_INDEX": "3",
    },
}


def test_registered_under_its_name():
    assert FilterModule().filters()["sparkfleet_node_env"] is sparkfleet_node_env


def test_takes_env_from_the_fact_and_sorts():
    env = sparkfleet_node_env(FABRIC)
    assert env == FABRIC["env"]
    assert list(env) == sorted(env)


def test_accepts_a_plain_env_dict():
    assert sparkfleet_node_env({"A": "1"}) == {"A": "1"}


def test_memory_monitor_off_for_gb10():
    env = sparkfleet_node_env(FABRIC, ray_memory_monitor=False, ray_memory_usage_threshold=0.98,
                              engine_ready_timeout_s=1800)
    assert env["RAY_memory_monitor_refresh_ms"] == "0"
    assert env["RAY_memory_usage_threshold"] == "0.98"
    assert env["VLLM_ENGINE_READY_TIMEOUT_S"] == "1800"


def test_memory_monitor_on_removes_the_off_switch():
    env = sparkfleet_node_env({"env": {"RAY_memory_monitor_refresh_ms": "0"}}, ray_memory_monitor=True)
    assert "RAY_memory_monitor_refresh_ms" not in env


def test_overrides_win_convert_numbers_and_null_removes():
    env = sparkfleet_node_env(FABRIC, {"NCCL_IB_GID_INDEX": None, "NCCL_DEBUG": "INFO", "NCCL_IB_TIMEOUT": 22,
                                       "RAY_memory_monitor_refresh_ms": "250"},
                              ray_memory_monitor=False)
    assert "NCCL_IB_GID_INDEX" not in env
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_IB_TIMEOUT"] == "22"
    assert env["RAY_memory_monitor_refresh_ms"] == "250"


def test_does_not_modify_the_fact():
    sparkfleet_node_env(FABRIC, {"NCCL_IB_GID_INDEX": None})
    assert FABRIC["env"]["NCCL_IB_GID_INDEX"] == "3"


@pytest.mark.parametrize("args,kwargs,words", [
    ((FABRIC, {"X": "a\nb"}), {}, ["X", "newline"]),
    ((FABRIC, {"X": True}), {}, ["X", "boolean"]),
    ((FABRIC, {"bad-name": "1"}), {}, ["bad-name", "not a valid variable name"]),
    ((FABRIC, ["X=1"]), {}, ["overrides must be a dict"]),
    (({"env": {"A": "x\ny"}},), {}, ["A", "newline"]),
    (("10.0.0.1",), {}, ["sparkfleet_fabric fact"]),
    ((FABRIC,), {"ray_memory_monitor": "no"}, ["ray_memory_monitor", "true or false"]),
    ((FABRIC,), {"ray_memory_usage_threshold": 95}, ["ray_memory_usage_threshold", "(0, 1]"]),
    ((FABRIC,), {"ray_memory_usage_threshold": True}, ["ray_memory_usage_threshold", "number"]),
    ((FABRIC,), {"engine_ready_timeout_s": 0}, ["engine_ready_timeout_s", "positive"]),
    ((FABRIC,), {"engine_ready_timeout_s": "600"}, ["engine_ready_timeout_s", "number"]),
])
def test_rejects(args, kwargs, words):
    with pytest.raises(AnsibleFilterError) as exc:
        sparkfleet_node_env(*args, **kwargs)
    for w in words:
        assert w in str(exc.value)
