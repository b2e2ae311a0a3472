#!/usr/bin/env python3
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Print the time tables of playbook runs recorded by bench/callback_plugins/timetable.py, side by side.

    bench/timetable_report.py [--top N] LABEL=GLOB [LABEL=GLOB ...]

Each LABEL's runs (the files GLOB matches) are reduced to its median run by total time (the slower middle one of
an even count); the tables show that run's
seconds per role and its slowest tasks, one column per label, and the total with its ratio to the first label.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import statistics
import sys
from collections import OrderedDict


def load(pattern):
    runs = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            runs.append(json.load(f))
    if not runs:
        sys.exit("no timetable files match %s" % pattern)
    runs.sort(key=lambda r: r["total_seconds"])
    return runs, runs[len(runs) // 2]


def by_role(run, field="seconds"):
    roles = OrderedDict()
    for t in run["tasks"]:
        key = t["role"] or "(play: %s)" % t["play"]
        roles[key] = roles.get(key, 0.0) + t.get(field, 0)
    return roles


def by_task(run):
    tasks = OrderedDict()
    for t in run["tasks"]:
        key = "%s : %s" % (t["role"] or t["play"], t["task"])
        tasks[key] = tasks.get(key, 0.0) + t["seconds"]
    return tasks


def table(title, rows, labels, width):
    print("\n%s" % title)
    print("%-*s %s" % (width, "", " ".join("%14s" % lb[:14] for lb in labels)))
    for name, values in rows:
        print("%-*s %s" % (width, name[:width], " ".join("%14s" % ("%.1f" % v if v is not None else "-")
                                                          for v in values)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--floor", action="append", default=[], metavar="LABEL=GLOB",
                    help="runs of a floor playbook (bench/noop_floor.py) of the last LABEL's runs, taken in the same "
                         "rounds: printed beside it with the ratio to each")
    ap.add_argument("--commit", action="append", default=[], metavar="LABEL=REV", help="the commit LABEL ran")
    ap.add_argument("--lab", action="append", default=[], metavar="LABEL=NAME", help="the lab LABEL ran on")
    ap.add_argument("--bench", default="B3", help="the name in the BENCH-JSON line (B3: site.yml; B3-status: status.yml)")
    ap.add_argument("series", nargs="+", metavar="LABEL=GLOB")
    args = ap.parse_intermixed_args()
    labels, medians, all_runs = [], [], []
    for s in args.series:
        label, _, pattern = s.partition("=")
        runs, median = load(pattern)
        labels.append(label)
        medians.append(median)
        all_runs.append(runs)

    roles = [by_role(m) for m in medians]
    names = list(OrderedDict.fromkeys(n for r in roles for n in r))
    table("seconds per role (median run)", [(n, [r.get(n) for r in roles]) for n in names], labels, 48)

    tasks = [by_task(m) for m in medians]
    names = list(OrderedDict.fromkeys(n for t in tasks for n in t))
    names.sort(key=lambda n: -max(t.get(n, 0.0) for t in tasks))
    table("slowest tasks (median run)", [(n, [t.get(n) for t in tasks]) for n in names[:args.top]], labels, 78)
    role_calls = [by_role(m, "calls") for m in medians]
    rnames = list(OrderedDict.fromkeys(n for r in role_calls for n in r))
    table("node round trips per role (median run: module runs on the nodes, retries and loop items included)",
          [(n, [r.get(n) for r in role_calls]) for n in rnames], labels, 48)

    host_calls = [by_host(m) for m in medians]
    hnames = sorted(set(h for r in host_calls for h in r))
    table("node round trips per node (median run; the issue's goal: 15 or fewer on each)",
          [(h, [r.get(h) for r in host_calls]) for h in hnames], labels, 48)

    print("\n%-28s %s" % ("", " ".join("%14s" % lb[:14] for lb in labels)))
    print("%-28s %s" % ("runs", " ".join("%14d" % len(r) for r in all_runs)))
    print("%-28s %s" % ("tasks (median run)", " ".join("%14d" % len(m["tasks"]) for m in medians)))
    print("%-28s %s" % ("total s, each run", " ".join(
        "%14s" % ",".join("%.1f" % x["total_seconds"] for x in r) for r in all_runs)))
    print("%-28s %s" % ("total s, median", " ".join("%14.1f" % statistics.median(x["total_seconds"] for x in r)
                                                     for r in all_runs)))
    base = statistics.median(x["total_seconds"] for x in all_runs[0])
    print("%-28s %s" % ("ratio to %s" % labels[0][:18], " ".join(
        "%13.2fx" % (statistics.median(x["total_seconds"] for x in r) / base) for r in all_runs)))
    print("%-28s %s" % ("changed (max over runs)", " ".join("%14d" % max(x["changed"] for x in r) for r in all_runs)))
    # Module runs on the nodes (one ssh round trip each): the figure the machine's load does not move.
    print("%-28s %s" % ("node round trips (median)", " ".join("%14d" % calls(m) for m in medians)))
    floors = []
    for f in args.floor:
        label, _, pattern = f.partition("=")
        runs, median = load(pattern)
        floors.append({"label": label, "runs": [round(x["total_seconds"], 1) for x in runs],
                       "load": [x.get("load", "") for x in runs],
                       "median_s": round(statistics.median(x["total_seconds"] for x in runs), 1),
                       "tasks": len(median["tasks"]), "round_trips": calls(median)})
    if floors:
        last = statistics.median(x["total_seconds"] for x in all_runs[-1])
        print("\nfloors of %s (the same tasks on the same hosts, same connection settings, same rounds):" % labels[-1])
        for f in floors:
            print("  %-6s each run %s s, median %.1f s (%d tasks, %d node round trips); %s / floor = %.2fx"
                  % (f["label"], ",".join("%.1f" % x for x in f["runs"]), f["median_s"], f["tasks"],
                     f["round_trips"], labels[-1], last / f["median_s"]))
    print("BENCH-JSON " + json.dumps({"floors": floors,
        "bench": args.bench, "date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "labels": labels,
        "runs": [[round(x["total_seconds"], 1) for x in r] for r in all_runs],
        "median_s": [round(statistics.median(x["total_seconds"] for x in r), 1) for r in all_runs],
        "changed": [max(x["changed"] for x in r) for r in all_runs], "tasks": [len(m["tasks"]) for m in medians],
        "round_trips": [calls(m) for m in medians],
        "round_trips_by_host": host_calls,
        "load": [[x.get("load", "") for x in r] for r in all_runs],
        "roles": [[[n, round(v, 1)] for n, v in r.items()] for r in roles],
        "role_calls": [[[n, v] for n, v in r.items()] for r in role_calls],
        "commits": dict(c.partition("=")[::2] for c in args.commit),
        "labs": dict(c.partition("=")[::2] for c in args.lab),
        "slowest": [[n, [round(t.get(n, 0.0), 1) for t in tasks]] for n in names[:10]]}))


def by_host(run):
    """{host: module runs on it} of one run (the tasks' calls_by_host summed)."""
    out = {}
    for t in run["tasks"]:
        for host, n in (t.get("calls_by_host") or {}).items():
            out[host] = out.get(host, 0) + n
    return out


def calls(run):
    return sum(t.get("calls", 0) for t in run["tasks"])


if __name__ == "__main__":
    main()
