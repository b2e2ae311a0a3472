"""qualify_plan and qualify_report (with plugin_utils/_qualify): the pair plan, and a verdict per figure on a lab-like
run, a healthy two-Spark run and a degraded one."""

from __future__ import annotations

import copy
import json
import os
import re

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.vllm.plugins.filter.qualify import qualify_plan, qualify_report, qualify_textfile
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _qualify

NODES = [{"host": "spark-1", "ip": "10.99.1.11", "head": True}, {"host": "spark-2", "ip": "10.99.1.12"},
         {"host": "spark-3", "ip": "10.99.1.13"}]
SPARK_CAPS = {"iperf3": True, "perftest": "node", "rdma_devices": ["/dev/infiniband/uverbs0"],
              "hca": ["rocep1s0f1", "roceP2p1s0f1"], "gids": {"rocep1s0f1": 3, "roceP2p1s0f1": 3}}
LAB_CAPS = {"iperf3": False, "perftest": "", "rdma_devices": ["/dev/infiniband/uverbs0"], "hca": ["rocep1s0f1"],
            "gids": {}}


def test_plan_every_pair_one_port_each_with_both_rails():
    plan = qualify_plan(NODES, {n["host"]: SPARK_CAPS for n in NODES}, port=29650, streams=4)
    assert plan["rdma_skip_reason"] is None
    tests = plan["tests"]
    assert [t["port"] for t in tests] == list(range(29650, 29650 + len(tests)))
    pairs = sorted({(t["client"], t["server"]) for t in tests})
    assert pairs == [("spark-1", "spark-2"), ("spark-1", "spark-3"), ("spark-2", "spark-3")]
    first = [t for t in tests if (t["client"], t["server"]) == ("spark-1", "spark-2")]
    assert [(t["transport"], t["test"], t["tool"]) for t in first] == [
        ("tcp", "latency", "python"), ("tcp", "bandwidth", "iperf3"),
        ("rdma", "bandwidth", "perftest"), ("rdma", "latency", "perftest"),
        ("rdma", "bandwidth", "perftest"), ("rdma", "latency", "perftest")]
    assert first[4]["client_device"] == "roceP2p1s0f1" and first[4]["server_gid"] == 3
    assert first[1]["streams"] == 4 and first[0]["client_ip"] == "10.99.1.11" and first[0]["server_ip"] == "10.99.1.12"


def test_plan_on_the_lab_says_why_rdma_is_not_measured():
    plan = qualify_plan(NODES[:2], {"spark-1": LAB_CAPS, "spark-2": LAB_CAPS})
    assert [(t["transport"], t["tool"]) for t in plan["tests"]] == [("tcp", "python"), ("tcp", "python")]
    assert "perftest (ib_write_bw, ib_write_lat) is on neither the node nor the serving image on spark-1, spark-2" \
        in plan["rdma_skip_reason"]
    no_dev = dict(LAB_CAPS, rdma_devices=[])
    assert "no RDMA device (/dev/infiniband) on spark-2" in qualify_plan(
        NODES[:2], {"spark-1": LAB_CAPS, "spark-2": no_dev})["rdma_skip_reason"]


@pytest.mark.parametrize("nodes, caps, kw, message", [
    ([{"host": "a"}], {}, {}, "each with host and ip"),
    (NODES, [], {}, "caps must map each host"),
    (NODES, {}, {"port": 0}, "port 0 is out of range"),
    (NODES, {}, {"port": 65535}, "leaves no room"),
    (NODES, {}, {"streams": 0}, "streams"),
])
def test_plan_bad_input(nodes, caps, kw, message):
    with pytest.raises(AnsibleFilterError, match=message):
        qualify_plan(nodes, caps, **kw)


def fabric_result(host, item, **got):
    r = {"item": item, "changed": False}
    if got.pop("failed", False):
        r.update(failed=True, msg=got.pop("msg"))
    r.update(got)
    if item["client"] == host:
        r.setdefault("role", "client")
    else:
        r.setdefault("role", "server")
    return r


def node(fabric_results, mtu=9000, hca=("rocep1s0f1", "roceP2p1s0f1"), allreduce=None, disk=None, ports=None,
         devices=("/dev/infiniband/uverbs0",)):
    return {"fabric": {"interface": "enp1s0f1np1", "mtu": mtu, "hca": list(hca), "rdma_char_devices": list(devices)},
            "rdma_ports": ports or {}, "fabric_results": fabric_results, "allreduce": allreduce, "disk": disk}


