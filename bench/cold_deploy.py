#!/usr/bin/env python3
"""Benchmark B6: a cold deploy (site.yml on fresh lab hosts, image caches warm) beside the stand-in's own load time.

    SPARKLAB_NAME=perf .venv/bin/python bench/cold_deploy.py [--hosts 2] [--start oldstack|clean|both] [--no-fresh]

Run as root from the repo root. It takes the lab down and up again (fresh hosts: nothing deployed, the runtime
image tar and the host image cached), stages the image and the model on the head (lab/stage.sh, untimed: as if
pulled and downloaded there), runs site.yml from the control namespace with a timing callback
(bench/callback/bench_times.py) and prints, per node, the seconds of every phase (role) and the whole run, beside
its floor: the stand-in vLLM's own load time, measured in the same run on the head (its container's start to
"Application startup complete", all ranks loaded: Ray placement, the gloo rendezvous, the shard reads, graph capture
and profile run, which stand for the real GPU's work), and the load it is configured for (shards x
SPARKLAB_SECONDS_PER_SHARD + graph capture + profile run). Target (issue 8): deploy minus load <= 90 s.

--start says where the hosts start: "clean" (the default: lab/stage.sh --clean, as B6 was always measured; a
revision from before issue 16, given with --tree, stops in preflight on the old stack), "oldstack" (lab/stage.sh's
default: the operators' old stack, DOMAIN 10: their units and containers holding the GPU, a foreign Ray head on 6379,
the API ports; refused with a stage.sh that cannot stage it), or "both", which deploys
from each, on fresh hosts each time, one after the other (--rounds N pairs, alternating), and prints the ratio of
(old stack - load) to (clean - load); target (issue 21): <= 1.3x. Prints one BENCH-JSON line per deploy (and one
for the pair).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_sync as b  # noqa: E402  (bench/model_sync.py: lab helpers)

STAGE = os.path.join(b.REPO, "lab", "stage.sh")
START_LABEL = {"oldstack": "from the operators' old stack", "clean": "from clean hosts"}


def stage_knows_clean():
    """Whether lab/stage.sh stages the old stack by default (and clean hosts with --clean)."""
    return "--clean" in open(STAGE).read()


def measured_load(host="spark-1", unit="sparkfleet-vllm"):
    """Seconds from the vLLM container's start to its "Application startup complete." line (None if not found)."""
    started = b.hexec(host, "docker inspect -f '{{.State.StartedAt}}' %s" % unit, check=False).strip()
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z$", started)
    if not m:
        return None
    t0 = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=datetime.timezone.utc).timestamp() + float(m.group(2) or 0)
    lines = b.hexec(host, "journalctl -u %s -o short-unix --no-pager -q | grep -F 'Application startup complete.'"
                    % unit, check=False).split("\n")
    ends = [float(x.split(" ", 1)[0]) for x in lines if x.strip()]
    ends = [t for t in ends if t >= t0]
    return round(ends[0] - t0, 1) if ends else None


def configured_load():
    """The load the stand-in is configured for: shards x SPARKLAB_SECONDS_PER_SHARD + graph capture + profile."""
    model_dir = b.hexec("spark-1", "ls -d /models/*/ | head -1").strip()
    shards = int(b.hexec("spark-1", "ls %s | grep -c '[.]safetensors$'" % model_dir).strip())
    env_line = b.hexec("spark-1", "cat /etc/sparkfleet/*.env 2>/dev/null | grep -h SPARKLAB_SECONDS_PER_SHARD | "
                       "head -1", check=False).strip()
    per_shard = float(env_line.split("=", 1)[1].strip("'\"")) if "=" in env_line else 1.0
    # The stand-in's defaults (lab/standin/README.md): graph capture 2 s, profile run 1.5 s.
    return shards * per_shard + 2.0 + 1.5, shards, per_shard


