# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The qualification report (controller side): every figure beside what two DGX Sparks do, with its source and a
verdict, plus its table and chart.

``judge(nodes, serving, context)`` turns what the qualify role measured into report lines; the
``sparkfleet.vllm.qualify_report`` filter calls it (so set_stats carries the verdicts) and the
``sparkfleet.vllm.report`` callback renders the section with ``table`` and ``chart``. A verdict is one of VERDICTS;
"below" always names the likely cause, "not measurable here" always says why.
"""

from __future__ import annotations

import os

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._report import write_json_and_table

AS_EXPECTED = "as expected"
BELOW = "below"
NOT_MEASURABLE = "not measurable here"
NO_REFERENCE = "no reference"
NOT_RUN = "not run"
FAILED = "failed"
VERDICTS = (AS_EXPECTED, BELOW, NOT_MEASURABLE, NO_REFERENCE, NOT_RUN, FAILED)

NVIDIA_PERF = ("NVIDIA dgx-spark-playbooks, nvidia/connect-two-sparks/assets/performance_benchmarking_guide.md "
               "(ib_write_bw on both rails: 92.57 and 97.28 Gb/s; health check threshold 80 Gb/s; a degraded CX-7 "
               "initialization carries 8-25 Gb/s per rail over TCP and RDMA)")
NVIDIA_NCCL = ("NVIDIA dgx-spark-playbooks, nvidia/nccl/README.md (two Sparks, one QSFP cable, both RoCE halves in "
               "NCCL_IB_HCA, MTU 9000, large buffers: busbw about 20-24 GB/s; about 3 GB/s at every size means NCCL is "
               "not on RDMA) and DOMAIN.md section 6 (23.7 GB/s)")
COMMUNITY_RDMA = ("community measurement between two DGX Sparks (github.com/elizabetht/spark, infiniband-tutorial: "
                  "ib_write_lat 1-2 us, iperf3 one TCP stream about 35 Gb/s); NVIDIA publishes no such figure")
DOMAIN_MTU = "DOMAIN.md section 2 (full bandwidth needs both twins and MTU 9000; stock Spark links run MTU 1500)"
DOMAIN_DISK = "DOMAIN.md section 6 (the Sparks' disks read 4-6 GB/s at depth)"
DOMAIN_DECODE = ("DOMAIN.md sections 1 and 6 (Qwen3.5-122B-A10B-FP8 on two Sparks: about 27 tokens/s single stream "
                 "measured by the operators, decode ceiling about 40 tokens/s)")

DOMAIN_AGGREGATE = ("DOMAIN.md section 11 (closest published: another FP8 MoE at TP=2 on two Sparks, 30.2 tokens/s "
                    "single stream and 140 tokens/s at 16 users; nothing published at 4 or 64 users)")

# A figure is "below" only when it is more than this fraction under the low end of its reference (over the high end of
# a latency); the qualify role passes qualify_reference_margin (percent) in the context.
DEFAULT_MARGIN = 0.10


def margin(context):
    """The context's margin as a fraction (0 to 0.9); DEFAULT_MARGIN when it sets none."""
    value = (context or {}).get("margin_pct")
    if value is None or value == "":
        return DEFAULT_MARGIN
    return min(max(float(value), 0.0), 90.0) / 100.0


def under(value, low, context):
    """True when value is missing or more than the margin under low (the reference's low end)."""
    return value is None or value < low * (1.0 - margin(context))


# The model whose serving figures two Sparks have published (DOMAIN.md); other models get "no reference".
REFERENCE_MODELS = ("Qwen/Qwen3.5-122B-A10B-FP8",)


def _line(group, figure, where, value=None, unit="", tool=None, expected="", source="", verdict=NO_REFERENCE,
          note=None):
    return {"group": group, "figure": figure, "where": where, "value": value, "unit": unit, "tool": tool,
            "expected": expected, "source": source, "verdict": verdict, "note": note}


def _nodes_without(nodes, key):
    return [h for h, n in nodes.items() if not ((n or {}).get("fabric") or {}).get(key)]


