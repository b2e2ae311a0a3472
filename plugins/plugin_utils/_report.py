# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deploy report (controller side): phases per node from task timings, results from module returns.

Pure functions shared by the ``sparkfleet.vllm.report`` callback (which feeds them) and its tests. The chart
needs matplotlib; without it the JSON report and the table are still written.
"""

from __future__ import annotations

import json
import os
import time

# Module returns the report keeps (short action name -> fields).
CAPTURED = {
    "image_check": ("image", "vllm_version", "ray_version", "model_architectures"),
    "model_sync": ("files_total", "files_transferred", "bytes_transferred", "transfer_seconds", "mb_per_s", "seconds"),
    "ray_cluster_check": ("ok", "summary", "ray_version", "address"),
    "vllm_wait": ("phase", "ready", "summary", "phase_times", "vllm_version", "failure", "progress"),
    "nccl_transport": ("transports",),
}


# Tasks that only pull in other tasks: not timed themselves (the tasks they include are).
INCLUDES = ("include_role", "import_role", "include_tasks", "import_tasks")


class PhaseClock(object):
    """Per host, the phases it went through in order: when the first task started, when the last result came, and
    whether one failed. A phase entered again later (the lock taken at the start, released at the end) is a new span."""

    def __init__(self, now=time.time):
        self.now = now
        self.started = now()
        self.spans = {}  # host -> [dict(phase, start, end, status, tasks)]

    def start(self, host, phase):
        spans = self.spans.setdefault(host, [])
        if spans and spans[-1]["phase"] == phase:
            return spans[-1]
        spans.append({"phase": phase, "start": self.now(), "end": None, "status": "ok", "tasks": 0})
        return spans[-1]

    def result(self, host, phase, status):
        span = next((s for s in reversed(self.spans.get(host, [])) if s["phase"] == phase), None)
        if span is None:
            span = self.start(host, phase)
        span["end"] = self.now()
        span["tasks"] += 1
        if status in ("failed", "unreachable") and span["status"] == "ok":
            span["status"] = status

    def phases(self):
        """{host: [{phase, start_s, end_s, seconds, status}]} in run order, offsets from the run's start."""
        out = {}
        for host in sorted(self.spans):
            rows = []
            for span in self.spans[host]:
                end = span["end"] if span["end"] is not None else span["start"]
                rows.append({"phase": span["phase"], "start_s": round(span["start"] - self.started, 2),
                             "end_s": round(end - self.started, 2), "seconds": round(end - span["start"], 2),
                             "status": span["status"]})
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


def build(playbook, clock, captured, custom_stats, host_stats, failure, now=time.time):
    """The report dict (JSON-ready)."""
    ended = now()
    stats = (custom_stats or {}).get("sparkfleet") or {}
    sync = captured.get("model_sync") or {}
    checks = captured.get("image_check") or {}
    ray = captured.get("ray_cluster_check") or {}
    wait = captured.get("vllm_wait") or {}
    failed = bool(failure) or any(s.get("failures") or s.get("unreachable") for s in (host_stats or {}).values())
    return {
        "playbook": playbook,
        "status": "failed" if failed else "successful",
        "started": _iso(clock.started),
        "ended": _iso(ended),
        "seconds": round(ended - clock.started, 1),
        "phases": clock.phases(),
        "endpoint": stats.get("endpoint"),
        "model": stats.get("model"),
        "tokens_per_s": stats.get("tokens_per_s"),
        "versions": {
            "vllm": (stats.get("versions") or {}).get("vllm") or checks.get("vllm_version") or wait.get("vllm_version"),
            "ray": (stats.get("versions") or {}).get("ray") or checks.get("ray_version") or ray.get("ray_version"),
            "image": (stats.get("versions") or {}).get("image") or checks.get("image"),
        },
        "transfer": {k: sync.get(k) for k in ("files_transferred", "bytes_transferred", "transfer_seconds", "mb_per_s")}
        if sync else None,
        "ray": {"ok": ray.get("ok"), "summary": ray.get("summary")} if ray else None,
        "nccl_transports": stats.get("nccl_transports") or (captured.get("nccl_transport") or {}).get("transports"),
        "vllm_phase_times": stats.get("vllm_phase_times") or wait.get("phase_times"),
        "failure": failure,
        "host_stats": host_stats,
    }


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


