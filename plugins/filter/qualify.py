# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters: sparkfleet.vllm.qualify_plan, sparkfleet.vllm.qualify_report and sparkfleet.vllm.qualify_textfile
(documented in qualify_plan.yml, qualify_report.yml and qualify_textfile.yml)."""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _qualify
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._checks import fail, port_number, whole_number


def qualify_plan(nodes, caps, port=29650, streams=4):
    """The fabric tests between every pair of nodes: {tests: [...], rdma_skip_reason}. Each test names its client,
    server, their fabric IPs, transport, test, tool, port (one per test) and, for RDMA, each end's device and GID."""
    where = "qualify_plan"
    if not isinstance(nodes, list) or not all(isinstance(n, Mapping) and n.get("host") and n.get("ip")
                                              for n in nodes):
        fail(where, "the input must be the cluster's nodes, each with host and ip (sparkfleet_cluster_nodes)")
    if not isinstance(caps, Mapping):
        fail(where, "caps must map each host to what it can measure with, got %r" % (caps,))
    port = port_number(where, "port", port)
    streams = whole_number(where, "streams", streams, low=1, high=64)
    tests = []
    reasons = []

    def add(**kw):
        kw["port"] = port + len(tests)
        if kw["port"] > 65535:
            fail(where, "port %d leaves no room for %d tests below 65536" % (port, len(tests) + 1))
        tests.append(kw)

    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            ca, cb = caps.get(a["host"]) or {}, caps.get(b["host"]) or {}
            pair = dict(client=a["host"], server=b["host"], client_ip=a["ip"], server_ip=b["ip"],
                        where="%s -> %s" % (a["host"], b["host"]))
            add(transport="tcp", test="latency", tool="python", streams=1, **pair)
            tool = "iperf3" if ca.get("iperf3") and cb.get("iperf3") else "python"
            add(transport="tcp", test="bandwidth", tool=tool, streams=streams, **pair)
            missing = [h for h, c in ((a["host"], ca), (b["host"], cb)) if not c.get("rdma_devices")]
            no_tool = [h for h, c in ((a["host"], ca), (b["host"], cb)) if not c.get("perftest")]
            if missing:
                reasons.append("no RDMA device (/dev/infiniband) on %s" % ", ".join(missing))
                continue
            if no_tool:
                reasons.append("perftest (ib_write_bw, ib_write_lat) is on neither the node nor the serving image on "
                               "%s (apt install perftest on the nodes)" % ", ".join(no_tool))
                continue
            for dev_a, dev_b in zip(ca.get("hca") or [], cb.get("hca") or []):
                rdma = dict(pair)
                rdma.update({"where": "%s -> %s (%s)" % (a["host"], b["host"], dev_a), "client_device": dev_a,
                             "server_device": dev_b, "client_gid": (ca.get("gids") or {}).get(dev_a),
                             "server_gid": (cb.get("gids") or {}).get(dev_b), "client_in": ca.get("perftest"),
                             "server_in": cb.get("perftest")})
                add(transport="rdma", test="bandwidth", tool="perftest", streams=1, **rdma)
                add(transport="rdma", test="latency", tool="perftest", streams=1, **rdma)
    unique = []
    for r in reasons:
        if r not in unique:
            unique.append(r)
    return {"tests": tests, "rdma_skip_reason": "; ".join(unique) or None}


def qualify_report(nodes, serving=None, context=None):
    """{host: what the qualify role measured there} -> the report section with a verdict per figure."""
    if not isinstance(nodes, Mapping):
        fail("qualify_report", "the input must map each host to its measurements, got %r" % (type(nodes).__name__,))
    if serving is not None and not isinstance(serving, Mapping):
        fail("qualify_report", "serving must be the serving_bench result (a dict), got %r" % (serving,))
    bad = sorted(str(host) for host, value in nodes.items() if not isinstance(value, Mapping))
    if bad:
        fail("qualify_report", "each host's measurements must be a dict, not so for %s" % ", ".join(bad))
    if context is not None and not isinstance(context, Mapping):
        fail("qualify_report", "context must be a dict, got %r" % (context,))
    pct = (context or {}).get("margin_pct")
    if isinstance(pct, str) and pct.isdigit():  # -e qualify_reference_margin=5 arrives as text
        pct = int(pct)
        context = dict(context, margin_pct=pct)
    if pct is not None and (isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 <= pct <= 90):
        fail("qualify_report", "qualify_reference_margin must be a whole percent from 0 to 90, got %r: set it in the "
                               "inventory (default 10)" % (pct,))
    section = _qualify.judge(dict(nodes), dict(serving) if serving else None, dict(context or {}))
    section["table"] = _qualify.table(section)
    return section


def qualify_textfile(nodes, section, measured_at):
    """{host: what the qualify role measured there}, the qualify_report section, when -> the figures for Prometheus."""
    if not isinstance(nodes, Mapping):
        fail("qualify_textfile", "the input must map each host to its measurements, got %r" % (type(nodes).__name__,))
    if not isinstance(section, Mapping):
        fail("qualify_textfile", "section must be the qualify_report result (a dict), got %r" % (section,))
    try:
        when = float(measured_at)
    except (TypeError, ValueError):
        when = None
    if when is None or isinstance(measured_at, bool) or when <= 0:
        fail("qualify_textfile", "measured_at must be a Unix time in seconds, got %r" % (measured_at,))
    return _qualify.textfile(dict(nodes), dict(section), when)


class FilterModule:
    """Qualification helpers."""

    def filters(self):
        return {"qualify_plan": qualify_plan, "qualify_report": qualify_report, "qualify_textfile": qualify_textfile}