def deploy(args, start, label):
    """One cold deploy from START (oldstack or clean); returns its BENCH-JSON dict (printed)."""
    if not args.no_fresh:
        b.sh(b.LABCTL, "down")
        b.sh(b.LABCTL, "up", "--hosts", str(args.hosts))
    # Where a user's Sparks are before site.yml: the image on the head (as if pulled), the model on the head (as if
    # downloaded), and (by default) the operators' old stack running. Not timed: that is the "warm cache".
    b.sh(STAGE, *(["--clean"] if start == "clean" and stage_knows_clean() else []))
    machine = b.machine()
    print("machine: %s" % machine, flush=True)
    started = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")
    with tempfile.TemporaryDirectory() as scratch:
        tmp = os.path.join(args.out, start) if args.out else scratch
        os.makedirs(tmp, exist_ok=True)
        out = os.path.join(tmp, "times.json")
        tree = os.path.abspath(args.tree or b.REPO)
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(tree, "ansible.cfg"), BENCH_TIMES_OUT=out,
                   ANSIBLE_CALLBACK_PLUGINS=os.path.join(b.REPO, "bench", "callback"),
                   ANSIBLE_CALLBACKS_ENABLED="sparkfleet.vllm.progress,bench_times")
        t0 = time.time()
        rc = subprocess.run([b.LABCTL, "ctl", "--", os.path.join(b.REPO, ".venv/bin/ansible-playbook"), "-i",
                             b.inventory(), os.path.join(tree, "site.yml")], cwd=tree, env=env,
                            stdout=open(os.path.join(tmp, "site.log"), "w"), stderr=subprocess.STDOUT).returncode
        wall = time.time() - t0
        if rc != 0:
            sys.stdout.write("".join(open(os.path.join(tmp, "site.log")).readlines()[-40:]))
            raise SystemExit("site.yml failed (rc %d)" % rc)
        times = json.load(open(out))
    load_end = open("/proc/loadavg").read().split()[:3]
    conf, shards, per_shard = configured_load()
    measured = measured_load()
    load = measured if measured is not None else conf
    # Per node and phase: the sum of that node's task times in the role (a task's time on a node runs from the
    # task's start to that node's result; roles recur across plays, so spans would overlap other phases).
    phases = {}
    roles = []
    for r in times["rows"]:
        phases[(r["host"], r["role"])] = phases.get((r["host"], r["role"]), 0.0) + r["seconds"]
        if r["role"] not in roles:
            roles.append(r["role"])
    hosts = sorted(set(h for h, _r in phases))
    print("\n%s: per phase (role), seconds (sum of the node's task times), per node:" % (label or start))
    print("%-28s " % "phase" + " ".join("%9s" % h for h in hosts))
    table = {}
    for role in roles:
        cells = [round(phases[(h, role)], 1) if (h, role) in phases else None for h in hosts]
        table[role] = dict(zip(hosts, cells))
        print("%-28s " % role + " ".join("%9s" % ("-" if c is None else "%.1f" % c) for c in cells))
    slow = sorted(times["rows"], key=lambda r: -r["seconds"])[:8]
    print("\nslowest tasks: " + "; ".join("%s %s: %.1f s" % (r["host"], r["task"], r["seconds"]) for r in slow))
    net = times["total"] - load
    print("\nsite.yml %.1f s (wall %.1f s) = %.2fx its floor, the stand-in's own load %s s (measured; configured "
          "%.1f s: %d shards x %.1f s + 3.5 s); deploy minus load %.1f s; target 90 s: %.2fx"
          % (times["total"], wall, times["total"] / load, "%.1f" % measured if measured is not None else "not found,"
             " the configured", conf, shards, per_shard, net, net / 90), flush=True)
    data = {"bench": "B6", "hosts": args.hosts, "label": label, "start": start, "date": started,
            "machine": machine, "load_end": load_end, "commit": commit(tree), "total_s": times["total"],
            "load_s": round(load, 1), "load_configured_s": conf, "load_measured_s": measured,
            "net_s": round(net, 1), "phases": table,
            "slowest": [[r["host"], r["task"], r["seconds"]] for r in slow]}
    print("BENCH-JSON " + json.dumps(data), flush=True)
    return data


def commit(tree):
    try:
        rev = subprocess.run(["git", "-C", tree, "rev-parse", "--short=12", "HEAD"], stdout=subprocess.PIPE,
                             universal_newlines=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", tree, "status", "--porcelain", "--untracked-files=no"],
                               stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
        return rev + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--start", choices=("oldstack", "clean", "both"), default="clean",
                    help="where the hosts start: clean hosts (lab/stage.sh --clean; the default), the operators' old "
                         "stack (lab/stage.sh's default), or both side by side")
    ap.add_argument("--rounds", type=int, default=1, help="with --start both: pairs of deploys, alternating")
    ap.add_argument("--no-fresh", action="store_true", help="deploy on the lab as it is (skip down/up)")
    ap.add_argument("--out", help="keep each run's log (site.log) and per-task times (times.json) under this directory")
    ap.add_argument("--tree", help="deploy with the collection in this checkout (e.g. a worktree of the revision "
                                   "before a change) instead of this one; the lab, staging and timing stay this one's")
    ap.add_argument("--label", help="name of this run in the results (e.g. before / after)")
    args = ap.parse_args()
    knows = stage_knows_clean()
    start = args.start
    if start != "clean" and not knows:
        raise SystemExit("lab/stage.sh stages clean hosts only here (no --clean option): --start %s needs the "
                         "stage.sh that stages the operators' old stack" % start)
    if start != "both":
        deploy(args, start, args.label)
        return
    if args.no_fresh:
        raise SystemExit("--start both deploys on fresh hosts each time: drop --no-fresh")
    runs = {"oldstack": [], "clean": []}
    for i in range(args.rounds):
        order = ("oldstack", "clean") if i % 2 == 0 else ("clean", "oldstack")
        for s in order:
            runs[s].append(deploy(args, s, START_LABEL[s] + (" (round %d)" % (i + 1) if args.rounds > 1 else "")))
    old = statistics.median(r["net_s"] for r in runs["oldstack"])
    clean = statistics.median(r["net_s"] for r in runs["clean"])
    print("\nfrom the old stack minus load %.1f s, from clean hosts minus load %.1f s (median of %d each): "
          "%.2fx (target <= 1.3x)" % (old, clean, args.rounds, old / clean))
    print("BENCH-JSON " + json.dumps({"bench": "B6-start", "rounds": args.rounds, "oldstack_net_s": old,
                                      "clean_net_s": clean, "ratio": round(old / clean, 2),
                                      "oldstack": [[r["total_s"], r["load_s"], r["net_s"]] for r in runs["oldstack"]],
                                      "clean": [[r["total_s"], r["load_s"], r["net_s"]] for r in runs["clean"]],
                                      "date": runs["oldstack"][0]["date"], "machine": runs["oldstack"][0]["machine"],
                                      "commit": runs["oldstack"][0]["commit"]}))


if __name__ == "__main__":
    main()
