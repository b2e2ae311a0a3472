#!/usr/bin/env python3
"""Benchmark B2: kill model_sync at about half, run it again, print the bytes re-sent beyond what was missing.

    SPARKLAB_NAME=perf lab/labctl up && .venv/bin/python bench/resume.py [--size-mb 2048] [--shards 40]

Run as root from the repo root. The same generated model as bench/model_sync.py goes spark-1 -> spark-2; once
about half of its bytes sit on spark-2 (final names plus partial files in the staging directory), the module's
process group on spark-1 is killed (SIGKILL, like a lost controller or a power cut of the head's run). Then the
sync runs again. "missing" is what spark-2 did not hold after the kill, counting a partial file's bytes as held
(the receiver continues it); "re-sent beyond" is what the second run sent on top of that. Done for each transport
(tcp, the default, keeps partial files; ssh, rsync's staging, starts them again). Target (issue 8): at most one
shard + 5% of the model. Prints one BENCH-JSON line for bench/run_all.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_sync as b  # noqa: E402  (bench/model_sync.py: lab helpers)


def held(host):
    """(bytes under final names, bytes in partial files) of the model on host."""
    final = b.arrived(host)
    staged = int(b.hexec(host, "find %s/.sparkfleet-sync -type f -printf '%%s\\n' 2>/dev/null | "
                               "awk '{s+=$1} END {print s+0}'" % b.DST).split()[0])
    return final, staged


def one(transport, total, shard):
    b.clean(["spark-2"])
    args = dict({"src": b.SRC, "dest": b.DST, "destinations": ["10.99.1.12"], "ssh_user": "spark",
                 "ssh_key": b.KEY, "transport": transport})
    proc = subprocess.Popen([b.LABCTL, "ctl", "--", os.path.join(b.REPO, ".venv/bin/ansible"), "spark-1", "-i",
                             b.inventory(), "-o", "-m", "sparkfleet.vllm.model_sync", "-a", json.dumps(args),
                             "-e", "ansible_become=false"], cwd=b.REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(b.REPO, "ansible.cfg")))
    pattern = "(rsync .*|send )%s" % b.SRC  # a stream of either transport: its group is the module's
    deadline = time.time() + 600
    while time.time() < deadline:
        final, staged = held("spark-2")
        if final + staged >= total * 45 // 100:  # a poll takes ~0.5 s: aim a bit early
            break
        time.sleep(0.2)
    out = b.hexec("spark-1", "for i in $(seq 50); do pid=$(pgrep -o -u spark -f '%s'); "
                             "pg=$([ -n \"$pid\" ] && ps -o pgid= -p \"$pid\" | tr -d ' '); "
                             "[ -n \"$pg\" ] && /bin/kill -s KILL -- -$pg && echo killed $pg && break; sleep 0.1; done"
                  % pattern, check=False)
    proc.wait(timeout=120)
    if "killed" not in out:
        print("  %-4s could not find the sync to kill (it finished first?): not measured" % transport, flush=True)
        return None
    time.sleep(2)
    final, staged = held("spark-2")
    listeners = b.hexec("spark-2", "ss -ltnpH | grep -c python3 || true", check=False).strip()
    # Bytes in partial files count as held for both transports: tcp continues them, rsync's prepare clears them
    # (so over ssh they are re-sent, which is what "beyond" shows).
    missing = total - final - staged
    res = b.run_module(["10.99.1.12"], transport=transport)
    sent = res["bytes_transferred"]
    beyond = sent - missing
    if b.arrived("spark-2") != total:
        raise SystemExit("%s: the second run did not complete the model" % transport)
    row = {"transport": transport, "at_kill_final": final, "at_kill_staged": staged, "missing": missing,
           "sent_again": sent, "beyond": beyond, "beyond_pct_of_model": round(100.0 * beyond / total, 2),
           "listeners_after_kill": int(listeners or 0), "target": shard + total // 20}
    print("  %-4s killed with %.0f MB final + %.0f MB partial of %.0f MB; re-run sent %.0f MB, %.0f MB beyond the "
          "missing (%.2f%% of the model); python listeners left on spark-2 after the kill: %s"
          % (transport, final / 1e6, staged / 1e6, total / 1e6, sent / 1e6, beyond / 1e6,
             row["beyond_pct_of_model"], listeners), flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=2200)  # 40 uneven shards: >= 2 GB in all
    ap.add_argument("--shards", type=int, default=40)
    ap.add_argument("--transports", default="tcp,ssh")
    args = ap.parse_args()
    files = b.setup(args.size_mb, args.shards)
    total = sum(s for _n, s in files)
    shard = max(s for _n, s in files)
    print("machine: %s" % b.machine())
    print("model: %d files, %.1f MB, largest shard %.1f MB; target: re-sent beyond the missing <= one shard + 5%% "
          "= %.1f MB" % (len(files), total / 1e6, shard / 1e6, (shard + total / 20) / 1e6), flush=True)
    rows = [r for r in (one(t, total, shard) for t in args.transports.split(",")) if r]
    b.clean(["spark-2"])
    for r in rows:
        print("ratio %-4s beyond/target %.2fx" % (r["transport"], r["beyond"] / float(r["target"])))
    print("BENCH-JSON " + json.dumps({"bench": "B2", "bytes": total, "shard": shard, "rows": rows}))


if __name__ == "__main__":
    main()
