#!/usr/bin/env python3
"""Benchmark B1: ways to move a model spark-1 -> spark-2 over the lab fabric, side by side in one run.

    SPARKLAB_NAME=perf lab/labctl up && .venv/bin/python bench/model_sync.py [--size-mb 2048] [--shards 40]
    .venv/bin/python bench/model_sync.py --shape 1gbit --cases module,tcp     # the link capped by tbf

Run as root from the repo root (it drives lab/labctl). It writes an incompressible multi-shard model (FP8 weights
are high-entropy: real safetensors headers, random bytes) to spark-1:/models/bench-src once, authorizes a sync key
from spark-1 on spark-2, then for every case empties spark-2:/models/bench-dst and times a full copy:

  ops         (a) the operators' `rsync -avP --compress` over ssh, one stream
  module      (b) sparkfleet.vllm.model_sync with its defaults (transport auto = tcp, 4 streams, content hashes
              checked on the worker before each file gets its name), through ansible from the control namespace
  module-ssh  model_sync with transport=ssh (rsync over ssh, 4 streams): the fallback
  daemon      an rsync daemon started for the run, bound to spark-2's fabric IP, per-run secret, 4 clients: the
              candidate measured before (issue 8)
  tcp         (c) raw TCP capacity of the same link: a socket copy of as many bytes, memory to memory, the best
              of 1 and 4 streams
  cpu         the tcp transport's two ends run directly (no ansible, no ssh), hashes on, a first sync: CPU-seconds
              (user + system) of the worker's receiver and the head's sender per GB, the cost that bounds the copy
              when both ends share the same cores (not a throughput case: no MB/s row)
  module-base model_sync with its defaults from another revision (--baseline REV, a `git archive` of REV unpacked
              for the run): the change and what it replaces, side by side on the same lab and load

Every run also measures its floors, on the same lab in the same minutes, and prints them first:
  floor CPU   the raw TCP copy's CPU-seconds per GB (both ends, memory to memory, 4 streams) plus two SHA-256 passes
              (hashlib's speed measured on the lab hosts in the run): what moving and checking a byte must cost;
              model_sync's own CPU-seconds per GB (its `cpu_seconds`: the module with what it waited for on the head,
              the receiver on the worker) is shown as a ratio of it
  floor time  the raw TCP copy's seconds (the wire) for the copy phase, and an `ansible -m ping` round trip (what
              any module run pays before and after its work) for the whole run
With --repeat N the case list runs N times, interleaved, and the median of each case is kept (the load moves).

It prints MB/s per case and the ratios b/a and b/c, and one JSON line (prefix BENCH-JSON) for bench/run_all.sh.
"MB/s (copy)" of the module is its own transfer_seconds (the bytes moving, the per-file checks on the worker
included); "MB/s (all)" is the whole ansible run (source checks, plan, verify, cache drop). Never used for asserts.
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
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import pack_bins  # noqa: E402
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_tcp import fast_bins  # noqa: E402
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._fast_copy import FAST_SCRIPT  # noqa: E402

LABCTL = os.path.join(REPO, "lab", "labctl")
SRC = "/models/bench-src"
DST = "/models/bench-dst"
KEY = "/home/spark/.ssh/sparkfleet_sync"
CIPHER = "aes128-gcm@openssh.com"


def fabric_ip(host):
    return "10.99.1.%d" % (10 + int(host.split("-")[1]))


# The one safetensors writer of the tests (tests/unit/support/model_files.py), run as a program on the head.
GEN = open(os.path.join(REPO, "tests", "unit", "support", "model_files.py"), encoding="utf-8").read()

# Raw TCP: a socket copy of NBYTES over STREAMS connections, memory to memory (no disk, no hashing).
TCP = r'''
import socket, sys, threading, time
mode, host, port, streams, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
if mode == "srv":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((host, port)); s.listen(16)
    s.settimeout(60)
    def sink(c):
        buf = memoryview(bytearray(1 << 20))
        while c.recv_into(buf):
            pass
    ts = []
    for _ in range(streams):
        c, _a = s.accept(); t = threading.Thread(target=sink, args=(c,)); t.start(); ts.append(t)
    s.close()
    for t in ts:
        t.join()
else:
    buf = b"\x5a" * (1 << 20)
    per = nbytes // streams // len(buf) + 1
    def one():
        c = socket.create_connection((host, port))
        for _ in range(per):
            c.sendall(buf)
        c.close()
    t0 = time.time(); ts = [threading.Thread(target=one) for _ in range(streams)]
    [t.start() for t in ts]; [t.join() for t in ts]
    print("%.3f %d" % (time.time() - t0, per * streams * len(buf)))
'''


# hashlib's SHA-256 speed on a lab host: CPU-seconds per GB over 512 MiB in memory (what one hash pass costs).
HASHSPEED = r'''
import hashlib, resource
buf = b"\x5a" * (64 << 20)
h = hashlib.sha256()
r0 = resource.getrusage(resource.RUSAGE_SELF)
for _ in range(8):
    h.update(buf)
r1 = resource.getrusage(resource.RUSAGE_SELF)
print("%.4f" % ((r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / (8 * 64 * 2 ** 20 / 1e9)))
'''


def sh(*argv, **kw):
    return subprocess.run(list(argv), check=True, stdout=subprocess.PIPE, universal_newlines=True, **kw).stdout


def hexec(host, script, user=None, stdin=None, check=True):
    if user:
        script = "su %s -s /bin/sh -c %s" % (user, shlex.quote(script))
    return subprocess.run([LABCTL, "exec", host, "sh", "-c", script], check=check, input=stdin,
                          stdout=subprocess.PIPE, universal_newlines=True).stdout


def machine():
    load = open("/proc/loadavg").read().split()[:3]
    cpu = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = int(open("/proc/meminfo").readline().split()[1]) // 1024 // 1024
    return "%d x %s, %d GiB RAM, kernel %s, load average %s at start" % (
        os.cpu_count(), cpu, mem, os.uname().release, " ".join(load))


def setup(size_mb, shards, workers=("spark-2",)):
    """The source model on spark-1 and the sync key authorized on the workers (plain key, as an operator would)."""
    shard_bytes = size_mb * 1024 * 1024 // shards
    # uneven shards, like real checkpoints: the last is 3/4 of the first
    out = subprocess.run([LABCTL, "exec", "spark-1", "python3", "-c", GEN, SRC, str(shards), str(shard_bytes), "bench",
                          str(shard_bytes // (4 * shards)), "keep"],
                         check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
    files = [(line.split(" ", 1)[1], int(line.split(" ", 1)[0])) for line in out.splitlines()]
    hexec("spark-1", "chown -R spark: %s; test -f %s || su spark -c \"ssh-keygen -q -t ed25519 -N '' -f %s\""
          % (SRC, KEY, KEY))
    pub = hexec("spark-1", "cat %s.pub" % KEY).strip()
    for w in ("spark-1",) + tuple(workers):  # every node may feed another in a fan-out
        hexec(w, "install -d -o spark -g spark -m 700 /home/spark/.ssh; "
              "grep -qxF %s /home/spark/.ssh/authorized_keys 2>/dev/null || echo %s >> /home/spark/.ssh/authorized_keys; "
              "chown spark: /home/spark/.ssh/authorized_keys; install -d -o spark -g spark /models"
              % (shlex.quote(pub), shlex.quote(pub)))
    return files


def ssh_e(cipher=None):
    e = "ssh -i %s -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=accept-new" % KEY
    return e + (" -c %s" % cipher if cipher else "")


def run_ops(dst_ip="10.99.1.12"):
    hexec("spark-1", "rsync -avP --compress -e %s %s/ spark@%s:%s/ >/dev/null"
          % (shlex.quote(ssh_e()), SRC, dst_ip, DST), user="spark")


def inventory():
    name = os.environ.get("SPARKLAB_NAME", "sfl")
    return os.path.join(REPO, "inventories", "lab") if name == "sfl" else "/var/tmp/sparklab/lab-%s/inventory" % name


def run_module(destinations, repo=REPO, **extra):
    """model_sync through ansible from the control namespace (the collection of ``repo``); returns its result."""
    args = dict({"src": SRC, "dest": DST, "destinations": destinations, "ssh_user": "spark", "ssh_key": KEY},
                **extra)
    out = subprocess.run([LABCTL, "ctl", "--", os.path.join(REPO, ".venv/bin/ansible"), "spark-1", "-i", inventory(),
                          "-o", "-m", "sparkfleet.vllm.model_sync", "-a", json.dumps(args), "-e", "ansible_become=false"],
                         cwd=repo, stdout=subprocess.PIPE, universal_newlines=True, check=False,
                         env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(repo, "ansible.cfg"),
                                  ANSIBLE_COLLECTIONS_PATH=os.path.join(repo, "collections"),
                                  ANSIBLE_DEPRECATION_WARNINGS="false")).stdout
    try:
        res = json.loads(out.split("=> ", 1)[1])
    except (IndexError, ValueError):
        raise RuntimeError(out[-3000:])
    if res.get("failed"):
        raise RuntimeError(json.dumps(res)[-3000:])
    return res


def run_daemon(files, streams=4, dst_ip="10.99.1.12"):
    port = 8730 + streams
    secret = secrets.token_hex(16)
    conf = ("pid file = /tmp/bench-rsyncd.%d.pid\nuse chroot = no\nmax connections = %d\nlock file = /tmp/bench-rsyncd.lock\n"
            "[m]\npath = %s\nread only = no\nauth users = bench\nsecrets file = /tmp/bench-rsyncd.secrets\n"
            % (port, streams, DST))
    hexec("spark-2", "umask 077; printf %s > /tmp/bench-rsyncd.conf; printf 'bench:%s\\n' > /tmp/bench-rsyncd.secrets; "
          "mkdir -p %s; rsync --daemon --address=%s --port=%d --config=/tmp/bench-rsyncd.conf; "
          "for i in $(seq 50); do [ -s /tmp/bench-rsyncd.%d.pid ] && break; sleep 0.1; done"
          % (shlex.quote(conf), secret, DST, dst_ip, port, port), user="spark")
    try:
        bins = pack_bins(files, streams)
        lists = "".join("printf '%%s\\n' %s > /tmp/bench-list.%d; " % (" ".join(shlex.quote(n) for n in b), i)
                        for i, b in enumerate(bins))
        pulls = "".join("rsync -a -W --files-from=/tmp/bench-list.%d %s/ rsync://bench@%s:%d/m/ & pids=\"$pids $!\"; "
                        % (i, SRC, dst_ip, port) for i in range(len(bins)))
        hexec("spark-1", "%s export RSYNC_PASSWORD=%s; pids=; %s rc=0; for p in $pids; do wait $p || rc=1; done; "
              "rm -f /tmp/bench-list.*; exit $rc" % (lists, secret, pulls), user="spark")
    finally:
        hexec("spark-2", "kill $(cat /tmp/bench-rsyncd.%d.pid); rm -f /tmp/bench-rsyncd.*" % port, user="spark")


def raw_tcp(nbytes, streams, dst="spark-2", port=5299):
    """(seconds, bytes sent, CPU-seconds of the sender, of the receiver) of a memory-to-memory socket copy of nbytes
    over streams connections spark-1 -> dst."""
    ip = fabric_ip(dst)
    srv = subprocess.Popen([LABCTL, "exec", dst, "timeout", "300", "bash", "-c", TIMED % ("srv %s %d %d %d" % (
        ip, port, streams, nbytes)), TCP], stderr=subprocess.PIPE, universal_newlines=True)
    try:
        for _ in range(50):
            time.sleep(0.2)
            if ":%d " % port in hexec(dst, "ss -ltnH", check=False):
                break
        out = subprocess.run([LABCTL, "exec", "spark-1", "bash", "-c", TIMED % ("cli %s %d %d %d" % (
            ip, port, streams, nbytes)), TCP], check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True)
    finally:
        srv.wait(timeout=120)
    secs, sent = out.stdout.split()
    return float(secs), int(sent), _cpu(out.stderr), _cpu(srv.stderr.read())


def _cpu(stderr):
    line = [x for x in stderr.splitlines() if x.startswith("CPU ")][-1].split()
    return float(line[1]) + float(line[2])


def hash_cost():
    """hashlib SHA-256 CPU-seconds per GB, the mean of the two lab hosts."""
    got = [float(hexec(h, "python3 -c %s" % shlex.quote(HASHSPEED)).strip()) for h in ("spark-1", "spark-2")]
    return sum(got) / len(got)


def ansible_round_trip():
    """Seconds of `ansible spark-1 -m ping` from the control namespace: what every module run pays around its work."""
    t0 = time.time()
    subprocess.run([LABCTL, "ctl", "--", os.path.join(REPO, ".venv/bin/ansible"), "spark-1", "-i", inventory(), "-o",
                    "-m", "ping", "-e", "ansible_become=false"], cwd=REPO, stdout=subprocess.DEVNULL, check=True,
                   env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                            ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "collections")))
    return time.time() - t0


LIST = r'''
import json, os, sys
root = sys.argv[1]
print(json.dumps([[n, os.stat(os.path.join(root, n)).st_size, os.stat(os.path.join(root, n)).st_mtime_ns,
                   os.stat(os.path.join(root, n)).st_mode & 0o777, None] for n in sorted(os.listdir(root))]))
'''
TIMED = "TIMEFORMAT='CPU %%U %%S'; time python3 -c \"$0\" %s"


def cpu_cost(dst="spark-2", streams=4):
    """CPU-seconds (user, system) of the receiver on dst and the sender on spark-1 for one first sync, hashes on."""
    files = json.loads(hexec("spark-1", "python3 -c %s %s" % (shlex.quote(LIST), SRC)))
    hexec("spark-1", "rm -rf /root/.cache/sparkfleet")
    hexec(dst, "rm -rf %s /root/.cache/sparkfleet" % DST)
    req = {"files": files, "streams": streams, "timeout": 60, "bind": fabric_ip(dst), "hash": True}
    recv = subprocess.Popen([LABCTL, "exec", dst, "env", "-u", "SSH_CONNECTION", "bash", "-c",
                             TIMED % ("receive " + DST), FAST_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)
    recv.stdin.write(json.dumps(req) + "\n")
    recv.stdin.flush()
    first = json.loads(recv.stdout.readline())
    sreq = {"host": first["bind"], "port": first["port"], "key": first["key"], "timeout": 60, "hash": True,
            "bins": fast_bins([(f[0], f[1]) for f in files], {}, streams)}
    send = subprocess.Popen([LABCTL, "exec", "spark-1", "bash", "-c", TIMED % ("send " + SRC), FAST_SCRIPT],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True)
    send.stdin.write(json.dumps(sreq) + "\n")
    send.stdin.flush()
    sent = json.loads(send.stdout.readline())
    send.stdin.close()
    got = json.loads(recv.stdout.readline())
    recv.stdin.close()
    out = {}
    for name, proc in (("receiver", recv), ("sender", send)):
        proc.wait(timeout=60)
        line = [x for x in proc.stderr.read().splitlines() if x.startswith("CPU ")][-1].split()
        out[name] = (float(line[1]), float(line[2]))
    if sent["errors"] or got["failed"] or len(got["ok"]) != len(files):
        raise SystemExit("cpu case: the copy failed: %s %s" % (sent["errors"], got["failed"]))
    hexec(dst, "rm -rf %s /root/.cache/sparkfleet" % DST)
    return out, sum(f[1] for f in files)


def arrived(host):
    """Bytes of the model's files under their final names on host (staging and marker aside)."""
    return int(hexec(host, "find %s -path %s/.sparkfleet-sync -prune -o -type f ! -name .sparkfleet-model "
                           "-printf '%%s\\n' 2>/dev/null | awk '{s+=$1} END {printf \"%%.0f\\n\", s}'" % (DST, DST)).split()[0])