# ------------------------------------------------------------------------------------------------------ fabric
def _fabric_lines(nodes, context):
    lines = []
    tests = []
    for host in sorted(nodes):
        for r in ((nodes[host] or {}).get("fabric_tests") or []):
            if r.get("role") == "client" or r.get("failed"):
                tests.append(r)
    if len(nodes) < 2:
        return [_line("fabric", "fabric tests", "one node", verdict=NOT_MEASURABLE,
                      note="a single node has no fabric peer to measure")]
    ran = any((n or {}).get("fabric_tests") is not None for n in nodes.values())
    if not ran:
        lines.append(_line("fabric", "fabric tests", "all pairs", verdict=NOT_RUN, note="skipped (--skip-tags fabric)"))
    mtus = {h: ((n or {}).get("fabric") or {}).get("mtu") for h, n in nodes.items()}
    no_rdma = _nodes_without(nodes, "rdma_char_devices")
    rdma_low = any(r.get("transport") == "rdma" and r.get("test") == "bandwidth" and (r.get("gbps") or 0) <= 25
                   for r in tests if not r.get("failed"))
    order = {("tcp", "bandwidth"): 0, ("tcp", "latency"): 1, ("rdma", "bandwidth"): 2, ("rdma", "latency"): 3}
    for r in sorted(tests, key=lambda r: order.get((r.get("transport"), r.get("test")), 9)):
        where = r.get("where") or "?"
        if r.get("failed"):
            lines.append(_line("fabric", _fabric_name(r), where, tool=r.get("tool"), verdict=FAILED,
                               note=r.get("msg")))
            continue
        if r.get("transport") == "rdma" and r.get("test") == "bandwidth":
            value = r.get("gbps")
            verdict, note = AS_EXPECTED, None
            if value < 80:
                verdict = BELOW
                note = _rdma_bw_cause(value, r, mtus)
            lines.append(_line("fabric", "RDMA write bandwidth (one rail)", where, value, "Gb/s", r.get("tool"),
                               "80-100 Gb/s per rail", NVIDIA_PERF, verdict,
                               note))
        elif r.get("transport") == "rdma":
            value = r.get("latency_us")
            ok = value <= 3.0
            lines.append(_line("fabric", "RDMA write latency (one way)", where, value, "us", r.get("tool"),
                               "about 1-2 us (up to 3 accepted)", COMMUNITY_RDMA, AS_EXPECTED if ok else BELOW,
                               None if ok else "slower than a direct RoCE link: a switch without PFC/ECN on the path, "
                                               "CPU power saving on either node, or a small path MTU"))
        elif r.get("test") == "bandwidth":
            value = r.get("gbps")
            verdict, note = AS_EXPECTED, None
            if value < 25:
                verdict = BELOW
                note = _tcp_bw_cause(value, r, mtus, no_rdma, rdma_low)
            streams = r.get("streams") or 1
            lines.append(_line("fabric", "TCP bandwidth (%d stream%s)" % (streams, "" if streams == 1 else "s"), where,
                               value, "Gb/s", r.get("tool"), "25 Gb/s or more per 200G rail", COMMUNITY_RDMA,
                               verdict, note))
        else:
            lines.append(_line("fabric", "TCP latency (one way, half the median round trip)", where,
                               r.get("latency_us"), "us", r.get("tool"),
                               "none published (RDMA's is 1-2 us)", COMMUNITY_RDMA, NO_REFERENCE))
    rdma_run = any(r.get("transport") == "rdma" for r in tests)
    if ran and not rdma_run:
        why = context.get("rdma_skip_reason") or "no RDMA test ran"
        for figure in ("RDMA write bandwidth (one rail)", "RDMA write latency (one way)"):
            lines.append(_line("fabric", figure, "all pairs", expected="80-100 Gb/s per rail" if "bandwidth" in figure
                               else "about 1-2 us", source=NVIDIA_PERF if "bandwidth" in figure else COMMUNITY_RDMA,
                               verdict=NOT_MEASURABLE, note=why))
    for host in sorted(nodes):
        fabric = (nodes[host] or {}).get("fabric") or {}
        mtu = fabric.get("mtu")
        if mtu is None:
            continue
        ok = mtu >= 9000
        lines.append(_line("fabric", "MTU of the fabric interface", "%s %s" % (host, fabric.get("interface") or ""),
                           mtu, "bytes", "ip link", "9000 (a recommendation; 1500 works, slower)", DOMAIN_MTU,
                           AS_EXPECTED if ok else BELOW,
                           None if ok else "stock MTU 1500: RoCE runs with a 1024-byte path MTU; set MTU 9000 on every "
                                           "fabric twin on both ends"))
        lines.append(_path_mtu_line(host, nodes[host] or {}, tests, context))
    return lines


