#!/usr/bin/env python3
"""Monitoring's own cost on each lab node (issue 42's figure), on a deployed lab with monitoring on.

    bench/monitoring_cost.py [--window 120] [--noop]     # as root; SPARKLAB_NAME picks the lab

Per node and unit (Prometheus, Alertmanager, the node exporter; our textfile timer's service per run): the CPU it
used over the window (its main process's and children's CPU time, /proc, before and after) as a share of one core, and its memory now
(MemoryCurrent, the unit's cgroup: page cache included). --noop also times the no-op re-run of site.yml with
monitoring on and with `sparkfleet_monitoring: false` (each run twice, the second timed; the target: within 1.1x).
Prints a markdown section for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LABCTL = os.path.join(ROOT, "lab", "labctl")
UNITS = ("prometheus", "prometheus-alertmanager", "prometheus-node-exporter")
TEXTFILE = "sparkfleet-monitoring-textfile"


def labctl(*args, timeout=300):
    return subprocess.run([LABCTL, *args], capture_output=True, text=True, timeout=timeout, check=False)


def hosts():
    name = os.environ.get("SPARKLAB_NAME", "sfl")
    state = "/var/tmp/sparklab/lab" + ("" if name == "sfl" else "-" + name)
    n = int(open(os.path.join(state, "nhosts")).read().strip())
    return ["spark-%d" % i for i in range(1, n + 1)], os.path.join(state, "inventory") if name != "sfl" else \
        os.path.join(ROOT, "inventories", "lab")


# CPU seconds of a unit's main process and its children (/proc/PID/stat utime + stime + cutime + cstime): the lab
# hosts' systemd keeps no CPU accounting (CPUUsageNSec is not set there).
PROC_CPU = ("import os,sys; f=open('/proc/%s/stat' % sys.argv[1]).read().rsplit(')', 1)[1].split(); "
            "print(sum(int(x) for x in f[11:15]) / os.sysconf('SC_CLK_TCK'))")
# One run of the textfile collector as its unit runs it, its CPU (children's rusage) printed.
ONE_RUN = ("import resource,shlex,subprocess,sys; "
           "cmd=[l.split('=',1)[1] for l in open('/etc/systemd/system/sparkfleet-monitoring-textfile.service') "
           "if l.startswith('ExecStart=')][0]; subprocess.run(shlex.split(cmd), check=True); "
           "r=resource.getrusage(resource.RUSAGE_CHILDREN); print(r.ru_utime + r.ru_stime)")


def show(host, unit):
    p = labctl("exec", host, "systemctl", "show", unit, "-p", "MainPID", "-p", "MemoryCurrent", "-p", "ActiveState")
    out = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)
    if out.get("MainPID", "0") not in ("", "0"):
        cpu = labctl("exec", host, "python3", "-c", PROC_CPU, out["MainPID"]).stdout.strip()
        out["cpu_s"] = cpu
    return out


def num(value):
    return int(value) if value and value.isdigit() else None


def cost(window):
    nodes, _inv = hosts()
    before = {(h, u): show(h, u) for h in nodes for u in UNITS + (TEXTFILE,)}
    t0 = time.time()
    time.sleep(window)
    elapsed = time.time() - t0
    rows = []
    for h in nodes:
        for u in UNITS:
            a, b = before[(h, u)], show(h, u)
            if b.get("ActiveState") != "active":
                continue
            try:
                cpu = (float(b["cpu_s"]) - float(a["cpu_s"])) / elapsed if a.get("MainPID") == b.get("MainPID") \
                    else None
            except (KeyError, ValueError):
                cpu = None
            rows.append((h, u, cpu, num(b.get("MemoryCurrent"))))
        # the oneshot: one run as its unit runs it, its CPU spread over the timer's 15 s
        one = labctl("exec", h, "python3", "-c", ONE_RUN).stdout.strip().splitlines()
        per_run = float(one[-1]) if one else None
        rows.append((h, TEXTFILE + " (%.2f CPU-s a run, every 15 s)" % per_run if per_run is not None else TEXTFILE,
                     None if per_run is None else per_run / 15, None))
    return rows, elapsed


def noop(inventory):
    times = {}
    for label, extra in (("monitoring on", "{}"), ("monitoring off", '{"sparkfleet_monitoring": false}')):
        for attempt in range(2):
            t0 = time.time()
            p = subprocess.run([LABCTL, "ctl", "--", os.path.join(ROOT, ".venv", "bin", "ansible-playbook"),
                                "site.yml", "-i", inventory, "-e", extra], capture_output=True, text=True,
                               timeout=1800, cwd=ROOT, check=False)
            if p.returncode != 0:
                sys.exit("site.yml (%s) failed:\n%s" % (label, p.stdout[-3000:]))
            recap = [ln for ln in p.stdout.splitlines() if "changed=" in ln and ln.startswith("spark")]
            times[label] = (time.time() - t0, recap)
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=120)
    ap.add_argument("--noop", action="store_true")
    a = ap.parse_args()
    load = open("/proc/loadavg").read().split()[:3]
    rows, elapsed = cost(a.window)
    print("## Monitoring's own cost on a node (issue 42)\n")
    print("Measured %s UTC on the lab (2 nodes), load average %s at start; window %.0f s.\n"
          % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()), " ".join(load), elapsed))
    print("| node | unit | CPU (share of one core) | memory (cgroup, page cache included) |")
    print("|---|---|---|---|")
    for h, u, cpu, mem in rows:
        print("| %s | %s | %s | %s |" % (h, u, "-" if cpu is None else "%.3f" % cpu,
                                        "-" if mem is None else "%.0f MiB" % (mem / 1048576.0)))
    if a.noop:
        _nodes, inventory = hosts()
        times = noop(inventory)
        on, off = times["monitoring on"][0], times["monitoring off"][0]
        print("\nNo-op re-run of site.yml (second of two runs each): monitoring on %.1f s, off %.1f s: %.2fx "
              "(target 1.1x).\n" % (on, off, on / off))
        for label, (_t, recap) in times.items():
            print("- %s: %s" % (label, "; ".join(" ".join(r.split()) for r in recap)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
