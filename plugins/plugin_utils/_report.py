# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deploy report (controller side): phases per node from task timings, results from module returns.

Pure functions shared by the ``sparkfleet.vllm.report`` callback (which feeds them) and its tests. The chart
needs matplotlib (its object API only: no pyplot, no global backend inside Ansible); without it the JSON report and
the table are still written.

To add a section: capture the module's fields (``CAPTURED``), derive the report's key in ``FIELDS`` and add a
function to ``SECTIONS`` that turns the report into table lines (``[]`` when it has nothing to say).
"""

from __future__ import annotations

import json
import os
import time

# Module returns the report keeps (short action name -> fields).
CAPTURED = {
    "image_check": ("image", "vllm_version", "ray_version", "model_architectures"),
    "model_sync": ("files_total", "files_transferred", "bytes_transferred", "transfer_seconds", "mb_per_s", "seconds",
                   "verified", "failed"),
    "ray_cluster_check": ("ok", "summary", "ray_version", "address"),
    "vllm_wait": ("phase", "ready", "summary", "phase_times", "vllm_version", "failure", "progress"),
    "nccl_transport": ("transports",),
}

# Tasks that only pull in other tasks: not timed themselves (the tasks they include are).
INCLUDES = ("include_role", "import_role", "include_tasks", "import_tasks")
# Actions that run on the controller only: no round trip to a node (the report's "node round trips" leave them out).
CONTROLLER_ACTIONS = frozenset((
    "set_fact", "debug", "assert", "fail", "meta", "set_stats", "include_tasks", "import_tasks", "include_role",
    "import_role", "add_host", "group_by", "validate_argument_spec", "include_vars", "pause", "async_status_local"))
# Phases that are not part of the deployment: the controller's own check of the inventory (playbooks/inventory_check.yml).
UNTIMED = ("inventory_check",)
# The phase whose vllm_wait saw the server start in this run (its startup phases are drawn inside it).
SERVE_PHASE = "vllm_serve"


class PhaseClock(object):
    """Per host, the phases it went through in order: when the first task started, when the last result came, and
    whether one failed. A phase entered again later (the lock taken at the start, released at the end) is a new span.
    A span in which every task was skipped did nothing and is left out of the report."""

    def __init__(self, now=time.time):
        self.now = now
        self.started = now()
        self.spans = {}  # host -> [dict(phase, start, end, status, tasks, ran)]

    def offset(self):
        """Seconds since the run started."""
        return round(self.now() - self.started, 2)

    def start(self, host, phase):
        if phase in UNTIMED:
            return None
        spans = self.spans.setdefault(host, [])
        if spans and spans[-1]["phase"] == phase:
            return spans[-1]
        spans.append({"phase": phase, "start": self.now(), "end": None, "status": "ok", "tasks": 0, "ran": 0})
        return spans[-1]

    def result(self, host, phase, status):
        """status: ok, skipped, failed or unreachable."""
        if phase in UNTIMED:
            return
        span = next((s for s in reversed(self.spans.get(host, [])) if s["phase"] == phase), None)
        if span is None:
            span = self.start(host, phase)
        span["end"] = self.now()
        span["tasks"] += 1
        if status != "skipped":
            span["ran"] += 1
        if status in ("failed", "unreachable") and span["status"] == "ok":
            span["status"] = status

    def phases(self):
        """{host: [{phase, start_s, end_s, seconds, status}]} in run order, offsets from the run's start."""
        out = {}
        for host in sorted(self.spans):
            rows = []
            for span in self.spans[host]:
                if span["status"] == "ok" and span["tasks"] and not span["ran"]:
                    continue   # every task skipped: the phase did not happen on this host
                end = span["end"] if span["end"] is not None else span["start"]
                rows.append({"phase": span["phase"], "start_s": round(span["start"] - self.started, 2),
                             "end_s": round(end - self.started, 2), "seconds": round(end - span["start"], 2),
                             "status": span["status"]})
            if rows:
                out[host] = rows
        return out


def phase_of(play_tags, role_name, play_name, action=None):
    """A task's phase: its play's tag (site.yml's thin plays carry their role's name), else its role, else its module
    (the lock plays run one module, run_lock), else its play. None for a role-less include (not timed)."""
    for tag in play_tags or ():
        if tag not in ("always", "never"):
            return tag
    if role_name:
        return role_name.rsplit(".", 1)[-1]
    if action and action.rsplit(".", 1)[-1] in INCLUDES:
        return None  # the tasks it pulls in carry their role
    if action:
        return action.rsplit(".", 1)[-1]
    return play_name or "play"


