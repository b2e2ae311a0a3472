"""nccl_transport on captured and composed container logs (fixtures/nccl_transport)."""

from __future__ import annotations

import os

import pytest

from ansible.module_utils import basic

from ansible_collections.sparkfleet.vllm.plugins.modules import nccl_transport

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "nccl_transport")
DEVS = ["/dev/infiniband/uverbs0"]
NODES = [{"host": "spark-a1", "ip": "192.168.200.12", "head": True},
         {"host": "spark-b2", "ip": "192.168.200.13", "head": False}]
RDMA = {"spark-a1": DEVS, "spark-b2": DEVS}


@pytest.fixture
def logs(monkeypatch, run_module, node_commands):
    calls = []

    def _run(fixture, rc=0, check_mode=False, **args):
        text = open(os.path.join(FIXTURES, fixture)).read() if fixture else ""

        node_commands((rc, text, "" if rc == 0 else "Error: No such container: sparkfleet-vllm"), unwrap=False).ran = calls
        warned = []
        monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, w: warned.append(w))
        args.setdefault("container", "sparkfleet-vllm")
        result = run_module(nccl_transport, args, check_mode=check_mode)
        result["warned"] = warned
        return result

    _run.calls = calls
    return _run


def test_ib_everywhere_passes(logs):
    result = logs("spark_ray_ib.log", nodes=NODES, rdma_devices=RDMA)
    assert not result.get("failed"), result
    assert result["changed"] is False and result["transports"] == {"spark-a1": "IB", "spark-b2": "IB"}
    assert logs.calls == [["/usr/bin/docker", "logs", "sparkfleet-vllm"]]


def test_socket_on_rdma_nodes_fails_naming_the_node(logs):
    result = logs("spark_ray_socket_worker.log", nodes=NODES, rdma_devices=RDMA, check_mode=True)
    assert result["failed"]
    assert "spark-b2 (192.168.200.13): NCCL uses NET/Socket" in result["msg"]
    assert result["transports"]["spark-b2"] == "Socket"


def test_socket_allowed_warns(logs):
    result = logs("spark_ray_socket_worker.log", nodes=NODES, rdma_devices=RDMA, allow_tcp_fallback=True)
    assert not result.get("failed") and any("spark-b2" in w for w in result["warned"])


def test_real_h200_socket_without_rdma_nodes_passes(logs):
    result = logs("h200_net_no_ib_device.log")
    assert not result.get("failed") and result["transports"] == {"vm": "Socket"}


def test_no_container_fails_with_hint(logs):
    result = logs(None, rc=1)
    assert result["failed"] and "sparkfleet-vllm" in result["msg"] and "systemctl" in result["hint"]


def test_socket_on_a_node_without_devices_passes(logs):
    result = logs("spark_ray_socket_worker.log", nodes=NODES, rdma_devices={"spark-a1": [], "spark-b2": []})
    assert not result.get("failed"), result
    assert result["transports"] == {"spark-a1": "Socket", "spark-b2": "Socket"}


@pytest.mark.parametrize("args, msg", [
    ({"nodes": [{"host": "spark-a1"}]}, "needs host and ip"),
    ({"nodes": NODES, "rdma_devices": {"spark-a1": "/dev/infiniband/uverbs0"}}, "rdma_devices[spark-a1]"),
])
def test_bad_input_names_it(logs, args, msg):
    result = logs("spark_ray_ib.log", **args)
    assert result["failed"] and msg in result["msg"]


def test_hints_name_the_settings_as_the_caller_says(logs):
    names = {"container_rdma": "ray_cluster_rdma: true", "allow_tcp_fallback": "sparkfleet_allow_tcp_fallback"}
    result = logs("spark_ray_socket_worker.log", nodes=NODES, rdma_devices=RDMA, setting_names=names)
    assert result["failed"] and "memory limit (ray_cluster_rdma: true)" in result["msg"]
    result = logs("spark_ray_socket_worker.log", nodes=NODES, rdma_devices=RDMA, allow_tcp_fallback=True,
                  setting_names=names)
    assert result["warned"] and all(w.endswith("(allowed: sparkfleet_allow_tcp_fallback is true)")
                                    for w in result["warned"])
    plain = logs("spark_ray_socket_worker.log", nodes=NODES, rdma_devices=RDMA)
    assert "--ulimit memlock=-1 on the container" in plain["msg"] and "ray_cluster_rdma" not in plain["msg"]


def test_unknown_setting_names_are_refused_before_reading_the_log(logs):
    result = logs("spark_ray_ib.log", nodes=NODES, rdma_devices=RDMA, setting_names={"rdma": "x"})
    assert result["failed"] and result["msg"] == "setting_names has unknown setting(s) rdma"
    assert logs.calls == []
