#!/usr/bin/env python3
"""B8: what one vllm_wait read costs on a huge log, this tree beside another revision's (issue 17 defects 8 and 9).

Cases, each a fresh process running the module's main() once (timeout 0) on this machine, no lab needed:
  journal    a unit whose journal holds SIZE MB of serving lines and then a failing startup; the stand-in
             journalctl prints the whole journal whatever -n says (the worst a real one could do)
  docker     the same as a container's `docker logs --timestamps`
  short      a log_file of 8 MiB of 2-byte lines and then a failing startup
  hang       a unit whose journalctl never answers, with timeout=2 (seconds until the call returns)
Prints seconds and peak memory (the module's process and its commands) per case and revision, and the ratios.

  .venv/bin/python bench/vllm_wait_read.py [--baseline main] [--size 50] [--cases journal,docker,short,hang]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAILING = os.path.join(ROOT, "tests", "unit", "plugins", "modules", "fixtures", "vllm_wait",
                       "fail_cuda_oom_v1_profiling.log.gz")

# Runs in the child: the module's main() with stand-in tools, then its time and peak memory as JSON.
CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
tools = json.loads(sys.argv[3])
real = basic.AnsibleModule.get_bin_path
basic.AnsibleModule.get_bin_path = lambda self, n, required=False, opt_dirs=None: tools.get(n) or real(self, n, required)
out = {}
def done(self, **kw):
    out.update(kw)
    raise SystemExit(0)
basic.AnsibleModule.exit_json = done
basic.AnsibleModule.fail_json = lambda self, msg=None, **kw: done(self, msg=msg, **kw)
from ansible_collections.sparkfleet.vllm.plugins.modules import vllm_wait
t0 = time.monotonic()
with patch_module_args(json.loads(sys.argv[2])):
    try:
        vllm_wait.main()
    except SystemExit:
        pass
peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps({"s": time.monotonic() - t0, "rss_mb": peak / 1024.0,
                  "cls": (out.get("failure") or {}).get("class"), "lines": out.get("lines")}))
"""


def tree(rev, work):
    """A collections directory holding this checkout, or REV's plugins (git archive)."""
    if rev is None:
        return os.path.join(ROOT, "collections")
    dest = os.path.join(work, "rev", "ansible_collections", "sparkfleet", "vllm")
    os.makedirs(dest)
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "plugins"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return os.path.join(work, "rev")


def tool(work, name, body):
    path = os.path.join(work, name)
    with open(path, "w") as fh:
        fh.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)
    return path


def build(work, size_mb):
    failing = gzip.open(FAILING, "rt").read()
    line = "(APIServer pid=1) INFO 08-20 10:20:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s\n"
    journal = os.path.join(work, "journal.txt")
    with open(journal, "w") as fh:
        fh.write(line * (size_mb * 1000000 // len(line)) + failing + "-- cursor: s=1\n")
    stamped = os.path.join(work, "docker.txt")
    with open(stamped, "w") as fh:
        for i, ln in enumerate((line * (size_mb * 1000000 // len(line)) + failing).splitlines()):
            fh.write("2026-11-29T09:%02d:%02d.%09dZ %s\n" % (i // 60 % 60, i % 60, i, ln))
    short = os.path.join(work, "short.log")
    with open(short, "w") as fh:
        fh.write("a\n" * (4 * 1024 * 1024) + failing)
    failed = "echo ActiveState=failed; echo SubState=failed; echo Result=exit-code; echo ExecMainStatus=1"
    return {
        "journal": ({"unit": "vllm.service", "timeout": 0},
                    {"journalctl": tool(work, "journalctl", 'case "$*" in *short-unix*) echo "$(date +%%s).0 h u: x";;'
                                                            ' *) cat %s;; esac' % journal),
                     "systemctl": tool(work, "systemctl", failed)}),
        "docker": ({"container": "vllm", "timeout": 0},
                   {"docker": tool(work, "docker", 'case "$1" in logs) cat %s;; *) echo "exited 1 false";; esac'
                                   % stamped)}),
        "short": ({"log_file": short, "timeout": 0}, {}),
        "hang": ({"unit": "vllm.service", "timeout": 2, "poll_interval": 1},
                 {"journalctl": tool(work, "journalctl-hang", "exec sleep 60"),
                  "systemctl": tool(work, "systemctl-up", "echo ActiveState=active; echo SubState=running")}),
    }


def run(collections, args, tools):
    res = subprocess.run([sys.executable, "-c", CHILD, collections, json.dumps(args), json.dumps(tools)],
                         capture_output=True, text=True, timeout=900)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"s": float("nan"), "rss_mb": float("nan"), "cls": "error: " + res.stderr[-300:], "lines": None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default="main", help="the revision to compare with (git archive of its plugins)")
    ap.add_argument("--size", type=int, default=50, help="MB of serving log before the failure")
    ap.add_argument("--cases", default="journal,docker,short,hang")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-vllm-wait-") as work:
        cases = build(work, opts.size)
        revs = [("this tree", tree(None, work)), (opts.baseline, tree(opts.baseline, work))]
        print("B8 vllm_wait read, %d MB log, %s" % (opts.size, time.strftime("%Y-%m-%d %H:%M")))
        for name in opts.cases.split(","):
            args, tools = cases[name]
            got = [(label, run(path, args, tools)) for label, path in revs]
            for label, r in got:
                print("  %-8s %-10s %7.1f s  %7.0f MB peak  class=%s lines=%s"
                      % (name, label, r["s"], r["rss_mb"], r["cls"], r["lines"]))
            new, old = got[0][1], got[1][1]
            if old["s"] and new["s"]:
                print("  %-8s ratio      %7.2fx time  %6.2fx memory (this tree / %s)"
                      % (name, new["s"] / old["s"], new["rss_mb"] / old["rss_mb"], opts.baseline))


if __name__ == "__main__":
    main()
