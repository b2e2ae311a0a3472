"""sparkfleet top: a live view of the cluster from the head's Prometheus (the monitoring role's).

The controller may not route to the management network's Prometheus port, so by default the queries go the way the
playbooks reach the head: ssh with the inventory's connection settings (ansible-inventory resolves them), where a
small Python program asks Prometheus on 127.0.0.1 (one ssh per refresh, every query in it). --prometheus URL asks
directly instead. Plain lines, one snapshot, when stdout is not a terminal (or with --once / --plain).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
import urllib.parse
import urllib.request

# name -> PromQL: what the view shows
QUERIES = {
    "tokens_s": "sum(rate(vllm:generation_tokens_total[1m]))",
    "prompt_s": "sum(rate(vllm:prompt_tokens_total[1m]))",
    "running": "sum(vllm:num_requests_running)",
    "waiting": "sum(vllm:num_requests_waiting)",
    "ttft_p50": "histogram_quantile(0.5, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
    "ttft_p95": "histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
    "kv": "max(vllm:kv_cache_usage_perc)",
    "engine_up": 'max(up{job="vllm"})',
    "mem_used": "max by (node) (sparkfleet_memory_used_bytes)",
    "mem_total": "max by (node) (sparkfleet_memory_total_bytes)",
    "mem_baseline": "sparkfleet:memory_baseline_bytes:by_node",
    "ray_up": 'max by (node) (up{job="ray"})',
    "last_event": "max by (node, unit, event, cause) (sparkfleet_supervision_last_event_timestamp_seconds)",
    "alerts": 'ALERTS{alertstate="firing"}',
}

# Run on the head (python3 is there: Ansible needs it): every query to Prometheus on loopback, one JSON answer.
REMOTE = r"""
import json, sys, urllib.parse, urllib.request
port, queries = sys.argv[1], json.loads(sys.argv[2])
out = {}
for name, expr in queries.items():
    url = "http://127.0.0.1:%s/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": expr}))
    try:
        out[name] = json.load(urllib.request.urlopen(url, timeout=10))
    except Exception as e:
        out[name] = {"status": "error", "error": "%s: %s" % (type(e).__name__, e)}