def _fabric_name(r):
    return "%s %s" % ("RDMA" if r.get("transport") == "rdma" else "TCP", r.get("test") or "test")


def _rdma_bw_cause(value, r, mtus):
    if value <= 25:
        return ("%.1f Gb/s is NVIDIA's degraded ConnectX-7 initialization signature (8-25 Gb/s per rail while the link "
                "shows 200G): reboot both nodes with the cables in place, then a full power cycle (NVIDIA's guide)"
                % value)
    mtu = r.get("path_mtu")
    if mtu and mtu < 4096:
        return "the queue pair ran with a %d-byte path MTU: set MTU 9000 on both ends" % mtu
    return "below NVIDIA's 80 Gb/s health threshold: check the link rate (ethtool), PCIe errors and the cable"


def _tcp_bw_cause(value, r, mtus, no_rdma, rdma_low):
    causes = []
    if no_rdma:
        causes.append("%s ha%s no RDMA device: this fabric is not a ConnectX-7 RoCE link"
                      % (", ".join(sorted(no_rdma)), "s" if len(no_rdma) == 1 else "ve"))
    low = sorted(h for h, m in mtus.items() if m and m < 9000)
    if low:
        causes.append("MTU below 9000 on %s" % ", ".join(low))
    if value <= 25 and rdma_low:
        causes.append("the RDMA figures are low too: NVIDIA's degraded ConnectX-7 state caps TCP and RDMA at 8-25 Gb/s "
                      "per rail")
    if r.get("tool") == "python":
        causes.append("the collection's Python test is CPU-bound per stream (install iperf3 on the nodes for a tool's "
                      "figure)")
    if not rdma_low and r.get("tool") != "python":
        causes.append("TCP through the kernel is CPU-bound; serving's all-reduce uses RDMA (see the RDMA lines)")
    return "; ".join(causes) or "a slow or shared link"


def _path_mtu_line(host, node, tests, context):
    fabric = node.get("fabric") or {}
    used = [r.get("path_mtu") for r in tests if r.get("transport") == "rdma" and r.get("path_mtu")
            and host in (r.get("where") or "")]
    ports = node.get("rdma_ports") or {}
    hca = (fabric.get("hca") or [None])[0]
    active = (ports.get(hca) or {}).get("active_mtu") if hca else None
    value, tool = (min(used), "perftest") if used else (active, "ibv_devinfo") if active else (None, None)
    where = "%s %s" % (host, hca or "")
    expected = "4096 with MTU 9000 (1024 at MTU 1500)"
    if value is None:
        why = context.get("path_mtu_reason") or ("no RDMA test ran and ibv_devinfo is on neither the node nor the "
                                                 "image")
        if fabric.get("mtu"):
            why += " (the interface's MTU %d would allow %s)" % (fabric["mtu"], _roce_mtu(fabric["mtu"]) or "none")
        return _line("fabric", "RoCE path MTU in use", where, expected=expected, source=DOMAIN_MTU,
                     verdict=NOT_MEASURABLE, note=why)
    ok = value >= 4096
    return _line("fabric", "RoCE path MTU in use", where, value, "bytes", tool, expected, DOMAIN_MTU,
                 AS_EXPECTED if ok else BELOW,
                 None if ok else "the netdev MTU (%s) allows only %d: set MTU 9000 on both ends" % (fabric.get("mtu"),
                                                                                                    value))


def _roce_mtu(mtu):
    for ib in (4096, 2048, 1024, 512, 256):
        if mtu >= ib + 82:
            return ib
    return None


