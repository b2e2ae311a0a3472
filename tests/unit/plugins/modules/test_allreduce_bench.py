"""allreduce_bench on the lab's captured gloo runs (both ranks, and a rank whose peer never came)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric import _allreduce
from ansible_collections.sparkfleet.vllm.plugins.modules import allreduce_bench

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "allreduce_bench")
NCCL_FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "nccl_transport")
NODES = [{"host": "spark-1", "ip": "10.99.1.11", "head": True}, {"host": "spark-2", "ip": "10.99.1.12"}]


def read(name, where=FIXTURES):
    with open(os.path.join(where, name), encoding="utf-8") as f:
        return f.read()


@pytest.fixture
def container(node_commands):
    state = {"run": (0, "", "")}

    def answer(cmd):
        if cmd[-1] == "command -v python3":
            return 0, "/opt/venv/bin/python3\n", ""
        return state["run"]
    state["calls"] = node_commands(answer, unwrap=False).ran
    return state


def test_rank_1_of_the_lab_gloo_run(run_module, container):
    container["run"] = (0, read("lab_gloo_rank1.out"), "")
    result = run_module(allreduce_bench, dict(container="sparkfleet-ray", nodes=NODES, ip="10.99.1.12",
                                              max_bytes=64 << 20), check_mode=True)
    assert result.get("failed") is None, result
    assert result["rank"] == 1 and result["world"] == 2 and result["backend"] == "gloo"
    assert [r["bytes"] for r in result["results"]] == [1 << 20, 4 << 20, 16 << 20]
    top = result["results"][-1]
    assert top["algbw_gbs"] == pytest.approx(top["bytes"] / top["seconds"] / 1e9, rel=1e-3)
    assert top["busbw_gbs"] == top["algbw_gbs"]  # 2(n-1)/n = 1 for two ranks
    assert result["busbw_gbs"] == top["busbw_gbs"] and result["correct"] is True
    assert result["transport"] is None and result["socket_ifname"] == "enp1s0f1np1"
    argv = container["calls"][-1]
    assert argv[:4] == ["/usr/bin/timeout", "-k", "5", "315"]  # bounded here ...
    argv = argv[4:]
    assert argv[:2] == ["/usr/bin/docker", "exec"]
    env = [argv[i + 1] for i, a in enumerate(argv) if a == "-e"]
    assert {"MASTER_ADDR=10.99.1.11", "RANK=1", "WORLD_SIZE=2", "NCCL_DEBUG=INFO"} <= set(env)
    at = argv.index("sparkfleet-ray")
    assert argv[at + 1:at + 5] == ["timeout", "-k", "5", "300"]  # ... and inside the container
    assert argv[-6:] == ["auto", ",".join(str(s) for s in (1 << 20, 4 << 20, 16 << 20, 64 << 20)), "10", "3", "300",
                         str(16 << 20)]


def test_a_peer_that_never_came_fails_with_torch_words(run_module, container):
    container["run"] = (1, "", read("lab_gloo_peer_missing.out"))
    result = run_module(allreduce_bench, dict(container="sparkfleet-ray", nodes=NODES, ip="10.99.1.11"))
    assert result["failed"]
    assert "the auto all-reduce (rank 0 of 2) failed" in result["msg"]
    assert "Timed out after 9 seconds waiting for clients. 1/2 clients joined." in result["msg"]


def test_nccl_lines_give_the_transport(run_module, container):
    # A real torch.distributed NCCL all-reduce log (H200, NCCL_IB_DISABLE=1: NET/Socket; nccl_transport's capture)
    # with the script's MARK lines of an NCCL run.
    marks = ('SPARKFLEET_ALLREDUCE {"init": true, "backend": "nccl", "rank": 0, "world": 2, "init_s": 1.2}\n'
             'SPARKFLEET_ALLREDUCE {"bytes": 1073741824, "seconds": 0.0512}\n'
             'SPARKFLEET_ALLREDUCE {"done": true, "correct": true}\n')
    container["run"] = (0, read("h200_net_ib_disabled.log", NCCL_FIXTURES) + marks, "")
    result = run_module(allreduce_bench, dict(container="sparkfleet-ray", nodes=NODES, ip="10.99.1.11"))
    assert result["backend"] == "nccl" and result["transport"] == "Socket"
    assert result["nccl"][0]["interface"] == "eth0"
    assert result["busbw_gbs"] == pytest.approx(1073741824 / 0.0512 / 1e9, rel=1e-3)


def test_a_wrong_sum_fails(run_module, container):
    text = read("lab_gloo_rank1.out").replace('"correct": true', '"correct": false')
    container["run"] = (0, text, "")
    result = run_module(allreduce_bench, dict(container="sparkfleet-ray", nodes=NODES, ip="10.99.1.12"))
    assert result["failed"] and "returned a wrong sum on rank 1" in result["msg"]


@pytest.mark.parametrize("args, message", [
    (dict(ip="10.99.1.13"), "ip 10.99.1.13 is not among the nodes' fabric IPs"),
    (dict(nodes=NODES[:1]), "needs at least 2 nodes"),
    (dict(nodes=[{"host": "a"}, {"host": "b", "ip": "10.99.1.12"}]), "every entry of nodes needs a fabric ip"),
    (dict(max_bytes=1000), "max_bytes and gloo_max_bytes must be at least min_bytes"),
    (dict(factor=1), "factor=1 is below 2"),
])
def test_bad_arguments(run_module, container, args, message):
    base = dict(container="sparkfleet-ray", nodes=NODES, ip="10.99.1.11")
    result = run_module(allreduce_bench, dict(base, **args))
    assert result["failed"] and message in result["msg"]
    assert container["calls"] == []


def test_sizes_and_bus_factor():
    assert _allreduce.sizes(1 << 20, 1 << 30, 4) == [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]
    assert _allreduce.sizes(1 << 20, 3 << 20, 2) == [1 << 20, 2 << 20, 3 << 20]
    assert _allreduce.bus_factor(2) == 1.0 and _allreduce.bus_factor(4) == 1.5


def test_the_script_caps_gloo_sizes_and_checks_the_sum():
    assert "if backend == \"gloo\":" in _allreduce.SCRIPT and "gloo_max" in _allreduce.SCRIPT
    compile(_allreduce.SCRIPT, "<allreduce>", "exec")