print(json.dumps(out))
"""


class TopError(Exception):
    """Prometheus could not be asked (no head, ssh failed, no answer): the message says what to do."""


def head_ssh(inventories, runner=subprocess.run):
    """(ssh argv prefix for the head, Prometheus's port there) from the inventory, as Ansible would connect."""
    argv = ["ansible-inventory", "--list"]
    for inv in inventories:
        argv += ["-i", inv]
    try:
        p = runner(argv, capture_output=True, text=True, timeout=120, check=False)
    except OSError as e:
        raise TopError("ansible-inventory could not run (%s): install ansible-core beside sparkfleet" % e) from e
    if p.returncode != 0:
        raise TopError("ansible-inventory failed: %s" % (p.stderr.strip().splitlines() or ["?"])[-1])
    data = json.loads(p.stdout)
    heads = (data.get("spark_head") or {}).get("hosts") or []
    if len(heads) != 1:
        raise TopError("the inventory needs exactly one host in spark_head (it has %d)" % len(heads))
    head = heads[0]
    hv = ((data.get("_meta") or {}).get("hostvars") or {}).get(head, {})
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    if hv.get("ansible_port"):
        ssh += ["-p", str(hv["ansible_port"])]
    if hv.get("ansible_ssh_private_key_file"):
        ssh += ["-i", str(hv["ansible_ssh_private_key_file"])]
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        if hv.get(key):
            ssh += shlex.split(str(hv[key]))
    target = str(hv.get("ansible_host") or head)
    if hv.get("ansible_user"):
        target = "%s@%s" % (hv["ansible_user"], target)
    return ssh + [target], int(hv.get("monitoring_prometheus_port") or 9090)


def ask_over_ssh(ssh, port, queries=QUERIES, runner=subprocess.run):
    cmd = "python3 -c %s %s %s" % (shlex.quote(REMOTE), port, shlex.quote(json.dumps(queries)))
    try:
        p = runner(ssh + [cmd], capture_output=True, text=True, timeout=60, check=False)
    except OSError as e:
        raise TopError("ssh could not run (%s)" % e) from e
    if p.returncode != 0:
        raise TopError("ssh to the head failed (rc %d): %s" % (p.returncode, p.stderr.strip()[-300:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def ask_direct(url, queries=QUERIES):
    out = {}
    for name, expr in queries.items():
        full = "%s/api/v1/query?%s" % (url.rstrip("/"), urllib.parse.urlencode({"query": expr}))
        try:
            with urllib.request.urlopen(full, timeout=10) as r:
                out[name] = json.load(r)
        except (OSError, ValueError) as e:
            out[name] = {"status": "error", "error": str(e)}
    return out


def _series(answers, name):
    a = answers.get(name) or {}
    if a.get("status") != "success":
        return []
    return [(s.get("metric", {}), float(s["value"][1])) for s in a["data"]["result"]]


def _one(answers, name):
    s = _series(answers, name)
    return s[0][1] if s else None


def snapshot(answers, now=None):
    """What the view shows, from the answers of QUERIES."""
    nodes = {}
    for key in ("mem_used", "mem_total", "mem_baseline", "ray_up"):
        for metric, value in _series(answers, key):
            nodes.setdefault(metric.get("node", "?"), {})[key] = value
    last = {}
    for metric, value in _series(answers, "last_event"):
        node = metric.get("node", "?")
        if value > last.get(node, {}).get("time", -1):
            last[node] = {"time": value, "unit": metric.get("unit", "?"), "event": metric.get("event", "?"),
                          "cause": metric.get("cause", "")}
    for node, event in last.items():
        nodes.setdefault(node, {})["last"] = event
    errors = sorted({a.get("error", "?") for a in answers.values() if a.get("status") != "success"})
    return {"time": time.time() if now is None else now,
            "tokens_s": _one(answers, "tokens_s"), "prompt_s": _one(answers, "prompt_s"),
            "running": _one(answers, "running"), "waiting": _one(answers, "waiting"),
            "ttft_p50": _one(answers, "ttft_p50"), "ttft_p95": _one(answers, "ttft_p95"),
            "kv": _one(answers, "kv"), "engine_up": _one(answers, "engine_up"),
            "nodes": dict(sorted(nodes.items())),
            "alerts": sorted("%s%s" % (m.get("alertname", "?"), " (%s)" % m["node"] if m.get("node") else "")
                             for m, _v in _series(answers, "alerts")),
            "errors": errors}


def _num(value, fmt="%.1f", none="-"):
    if value is None or value != value:   # NaN: no requests in the window
        return none
    return fmt % value


def _gib(value):
    return _num(None if value is None else value / (1 << 30), "%.2f GiB")


def _last(last, now):
    """A node's last restart and why: "sparkfleet-vllm stopped 8m ago: <cause>" (the plain lines and the table alike)."""
    return "%s %s %s%s" % (last.get("unit", "-"), last.get("event", "none"), _ago(last.get("time"), now),
                           (": " + last["cause"]) if last.get("cause") else "")


def _ago(then, now):
    if not then:
        return "never"
    s = int(now - then)
    return "%ds ago" % s if s < 120 else "%dm ago" % (s // 60) if s < 7200 else "%dh ago" % (s // 3600)


def lines(snap):
    """Plain text: the serving line, one line a node, the firing alerts."""
    up = snap["engine_up"]
    out = ["engine %s  tokens/s %s (prompt %s)  running %s  waiting %s  TTFT p50 %s p95 %s  KV cache %s" % (
        "up" if up == 1 else "DOWN" if up == 0 else "?", _num(snap["tokens_s"]), _num(snap["prompt_s"]),
        _num(snap["running"], "%d"), _num(snap["waiting"], "%d"), _num(snap["ttft_p50"], "%.3fs"),
        _num(snap["ttft_p95"], "%.3fs"), _num(None if snap["kv"] is None else snap["kv"] * 100, "%.0f%%"))]
    for node, n in snap["nodes"].items():
        used, base = n.get("mem_used"), n.get("mem_baseline")
        delta = "" if used is None or base is None else " (%s%.2f GiB vs baseline %s)" % (
            "+" if used >= base else "-", abs(used - base) / (1 << 30), _gib(base))
        last = n.get("last") or {}
        why = "last %s" % _last(last, snap["time"]) if last else "last -"
        ray = {1.0: "up", 0.0: "DOWN"}.get(n.get("ray_up"), "?")
        out.append("%-10s memory %s of %s%s  ray %s  %s" % (node, _gib(used), _gib(n.get("mem_total")), delta, ray, why))
    out.append("alerts: %s" % (", ".join(snap["alerts"]) or "none firing"))
    if snap["errors"]:
        out.append("errors: %s" % "; ".join(snap["errors"]))
    return out


def table(snap):
    """The same as a rich renderable, for the live view."""
    from rich.console import Group  # pylint: disable=import-outside-toplevel
    from rich.table import Table  # pylint: disable=import-outside-toplevel
    from rich.text import Text  # pylint: disable=import-outside-toplevel

    text = lines(snap)
    t = Table(title="sparkfleet top  %s" % time.strftime("%H:%M:%S", time.localtime(snap["time"])), expand=False)
    for col in ("node", "unified memory", "against baseline", "ray", "last restart and why"):
        t.add_column(col)
    for node, n in snap["nodes"].items():
        used, base = n.get("mem_used"), n.get("mem_baseline")
        above = None if used is None or base is None else used - base
        last = n.get("last") or {}
        t.add_row(node, "%s / %s" % (_gib(used), _gib(n.get("mem_total"))),
                  Text("-" if above is None else "%+.2f GiB" % (above / (1 << 30)),
                       style="red" if above is not None and above > (1 << 30) else ""),
                  Text({1.0: "up", 0.0: "DOWN"}.get(n.get("ray_up"), "?"),
                       style="red" if n.get("ray_up") == 0 else "green"),
                  _last(last, snap["time"]) if last else "-")
    alerts = Text(text[-1] if not snap["errors"] else text[-2], style="red" if snap["alerts"] else "green")
    return Group(Text(text[0], style="bold"), t, alerts, *([Text(text[-1], style="red")] if snap["errors"] else []))


def run(args, console):
    """The top subcommand: 0 once a snapshot was shown; 1 when Prometheus could not be asked."""
    try:
        if args.prometheus:
            def ask():
                return ask_direct(args.prometheus)
        else:
            ssh, port = head_ssh(args.inventory)

            def ask():
                return ask_over_ssh(ssh, port)
        snap = snapshot(ask())
    except (TopError, subprocess.TimeoutExpired, ValueError) as e:
        console.print("sparkfleet top: %s" % e, markup=False, highlight=False, style="red")
        return 1
    if args.once or args.plain or not console.is_terminal:
        for line in lines(snap):
            console.print(line, markup=False, highlight=False)
        return 0
    from rich.live import Live  # pylint: disable=import-outside-toplevel
    with Live(table(snap), console=console, refresh_per_second=1, transient=False) as live:
        while True:
            time.sleep(args.interval)
            try:
                snap = snapshot(ask())
            except (TopError, subprocess.TimeoutExpired, ValueError) as e:
                snap = dict(snap, errors=[str(e)])
            live.update(table(snap))