def capture(action, result):
    """The fields of one module result the report keeps, or None when the action is not one it reads."""
    short = (action or "").rsplit(".", 1)[-1]
    fields = CAPTURED.get(short)
    if fields is None or not isinstance(result, dict) or result.get("skipped") or result.get("censored"):
        return None
    return short, {k: result[k] for k in fields if k in result}


def round_trips(host, action, looped, result):
    """(node, count): the module runs on a node that one task result stands for, each an ssh exchange (a Python start
    on the node, become): 0 for an action that runs on the controller, for a skipped result and for a task delegated
    to the controller; one per loop item that ran; as many as a wait that polls itself ran its module (its ``polls``,
    plugins/plugin_utils/_poll.py); counted against the host a task was delegated to."""
    result = result if isinstance(result, dict) else {}
    if (action or "").split(".")[-1] in CONTROLLER_ACTIONS or result.get("skipped"):
        return host, 0
    delegated = result.get("_ansible_delegated_vars") or {}
    node = delegated.get("ansible_delegated_host") or host
    if delegated and (delegated.get("ansible_connection") == "local" or node in ("localhost", "127.0.0.1")):
        return node, 0
    if looped and isinstance(result.get("results"), list):
        return node, sum(1 for item in result["results"] if isinstance(item, dict) and not item.get("skipped"))
    polls = result.get("polls")
    if isinstance(polls, int) and not isinstance(polls, bool) and polls > 0:
        return node, polls
    return node, 1


def vllm_start(fields, host, phase, at_s):
    """What the callback keeps of a vllm_wait result seen in the serving phase: the server (re)started in this run,
    and its startup phases end about when this result came (``at_s``, seconds since the run started)."""
    if phase != SERVE_PHASE or not fields.get("ready"):
        return None
    return {"host": host, "at_s": at_s, "phase_times": fields.get("phase_times") or {}}


# --------------------------------------------------------------------------------------------- the report dict

def _versions(stats, captured):
    checks = captured.get("image_check") or {}
    ray = captured.get("ray_cluster_check") or {}
    wait = captured.get("vllm_wait") or {}
    found = stats.get("versions") or {}
    return {
        "vllm": found.get("vllm") or checks.get("vllm_version") or wait.get("vllm_version"),
        "ray": found.get("ray") or checks.get("ray_version") or ray.get("ray_version"),
        "image": found.get("image") or checks.get("image"),
    }


def _transfer(stats, captured):
    sync = captured.get("model_sync") or {}
    return {k: sync.get(k) for k in ("files_transferred", "bytes_transferred", "transfer_seconds", "mb_per_s",
                                     "verified", "failed")} \
        if sync else None


def _ray(stats, captured):
    ray = captured.get("ray_cluster_check") or {}
    return {"ok": ray.get("ok"), "summary": ray.get("summary")} if ray else None


def _nccl(stats, captured):
    return stats.get("nccl_transports") or (captured.get("nccl_transport") or {}).get("transports")


def _phase_times(stats, captured):
    return stats.get("vllm_phase_times") or (captured.get("vllm_wait") or {}).get("phase_times")


def _vllm_startup(stats, captured):
    """vLLM's startup sub-phases, each with its seconds (zero-length ones left out), and where they sit in this run:
    laid end to end, ending when the serving phase's wait saw the server ready; ``this_run`` false when the server
    started before this run (no wait saw it start), then they have no place on this run's timeline."""
    started = captured.get("vllm_start") or {}
    times = _phase_times(stats, captured) or started.get("phase_times") or {}
    rows = []
    for name, seconds in times.items():
        try:
            seconds = float(seconds)
        except (TypeError, ValueError):
            continue
        if seconds > 0:
            rows.append({"phase": name, "seconds": round(seconds, 2)})
    if not rows:
        return None
    out = {"host": started.get("host"), "this_run": bool(started), "phases": rows}
    if started:
        end = float(started["at_s"])
        for row in reversed(rows):
            row["end_s"] = round(end, 2)
            row["start_s"] = round(max(end - row["seconds"], 0.0), 2)
            end = row["start_s"]
    return out