def table(report):
    """The report as plain text lines (what the callback prints and status.yml shows)."""
    phases = report.get("phases") or {}
    order = _order(phases)
    keyed = {h: _keyed(rows) for h, rows in phases.items()}
    hosts = sorted(phases)
    width = max([len("phase")] + [len(p) for p in order])
    cols = [max(len(h), 9) for h in hosts]
    head = (report.get("playbook"), report.get("status"), _fmt_s(report.get("seconds")), report.get("started"))
    lines = ["sparkfleet report: %s %s in %s (%s)" % head]
    lines.append("  " + "phase".ljust(width) + "".join("  " + h.rjust(c) for h, c in zip(hosts, cols)))
    for phase in order:
        cells = []
        for host, col in zip(hosts, cols):
            row = keyed[host].get(phase)
            cell = "" if row is None else _fmt_s(row["seconds"]) + ("" if row["status"] == "ok" else " FAILED")
            cells.append("  " + cell.rjust(col))
        lines.append(("  " + phase.ljust(width) + "".join(cells)).rstrip())
    transfer = report.get("transfer") or {}
    if transfer.get("bytes_transferred") == 0:
        lines.append("  transfer: nothing to send (every worker has the model, verified)")
    elif transfer.get("bytes_transferred") is not None:
        moved = (transfer["bytes_transferred"] / 1e6, _fmt_s(transfer.get("transfer_seconds")),
                 transfer.get("mb_per_s") or 0.0)
        lines.append("  transfer: %.1f MB in %s (%.1f MB/s)" % moved)
    if report.get("ray"):
        lines.append("  ray: %s" % report["ray"].get("summary"))
    versions = report.get("versions") or {}
    if any(versions.values()):
        found = tuple(versions.get(k) or "?" for k in ("vllm", "ray", "image"))
        lines.append("  versions: vLLM %s, Ray %s, image %s" % found)
    if report.get("endpoint"):
        tps = report.get("tokens_per_s")
        rate = "%s tokens/s" % tps if tps is not None else "tokens/s not measured"
        lines.append("  serving: %s at %s, %s" % (report.get("model"), report["endpoint"], rate))
    failure = report.get("failure")
    if failure:
        what = (failure.get("task"), failure.get("host"), failure.get("class") or "error", failure.get("msg"))
        lines.append("  failed: %s on %s (%s): %s" % what)
        if failure.get("hint"):
            lines.append("  hint: %s" % failure["hint"])
    return lines


def write(report, directory, chart=True):
    """Write report.json, report.txt and (with matplotlib) timeline.png into directory; return what was written."""
    os.makedirs(directory, exist_ok=True)
    written = {}
    path = os.path.join(directory, "report.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, sort_keys=True, default=str)
        f.write("\n")
    written["json"] = path
    path = os.path.join(directory, "report.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(table(report)) + "\n")
    written["table"] = path
    if chart:
        try:
            written["chart"] = timeline(report, os.path.join(directory, "timeline.png"))
        except ImportError:
            written["chart_missing"] = "matplotlib is not installed on the controller: no timeline chart"
    return written


# Fixed colours per known phase so charts of different runs compare at a glance.
COLOURS = {"preflight": "#8c8c8c", "runtime_image": "#9467bd", "gpu_cleanup": "#d62728", "model_sync": "#1f77b4",
           "ray_cluster": "#ff7f0e", "vllm_serve": "#2ca02c", "healthcheck": "#17becf"}


def timeline(report, path):
    """A Gantt chart of phases per node (PNG). Raises ImportError without matplotlib."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    from matplotlib import pyplot  # pylint: disable=import-outside-toplevel
    from matplotlib.patches import Patch  # pylint: disable=import-outside-toplevel

    phases = report.get("phases") or {}
    hosts = sorted(phases)
    order = []
    for key in _order(phases):
        base = key.split(" (")[0]
        if base not in order:
            order.append(base)
    spare = iter(["#bcbd22", "#e377c2", "#7f7f7f", "#8c564b", "#aec7e8", "#ffbb78"] * 4)
    colours = {p: COLOURS.get(p) or next(spare) for p in order}
    fig, ax = pyplot.subplots(figsize=(11, 1.6 + 0.7 * max(1, len(hosts))))
    for y, host in enumerate(reversed(hosts)):
        for row in phases[host]:
            width = max(row["end_s"] - row["start_s"], 0.05)
            ax.broken_barh([(row["start_s"], width)], (y - 0.35, 0.7), facecolors=colours[row["phase"]],
                           edgecolor="black" if row["status"] == "ok" else "red",
                           hatch=None if row["status"] == "ok" else "xx", linewidth=0.6)
            if width >= 0.045 * max(report.get("seconds") or 1, 1):
                ax.text(row["start_s"] + width / 2, y, _fmt_s(row["seconds"]), ha="center", va="center", fontsize=8)
    ax.set_yticks(range(len(hosts)))
    ax.set_yticklabels(list(reversed(hosts)))
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
    fig.legend(handles=[Patch(facecolor=colours[p], edgecolor="black", label=p) for p in order],
               loc="lower center", ncol=min(len(order), 8), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.45 / height, 1, 1))
    fig.savefig(path, dpi=110)
    pyplot.close(fig)
    return path
