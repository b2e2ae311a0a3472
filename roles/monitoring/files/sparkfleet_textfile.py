# sparkfleet-textfile: our supervision as Prometheus metrics, for the node exporter's textfile collector (installed by
# the sparkfleet.vllm monitoring role; run by the sparkfleet-monitoring-textfile timer on every node).
#
# Writes DIR/sparkfleet.prom atomically (a temporary file in DIR, then rename) and bounded (one series per unit and
# event, causes cut to 160 characters), from what our units already keep:
#   - this node's unified memory as the memory gate reads it (sparkfleet_memory.py: meminfo, or the memory cgroup
#     where one caps the node), so a node's memory is the same figure here, in the gate and in status.yml;
#   - the memory baselines the gate keeps (on the head: every node's memory in use at the last start that served);
#   - the watchdog's supervision log (restarts, failed restarts, escalations, returns, stops) as counters that only
#     grow (the log itself is trimmed; the counts carry on in a state file);
#   - escalation markers (/run/sparkfleet/escalated-UNIT);
#   - free space on the model's filesystem.
# stdlib only; python3 sparkfleet-textfile.py --dir D --state S --unit U... --node NAME=IP... [--model-dir P]

from __future__ import annotations

import argparse
import json
import os
import sys
import time

CAUSE_MAX = 160
EVENTS = ("restart", "restart-failed", "escalated", "return", "stopped")
MEMORY_FIELDS = ("total", "free", "available", "cache", "shmem", "used", "unaccounted")