# ------------------------------------------------------------------------------------------------------ NCCL
def _nccl_lines(nodes, context):
    runs = {h: (n or {}).get("allreduce") for h, n in nodes.items()}
    if len(nodes) < 2:
        return [_line("nccl", "all-reduce", "one node", verdict=NOT_MEASURABLE,
                      note="a single node has no peer to all-reduce with")]
    if all(v is None for v in runs.values()):
        return [_line("nccl", "all-reduce", "all nodes", verdict=NOT_RUN, note="skipped (--skip-tags nccl)")]
    lines = []
    failed = {h: r for h, r in runs.items() if r and r.get("failed")}
    if failed:
        for host, r in sorted(failed.items()):
            lines.append(_line("nccl", "all-reduce", host, verdict=FAILED, note=r.get("msg")))
        return lines
    head = context.get("head") or sorted(runs)[0]
    first = runs.get(head) or next(r for r in runs.values() if r)
    backend = first.get("backend")
    sizes = first.get("results") or []
    top = sizes[-1] if sizes else {}
    world = first.get("world")
    expected = "20-24 GB/s at large messages"
    if backend == "nccl":
        value = top.get("busbw_gbs")
        transports = {h: (r or {}).get("transport") for h, r in runs.items()}
        verdict, note = AS_EXPECTED, None
        if under(value, 20.0, context):
            verdict = BELOW
            note = _nccl_cause(value, top, transports, nodes)
        lines.append(_line("nccl", "NCCL all-reduce bus bandwidth (%s)" % _size(top.get("bytes")),
                           "%d nodes" % (world or 0), value, "GB/s", "torch.distributed (NCCL)", expected, NVIDIA_NCCL,
                           verdict, note))
        for host in sorted(transports):
            t = transports[host]
            ok = t == "IB"
            lines.append(_line("nccl", "NCCL transport", host, "NET/%s" % t if t else None, "", "NCCL_DEBUG=INFO",
                               "NET/IB on every node", "DOMAIN.md section 9; " + NVIDIA_NCCL.split(" (", maxsplit=1)[0],
                               AS_EXPECTED if ok else BELOW if t else NO_REFERENCE,
                               None if ok else (
                                   "NCCL fell back to TCP: the Ray container lacks /dev/infiniband or an unlimited "
                                   "locked-memory limit, or NCCL_IB_HCA does not name this node's devices"
                                   if t == "Socket" else "NCCL printed no transport line")))
    else:
        torch = first.get("torch") or "?"
        why = ("the image's torch (%s) sees no CUDA GPU: an NCCL all-reduce needs one; the gloo all-reduce below is "
               "what runs here" % torch)
        lines.append(_line("nccl", "NCCL all-reduce bus bandwidth", "%d nodes" % (world or 0), expected=expected,
                           source=NVIDIA_NCCL, verdict=NOT_MEASURABLE, note=why))
        lines.append(_line("nccl", "NCCL transport", "all nodes", expected="NET/IB on every node",
                           source="DOMAIN.md section 9", verdict=NOT_MEASURABLE, note=why))
        lines.append(_line("nccl", "gloo all-reduce bus bandwidth, CPU over TCP (%s)" % _size(top.get("bytes")),
                           "%d nodes via %s" % (world or 0, first.get("socket_ifname") or "?"), top.get("busbw_gbs"),
                           "GB/s", "torch.distributed (gloo)", "none (CPU gloo is not serving's path)",
                           "", NO_REFERENCE, "a CPU all-reduce over TCP sockets, not comparable with NCCL's figures"))
    return lines


def _nccl_cause(value, top, transports, nodes):
    socket_nodes = sorted(h for h, t in transports.items() if t == "Socket")
    if socket_nodes:
        return ("NCCL uses NET/Socket (TCP) on %s: give the Ray container /dev/infiniband and an unlimited locked-memory "
                "limit" % ", ".join(socket_nodes))
    if value is not None and value <= 3.5:
        return "about 3 GB/s: NVIDIA's sign that NCCL is not on RDMA (its README's troubleshooting)"
    if (top.get("bytes") or 0) < 256 << 20:
        return "the largest message (%s) is too small to fill the link: raise qualify_nccl_max_bytes" % _size(
            top.get("bytes"))
    one = [h for h, n in nodes.items() if len(((n or {}).get("fabric") or {}).get("hca") or []) < 2]
    if one:
        return "only one RoCE half in NCCL_IB_HCA on %s (one rail is about 100 Gb/s, 12 GB/s)" % ", ".join(sorted(one))
    low = sorted(h for h, n in nodes.items() if (((n or {}).get("fabric") or {}).get("mtu") or 0) < 9000)
    if low:
        return "MTU below 9000 on %s" % ", ".join(low)
    return "below NVIDIA's published range: check the RDMA lines above (a degraded rail shows there)"


