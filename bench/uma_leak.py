#!/usr/bin/env python3
"""A crash-looping engine on a node that leaks unified memory, today's supervision against a base checkout's, side by
side on one deployed lab (unified memory: a GB10's GPU memory is the host's, DOMAIN.md section 11).

    .venv/bin/python bench/uma_leak.py --base BASE_CHECKOUT [--tree CHECKOUT] [--limit 420] [--leak-mib N]

Run as root from the repo root on the shared lab (deployed or not); it re-runs itself in the lab's control namespace,
so nothing leaves the lab. For each checkout, base first: a clean worker (`labctl reboot`: what leaked is gone),
site.yml of that checkout (the lab's memory settings: gpu_memory_utilization 0.35 for both), the API serving; then on
the last worker `labctl break wedge` (past its memory the node freezes instead of an OOM kill, as a GB10 does) and
`break leak` (every rank start there reserves --leak-mib MiB that an unclean exit leaves held), and the engine killed
(`labctl break engine` on the head) each time it runs again, for at most --limit seconds. Every 5 s: does the worker
answer ssh, is it frozen (`labctl mem`), how many times has vLLM started, has supervision escalated. Ends a mode at
the first of: the worker frozen (wedged), supervision escalated, the limit. Then the worker is power-cycled if frozen,
the knobs fixed. Prints per checkout: engine starts, memory leaked, the outcome and when, whether every node answered
ssh throughout; then the ratio of starts. Leaves the lab serving this checkout (a last reboot of the worker and
site.yml). Bounded: 3 site.yml runs, 2 x --limit seconds of kills, 2-3 reboots of one worker.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak  # noqa: E402  (the lab's knobs, playbook runner, log)

UNIT = "sparkfleet-vllm"
MARKER = "/run/sparkfleet/escalated-%s" % UNIT
EXTRA = ["-e", "vllm_serve_gpu_memory_utilization=0.35"]     # what inventories/lab sets now; a base may lack it


def playbook(lab, tree, logfile, timeout=1800):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(tree, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    with open(logfile, "a") as out:
        out.write("\n===== %s site.yml of %s\n" % (time.strftime("%H:%M:%S"), tree))
        out.flush()
        try:
            return subprocess.run([os.path.join(soak.REPO, ".venv", "bin", "ansible-playbook"), "-i",
                                   os.path.join(soak.REPO, "inventories", "lab"), *EXTRA, os.path.join(tree, "site.yml")],
                                  cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return 124


def answers_ssh(host):
    try:
        return subprocess.run([soak.LABCTL, "ctl", "--", "ssh", "-F", "/var/tmp/sparklab/lab/ssh/config", "-o",
                               "BatchMode=yes", "-o", "ConnectTimeout=8", host, "true"], capture_output=True,
                              timeout=20).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def frozen(lab, host):
    return "FROZEN" in lab.labctl("mem", host, timeout=60).stdout


def leaked_bytes(lab, host):
    for line in lab.labctl("mem", host, timeout=60).stdout.splitlines():
        if line.strip().startswith("leak:") and "leaked:" in line:
            return int(line.split("file(s),")[1].split()[0])
    return 0


def head(lab, script):
    return lab.exec(lab.head, script, timeout=60).stdout.strip()


def mode_run(lab, args, tree, logfile):
    worker = lab.workers[-1]
    lab.labctl("reboot", worker)
    rc = playbook(lab, tree, logfile)
    if rc != 0:
        sys.exit("uma_leak: site.yml of %s failed (rc %d): %s" % (tree, rc, logfile))
    starts0 = int(head(lab, "journalctl -u %s -o cat --no-pager | grep -c '^Starting ' || true" % UNIT) or 0)
    lab.labctl("break", "wedge", worker)
    lab.labctl("break", "leak", worker, str(args.leak_mib))
    t0, ssh_ok, outcome, kills = time.time(), True, None, 0
    while time.time() - t0 < args.limit:
        if head(lab, "docker inspect -f '{{.State.Running}}' %s 2>/dev/null || true" % UNIT) == "true":
            lab.labctl("break", "engine", lab.head)
            kills += 1
        up = answers_ssh(worker)
        ssh_ok = ssh_ok and up
        if frozen(lab, worker):
            outcome = "%s WEDGED (frozen, ssh %s) %.0f s in" % (worker, "answers" if up else "dead", time.time() - t0)
            break
        esc = head(lab, "cat %s 2>/dev/null || true" % MARKER)
        if esc:
            step = json.loads(esc).get("step", "?")
            outcome = "escalated %.0f s in; human step: %s" % (time.time() - t0, step)
            break
        time.sleep(5)
    starts = int(head(lab, "journalctl -u %s -o cat --no-pager | grep -c '^Starting ' || true" % UNIT) or 0) - starts0
    leaked = 0 if outcome and "WEDGED" in outcome else leaked_bytes(lab, worker)
    result = {"starts": starts, "kills": kills, "outcome": outcome or "still looping after %d s" % args.limit,
              "ssh": ssh_ok and answers_ssh(worker), "leaked": leaked, "seconds": time.time() - t0}
    soak.log("%s: %s" % (tree, result))
    lab.labctl("fix", "leak", worker)
    lab.labctl("fix", "wedge", worker)
    return result


def enter_lab(args, prog, script):
    """Check --limit, re-run the script in the lab's control namespace (nothing leaves the lab), then say what runs
    where; returns the shared lab and the playbook log's path."""
    if not 60 <= args.limit <= 1200:
        sys.exit("%s: --limit must be 60..1200" % prog)
    args.base, args.tree = os.path.abspath(args.base), os.path.abspath(args.tree)
    if not args.in_ctl:
        os.execv(soak.LABCTL, [soak.LABCTL, "ctl", "--", sys.executable, os.path.abspath(script), "--in-ctl"]
                 + sys.argv[1:])
    lab = soak.Lab("sfl", args.tree)
    logfile = "/var/tmp/sparkfleet-%s-%s.log" % (prog.replace("_", "-"), time.strftime("%Y%m%d-%H%M%S"))
    soak.log("lab %s, base %s @ %s, tree %s @ %s, %s; load %s; playbook log %s" % (
        ", ".join(lab.hosts), args.base, soak.commit_of(args.base), args.tree, soak.commit_of(args.tree),
        soak.machine(), " ".join(open("/proc/loadavg").read().split()[:3]), logfile))
    return lab, logfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="a checkout of the code to compare against (e.g. main before)")
    ap.add_argument("--tree", default=soak.REPO, help="the checkout under test")
    ap.add_argument("--limit", type=int, default=420, help="seconds of kills per checkout (60-1200)")
    ap.add_argument("--leak-mib", type=int, default=1024, help="MiB each rank start reserves on the worker")
    ap.add_argument("--in-ctl", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    lab, logfile = enter_lab(args, "uma_leak", __file__)
    results = {}
    try:
        for name, tree in (("base", args.base), ("tree", args.tree)):
            results[name] = mode_run(lab, args, tree, logfile)
    finally:
        lab.labctl("reboot", lab.workers[-1])
        soak.log("restored: site.yml of the tree rc %d" % playbook(lab, args.tree, logfile))
    print("\nan engine killed whenever it runs, the worker leaking %d MiB per rank start with wedge on, %s, load %s"
          % (args.leak_mib, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
             " ".join(open("/proc/loadavg").read().split()[:3])))
    print("| checkout | engine starts | kills | outcome | every node answered ssh | leaked on the worker |")
    print("|---|---|---|---|---|---|")
    for name, tree in (("base", args.base), ("tree", args.tree)):
        r = results[name]
        print("| %s (%s) | %d | %d | %s | %s | %s |" % (name, soak.commit_of(tree), r["starts"], r["kills"],
                                                    r["outcome"], "yes" if r["ssh"] else "NO",
                                                    "%.1f GiB" % (r["leaked"] / 2 ** 30) if r["leaked"] else "-"))
    b, t = results["base"]["starts"], results["tree"]["starts"]
    print("ratio tree/base: engine starts %.2f (%d / %d)" % (t / b if b else 0.0, t, b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