# Report keys derived from the captured module results and the set_stats results, in the order they are written.
FIELDS = [
    ("endpoint", lambda stats, captured: stats.get("endpoint")),
    ("model", lambda stats, captured: stats.get("model")),
    ("tokens_per_s", lambda stats, captured: stats.get("tokens_per_s")),
    ("versions", _versions),
    ("transfer", _transfer),
    ("ray", _ray),
    ("nccl_transports", _nccl),
    ("vllm_phase_times", _phase_times),
    ("vllm_startup", _vllm_startup),
]


def build(playbook, clock, captured, custom_stats, host_stats, failure, now=time.time):
    """The report dict (JSON-ready)."""
    ended = now()
    stats = (custom_stats or {}).get("sparkfleet") or {}
    captured = captured or {}
    failed = bool(failure) or any(s.get("failures") or s.get("unreachable") for s in (host_stats or {}).values())
    report = {
        "playbook": playbook,
        "status": "failed" if failed else "successful",
        "started": _iso(clock.started),
        "ended": _iso(ended),
        "seconds": round(ended - clock.started, 1),
        "phases": clock.phases(),
    }
    for key, derive in FIELDS:
        report[key] = derive(stats, captured)
    report["failure"] = failure
    report["host_stats"] = host_stats
    return report


def _iso(ts):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _fmt_s(seconds):
    if seconds is None:
        return "-"
    seconds = float(seconds)
    return "%.1f s" % seconds if seconds < 120 else "%dm%02ds" % (seconds // 60, seconds % 60)


def _keyed(rows):
    """Rows keyed by phase name, a repeated phase as 'name (2)'."""
    seen, out = {}, {}
    for row in rows:
        seen[row["phase"]] = seen.get(row["phase"], 0) + 1
        out[row["phase"] if seen[row["phase"]] == 1 else "%s (%d)" % (row["phase"], seen[row["phase"]])] = row
    return out


def _order(phases):
    """Phase keys in the order they ran, across hosts (the head runs every phase; workers a subset)."""
    order = []
    for host in sorted(phases, key=lambda h: -len(phases[h])):
        keys = list(_keyed(phases[host]))
        for i, key in enumerate(keys):
            if key not in order:
                after = [k for k in keys[:i] if k in order]
                order.insert(order.index(after[-1]) + 1 if after else 0, key)
    return order


def _hosts(report):
    """The table's and the chart's columns: every host that ran a phase, then any other the results name."""
    hosts = sorted(report.get("phases") or {})
    return hosts + sorted(h for h in (report.get("nccl_transports") or {}) if h not in hosts)


# ------------------------------------------------------------------------------------------------ the table

def _phase_table(report):
    phases = report.get("phases") or {}
    hosts = _hosts(report)
    if not hosts:
        return ["  no phase ran on any node"]
    keyed = {h: _keyed(phases.get(h, [])) for h in hosts}
    startup = report.get("vllm_startup") or {}
    sub = startup.get("phases") if startup.get("this_run") else []
    rows = []   # (label, cells)
    for phase in _order(phases):
        cells = []
        for host in hosts:
            row = keyed[host].get(phase)
            cells.append("" if row is None else _fmt_s(row["seconds"]) + ("" if row["status"] == "ok" else " FAILED"))
        rows.append((phase, cells))
        if phase == SERVE_PHASE and sub:
            for row in sub:
                rows.append(("  %s" % row["phase"],
                             [_fmt_s(row["seconds"]) if h == startup.get("host") else "" for h in hosts]))
    nccl = report.get("nccl_transports") or {}
    if nccl:
        rows.append(("NCCL transport", [str(nccl.get(h) or "") for h in hosts]))
    width = max(len(label) for label, _cells in rows + [("phase", [])])
    cols = [max([len(h), 9] + [len(cells[i]) for _label, cells in rows]) for i, h in enumerate(hosts)]

    def line(label, cells):
        return ("  " + label.ljust(width) + "".join("  " + c.rjust(w) for c, w in zip(cells, cols))).rstrip()

    return [line("phase", hosts)] + [line(label, cells) for label, cells in rows]


def _startup_section(report):
    startup = report.get("vllm_startup") or {}
    if not startup or startup.get("this_run"):
        return []
    steps = ", ".join("%s %s" % (r["phase"], _fmt_s(r["seconds"])) for r in startup["phases"])
    return ["  vLLM startup (the running server, started before this run): %s" % steps]


def _transfer_section(report):
    transfer = report.get("transfer") or {}
    if transfer.get("failed"):
        return ["  transfer: the model sync failed (see below); no copy is reported verified"]
    if transfer.get("bytes_transferred") == 0:
        # "verified" only when model_sync checked every worker's copy in this run (its `verified` return).
        return ["  transfer: nothing to send (every worker has the model, %s)"
                % ("verified" if transfer.get("verified") is True else "not verified in this run")]
    if transfer.get("bytes_transferred") is not None:
        moved = (transfer["bytes_transferred"] / 1e6, _fmt_s(transfer.get("transfer_seconds")),
                 transfer.get("mb_per_s") or 0.0)
        return ["  transfer: %.1f MB in %s (%.1f MB/s)" % moved]
    return []


def _ray_section(report):
    return ["  ray: %s" % report["ray"].get("summary")] if report.get("ray") else []


def _versions_section(report):
    versions = report.get("versions") or {}
    if not any(versions.values()):
        return []
    return ["  versions: vLLM %s, Ray %s, image %s" % tuple(versions.get(k) or "?" for k in ("vllm", "ray", "image"))]


def _serving_section(report):
    if not report.get("endpoint"):
        return []
    tps = report.get("tokens_per_s")
    rate = "%s tokens/s" % tps if tps is not None else "tokens/s not measured"
    return ["  serving: %s at %s, %s" % (report.get("model"), report["endpoint"], rate)]


def _round_trips_section(report):
    trips = report.get("round_trips") or {}
    if not trips:
        return []
    per_node = ", ".join("%s %d" % (h, trips[h]) for h in sorted(trips))
    return ["  node round trips: %s (%d in all)" % (per_node, sum(trips.values()))]


def _failure_section(report):
    failure = report.get("failure")
    if not failure:
        return []
    what = (failure.get("task"), failure.get("host"), failure.get("class") or "error", failure.get("msg"))
    lines = ["  failed: %s on %s (%s): %s" % what]
    if failure.get("detail"):  # the late error a node that went away caused (class node_away)
        lines.append("  first error: %s" % str(failure["detail"])[:300])
    if failure.get("hint"):
        lines.append("  hint: %s" % failure["hint"])
    return lines


# The table after its title line, section by section (each a function of the report dict returning lines).
SECTIONS = [_phase_table, _startup_section, _transfer_section, _ray_section, _versions_section, _serving_section,
            _round_trips_section, _failure_section]


def table(report):
    """The report as plain text lines (what the callback prints and status.yml shows)."""
    head = (report.get("playbook"), report.get("status"), _fmt_s(report.get("seconds")), report.get("started"))
    lines = ["sparkfleet report: %s %s in %s (%s)" % head]
    for section in SECTIONS:
        lines.extend(section(report))
    return lines


def write_json_and_table(data, lines, directory, stem):
    """Write STEM.json (data, keys sorted) and STEM.txt (lines) into directory, made if missing: {json, table}."""
    os.makedirs(directory, exist_ok=True)
    written = {"json": os.path.join(directory, stem + ".json"), "table": os.path.join(directory, stem + ".txt")}
    with open(written["json"], "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
        f.write("\n")
    with open(written["table"], "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return written


def write(report, directory, chart=True):
    """Write report.json, report.txt and (with matplotlib) timeline.png into directory; return what was written:
    json, table, and chart (its path) or chart_missing (why there is none)."""
    written = write_json_and_table(report, table(report), directory, "report")
    if chart:
        try:
            drawn = timeline(report, os.path.join(directory, "timeline.png"))
        except ImportError:
            written["chart_missing"] = "matplotlib is not installed on the controller: no timeline chart"
        else:
            if drawn:
                written["chart"] = drawn
            else:
                written["chart_missing"] = "no phase ran on any node: no timeline chart"
    return written


# ------------------------------------------------------------------------------------------------ the chart

# Fixed colours per known phase so charts of different runs compare at a glance.
COLOURS = {"preflight": "#8c8c8c", "runtime_image": "#9467bd", "gpu_cleanup": "#d62728", "model_sync": "#1f77b4",
           "ray_cluster": "#ff7f0e", "vllm_serve": "#2ca02c", "healthcheck": "#17becf"}
# vLLM's startup sub-phases, in shades of the serving phase's green.
STARTUP_COLOURS = ["#c7e9c0", "#a1d99b", "#74c476", "#41ab5d", "#238b45", "#006d2c", "#00441b", "#e5f5e0"]


def timeline(report, path):
    """A Gantt chart of phases per node (PNG), with vLLM's startup sub-phases in a row under the head and NCCL's
    transport beside each node's name. Returns the path, or None when no phase ran (nothing to draw).
    Raises ImportError without matplotlib."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=import-outside-toplevel
    from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel
    from matplotlib.patches import Patch  # pylint: disable=import-outside-toplevel

    phases = report.get("phases") or {}
    if not phases:
        return None
    nccl = report.get("nccl_transports") or {}
    startup = report.get("vllm_startup") or {}
    sub = startup.get("phases") if startup.get("this_run") else []
    order = []
    for key in _order(phases):
        base = key.split(" (")[0]
        if base not in order:
            order.append(base)
    spare = iter(["#bcbd22", "#e377c2", "#7f7f7f", "#8c564b", "#aec7e8", "#ffbb78"] * 4)
    colours = {p: COLOURS.get(p) or next(spare) for p in order}
    sub_colours = {r["phase"]: STARTUP_COLOURS[i % len(STARTUP_COLOURS)] for i, r in enumerate(sub or [])}
    # Rows from the top: each host, and under the head the vLLM startup row.
    rows = []
    for host in sorted(phases):
        label = host + ("\nNCCL %s" % nccl[host] if nccl.get(host) else "")
        rows.append(("host", host, label))
        if sub and host == startup.get("host"):
            rows.append(("startup", host, "%s\nvLLM startup" % host))
    total = max(report.get("seconds") or 1, 1)
    fig = Figure(figsize=(11, 1.6 + 0.7 * len(rows)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for y, (kind, host, _label) in enumerate(reversed(rows)):
        bars = phases[host] if kind == "host" else sub
        for row in bars:
            width = max(row["end_s"] - row["start_s"], 0.05)
            colour = colours[row["phase"]] if kind == "host" else sub_colours[row["phase"]]
            ok = row.get("status", "ok") == "ok"
            ax.broken_barh([(row["start_s"], width)], (y - 0.35, 0.7), facecolors=colour,
                           edgecolor="black" if ok else "red", hatch=None if ok else "xx", linewidth=0.6)
            if width >= 0.045 * total:
                text = _fmt_s(row["seconds"]) if kind == "host" else "%s\n%s" % (row["phase"], _fmt_s(row["seconds"]))
                dark = kind != "host" and STARTUP_COLOURS.index(colour) in (4, 5, 6)
                ax.text(row["start_s"] + width / 2, y, text, ha="center", va="center",
                        fontsize=7 if kind != "host" else 8, color="white" if dark else "black")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([label for _k, _h, label in reversed(rows)], fontsize=8)
    ax.set_xlabel("seconds since the run started (%s)" % report.get("started"))
    title = "%s: %s in %s" % (report.get("playbook"), report.get("status"), _fmt_s(report.get("seconds")))
    if report.get("model"):
        title += " - %s" % report["model"]
    if report.get("tokens_per_s") is not None:
        title += ", %s tokens/s" % report["tokens_per_s"]
    if (report.get("transfer") or {}).get("bytes_transferred"):
        title += "; model sent at %.1f MB/s" % (report["transfer"].get("mb_per_s") or 0.0)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", linestyle=":", alpha=0.6)
    height = fig.get_size_inches()[1]
    handles = [Patch(facecolor=colours[p], edgecolor="black", label=p) for p in order]
    handles += [Patch(facecolor=sub_colours[r["phase"]], edgecolor="black", label="vLLM " + r["phase"]) for r in sub or []]
    per_row = 6
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), per_row), fontsize=8, frameon=False)
    legend_rows = (len(handles) + per_row - 1) // per_row
    fig.tight_layout(rect=(0, (0.25 + 0.22 * legend_rows) / height, 1, 1))
    fig.savefig(path, dpi=110)
    return path