def spark_run(rdma_gbps=(92.6, 97.3), tcp=36.0, busbw=22.5, transports=("IB", "IB"), mtu=9000, disk=(5.1, 4.8),
              path_mtu=4096, tps=27.0, itl=37.0):
    plan = qualify_plan(NODES[:2], {"spark-1": SPARK_CAPS, "spark-2": SPARK_CAPS})["tests"]
    results = {"spark-1": [], "spark-2": []}
    bw = iter(rdma_gbps)
    for item in plan:
        if item["transport"] == "tcp" and item["test"] == "latency":
            got = {"latency_us": 14.2, "tool": "python"}
        elif item["transport"] == "tcp":
            got = {"gbps": tcp, "tool": "iperf3"}
        elif item["test"] == "bandwidth":
            got = {"gbps": next(bw), "tool": "ib_write_bw", "path_mtu": path_mtu}
        else:
            got = {"latency_us": 1.6, "tool": "ib_write_lat", "path_mtu": path_mtu}
        results["spark-1"].append(fabric_result("spark-1", item, **got))
        results["spark-2"].append(fabric_result("spark-2", item, tool=got["tool"]))

    def ar(rank, transport):
        return {"backend": "nccl", "rank": rank, "world": 2, "transport": transport, "torch": "2.9.0+cu130",
                "results": [{"bytes": 1 << 20, "seconds": 1e-4, "algbw_gbs": 10.5, "busbw_gbs": 10.5},
                            {"bytes": 1 << 30, "seconds": 0.05, "algbw_gbs": busbw, "busbw_gbs": busbw}]}

    def dk(gbps):
        return {"gbps": gbps, "bytes_read": 32 << 30, "bytes_total": 119 << 30, "threads": 4, "stopped_by": "max_bytes"}

    nodes = {"spark-1": node(results["spark-1"], mtu=mtu, allreduce=ar(0, transports[0]), disk=dk(disk[0])),
             "spark-2": node(results["spark-2"], mtu=mtu, allreduce=ar(1, transports[1]), disk=dk(disk[1]))}
    serving = {"tool": "vllm bench serve", "levels": [
        {"concurrency": 1, "ok": 2, "requests": 2, "failed": 0, "output_tok_s": tps, "ttft_ms": {"p50": 180.0},
         "itl_ms": {"p50": itl}},
        {"concurrency": 4, "ok": 8, "requests": 8, "failed": 0, "output_tok_s": tps * 3, "ttft_ms": {"p50": 260.0},
         "itl_ms": {"p50": itl * 1.4}},
        {"concurrency": 16, "ok": 32, "requests": 32, "failed": 0, "output_tok_s": tps * 6,
         "ttft_ms": {"p50": 900.0}, "itl_ms": {"p50": itl * 2.6}}]}
    ctx = {"head": "spark-1", "model": "Qwen/Qwen3.5-122B-A10B-FP8", "endpoint": "http://10.1.230.180:30000",
           "model_dir": "/models/qwen"}
    return nodes, serving, ctx


def by(section, figure, where=None):
    return [ln for ln in section["lines"] if ln["figure"].startswith(figure) and (where is None or where in ln["where"])]


def test_a_healthy_pair_of_sparks_is_as_expected_everywhere_published():
    section = qualify_report(*spark_run())
    verdicts = {ln["verdict"] for ln in section["lines"]}
    assert verdicts <= {"as expected", "no reference"}, [ln for ln in section["lines"] if ln["verdict"] not in
                                                         ("as expected", "no reference")]
    rdma = by(section, "RDMA write bandwidth")
    assert [ln["value"] for ln in rdma] == [92.6, 97.3] and "performance_benchmarking_guide.md" in rdma[0]["source"]
    nccl = by(section, "NCCL all-reduce bus bandwidth")[0]
    assert nccl["value"] == 22.5 and "1 GiB" in nccl["figure"] and "nvidia/nccl/README.md" in nccl["source"]
    assert [ln["value"] for ln in by(section, "NCCL transport")] == ["NET/IB", "NET/IB"]
    assert by(section, "output throughput", "1 user")[0]["verdict"] == "as expected"
    assert by(section, "RoCE path MTU")[0]["value"] == 4096
    cap = by(section, "users served before latency doubles")[0]
    assert cap["value"] == 4 and "first above twice that at 16 users" in cap["note"]
    assert section["table"][0].startswith("qualify: ") and any("sources:" in ln for ln in section["table"])
    json.dumps(section)


