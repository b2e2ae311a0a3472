"""_nccl: which transport NCCL chose, from captured NCCL_DEBUG=INFO logs (fixtures/nccl_transport/README.md)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric import _nccl

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "modules", "fixtures", "nccl_transport")
DEVS = ["/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0"]
SPARKS = {"192.168.200.12": {"name": "spark-a1", "rdma_devices": DEVS},
          "192.168.200.13": {"name": "spark-b2", "rdma_devices": DEVS}}


def _log(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


@pytest.mark.parametrize("name, transport, channels", [
    ("h200_net_no_ib_device.log", "Socket", ["NET/Socket/0"]),
    ("h200_net_ib_disabled.log", "Socket", ["NET/Socket/0"]),
    ("h200_p2p.log", "local", ["P2P/CUMEM"]),
    ("spark_ray_ib.log", "IB", ["NET/IB/0"]),
])
def test_captured_logs(name, transport, channels):
    procs = _nccl.parse(_log(name))
    assert len(procs) == 2
    for proc in procs:
        assert proc["transport"] == transport
        assert proc["channels"] == channels


def test_real_h200_process_addresses():
    procs = _nccl.parse(_log("h200_net_no_ib_device.log"))
    assert {(p["host"], p["ip"], p["interface"], p["network"]) for p in procs} == {("vm", "192.0.2.2", "eth0", "Socket")}


def test_ray_prefix_gives_the_worker_ip_and_bootstrap_gives_the_head_ip():
    procs = _nccl.parse(_log("spark_ray_ib.log"))
    assert [(p["host"], p["ip"], p["interface"]) for p in procs] == [
        ("spark-a1", "192.168.200.12", "enp1s0f1np1"), ("spark-b2", "192.168.200.13", "enP2p1s0f1np1")]
    assert procs[0]["ib_devices"] == ["rocep1s0f1", "roceP2p1s0f1"]
    assert _nccl.summary(procs, SPARKS) == {"spark-a1": "IB", "spark-b2": "IB"}
    assert _nccl.judge(procs, SPARKS) == ([], [])


def test_socket_on_an_rdma_node_fails_naming_node_and_fix():
    procs = _nccl.parse(_log("spark_ray_socket_worker.log"))
    problems, warnings = _nccl.judge(procs, SPARKS)
    assert warnings == []
    assert len(problems) == 2  # both ends fell back: NCCL needs the same network on both sides
    worker = [m for m in problems if m.startswith("spark-b2 (192.168.200.13)")]
    assert worker and "NET/Socket" in worker[0] and "enP2p1s0f1np1" in worker[0]
    assert "--ulimit memlock=-1" in worker[0] and "/dev/infiniband/uverbs" in worker[0]


def test_tcp_fallback_allowed_is_a_warning():
    procs = _nccl.parse(_log("spark_ray_socket_worker.log"))
    problems, warnings = _nccl.judge(procs, SPARKS, allow_tcp_fallback=True)
    assert problems == [] and len(warnings) == 2 and warnings[0].endswith(" (allowed: allow_tcp_fallback is true)")
    names = {"allow_tcp_fallback": "sparkfleet_allow_tcp_fallback", "container_rdma": "ray_cluster_rdma: true"}
    problems, warnings = _nccl.judge(procs, SPARKS, allow_tcp_fallback=True, names=names)
    assert warnings[0].endswith(" (allowed: sparkfleet_allow_tcp_fallback is true)")
    assert "(ray_cluster_rdma: true)" in warnings[0]


def test_socket_without_rdma_devices_is_fine():
    procs = _nccl.parse(_log("h200_net_ib_disabled.log"))
    nodes = {"192.0.2.2": {"name": "h200", "rdma_devices": []}}
    assert _nccl.judge(procs, nodes) == ([], [])
    assert _nccl.summary(procs, nodes) == {"h200": "Socket"}


def test_no_nccl_lines_warns():
    problems, warnings = _nccl.judge(_nccl.parse("(APIServer pid=1) INFO ready\n"), SPARKS)
    assert problems == [] and "NCCL_DEBUG=INFO" in warnings[0]


def test_ansi_codes_and_ray_repeat_suffix_are_ignored():
    line = ("\x1b[36m(RayWorkerWrapper pid=188, ip=192.168.200.13)\x1b[0m spark-b2:188:188 [0] NCCL INFO "
            "Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IBext_v11/0 [repeated 3x across cluster]\n")
    procs = _nccl.parse(line)
    assert procs[0]["ip"] == "192.168.200.13" and procs[0]["channels"] == ["NET/IBext_v11/0"]
    assert procs[0]["transport"] == "IB"


def test_nccl_warn_lines_are_kept():
    procs = _nccl.parse("spark-b2:9:9 [0] NCCL WARN Bootstrap : no socket interface found\n")
    assert procs[0]["warnings"] == ["Bootstrap : no socket interface found"] and procs[0]["transport"] is None


@pytest.mark.parametrize("name, transport", [("IB", "IB"), ("IBext_v11", "IB"), ("NET/IB/1", "IB"),
                                             ("Socket", "Socket"), ("NET/Socket/0", "Socket"),
                                             ("P2P/CUMEM", "local"), ("SHM/direct/direct", "local"), (None, None)])
def test_transport_of(name, transport):
    assert _nccl.transport_of(name) == transport


def test_nested_engine_core_and_ray_prefixes():
    # as the lab's API container logs it (vLLM V1: the EngineCore process prefixes the Ray-forwarded lines)
    text = ("(EngineCore_DP0 pid=423) \x1b[36m(RayWorkerWrapper pid=178, ip=10.99.1.12)\x1b[0m spark-2:178:178 [0] "
            "NCCL INFO NET/IB : Using [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE [RO]; OOB enp1s0f1np1:10.99.1.12<0>\n"
            "(EngineCore_DP0 pid=423) \x1b[36m(RayWorkerWrapper pid=215)\x1b[0m spark-1:215:215 [0] NCCL INFO "
            "Bootstrap: Using enp1s0f1np1:10.99.1.11<0>\n"
            "(EngineCore_DP0 pid=423) \x1b[36m(RayWorkerWrapper pid=215)\x1b[0m spark-1:215:215 [0] NCCL INFO "
            "Using network Socket\n")
    procs = _nccl.parse(text)
    assert [(p["host"], p["ip"], p["transport"]) for p in procs] == [
        ("spark-2", "10.99.1.12", None), ("spark-1", "10.99.1.11", "Socket")]
    assert procs[0]["ib_devices"] == ["rocep1s0f1", "roceP2p1s0f1"]