def _size(n):
    if not n:
        return "?"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return "%g %s" % (round(n / float(div), 1), unit)
    return "%d B" % n


# ------------------------------------------------------------------------------------------------------ disk
def _disk_lines(nodes, context):
    runs = {h: (n or {}).get("disk") for h, n in nodes.items()}
    if all(v is None for v in runs.values()):
        return [_line("disk", "cold sequential read of the model", "all nodes", verdict=NOT_RUN,
                      note="skipped (--skip-tags disk)")]
    lines = []
    for host in sorted(runs):
        r = runs[host]
        if r is None:
            continue
        if r.get("failed"):
            lines.append(_line("disk", "cold sequential read of the model", host, verdict=FAILED, note=r.get("msg")))
            continue
        value = r.get("gbps")
        ok = not under(value, 4.0, context)
        note = None
        if not ok:
            note = ("%d reader(s) over %s: a shallower queue than the disk's depth (qualify_disk_threads), a slower disk "
                    "than the Sparks' NVMe, or a model on a network/USB disk" % (r.get("threads") or 0,
                                                                                 _size(r.get("bytes_read"))))
        if r.get("bytes_read") and r.get("bytes_total") and r["bytes_read"] < r["bytes_total"]:
            stopped = " (stopped by %s after %s of %s)" % (r.get("stopped_by"), _size(r["bytes_read"]),
                                                           _size(r["bytes_total"]))
            note = (note + stopped) if note else stopped.strip(" ()")
        lines.append(_line("disk", "cold sequential read of the model", "%s %s" % (host, context.get("model_dir") or ""),
                           value, "GB/s", "disk_bench (%d readers)" % (r.get("threads") or 0), "4-6 GB/s at depth",
                           DOMAIN_DISK, AS_EXPECTED if ok else BELOW, note))
    return lines


# ------------------------------------------------------------------------------------------------------ serving
def _serving_lines(serving, context):
    if not serving:
        return [_line("serving", "load test", context.get("endpoint") or "API", verdict=NOT_RUN,
                      note="skipped (--skip-tags serving)")]
    if serving.get("failed"):
        return [_line("serving", "load test", context.get("endpoint") or "API", verdict=FAILED,
                      note=serving.get("msg"))]
    model = context.get("model") or "?"
    known = model in REFERENCE_MODELS or os.path.basename(str(model)) in [m.rsplit("/", maxsplit=1)[-1] for m in REFERENCE_MODELS]
    tool = serving.get("tool")
    no_ref = "none published for this model" if not known else "none published at this load"
    lines = []
    levels = serving.get("levels") or []
    for level in levels:
        c = level.get("concurrency")
        where = "%d user%s" % (c, "" if c == 1 else "s")
        tps = level.get("output_tok_s")
        if known and c == 1:
            ok = not under(tps, 20.0, context)
            lines.append(_line("serving", "output throughput", where, tps, "tokens/s", tool, "20-40 tokens/s",
                               DOMAIN_DECODE, AS_EXPECTED if ok else BELOW,
                               None if ok else "slower decode than the operators' 27 tokens/s: NCCL on TCP (see the "
                                               "NCCL lines), a GPU shared with another process, or prompts longer "
                                               "than the test's"))
        elif known and c == 16:
            # Another model's figure: shown beside ours, never a verdict on it.
            lines.append(_line("serving", "output throughput", where, tps, "tokens/s", tool,
                               "140 tokens/s (another FP8 MoE)", DOMAIN_AGGREGATE, NO_REFERENCE,
                               "the closest published figure is of another model: no verdict"))
        else:
            lines.append(_line("serving", "output throughput", where, tps, "tokens/s", tool, no_ref, "", NO_REFERENCE))
        ttft = level.get("ttft_ms") or {}
        lines.append(_line("serving", "time to first token (median)", where, ttft.get("p50"), "ms", tool, no_ref, "",
                           NO_REFERENCE))
        for tail in ("p95", "p99"):  # the tail the load test measured (serving_bench: p99; vllm bench serve: both)
            if ttft.get(tail) is not None:
                lines.append(_line("serving", "time to first token (%s)" % tail, where, ttft[tail], "ms", tool, no_ref,
                                   "", NO_REFERENCE))
        itl = (level.get("itl_ms") or {}).get("p50")
        if itl is None:
            lines.append(_line("serving", "inter-token latency (median)", where, None, "ms", tool,
                               "25-50 ms at one user" if known else no_ref, DOMAIN_DECODE if known else "",
                               NOT_MEASURABLE, level.get("itl_note") or "no request streamed more than one piece"))
        elif known and c == 1:
            ok = itl <= 50.0 * (1.0 + margin(context))
            lines.append(_line("serving", "inter-token latency (median)", where, itl, "ms", tool,
                               "25-50 ms at one user (20-40 tokens/s)", DOMAIN_DECODE, AS_EXPECTED if ok else BELOW,
                               None if ok else "slower than the operators' 37 ms (27 tokens/s): see the NCCL lines"))
        else:
            lines.append(_line("serving", "inter-token latency (median)", where, itl, "ms", tool, no_ref, "",
                               NO_REFERENCE))
        if level.get("failed"):
            lines.append(_line("serving", "failed requests", where, level["failed"], "of %d" % level.get("requests", 0),
                               tool, "0", "", BELOW, "; ".join(level.get("errors") or []) or None))
    knee = capacity(levels)
    if knee:
        lines.append(_line("serving", "users served before latency doubles", knee["metric"], knee["users"], "users",
                           tool, "none published", "", NO_REFERENCE, knee["note"]))
    return lines