@pytest.mark.parametrize("kw, figure, cause", [
    (dict(rdma_gbps=(13.0, 96.0)), "RDMA write bandwidth", "degraded ConnectX-7 initialization"),
    (dict(rdma_gbps=(60.0, 96.0), path_mtu=1024), "RDMA write bandwidth", "1024-byte path MTU"),
    (dict(transports=("IB", "Socket"), busbw=2.9), "NCCL all-reduce", "NET/Socket (TCP) on spark-2"),
    (dict(busbw=3.1), "NCCL all-reduce", "about 3 GB/s"),
    (dict(mtu=1500, path_mtu=1024), "MTU of the fabric", "stock MTU 1500"),
    (dict(disk=(1.2, 5.0)), "cold sequential read", "shallower queue"),
    (dict(tps=12.0, itl=80.0), "output throughput", "slower decode"),
    (dict(tcp=9.0, rdma_gbps=(12.0, 14.0)), "TCP bandwidth", "degraded ConnectX-7 state"),
])
def test_below_names_the_likely_cause(kw, figure, cause):
    section = qualify_report(*spark_run(**kw))
    low = [ln for ln in by(section, figure) if ln["verdict"] == "below"]
    assert low and cause in low[0]["note"], by(section, figure)


@pytest.mark.parametrize("busbw, margin_pct, verdict", [
    (19.0, None, "as expected"),   # 5 % under 20 GB/s: inside the default 10 % margin
    (17.5, None, "below"),         # 12.5 % under
    (19.0, 0, "below"),            # no margin: anything under the range
    (15.0, 30, "as expected"),
    (2.9, 85, "below"),            # the half-configured fabric (about 3 GB/s) is flagged up to an 85 % margin
])
def test_nccl_is_below_only_past_the_margin(busbw, margin_pct, verdict):
    nodes, serving, ctx = spark_run(busbw=busbw)
    if margin_pct is not None:
        ctx["margin_pct"] = margin_pct
    section = qualify_report(nodes, serving, ctx)
    line = by(section, "NCCL all-reduce bus bandwidth")[0]
    assert line["verdict"] == verdict and line["expected"] == "20-24 GB/s at large messages"
    shown = 10 if margin_pct is None else margin_pct
    assert any(row.startswith("  below: more than %g %% under" % shown) for row in section["table"])


def test_serving_tokens_beside_their_reference_with_the_margin():
    nodes, serving, ctx = spark_run(tps=18.5, itl=54.0)   # 7.5 % under 20 tokens/s, 8 % over 50 ms
    section = qualify_report(nodes, serving, ctx)
    one = by(section, "output throughput", "1 user")[0]
    assert one["verdict"] == "as expected" and one["expected"] == "20-40 tokens/s" and "27 tokens/s" in one["source"]
    assert by(section, "inter-token latency", "1 user")[0]["verdict"] == "as expected"
    ctx["margin_pct"] = 5
    section = qualify_report(nodes, serving, ctx)
    assert by(section, "output throughput", "1 user")[0]["verdict"] == "below"
    assert by(section, "inter-token latency", "1 user")[0]["verdict"] == "below"
    # 16 users: the closest published figure is of another model, shown with its source and never judged.
    sixteen = by(section, "output throughput", "16 users")[0]
    assert sixteen["expected"].startswith("140 tokens/s") and sixteen["verdict"] == "no reference"
    assert "another FP8 MoE" in sixteen["source"]


def test_ttft_tail_is_shown_as_the_load_test_measured_it():
    nodes, serving, ctx = spark_run()
    serving["levels"][0]["ttft_ms"] = {"p50": 180.0, "p99": 420.0}   # serving_bench's own client: mean/p50/p99
    section = qualify_report(nodes, serving, ctx)
    assert [ln["value"] for ln in by(section, "time to first token (p99)", "1 user")] == [420.0]
    assert by(section, "time to first token (p95)") == []


@pytest.mark.parametrize("pct", [-1, 91, "ten", True])
def test_a_bad_margin_is_refused_naming_the_variable(pct):
    nodes, serving, ctx = spark_run()
    ctx["margin_pct"] = pct
    with pytest.raises(AnsibleFilterError, match="qualify_reference_margin must be a whole percent from 0 to 90"):
        qualify_report(nodes, serving, ctx)


