"""qualify_facts: tools on the node and in the serving container, torch's view, RoCE ports (captured ibv_devinfo)."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.sparkfleet.vllm.plugins.modules import qualify_facts

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "qualify_facts")
SPARK_DEVINFO = open(os.path.join(FIXTURES, "ibv_devinfo_spark.txt")).read()


@pytest.fixture
def node(node_commands):
    """A node: `bins` are the tools on it; `answer(argv)` gives (rc, out, err) for each command."""
    state = {"bins": {"docker", "timeout"}, "answer": None}

    def answer(cmd):          # the test sets state["answer"] after the fixture returns
        return state["answer"](cmd)
    fake = node_commands(answer, bins=state["bins"], unwrap=False)
    state["calls"] = fake.ran
    return state


def lab_container(cmd):
    """What the lab's Ray container answers (torch 2.13 CPU, no perftest, no iperf3)."""
    if cmd[0].endswith("timeout"):
        cmd = cmd[4:]
    if cmd[1] == "inspect":
        return 0, "true\n", ""
    if "sh" in cmd and "-c" in cmd:
        return 0, "python3=/opt/venv/bin/python3\ntimeout=/usr/bin/timeout\n", ""
    if "-c" in cmd and "import json" in cmd[-1]:
        return 0, json.dumps({"version": "2.13.0+cpu", "cuda": False, "gpus": 0, "nccl": None}) + "\n", ""
    raise AssertionError(cmd)


def test_lab_node_and_container(run_module, node):
    node["answer"] = lab_container
    result = run_module(qualify_facts, {"container": "sparkfleet-ray"}, check_mode=True)
    assert result.get("failed") is None, result
    assert result["node_tools"]["iperf3"] is None and result["node_tools"]["ib_write_bw"] is None
    assert result["container_running"] is True
    assert result["container_tools"]["python3"] == "/opt/venv/bin/python3"
    assert result["container_tools"]["ib_write_bw"] is None
    assert result["torch"] == {"version": "2.13.0+cpu", "cuda": False, "gpus": 0, "nccl": None}
    assert result["rdma_ports"] == {} and result["vllm_bench"] is None and result["changed"] is False


def test_spark_node_with_perftest_and_ibv_devinfo(run_module, node):
    node["bins"] |= {"ibv_devinfo", "ib_write_bw", "ib_write_lat", "iperf3"}
    node["answer"] = lambda cmd: (0, SPARK_DEVINFO, "") if cmd[-1] == "/usr/bin/ibv_devinfo" else (1, "", "?")
    result = run_module(qualify_facts, {})
    assert result["node_tools"]["ib_write_bw"] == "/usr/bin/ib_write_bw" and result["node_tools"]["iperf3"]
    assert result["rdma_ports"]["rocep1s0f1"]["active_mtu"] == 4096
    assert result["container_running"] is None


def test_a_container_that_does_not_run_fails_with_the_fix(run_module, node):
    node["answer"] = lambda cmd: (1, "", "Error: No such object: sparkfleet-ray")
    result = run_module(qualify_facts, {"container": "sparkfleet-ray"})
    assert result["failed"] and "container sparkfleet-ray is not running on this node" in result["msg"]
    assert "run site.yml first" in result["hint"]


def test_vllm_bench_is_found_by_its_options_not_by_rc(run_module, node):
    def answer(cmd):
        cmd = cmd[4:] if cmd[0].endswith("timeout") else cmd
        if cmd[1] == "inspect":
            return 0, "true\n", ""
        # the lab's stand-in: `vllm bench serve --help` prints bench's usage without --max-concurrency
        return 0, "usage: vllm bench [-h]\n", ""
    node["answer"] = answer
    assert run_module(qualify_facts, {"bench_container": "sparkfleet-vllm"})["vllm_bench"] is False

    node["answer"] = lambda cmd: (0, "true\n", "") if "inspect" in cmd else (
        0, "usage: vllm bench serve ...\n  --max-concurrency MAX_CONCURRENCY\n", "")
    assert run_module(qualify_facts, {"bench_container": "sparkfleet-vllm"})["vllm_bench"] is True


def test_parse_torch_takes_the_last_json_line():
    assert qualify_facts.parse_torch("warning: x\n{\"version\": \"2.9\", \"cuda\": true}\n")["cuda"] is True
    assert "printed no result" in qualify_facts.parse_torch("Traceback ...")["error"]