def capacity(levels):
    """The most concurrent users whose median ITL (else TTFT) stays within twice the first level's."""
    for metric, key in (("inter-token latency", "itl_ms"), ("time to first token", "ttft_ms")):
        points = [(lv["concurrency"], (lv.get(key) or {}).get("p50")) for lv in levels if lv.get("ok")]
        points = [(c, v) for c, v in points if v is not None]
        if len(points) < 2:
            continue
        base = points[0][1]
        within = [c for c, v in points if v <= 2 * base]
        over = [c for c, v in points if v > 2 * base]
        note = ("median %s %.1f ms at %d user(s); " % (metric, base, points[0][0]) +
                ("first above twice that at %d users" % over[0] if over else "never doubled up to %d users"
                 % points[-1][0]))
        return {"metric": metric, "users": max(within), "note": note}
    return None


# ------------------------------------------------------------------------------------------------------ whole
def _ran(result):
    """A registered result, or None when its task did not run (skipped by tag or condition)."""
    if not isinstance(result, dict) or result.get("skipped"):
        return None
    return result


def _test_of(host, r):
    """One fabric_bench loop result as this node saw it (its end, the figures, or the failure)."""
    item = r.get("item") or {}
    role = r.get("role") or ("client" if item.get("client") == host else "server")
    out = {"role": role, "transport": item.get("transport"), "test": item.get("test"),
           "tool": r.get("tool") or item.get("tool"), "where": item.get("where"), "streams": item.get("streams"),
           "gbps": r.get("gbps"), "latency_us": r.get("latency_us"), "path_mtu": r.get("path_mtu")}
    if r.get("failed"):
        out.update(failed=True, msg="%s (%s end)" % (r.get("msg") or "failed", role))
    return out


def normalize(nodes):
    """{host: raw measurements as the role registered them} -> {host: {fabric, rdma_ports, fabric_tests, allreduce,
    disk}} with steps that did not run as None."""
    out = {}
    for host, raw in (nodes or {}).items():
        raw = raw or {}
        results = raw.get("fabric_results")
        tests = None
        if results is not None:
            tests = [_test_of(host, r) for r in results if isinstance(r, dict) and not r.get("skipped")]
        out[host] = {"fabric": raw.get("fabric") or {}, "rdma_ports": raw.get("rdma_ports") or {},
                     "fabric_tests": raw.get("fabric_tests", tests), "allreduce": _ran(raw.get("allreduce")),
                     "disk": _ran(raw.get("disk"))}
    return out