def _load_memory(path):
    """sparkfleet_memory.py, which the ray_cluster role installs on every node; None where it is not (yet) there."""
    import importlib.util
    sys.dont_write_bytecode = True
    if not os.path.isfile(path):
        return None
    spec = importlib.util.spec_from_file_location("sparkfleet_memory", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labels(**pairs):
    return "{%s}" % ",".join('%s="%s"' % (k, escape(v)) for k, v in sorted(pairs.items())) if pairs else ""


def read_json(path, default=None):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return default


def read_events(path, limit=1 << 20):
    """The supervision log's entries (one JSON object a line); a torn or foreign line is skipped."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(size - limit, 0))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("time"), (int, float)):
            out.append(entry)
    return out


def count_events(entries, state, units):
    """Add the entries newer than state["seen"] to state["counts"] (unit -> event -> n); keep the last of each unit.

    The log is trimmed by the watchdog, so counting what it holds now would go down; counting what is new since the
    last run only grows. Returns the new state."""
    counts = dict((u, dict(state.get("counts", {}).get(u, {}))) for u in units)
    last = dict(state.get("last", {}))
    seen = float(state.get("seen", 0) or 0)
    newest = seen
    for entry in sorted(entries, key=lambda e: e["time"]):
        unit, event = entry.get("unit"), entry.get("event")
        if unit not in counts or event not in EVENTS or entry["time"] <= seen:
            continue
        counts[unit][event] = counts[unit].get(event, 0) + 1
        last[unit] = {"time": entry["time"], "event": event, "cause": str(entry.get("cause") or "")[:CAUSE_MAX]}
        newest = max(newest, entry["time"])
    return {"seen": newest, "counts": counts, "last": dict((u, last[u]) for u in units if u in last)}


def render(state, units, memory=None, baselines=None, names=None, escalated=(), disk=None, now=None):
    """The .prom text: families in a fixed order, every sample of a family together."""
    names = names or {}
    out = []

    def family(name, kind, text):
        out.append("# HELP %s %s" % (name, text))
        out.append("# TYPE %s %s" % (name, kind))

    family("sparkfleet_supervision_events_total", "counter",
           "Supervision events of our units (watchdog and memory gate): restart, restart-failed, escalated, return, "
           "stopped.")
    for unit in units:
        for event in EVENTS:
            out.append("sparkfleet_supervision_events_total%s %d"
                       % (labels(unit=unit, event=event), state["counts"].get(unit, {}).get(event, 0)))
    family("sparkfleet_supervision_last_event_timestamp_seconds", "gauge",
           "When the unit's last supervision event happened, with what and why.")
    for unit in units:
        # a unit with no event yet has one too (event "none", time 0): the panels and `sparkfleet top` show it so
        last = state["last"].get(unit) or {"event": "none", "cause": "", "time": 0}
        out.append("sparkfleet_supervision_last_event_timestamp_seconds%s %.1f" % (
            labels(unit=unit, event=last["event"], cause=last["cause"]), last["time"]))
    family("sparkfleet_escalated", "gauge", "1 while the unit is escalated (stopped by supervision until a person acts).")
    for unit in units:
        out.append("sparkfleet_escalated%s %d" % (labels(unit=unit), 1 if unit in escalated else 0))
    if memory:
        for field in MEMORY_FIELDS:
            family("sparkfleet_memory_%s_bytes" % field, "gauge",
                   "This node's unified memory, %s (as the memory gate reads it; source %s)."
                   % (field, memory.get("source", "?")))
            out.append("sparkfleet_memory_%s_bytes %d" % (field, int(memory.get(field) or 0)))
    if baselines:
        family("sparkfleet_memory_baseline_bytes", "gauge",
               "A node's memory in use at the engine's last start that served (the memory gate's baseline).")
        for ip in sorted(baselines):
            unit, used = baselines[ip]
            out.append("sparkfleet_memory_baseline_bytes%s %d" % (labels(baseline_node=names.get(ip, ip), unit=unit), used))
    if disk:
        family("sparkfleet_model_filesystem_avail_bytes", "gauge", "Free space for us on the model's filesystem.")
        out.append("sparkfleet_model_filesystem_avail_bytes%s %d" % (labels(path=disk["path"]), disk["avail"]))
        family("sparkfleet_model_filesystem_size_bytes", "gauge", "Size of the model's filesystem.")
        out.append("sparkfleet_model_filesystem_size_bytes%s %d" % (labels(path=disk["path"]), disk["size"]))
    family("sparkfleet_textfile_timestamp_seconds", "gauge", "When this file was written.")
    out.append("sparkfleet_textfile_timestamp_seconds %.1f" % (time.time() if now is None else now))
    return "\n".join(out) + "\n"


def read_baselines(watchdog_dir, units):
    """{fabric IP: (unit, bytes used)} from the memory gate's memory-baseline-UNIT.json ({"time", "nodes": {IP: used}}:
    each node's memory in use at the unit's last start that served)."""
    out = {}
    for unit in units:
        data = read_json(os.path.join(watchdog_dir, "memory-baseline-%s.json" % unit), {})
        nodes = data.get("nodes") if isinstance(data, dict) else None
        for ip, used in (nodes.items() if isinstance(nodes, dict) else ()):
            if isinstance(used, (int, float)) and not isinstance(used, bool) and used >= 0:
                out[ip] = (unit, int(used))
    return out


def model_disk(path):
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return {"path": path, "avail": st.f_bavail * st.f_frsize, "size": st.f_blocks * st.f_frsize}


def write_atomic(directory, name, text):
    """DIR/NAME replaced in one rename: the exporter never reads half a file."""
    final = os.path.join(directory, name)
    tmp = os.path.join(directory, ".%s.%d.tmp" % (name, os.getpid()))
    with open(tmp, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, final)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dir", required=True, help="the node exporter's textfile directory")
    p.add_argument("--state", required=True, help="where the counts are kept between runs (JSON)")
    p.add_argument("--unit", action="append", default=[], help="one of our units (repeat)")
    p.add_argument("--node", action="append", default=[], help="NAME=IP of every node (baselines are by IP)")
    p.add_argument("--watchdog-dir", default="/var/lib/sparkfleet/watchdog")
    p.add_argument("--run-dir", default="/run/sparkfleet")
    p.add_argument("--memory-lib", default="/usr/local/lib/sparkfleet_memory.py")
    p.add_argument("--model-dir", default="")
    a = p.parse_args(argv)
    units = list(dict.fromkeys(a.unit))
    names = dict((ip, name) for name, _sep, ip in (n.partition("=") for n in a.node) if ip)
    state = read_json(a.state, {}) or {}
    state = count_events(read_events(os.path.join(a.watchdog_dir, "supervision.log")), state, units)
    baselines = read_baselines(a.watchdog_dir, units)
    escalated = [u for u in units if os.path.exists(os.path.join(a.run_dir, "escalated-%s" % u))]
    mem = _load_memory(a.memory_lib)
    memory = mem.measure() if mem else None
    text = render(state, units, memory, baselines, names, escalated, model_disk(a.model_dir) if a.model_dir else None)
    os.makedirs(os.path.dirname(os.path.abspath(a.state)), mode=0o755, exist_ok=True)
    write_atomic(os.path.dirname(os.path.abspath(a.state)), os.path.basename(a.state), json.dumps(state, sort_keys=True))
    write_atomic(a.dir, "sparkfleet.prom", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