def test_socket_transport_line():
    section = qualify_report(*spark_run(transports=("IB", "Socket")))
    t = {ln["where"]: ln for ln in by(section, "NCCL transport")}
    assert t["spark-1"]["verdict"] == "as expected" and t["spark-2"]["verdict"] == "below"
    assert "lacks /dev/infiniband" in t["spark-2"]["note"]


def test_a_lab_run_measures_tcp_gloo_disk_and_the_api_and_says_what_it_cannot():
    plan = qualify_plan(NODES[:2], {"spark-1": LAB_CAPS, "spark-2": LAB_CAPS})
    items = plan["tests"]
    nodes = {
        "spark-1": node([fabric_result("spark-1", items[0], latency_us=12.9, tool="python"),
                         fabric_result("spark-1", items[1], gbps=17.4, tool="python")], hca=["rocep1s0f1"],
                        allreduce={"backend": "gloo", "world": 2, "torch": "2.13.0+cpu", "socket_ifname": "enp1s0f1np1",
                                   "results": [{"bytes": 16 << 20, "busbw_gbs": 0.64}]},
                        disk={"gbps": 0.98, "bytes_read": 256 << 20, "bytes_total": 256 << 20, "threads": 4}),
        "spark-2": node([fabric_result("spark-2", items[0], tool="python"),
                         fabric_result("spark-2", items[1], tool="python")], hca=["rocep1s0f1"],
                        allreduce={"backend": "gloo", "world": 2, "results": [{"bytes": 16 << 20, "busbw_gbs": 0.6}]},
                        disk={"gbps": 1.3, "bytes_read": 256 << 20, "bytes_total": 256 << 20, "threads": 4})}
    level = {"concurrency": 1, "ok": 8, "requests": 8, "output_tok_s": 7098.0, "ttft_ms": {"p50": 9.0}, "itl_ms": None,
             "itl_note": "the server sent each completion in one piece"}
    serving = {"tool": "client", "levels": [level]}
    context = {"head": "spark-1", "model": "sparklab/tiny-moe", "rdma_skip_reason": plan["rdma_skip_reason"]}
    section = qualify_report(nodes, serving=serving, context=context)
    not_here = [ln for ln in section["lines"] if ln["verdict"] == "not measurable here"]
    assert {ln["figure"].split(" (")[0] for ln in not_here} >= {
        "RDMA write bandwidth", "RDMA write latency", "RoCE path MTU in use", "NCCL all-reduce bus bandwidth",
        "NCCL transport", "inter-token latency"}
    assert all(ln["note"] and ln["value"] is None for ln in not_here)
    assert "torch (2.13.0+cpu) sees no CUDA GPU" in by(section, "NCCL all-reduce")[0]["note"]
    gloo = by(section, "gloo all-reduce")[0]
    assert gloo["value"] == 0.64 and gloo["verdict"] == "no reference" and "CPU over TCP" in gloo["figure"]
    measured = [ln for ln in section["lines"] if ln["value"] is not None]
    assert measured and all(ln["value"] for ln in measured)
    assert by(section, "output throughput")[0]["expected"] == "none published for this model"


def test_skipped_and_failed_steps():
    nodes, serving, ctx = spark_run()
    for n in nodes.values():
        n["disk"] = None
        n["allreduce"] = {"skipped": True}
    nodes["spark-2"]["fabric_results"][1] = fabric_result(
        "spark-2", nodes["spark-2"]["fabric_results"][1]["item"], failed=True, msg="iperf3 server: the peer never came")
    section = qualify_report(nodes, serving=None, context=ctx)
    assert by(section, "cold sequential read")[0]["verdict"] == "not run"
    assert by(section, "all-reduce")[0]["verdict"] == "not run"
    assert by(section, "load test")[0]["verdict"] == "not run"
    failed = [ln for ln in section["lines"] if ln["verdict"] == "failed"]
    assert failed and "the peer never came (server end)" in failed[0]["note"]


def test_report_bad_input():
    with pytest.raises(AnsibleFilterError, match="must map each host"):
        qualify_report([])
    with pytest.raises(AnsibleFilterError, match="serving must be the serving_bench result"):
        qualify_report({}, serving="x")


def test_write_and_chart(tmp_path):
    nodes, serving, ctx = spark_run()
    section = qualify_report(nodes, serving=serving, context=ctx)
    written = _qualify.write(copy.deepcopy(section), str(tmp_path))
    assert json.loads((tmp_path / "qualify.json").read_text())["summary"] == section["summary"]
    assert (tmp_path / "qualify.txt").read_text().startswith("qualify: ")
    assert written["chart"] and os.path.getsize(written["chart"]) > 10000