def judge(nodes, serving=None, context=None):
    """The report section: {lines, summary, serving, allreduce, context}."""
    context = dict(context or {})
    nodes = normalize(nodes)
    serving = _ran(serving)
    lines = (_fabric_lines(nodes, context) + _nccl_lines(nodes, context) + _disk_lines(nodes, context)
             + _serving_lines(serving, context))
    counts = {}
    for line in lines:
        counts[line["verdict"]] = counts.get(line["verdict"], 0) + 1
    head = context.get("head")
    allreduce = ((nodes.get(head) or {}).get("allreduce") or {}) if head else {}
    return {"lines": lines, "summary": counts, "serving": (serving or {}).get("levels") or [],
            "serving_tool": (serving or {}).get("tool"),
            "allreduce": {"backend": allreduce.get("backend"), "results": allreduce.get("results") or []},
            "context": context}


def _fmt(value):
    if value is None:
        return "-"
    if isinstance(value, float):
        return "%.3g" % value if abs(value) < 100 else "%.0f" % value
    return str(value)


def table(section):
    """The section as text lines: figure, where, value, expected, verdict (and the cause or reason)."""
    lines = ["qualify: %s" % ", ".join("%d %s" % (n, v) for v, n in sorted((section.get("summary") or {}).items()))]
    rows = [("figure", "where", "value", "expected (two Sparks)", "verdict")]
    for ln in section.get("lines") or []:
        value = "%s %s" % (_fmt(ln["value"]), ln["unit"]) if ln["value"] is not None else "-"
        rows.append((ln["figure"], ln["where"], value.strip(), ln["expected"] or "-", ln["verdict"]))
    widths = [min(max(len(r[i]) for r in rows), cap) for i, cap in enumerate((52, 30, 16, 44, 20))]
    for i, row in enumerate(rows):
        lines.append("  " + "  ".join(cell[:w].ljust(w) for cell, w in zip(row, widths)).rstrip())
        if i and (section["lines"][i - 1].get("note")):
            lines.append("      %s" % section["lines"][i - 1]["note"])
    ctx = section.get("context") or {}
    lines.append("  below: more than %g %% under the reference's low end (over a latency's high end), "
                 "qualify_reference_margin" % round(margin(ctx) * 100, 1))
    sources = []
    for ln in section.get("lines") or []:
        if ln.get("source") and ln["source"] not in sources:
            sources.append(ln["source"])
    if sources:
        lines.append("  sources:")
        lines.extend("    [%d] %s" % (i + 1, s) for i, s in enumerate(sources))
    return lines


