"""fabric_bench: argument checks, the own test end to end on loopback, iperf3 and perftest on captured outputs."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric import _fabric_bench as fb
from ansible_collections.sparkfleet.vllm.plugins.modules import fabric_bench

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "fabric_bench")


def read(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return f.read()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def commands(node_commands):
    """run_command answered from a list of (rc, stdout, stderr), in order; the calls are kept."""
    answers = []
    return node_commands(answers, unwrap=False).ran, answers


BASE = dict(role="client", test="bandwidth", bind="10.99.1.11", peer="10.99.1.12", port=29650,
            subnet="10.99.1.0/24", timeout=30)


@pytest.mark.parametrize("args, message", [
    (dict(peer="10.99.0.11"), "peer 10.99.0.11 is outside the fabric subnet 10.99.1.0/24"),
    (dict(bind="10.99.1.12"), "bind and peer are the same address"),
    (dict(transport="rdma"), "transport=rdma needs device"),
    (dict(transport="rdma", device="rocep1s0f1", tool="iperf3"), "transport=rdma measures with perftest"),
    (dict(tool="perftest"), "perftest measures RDMA, not TCP"),
    (dict(tool="iperf3", test="latency"), "iperf3 measures bandwidth only"),
    (dict(peer="fabric-2"), "peer='fabric-2' is not an IPv4 address"),
    (dict(port=70000), "port=70000 is not a TCP port"),
    (dict(streams=65), "streams=65 is above 64"),
    (dict(seconds=30), "timeout=30 leaves no room for a 30.0 s test"),
])
def test_bad_arguments_fail_before_anything_runs(run_module, commands, args, message):
    result = run_module(fabric_bench, dict(BASE, **args))
    assert result["failed"] and message in result["msg"], result
    assert commands[0] == []


def test_python_bandwidth_client_against_a_real_server(run_module):
    port = free_port()
    box = {}
    # The server listens on 127.0.0.1 and takes connections from 127.0.0.3 only (the client's bind address).
    t = threading.Thread(target=lambda: box.update(seen=fb.serve("127.0.0.1", port, "127.0.0.3", 20)))
    t.start()
    args = dict(BASE, bind="127.0.0.3", peer="127.0.0.1", subnet="127.0.0.0/8", port=port, seconds=0.5, streams=2)
    result = run_module(fabric_bench, args, check_mode=True)
    t.join(20)
    assert result.get("failed") is None, result
    assert result["tool"] == "python" and result["gbps"] > 0 and result["changed"] is False
    assert box["seen"]["bytes"] == result["result"]["bytes"] and box["seen"]["rejected"] == []


def test_python_client_with_nobody_listening_fails_naming_both_ends(run_module):
    port = free_port()
    result = run_module(fabric_bench, dict(BASE, test="latency", bind="127.0.0.3", peer="127.0.0.1",
                                           subnet="127.0.0.0/8", port=port, timeout=5))
    assert result["failed"]
    assert "latency tcp test (client) between 127.0.0.3 and 127.0.0.1 failed: nothing answered" in result["msg"]


def test_iperf3_client_retries_while_the_server_is_not_up(run_module, commands):
    calls, answers = commands
    answers.extend([(0, read("iperf3_refused.json"), ""), (0, read("iperf3_client.json"), "")])
    result = run_module(fabric_bench, dict(BASE, tool="iperf3", streams=4, seconds=2))
    assert result.get("failed") is None, result
    assert result["tool"] == "iperf3" and result["gbps"] == fb.parse_iperf3(read("iperf3_client.json"))["gbps"]
    assert len(calls) == 2
    assert calls[1] == ["/usr/bin/timeout", "-k", "5", calls[1][3], "/usr/bin/iperf3", "-c", "10.99.1.12", "-B",
                        "10.99.1.11", "-p", "29650", "-t", "2", "-P", "4", "-J"]
    assert 0 < int(calls[1][3]) <= 30  # bounded by what is left of the timeout


def test_iperf3_server_is_one_off_on_the_fabric_address(run_module, commands):
    calls, answers = commands
    answers.append((0, read("iperf3_server.json"), ""))
    result = run_module(fabric_bench, dict(BASE, role="server", tool="iperf3"))
    assert result["role"] == "server" and result["result"]["bytes"] > 0
    assert calls[0][-8:] == ["/usr/bin/iperf3", "-s", "-1", "-B", "10.99.1.11", "-p", "29650", "-J"]


def test_perftest_in_the_image_runs_under_timeout_inside_the_container(run_module, commands):
    calls, answers = commands
    answers.append((0, read("ib_write_bw_spark.txt"), ""))
    result = run_module(fabric_bench, dict(BASE, transport="rdma", device="rocep1s0f0", gid_index=3,
                                           container="sparkfleet-ray", seconds=5))
    assert result.get("failed") is None, result
    assert result["gbps"] == 92.57 and result["path_mtu"] == 1024 and result["tool"] == "ib_write_bw"
    argv = calls[0]
    at = argv.index("/usr/bin/docker")
    assert argv[at:at + 7] == ["/usr/bin/docker", "exec", "sparkfleet-ray", "timeout", "-k", "5", "30"]
    assert argv[at + 7:] == ["ib_write_bw", "-d", "rocep1s0f0", "-i", "1", "-p", "29650", "-F", "-x", "3",
                             "--report_gbits", "-D", "5", "10.99.1.12"]


def test_perftest_latency_client(run_module, commands):
    calls, answers = commands
    answers.append((0, read("ib_write_lat_mlx4.txt"), ""))
    result = run_module(fabric_bench, dict(BASE, test="latency", transport="rdma", device="mlx4_0", count=500))
    assert result["latency_us"] == 0.98 and result["path_mtu"] == 2048
    assert calls[0][4:] == ["/usr/bin/ib_write_lat", "-d", "mlx4_0", "-i", "1", "-p", "29650", "-F", "-n", "500",
                            "-s", "64", "10.99.1.12"]


def test_perftest_without_devices_fails_with_its_words(run_module, commands):
    _calls, answers = commands
    answers.append((1, read("ib_write_bw_nodev.txt"), ""))
    result = run_module(fabric_bench, dict(BASE, role="server", transport="rdma", device="rocep1s0f1"))
    assert result["failed"] and "Unable to find the Infiniband/RoCE device" in result["msg"]
    assert "ib_write_bw server on rocep1s0f1 (10.99.1.11, peer 10.99.1.12)" in result["msg"]
