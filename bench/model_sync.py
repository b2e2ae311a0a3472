#!/usr/bin/env python3
"""Benchmark: ways to move a model spark-1 -> spark-2 over the lab fabric, side by side in one run.

    lab/labctl up && .venv/bin/python bench/model_sync.py [--size-mb 1024] [--shards 8] [--shape 1gbit]

Run as root from the repo root (it drives lab/labctl). It writes an incompressible multi-shard model
(FP8 weights are high-entropy) to spark-1:/models/bench-src once, authorizes a sync key from spark-1 on
spark-2, then for every case empties spark-2:/models/bench-dst and times a full copy:

  rsync -az         the operators' way (`rsync -avP --compress`), one stream, ssh default cipher
  rsync -a -W       one stream, whole-file, no compression, aes128-gcm
  module s=1        sparkfleet.vllm.model_sync streams=1 through ansible (checks + verify included)
  module s=4        the same with streams=4
  daemon x1         rsync daemon bound to spark-2's fabric IP, per-run credentials, no ssh
  daemon x4         the same, four parallel clients (largest-first packing)

and prints MB/s and the ratio to the first case. Numbers on this 2-core machine are CPU bound: both
ends and the "wire" share the same two cores, unlike two Sparks. Never used for asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "collections"))
from ansible_collections.sparkfleet.vllm.plugins.module_utils._model_sync import pack_bins  # noqa: E402

LABCTL = os.path.join(REPO, "lab", "labctl")
SRC = "/models/bench-src"
DST = "/models/bench-dst"
KEY = "/home/spark/.ssh/sparkfleet_sync"
S2 = "10.99.1.12"
CIPHER = "aes128-gcm@openssh.com"

GEN = r'''
import json, os, struct, sys
root, shards, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(root, exist_ok=True)
json.dump({"model_type": "bench"}, open(os.path.join(root, "config.json"), "w"))
wm = {}
for i in range(1, shards + 1):
    name = "model-%05d-of-%05d.safetensors" % (i, shards)
    path = os.path.join(root, name)
    n = size - (i % 3) * (size // 8)  # uneven shards, like real checkpoints
    hdr = json.dumps({"w%d" % i: {"dtype": "F8_E4M3", "shape": [n], "data_offsets": [0, n]}}).encode()
    if not (os.path.exists(path) and os.path.getsize(path) == 8 + len(hdr) + n):
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(hdr)) + hdr)
            left = n
            while left:
                k = min(left, 8 << 20)
                f.write(os.urandom(k))
                left -= k
    wm["w%d" % i] = name
json.dump({"weight_map": wm}, open(os.path.join(root, "model.safetensors.index.json"), "w"))
for dp, dn, fn in os.walk(root):
    for n in fn:
        print("%d %s" % (os.path.getsize(os.path.join(dp, n)), n))
'''


def sh(*argv, **kw):
    return subprocess.run(list(argv), check=True, stdout=subprocess.PIPE, universal_newlines=True, **kw).stdout


def hexec(host, script, user=None, stdin=None):
    if user:
        script = "su %s -s /bin/sh -c %s" % (user, shlex.quote(script))
    return subprocess.run([LABCTL, "exec", host, "sh", "-c", script], check=True, input=stdin,
                          stdout=subprocess.PIPE, universal_newlines=True).stdout


def setup(args):
    out = subprocess.run([LABCTL, "exec", "spark-1", "python3", "-c", GEN, SRC, str(args.shards),
                          str(args.size_mb * 1024 * 1024 // args.shards)],
                         check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
    files = [(line.split(" ", 1)[1], int(line.split(" ", 1)[0])) for line in out.splitlines()]
    hexec("spark-1", "chown -R spark: %s; test -f %s || su spark -c \"ssh-keygen -q -t ed25519 -N '' -f %s\""
          % (SRC, KEY, KEY))
    pub = hexec("spark-1", "cat %s.pub" % KEY).strip()
    hexec("spark-2", "install -d -o spark -g spark -m 700 /home/spark/.ssh; "
          "grep -qxF %s /home/spark/.ssh/authorized_keys 2>/dev/null || echo %s >> /home/spark/.ssh/authorized_keys; "
          "chown spark: /home/spark/.ssh/authorized_keys; install -d -o spark -g spark /models"
          % (shlex.quote(pub), shlex.quote(pub)))
    return files


def ssh_e(cipher=None):
    e = "ssh -i %s -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=accept-new" % KEY
    return e + (" -c %s" % cipher if cipher else "")


def case_rsync(flags, cipher):
    def run(files):
        hexec("spark-1", "rsync %s -e %s %s/ spark@%s:%s/" % (flags, shlex.quote(ssh_e(cipher)), SRC, S2, DST),
              user="spark")
    return run


def case_module(streams):
    def run(files):
        args = json.dumps({"src": SRC, "dest": DST, "destinations": [S2], "ssh_user": "spark",
                           "ssh_key": KEY, "streams": streams})
        out = subprocess.run([LABCTL, "ctl", "--", os.path.join(REPO, ".venv/bin/ansible"), "spark-1",
                              "-o", "-m", "sparkfleet.vllm.model_sync", "-a", args, "-e", "ansible_become=false"],
                             cwd=REPO, stdout=subprocess.PIPE, universal_newlines=True, check=False).stdout
        res = json.loads(out.split("=> ", 1)[1])
        if res.get("failed") or res["files_transferred"] != len(files):
            raise RuntimeError(out[-2000:])
        return res["transfer_seconds"]
    return run


def case_daemon(streams):
    port = 8730 + streams  # a fresh port per case: no wait on the previous daemon's exit

    def run(files):
        secret = secrets.token_hex(16)
        conf = ("pid file = /tmp/bench-rsyncd.%d.pid\nuse chroot = no\nmax connections = 16\nlock file = /tmp/bench-rsyncd.lock\n[m]\npath = %s\n"
                "read only = no\nauth users = bench\nsecrets file = /tmp/bench-rsyncd.secrets\n" % (port, DST))
        hexec("spark-2", "umask 077; printf %s > /tmp/bench-rsyncd.conf; printf 'bench:%s\\n' > /tmp/bench-rsyncd.secrets; "
              "mkdir -p %s; rsync --daemon --address=%s --port=%d --config=/tmp/bench-rsyncd.conf; "
              "for i in $(seq 50); do [ -s /tmp/bench-rsyncd.%d.pid ] && break; sleep 0.1; done"
              % (shlex.quote(conf), secret, DST, S2, port, port), user="spark")
        try:
            bins = pack_bins(files, streams)
            lists = "".join("printf '%%s\\n' %s > /tmp/bench-list.%d; " % (" ".join(shlex.quote(n) for n in b), i)
                            for i, b in enumerate(bins))
            pulls = "".join("rsync -a -W --files-from=/tmp/bench-list.%d %s/ rsync://bench@%s:%d/m/ & pids=\"$pids $!\"; "
                            % (i, SRC, S2, port) for i in range(len(bins)))
            hexec("spark-1", "%s export RSYNC_PASSWORD=%s; pids=; %s rc=0; for p in $pids; do wait $p || rc=1; done; "
                  "rm -f /tmp/bench-list.*; exit $rc" % (lists, secret, pulls), user="spark")
        finally:
            hexec("spark-2", "kill $(cat /tmp/bench-rsyncd.%d.pid); rm -f /tmp/bench-rsyncd.*" % port, user="spark")
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--shape", default=None, help="cap the fabric first (lab/labctl shape RATE), e.g. 1gbit")
    ap.add_argument("--cases", default="rsync-z,rsync-W,module-1,module-4,daemon-1,daemon-4")
    args = ap.parse_args()
    cases = {
        "rsync-z": ("rsync -az (operators')", case_rsync("-az", None)),
        "rsync-W": ("rsync -a -W aes128-gcm", case_rsync("-a -W", CIPHER)),
        "module-1": ("model_sync streams=1", case_module(1)),
        "module-4": ("model_sync streams=4", case_module(4)),
        "daemon-1": ("rsync daemon x1", case_daemon(1)),
        "daemon-4": ("rsync daemon x4", case_daemon(4)),
    }
    if args.shape:
        sh(LABCTL, "shape", args.shape)
    files = setup(args)
    total = sum(s for _n, s in files)
    print("model: %d files, %.1f MB on spark-1:%s -> spark-2 %s:%s; shape %s; %d CPUs here"
          % (len(files), total / 1e6, SRC, S2, DST, args.shape or "none", os.cpu_count()))
    rows = []
    for key in args.cases.split(","):
        label, run = cases[key]
        hexec("spark-2", "rm -rf %s" % DST)
        t0 = time.time()
        inner = run(files)
        secs = time.time() - t0
        wire = inner or secs  # the module's own transfer phase, without ansible, checks and verify
        got = int(hexec("spark-2", "du -sb --exclude=.sparkfleet-sync %s | cut -f1" % DST).split()[0])
        rows.append((label, secs, total / secs / 1e6, total / wire / 1e6, got))
        note = "" if got >= total else "  INCOMPLETE %d" % got
        print("  %-26s %7.2f s %8.1f MB/s%s" % (label, secs, total / secs / 1e6, note), flush=True)
    base = rows[0][3]
    print("\n%-26s %9s %11s %13s %8s" % ("case", "seconds", "MB/s (all)", "MB/s (copy)", "ratio"))
    for label, secs, mbs, wire_mbs, _got in rows:
        print("%-26s %9.2f %11.1f %13.1f %7.2fx" % (label, secs, mbs, wire_mbs, wire_mbs / base))
    print("ratio: copy-phase MB/s against the first case; (all) includes ansible, checks and verify.")
    if args.shape:
        sh(LABCTL, "shape", "off")
    hexec("spark-2", "rm -rf %s" % DST)


if __name__ == "__main__":
    main()