def _samples(text):
    """{(name, frozenset(labels)): value} of a Prometheus text file (our writer quotes no comma or brace in values)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-z_:]+)(?:\{(.*)\})? (\S+)$', line)
        assert m, line
        labels = frozenset(re.findall(r'([a-z_]+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def test_the_qualified_figures_for_prometheus_name_each_end_and_what_is_below():
    """Issue 42: what qualify leaves for the textfile collector: each pair's TCP and RDMA bandwidth at both ends' fabric
    interfaces, the link speeds, the all-reduce, when, and a line per figure under two Sparks' (here NCCL)."""
    nodes, serving, ctx = spark_run(busbw=9.5)
    nodes["spark-1"]["fabric"]["speed_mbps"] = 200000
    nodes["spark-2"]["fabric"]["speed_mbps"] = 200000
    section = qualify_report(nodes, serving, ctx)
    text = qualify_textfile(nodes, section, 1764900000)
    got = _samples(text)
    both = {"fabric_node": None, "device": "enp1s0f1np1", "transport": "tcp", "pair": "spark-1 -> spark-2"}
    for end in ("spark-1", "spark-2"):
        labels = frozenset(dict(both, fabric_node=end).items())
        assert got[("sparkfleet_qualified_fabric_bandwidth_bytes", labels)] == 36.0e9 / 8
        assert got[("sparkfleet_qualified_fabric_link_speed_bytes",
                    frozenset({"fabric_node": end, "device": "enp1s0f1np1"}.items()))] == 200000e6 / 8
    rdma = sorted(v for (name, labels), v in got.items()
                  if name == "sparkfleet_qualified_fabric_bandwidth_bytes" and ("transport", "rdma") in labels
                  and ("fabric_node", "spark-2") in labels)
    assert rdma == [92.6e9 / 8, 97.3e9 / 8]     # one per rail, at the server's end too
    assert got[("sparkfleet_qualified_allreduce_bus_bandwidth_bytes",
                frozenset({"backend": "nccl", "message_bytes": str(1 << 30)}.items()))] == 9.5e9
    assert got[("sparkfleet_qualified_timestamp_seconds", frozenset())] == 1764900000
    below = [dict(labels) for (name, labels) in got if name == "sparkfleet_qualified_below"]
    assert [b["group"] for b in below] == ["nccl"] and below[0]["figure"].startswith("NCCL all-reduce bus bandwidth")
    assert got[("sparkfleet_qualified_below_figures", frozenset())] == 1
    # every metric has its HELP and TYPE once, before its samples
    names = [ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE")]
    assert len(names) == len(set(names)) == len({name for name, _labels in got})


def test_the_qualified_figures_leave_out_what_was_not_measured():
    """The lab: no link speed where the kernel gives none, no RDMA, a gloo all-reduce labelled as such, a failed
    test no figure."""
    nodes, serving, ctx = spark_run()
    for host in nodes:
        nodes[host]["fabric"]["speed_mbps"] = None
    nodes["spark-1"]["fabric_results"] = [r if r["item"]["transport"] == "tcp" else
                                          dict(r, failed=True, msg="ib_write_bw: no device")
                                          for r in nodes["spark-1"]["fabric_results"]]
    nodes["spark-1"]["allreduce"] = dict(nodes["spark-1"]["allreduce"], backend="gloo")
    got = _samples(qualify_textfile(nodes, qualify_report(nodes, serving, ctx), 1764900000.5))
    names = {name for name, _labels in got}
    assert "sparkfleet_qualified_fabric_link_speed_bytes" not in names
    transports = {dict(labels)["transport"] for name, labels in got
                  if name == "sparkfleet_qualified_fabric_bandwidth_bytes"}
    assert transports == {"tcp"}
    assert [dict(labels)["backend"] for name, labels in got
            if name == "sparkfleet_qualified_allreduce_bus_bandwidth_bytes"] == ["gloo"]


@pytest.mark.parametrize("measured_at", [None, "yesterday", 0, True])
def test_the_qualified_figures_need_a_time(measured_at):
    nodes, serving, ctx = spark_run()
    with pytest.raises(AnsibleFilterError, match="measured_at must be a Unix time"):
        qualify_textfile(nodes, qualify_report(nodes, serving, ctx), measured_at)