def clean(hosts):
    for h in hosts:
        hexec(h, "rm -rf %s /home/spark/.cache/sparkfleet" % DST)


def median(values):
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2.0


def one_case(key, files, total, base):
    """Run one case on a fresh destination; its row (seconds, MB/s) and what else it measured."""
    clean(["spark-2"])
    # Every case is a first sync: neither end has hashed these files before (a fresh download on the head).
    hexec("spark-1", "rm -rf /home/spark/.cache/sparkfleet")
    hexec("spark-1", "sync")
    t0 = time.time()
    inner, extra = None, {}
    if key == "ops":
        run_ops()
    elif key in ("module", "module-base", "module-ssh"):
        kw = {"transport": "ssh"} if key == "module-ssh" else {}
        res = run_module(["10.99.1.12"], repo=base if key == "module-base" else REPO, **kw)
        inner = res["transfer_seconds"]
        extra["phases"] = res.get("phase_seconds")
        extra["module_seconds"] = res.get("seconds")
        if res.get("cpu_seconds"):
            extra["cpu_s"] = sum(res["cpu_seconds"].values())
            extra["cpu_split"] = res["cpu_seconds"]
        if key != "module-ssh":
            assert res["destinations"]["10.99.1.12"]["transport"] == "tcp", res["destinations"]
    elif key == "daemon":
        run_daemon(files)
    elif key == "tcp":
        runs = [raw_tcp(total, n) for n in (1, 4)]
        best = min(runs, key=lambda r: r[0] / r[1])
        inner = best[0] * total / best[1]
        four = runs[1]
        extra["cpu_s"] = (four[2] + four[3]) * total / four[1]  # 4 streams, scaled to the model's bytes
        extra["cpu_split"] = {"sender": four[2] * total / four[1], "receiver": four[3] * total / four[1]}
    elif key == "ansible":
        return {"seconds_all": round(ansible_round_trip(), 2)}, {}
    else:
        raise SystemExit("unknown case %s" % key)
    secs = time.time() - t0
    copy = inner or secs
    if key != "tcp":
        got = arrived("spark-2")
        if got != total:
            raise SystemExit("%s: %d of %d bytes arrived" % (key, got, total))
    return {"seconds_all": round(secs, 2), "seconds_copy": round(copy, 2), "mbs_all": round(total / secs / 1e6, 1),
            "mbs_copy": round(total / copy / 1e6, 1)}, extra


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=2200)  # 40 uneven shards: >= 2 GB in all
    ap.add_argument("--shards", type=int, default=40)
    ap.add_argument("--shape", default=None, help="cap the fabric first (lab/labctl shape RATE), e.g. 1gbit")
    ap.add_argument("--cases", default="ansible,tcp,ops,module,module-ssh,daemon")
    ap.add_argument("--baseline", metavar="REV", help="also run model_sync from REV (case module-base), e.g. main")
    ap.add_argument("--repeat", type=int, default=1, help="run the cases N times, interleaved; medians are kept")
    args = ap.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    commit = sh("git", "-C", REPO, "log", "-1", "--format=%h").strip() + (
        "+dirty" if sh("git", "-C", REPO, "status", "--porcelain", "--untracked-files=no").strip() else "")
    cases = args.cases.split(",")
    base = None
    if args.baseline:
        base = "/var/tmp/sparkfleet-bench-base-%s" % os.environ.get("SPARKLAB_NAME", "sfl")
        subprocess.run(["rm", "-rf", base], check=True)
        os.makedirs(base)
        subprocess.run("git -C %s archive %s | tar -x -C %s" % (shlex.quote(REPO), shlex.quote(args.baseline),
                                                              shlex.quote(base)), shell=True, check=True)
        print("baseline: %s = %s" % (args.baseline, sh("git", "-C", REPO, "log", "-1", "--format=%h %s",
                                                     args.baseline).strip()))
        if "module-base" not in cases:
            cases.insert(cases.index("module") + 1 if "module" in cases else len(cases), "module-base")
    if args.shape:
        sh(LABCTL, "shape", args.shape)
    samples, extras, cpu = {}, {}, None
    try:
        files = setup(args.size_mb, args.shards)
        total = sum(s for _n, s in files)
        gb = total / 1e9
        print("machine: %s" % machine())
        print("commit: %s" % commit)
        print("model: %d files, %.1f MB on spark-1:%s -> spark-2 10.99.1.12:%s; shape %s"
              % (len(files), total / 1e6, SRC, DST, args.shape or "none"), flush=True)
        hash_s = hash_cost()
        print("  hashlib     SHA-256 %.3f CPU-seconds per GB (%.2f GB/s per core) on the lab hosts"
              % (hash_s, 1 / hash_s), flush=True)
        for rep in range(args.repeat):
            for key in cases:
                if key == "cpu":
                    if rep == 0:
                        cost, nbytes = cpu_cost()
                        cgb = nbytes / 1e9
                        cpu = dict((end, {"user_s_per_gb": round(u / cgb, 2), "sys_s_per_gb": round(y / cgb, 2)})
                                   for end, (u, y) in cost.items())
                        print("  cpu          receiver %.2f + %.2f s, sender %.2f + %.2f s (user + system) for %.1f GB: "
                              "%.2f CPU-seconds per GB" % (cost["receiver"] + cost["sender"] + (
                                  cgb, sum(cost["receiver"] + cost["sender"]) / cgb)), flush=True)
                    continue
                row, extra = one_case(key, files, total, base)
                samples.setdefault(key, []).append(row)
                extras.setdefault(key, []).append(extra)
                print("  %-11s %8.2f s all%s%s%s" % (
                    key, row["seconds_all"],
                    " %8.1f MB/s all %8.1f MB/s copy" % (row["mbs_all"], row["mbs_copy"]) if "mbs_all" in row else "",
                    " %.2f CPU-s/GB" % (extra["cpu_s"] / gb) if extra.get("cpu_s") else "",
                    "; module %s s, phases %s, cpu %s" % (extra.get("module_seconds"), json.dumps(extra["phases"]), json.dumps(extra.get("cpu_split")))
                    if extra.get("phases") else ""), flush=True)
        clean(["spark-2"])
    finally:
        if args.shape:
            sh(LABCTL, "shape", "off")
        if base:
            subprocess.run(["rm", "-rf", base], check=True)
    rows, phases, cpu_per_gb = {}, {}, {}
    for key, runs in samples.items():
        rows[key] = dict((k, round(median([r[k] for r in runs]), 2)) for k in runs[0])
        got = [e["cpu_s"] for e in extras[key] if e.get("cpu_s")]
        if got:
            cpu_per_gb[key] = round(median(got) / gb, 3)
        ph = [e["phases"] for e in extras[key] if e.get("phases")]
        if ph:
            phases[key] = dict((p, round(median([x.get(p, 0.0) for x in ph]), 2)) for p in ph[0])
            phases[key]["module"] = round(median([e.get("module_seconds") or 0.0 for e in extras[key]]), 2)
    floor = {"hash_s_per_gb": round(hash_s, 3)}
    if "tcp" in cpu_per_gb:
        floor["tcp_cpu_s_per_gb"] = cpu_per_gb["tcp"]
        floor["cpu_s_per_gb"] = round(cpu_per_gb["tcp"] + 2 * hash_s, 3)
    if "tcp" in rows:
        floor["copy_s"] = rows["tcp"]["seconds_copy"]
    if "ansible" in rows:
        floor["ansible_s"] = rows["ansible"]["seconds_all"]
    print("\nfloors (this run, this lab):")
    if "cpu_s_per_gb" in floor:
        print("  CPU   %.2f CPU-s/GB = raw TCP copy %.2f (both ends, 4 streams) + 2 x SHA-256 %.2f"
              % (floor["cpu_s_per_gb"], floor["tcp_cpu_s_per_gb"], hash_s))
    if "copy_s" in floor:
        print("  copy  %.2f s: the raw TCP copy of the same bytes (the wire)" % floor["copy_s"])
    if "ansible_s" in floor:
        print("  run   %.2f s: an `ansible -m ping` round trip (every module run's fixed cost)" % floor["ansible_s"])
    ratios = {}
    for key in ("module", "module-base", "module-ssh"):
        if key in cpu_per_gb and "cpu_s_per_gb" in floor:
            ratios["%s CPU/floor" % key] = round(cpu_per_gb[key] / floor["cpu_s_per_gb"], 2)
        if key in rows and "copy_s" in floor:
            ratios["%s copy/floor" % key] = round(rows[key]["seconds_copy"] / floor["copy_s"], 2)
        if key in rows and "ansible_s" in floor:
            ratios["%s run - ansible floor s" % key] = round(rows[key]["seconds_all"] - floor["ansible_s"], 2)
    print("\n%-11s %9s %9s %11s %12s %10s" % ("case", "s (all)", "s (copy)", "MB/s (all)", "MB/s (copy)", "CPU-s/GB"))
    for key, r in rows.items():
        if "mbs_all" not in r:
            continue
        print("%-11s %9.2f %9.2f %11.1f %12.1f %10s" % (key, r["seconds_all"], r["seconds_copy"], r["mbs_all"],
                                                      r["mbs_copy"], "%.2f" % cpu_per_gb[key] if key in cpu_per_gb
                                                      else "-"))
    if "module" in rows and "ops" in rows:
        ratios["b/a"] = round(rows["module"]["mbs_copy"] / rows["ops"]["mbs_copy"], 2)
        ratios["b/a (all)"] = round(rows["module"]["mbs_all"] / rows["ops"]["mbs_all"], 2)
    if "module" in rows and "tcp" in rows:
        ratios["b/c"] = round(rows["module"]["mbs_copy"] / rows["tcp"]["mbs_copy"], 2)
    if "module" in rows and "module-base" in rows:
        ratios["b/base"] = round(rows["module"]["mbs_copy"] / rows["module-base"]["mbs_copy"], 2)
        ratios["b/base (all)"] = round(rows["module"]["mbs_all"] / rows["module-base"]["mbs_all"], 2)
    if "module" in rows and args.shape:
        cap = float(args.shape.lower().replace("gbit", "e9").replace("mbit", "e6")) / 8 / 1e6
        ratios["b/cap"] = round(rows["module"]["mbs_copy"] / cap, 2)
    for k, v in ratios.items():
        print("ratio %-26s %6.2f%s" % (k, v, "" if k.endswith(" s") else "x"))
    print("BENCH-JSON " + json.dumps({"bench": "B1", "shape": args.shape, "bytes": total, "files": len(files),
                                      "rows": dict((k, v) for k, v in rows.items() if "mbs_all" in v),
                                      "ratios": ratios, "phases": phases, "cpu": cpu, "floor": floor,
                                      "cpu_per_gb": cpu_per_gb, "repeat": args.repeat, "commit": commit,
                                      "date": started, "baseline": args.baseline,
                                      "load_end": open("/proc/loadavg").read().split()[:3]}))


if __name__ == "__main__":
    main()