def chart(section, path):
    """Throughput and latency against concurrency (PNG, matplotlib's object API). Raises ImportError without it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=import-outside-toplevel
    from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel

    levels = [lv for lv in section.get("serving") or [] if lv.get("ok")]
    fig = Figure(figsize=(10, 4.2))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    users = [lv["concurrency"] for lv in levels]
    left.plot(users, [lv.get("output_tok_s") or 0 for lv in levels], marker="o", color="#2ca02c")
    left.set_xlabel("concurrent users")
    left.set_ylabel("output tokens/s")
    left.set_title("throughput", fontsize=10)
    left.set_ylim(bottom=0)
    for key, label, colour in (("ttft_ms", "time to first token (median)", "#1f77b4"),
                               ("itl_ms", "inter-token latency (median)", "#ff7f0e"),
                               ("e2el_ms", "request latency (median)", "#7f7f7f")):
        pts = [(lv["concurrency"], (lv.get(key) or {}).get("p50")) for lv in levels]
        pts = [(c, v) for c, v in pts if v is not None]
        if pts:
            right.plot([c for c, _v in pts], [v for _c, v in pts], marker="o", color=colour, label=label)
    right.set_xlabel("concurrent users")
    right.set_ylabel("ms")
    no_itl = not any(lv.get("itl_ms") for lv in levels)
    right.set_title("latency" + (" (no inter-token latency: each completion came in one piece)" if no_itl else ""),
                    fontsize=10)
    right.set_ylim(bottom=0)
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=8)
    for ax in (left, right):
        if users:
            ax.set_xscale("log", base=2)
            ax.set_xticks(users)
            ax.set_xticklabels([str(u) for u in users])
        ax.grid(linestyle=":", alpha=0.6)
    ctx = section.get("context") or {}
    fig.suptitle("%s at %s (%s)" % (ctx.get("model") or "?", ctx.get("endpoint") or "?",
                                    section.get("serving_tool") or "?"), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def write(section, directory, chart_too=True):
    """qualify.json, qualify.txt and (with matplotlib and a load test) qualify.png in directory."""
    written = write_json_and_table(section, table(section), directory, "qualify")
    if chart_too and section.get("serving"):
        try:
            written["chart"] = chart(section, os.path.join(directory, "qualify.png"))
        except ImportError:
            written["chart_missing"] = "matplotlib is not installed on the controller: no qualify chart"
    return written


# --------------------------------------------------------------------------------------------- for Prometheus
# The qualified figures as the node exporter's textfile collector reads them (issue 42): the monitoring role's rules
# compare the live fabric with them. The file lives on the head, so each node's figure carries its node in
# `fabric_node` (the head's exporter target sets `node`).
TEXTFILE_NAME = "sparkfleet-qualified.prom"


def _prom_label(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _prom_line(name, labels, value):
    inner = ",".join('%s="%s"' % (k, _prom_label(v)) for k, v in sorted(labels.items()))
    return "%s{%s} %s" % (name, inner, repr(float(value))) if inner else "%s %s" % (name, repr(float(value)))


def textfile(nodes, section, measured_at):
    """The qualified figures in Prometheus's text format: when, each node's fabric link speed and the bandwidth of
    each pair's TCP and RDMA tests at both ends (by the node's fabric interface), the all-reduce's bus bandwidth at
    its largest message, and one line per verdict "below" (a figure under what two Sparks do)."""
    nodes = nodes or {}
    out = {}

    def add(name, kind, helptext, labels, value):
        if value is None or isinstance(value, bool):
            return
        try:
            value = float(value)
        except (TypeError, ValueError):
            return
        entry = out.setdefault(name, ["# HELP %s %s" % (name, helptext), "# TYPE %s %s" % (name, kind)])
        entry.append(_prom_line(name, labels, value))

    add("sparkfleet_qualified_timestamp_seconds", "gauge", "When qualify.yml measured these figures (Unix time).", {},
        measured_at)
    devices = {}
    for host in sorted(nodes):
        fabric = (nodes[host] or {}).get("fabric") or {}
        devices[host] = fabric.get("interface")
        speed = fabric.get("speed_mbps")
        if fabric.get("interface") and speed:
            add("sparkfleet_qualified_fabric_link_speed_bytes", "gauge",
                "The fabric interface's link speed when qualify.yml ran (bytes/s).",
                {"fabric_node": host, "device": fabric["interface"]}, float(speed) * 1e6 / 8)
    for host in sorted(nodes):
        for r in ((nodes[host] or {}).get("fabric_results") or []):
            item = (r or {}).get("item") or {}
            if r.get("skipped") or r.get("failed") or item.get("test") != "bandwidth" or item.get("client") != host:
                continue
            gbps = r.get("gbps")
            for end in (item.get("client"), item.get("server")):
                if devices.get(end):
                    add("sparkfleet_qualified_fabric_bandwidth_bytes", "gauge",
                        "Bandwidth qualify.yml measured between two nodes, at each end's fabric interface (bytes/s).",
                        {"fabric_node": end, "device": devices[end], "transport": item.get("transport") or "",
                         "pair": item.get("where") or ""}, None if gbps is None else float(gbps) * 1e9 / 8)
    allreduce = (section or {}).get("allreduce") or {}
    results = allreduce.get("results") or []
    if results:
        top = results[-1]
        busbw = top.get("busbw_gbs")
        add("sparkfleet_qualified_allreduce_bus_bandwidth_bytes", "gauge",
            "The all-reduce's bus bandwidth at its largest message when qualify.yml ran (bytes/s; backend nccl, or "
            "gloo on the CPU where no GPU is seen).",
            {"backend": allreduce.get("backend") or "", "message_bytes": top.get("bytes") or 0},
            None if busbw is None else float(busbw) * 1e9)
    below = [ln for ln in (section or {}).get("lines") or [] if ln.get("verdict") == BELOW]
    for ln in below:
        add("sparkfleet_qualified_below", "gauge",
            "A figure qualify.yml measured under what two DGX Sparks do (1; its value in the qualify report).",
            {"group": ln.get("group") or "", "figure": ln.get("figure") or "", "where": ln.get("where") or ""}, 1)
    add("sparkfleet_qualified_below_figures", "gauge", "How many figures qualify.yml found under two Sparks'.", {},
        len(below))
    return "".join("\n".join(lines) + "\n" for lines in out.values())
