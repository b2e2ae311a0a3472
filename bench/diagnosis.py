#!/usr/bin/env python3
"""Benchmark B4: time to diagnosis. From a failing vLLM line being written to the play failing with its class.

    SPARKLAB_NAME=perf lab/labctl up && .venv/bin/python bench/diagnosis.py

Run as root from the repo root. For each injected failure (Ray OOM kill at graph capture, a worker crash mid-load,
the API port in use, a placement mismatch, the worker's Ray gone) it takes the real captured vLLM log of that
failure (tests/unit/plugins/modules/fixtures/vllm_wait), writes the startup part of it to a log file on spark-1,
starts a play from the control namespace that waits like roles/vllm_serve/tasks/wait.yml does (vllm_wait with
timeout = vllm_serve_poll_interval (10), poll_interval 1, until failed or ready), and once the module is polling
appends the failing part in one write (a traceback arrives as a burst). The delay is from that write (its clock
inside spark-1) to ansible-playbook exiting failed; the class the play reports is checked against the log's.
The role follows the container's log (docker logs) and the unit's journal; this bench reads a file, so docker's
own latency is not in it. Prints one BENCH-JSON line.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_sync as b  # noqa: E402  (bench/model_sync.py: lab helpers)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine._vllm_log import VllmLogParser  # noqa: E402

FIX = os.path.join(b.REPO, "tests", "unit", "plugins", "modules", "fixtures", "vllm_wait")
CASES = [
    ("Ray OOM kill at graph capture", "fail_ray_oom_killed_v1_graphs"),
    ("crash mid-load (a worker died)", "fail_worker_died_v1_loading"),
    ("API port in use", "fail_port_in_use_v1"),
    ("placement mismatch", "fail_placement_group_v1"),
    ("worker Ray dies (GCS unreachable)", "fail_ray_unreachable_v1"),
]
LOG = "/tmp/bench-diag.log"
PLAY = """
- name: Wait like roles/vllm_serve/tasks/wait.yml
  hosts: spark-1
  gather_facts: false
  tasks:
    - name: Wait for vLLM
      sparkfleet.vllm.vllm_wait:
        log_file: %s
        timeout: %d
        poll_interval: "%s"
        stall_timeout: 900
      register: st
      until: st.ready | default(false) or st is failed
      retries: 30
      delay: 0
""" % (LOG, 10, "{{ wait_poll | default(2) }}")


def split(name):
    """(startup lines, failing burst, expected class): the burst starts at the first line after which the
    parser reports a failure."""
    lines = gzip.open(os.path.join(FIX, name + ".log.gz"), "rt", errors="replace").read().splitlines(True)
    parser = VllmLogParser(stall_timeout=900)
    for i, line in enumerate(lines):
        parser.feed(line)
        if parser.failure():
            break
    full = VllmLogParser(stall_timeout=900)
    full.feed("".join(lines))
    return "".join(lines[:i]), "".join(lines[i:]), full.failure()["class"]


def one(label, name, poll, tmp):
    pre, burst, cls = split(name)
    b.hexec("spark-1", "cat > %s" % LOG, stdin=pre)
    playbook = os.path.join(tmp, "wait.yml")
    with open(playbook, "w") as fh:
        fh.write(PLAY)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(b.REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json",
               ANSIBLE_DEPRECATION_WARNINGS="false")
    proc = subprocess.Popen([b.LABCTL, "ctl", "--", os.path.join(b.REPO, ".venv/bin/ansible-playbook"), "-i",
                             b.inventory(), playbook, "-e", "wait_poll=%s" % poll], cwd=b.REPO, env=env,
                            stdout=subprocess.PIPE, universal_newlines=True)
    # Once the module polls (its AnsiballZ runs on spark-1), let a poll or two pass, then write the failure.
    deadline = time.time() + 120
    while time.time() < deadline:
        if b.hexec("spark-1", "pgrep -f AnsiballZ_vllm_wait >/dev/null && echo up", check=False).strip() == "up":
            break
        time.sleep(0.2)
    time.sleep(3.3)
    t0 = float(b.hexec("spark-1", "cat >> %s && python3 -c 'import time; print(repr(time.time()))'" % LOG,
                       stdin=burst))
    out, _ = proc.communicate(timeout=300)
    t1 = time.time()
    got = None
    fatal = [line for line in out.splitlines() if line.startswith("fatal: [spark-1]: FAILED! => ")]
    if fatal:
        try:
            got = (json.loads(fatal[-1].split("=> ", 1)[1]).get("failure") or {}).get("class")
        except ValueError:
            pass
    row = {"case": label, "fixture": name, "expected": cls, "got": got, "delay_s": round(t1 - t0, 2),
           "poll_interval": poll}
    print("  %-36s %-16s -> %-16s %5.2f s" % (label, cls, got, t1 - t0), flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--poll", default="1", help="vllm_wait poll_interval (the role uses 1)")
    args = ap.parse_args()
    print("machine: %s" % b.machine())
    print("poll_interval %s s; delay = failing burst written -> ansible-playbook exits failed" % args.poll, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [one(label, name, args.poll, tmp) for label, name in CASES]
    b.hexec("spark-1", "rm -f %s" % shlex.quote(LOG))
    worst = max(r["delay_s"] for r in rows)
    print("worst %.2f s (target 5 s): %.2fx of the target; every class right: %s"
          % (worst, worst / 5.0, all(r["got"] == r["expected"] for r in rows)))
    print("BENCH-JSON " + json.dumps({"bench": "B4", "rows": rows, "worst_s": worst}))


if __name__ == "__main__":
    main()
