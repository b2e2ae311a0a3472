#!/usr/bin/env python3
"""The worker's page cache full (a 119 GB sync leaves it so), then the engine starts: today's supervision against a
base checkout's, side by side on one lab (unified memory: the page cache competes with the engine for a GB10's
memory, DOMAIN.md section 11; vLLM refuses to start when free memory is below gpu_memory_utilization x total).

    .venv/bin/python bench/uma_page_cache.py --base BASE_CHECKOUT [--tree CHECKOUT] [--limit 300]

Run as root from the repo root on the shared lab (deployed or not); it re-runs itself in the lab's control namespace,
so nothing leaves the lab. For each checkout, base first: a clean worker (`labctl reboot`), site.yml of that checkout
(the lab's memory settings), the API serving; the engine stopped; vLLM's later startup rule (MemFree: the page cache
is not free, vllm#48140, SPARKLAB_UMA_FREE=free in vllm.env as the lab test does); `labctl break page-cache` on the
worker (its page cache read full); the engine started (systemctl start, as a restart does). Then every 5 s for at most
--limit seconds: does the API complete a request, how many times has vLLM started, how many times did it refuse
("less than desired GPU memory utilization"), has supervision escalated. Prints per checkout: the outcome and when,
starts, refusals; then the ratio of starts. Leaves the lab serving this checkout (the knob fixed, vllm.env restored,
site.yml). Bounded: 3 site.yml runs, 2 x --limit seconds of watching, 3 reboots of one worker.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak  # noqa: E402  (the lab's knobs, playbook runner, log)
import uma_leak  # noqa: E402  (a checkout's site.yml on the lab, the head's shell)

UNIT = uma_leak.UNIT
ENV_FILE = "/etc/sparkfleet/vllm.env"
REFUSAL = "on startup is less than desired GPU memory utilization"


def serves(lab):
    """A real completion through the head's API where it listens (the management address; curl on the head, its key
    from vllm.env)."""
    out = uma_leak.head(lab, "key=$(sed -n 's/^VLLM_API_KEY=//p' %s); curl -s -m 10 -o /dev/null -w '%%{http_code}'"
                             " -H \"Authorization: Bearer $key\" -H 'Content-Type: application/json'"
                             " -d '{\"model\": \"sparklab/tiny-moe\", \"prompt\": \"hi\", \"max_tokens\": 2}'"
                             " %s/v1/completions || true" % (ENV_FILE, soak.API))
    return out.strip().endswith("200")


def count(lab, since, pattern):
    return int(uma_leak.head(lab, "journalctl -u %s --since @%d -o cat --no-pager | grep -c -- %s || true"
                             % (UNIT, since, shlex.quote(pattern))) or 0)


def mode_run(lab, args, tree, logfile):
    worker = lab.workers[-1]
    lab.labctl("reboot", worker)
    rc = uma_leak.playbook(lab, tree, logfile)
    if rc != 0:
        sys.exit("uma_page_cache: site.yml of %s failed (rc %d): %s" % (tree, rc, logfile))
    uma_leak.head(lab, "echo SPARKLAB_UMA_FREE=free >>%s && systemctl stop %s" % (ENV_FILE, UNIT))
    lab.labctl("break", "page-cache", worker)
    t0 = time.time()
    uma_leak.head(lab, "systemctl start --no-block %s" % UNIT)
    outcome = None
    while time.time() - t0 < args.limit:
        if serves(lab):
            outcome = "served %.0f s after the start" % (time.time() - t0)
            break
        esc = uma_leak.head(lab, "cat %s 2>/dev/null || true" % uma_leak.MARKER)
        if esc:
            outcome = "escalated %.0f s after the start" % (time.time() - t0)
            break
        time.sleep(5)
    result = {"starts": count(lab, t0 - 1, "^Starting "), "refusals": count(lab, t0 - 1, REFUSAL),
              "outcome": outcome or "not serving after %d s" % args.limit, "seconds": time.time() - t0}
    soak.log("%s: %s" % (tree, result))
    lab.labctl("fix", "page-cache", worker)
    uma_leak.head(lab, "sed -i '/^SPARKLAB_UMA_FREE=/d' %s" % ENV_FILE)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="a checkout of the code to compare against (e.g. main before)")
    ap.add_argument("--tree", default=soak.REPO, help="the checkout under test")
    ap.add_argument("--limit", type=int, default=300, help="seconds to watch each checkout (60-1200)")
    ap.add_argument("--in-ctl", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    lab, logfile = uma_leak.enter_lab(args, "uma_page_cache", __file__)
    results = {}
    try:
        for name, tree in (("base", args.base), ("tree", args.tree)):
            results[name] = mode_run(lab, args, tree, logfile)
    finally:
        lab.labctl("fix", "page-cache", lab.workers[-1])
        lab.labctl("reboot", lab.workers[-1])
        soak.log("restored: site.yml of the tree rc %d" % uma_leak.playbook(lab, args.tree, logfile))
    print("\nthe worker's page cache full, then the engine started (vLLM's MemFree rule), %s, load %s"
          % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), " ".join(open("/proc/loadavg").read().split()[:3])))
    print("| checkout | outcome | engine starts | vLLM's refusals |")
    print("|---|---|---|---|")
    for name, tree in (("base", args.base), ("tree", args.tree)):
        r = results[name]
        print("| %s (%s) | %s | %d | %d |" % (name, soak.commit_of(tree), r["outcome"], r["starts"], r["refusals"]))
    b, t = results["base"]["starts"], results["tree"]["starts"]
    print("ratio tree/base: engine starts %.2f (%d / %d)" % (t / b if b else 0.0, t, b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
