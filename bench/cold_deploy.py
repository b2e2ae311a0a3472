#!/usr/bin/env python3
"""Benchmark B6: a cold deploy (site.yml on fresh lab hosts, image caches warm) minus the stand-in's load time.

    SPARKLAB_NAME=perf .venv/bin/python bench/cold_deploy.py [--hosts 2] [--no-fresh]

Run as root from the repo root. It takes the lab down and up again (fresh hosts: nothing deployed, the runtime
image tar and the host image cached), stages the image and the model on the head (lab/stage.sh, untimed: as if
pulled and downloaded there), runs site.yml from the control namespace with a timing callback
(bench/callback/bench_times.py) and prints, per node, the seconds of every phase (role) and the whole run, minus
the load time the stand-in vLLM is configured to spend (shards x SPARKLAB_SECONDS_PER_SHARD + graph capture +
profile run), which stands for the real GPU's work. Target (issue 8): <= 90 s. Prints one BENCH-JSON line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_sync as b  # noqa: E402  (bench/model_sync.py: lab helpers)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--no-fresh", action="store_true", help="deploy on the lab as it is (skip down/up)")
    ap.add_argument("--out", help="keep the run's log (site.log) and per-task times (times.json) in this directory")
    ap.add_argument("--tree", help="deploy with the collection in this checkout (e.g. a worktree of the revision "
                                   "before a change) instead of this one; the lab, staging and timing stay this one's")
    ap.add_argument("--label", help="name of this run in the results (e.g. before / after)")
    args = ap.parse_args()
    if not args.no_fresh:
        b.sh(b.LABCTL, "down")
        b.sh(b.LABCTL, "up", "--hosts", str(args.hosts))
    # Where a user's Sparks are before site.yml: the image on the head (as if pulled), the model on the head (as if
    # downloaded). Not timed: that is the "warm cache" of a cold deploy.
    # Clean hosts (--clean): a revision from before issue 16 stops in preflight on the operators' old stack, which
    # the default staging now puts on every host; stopping it is not part of the deploy being compared.
    b.sh(os.path.join(b.REPO, "lab", "stage.sh"), "--clean")
    print("machine: %s" % b.machine(), flush=True)
    started = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.out or scratch
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
    model_dir = b.hexec("spark-1", "ls -d /models/*/ | head -1").strip()
    shards = int(b.hexec("spark-1", "ls %s | grep -c '[.]safetensors$'" % model_dir).strip())
    env_line = b.hexec("spark-1", "cat /etc/sparkfleet/*.env 2>/dev/null | grep -h SPARKLAB_SECONDS_PER_SHARD | head -1",
                       check=False).strip()
    per_shard = float(env_line.split("=", 1)[1].strip("'\"")) if "=" in env_line else 1.0
    # The stand-in's defaults (lab/standin/README.md): graph capture 2 s, profile run 1.5 s.
    load = shards * per_shard + 2.0 + 1.5
    # Per node and phase: the sum of that node's task times in the role (a task's time on a node runs from the
    # task's start to that node's result; roles recur across plays, so spans would overlap other phases).
    phases = {}
    roles = []
    for r in times["rows"]:
        phases[(r["host"], r["role"])] = phases.get((r["host"], r["role"]), 0.0) + r["seconds"]
        if r["role"] not in roles:
            roles.append(r["role"])
    hosts = sorted(set(h for h, _r in phases))
    print("\nper phase (role), seconds (sum of the node's task times), per node:")
    print("%-28s " % "phase" + " ".join("%9s" % h for h in hosts))
    table = {}
    for role in roles:
        cells = [round(phases[(h, role)], 1) if (h, role) in phases else None for h in hosts]
        table[role] = dict(zip(hosts, cells))
        print("%-28s " % role + " ".join("%9s" % ("-" if c is None else "%.1f" % c) for c in cells))
    slow = sorted(times["rows"], key=lambda r: -r["seconds"])[:8]
    print("\nslowest tasks: " + "; ".join("%s %s: %.1f s" % (r["host"], r["task"], r["seconds"]) for r in slow))
    net = times["total"] - load
    print("\nsite.yml %.1f s (wall %.1f s); stand-in load time %.1f s (%d shards x %.1f s + 3.5 s); "
          "deploy minus load %.1f s; target 90 s: %.2fx" % (times["total"], wall, load, shards, per_shard, net, net / 90))
    print("BENCH-JSON " + json.dumps({"bench": "B6", "hosts": args.hosts, "label": args.label, "date": started,
                                      "total_s": times["total"],
                                      "load_s": load, "net_s": round(net, 1), "phases": table,
                                      "slowest": [[r["host"], r["task"], r["seconds"]] for r in slow]}))


if __name__ == "__main__":
    main()
