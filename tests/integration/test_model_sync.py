"""model_sync on the lab: spark-1 /models -> the workers over the fabric IPs, through Ansible.

Run as root: lab/labctl ctl -- .venv/bin/pytest tests/integration/test_model_sync.py -m lab
The model is generated on spark-1 (real safetensors shards, random FP8-like bytes). The head gets a
sync key authorized on the workers by an Ansible play, as the role will do.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.vllm.tests.unit.support import model_files

pytestmark = pytest.mark.lab

MODEL = "/models/itest-model"
KEY = "/home/spark/.ssh/sparkfleet_sync"
SHARDS = 6
SHARD_MB = 8

# Run on spark-1 as a program (ROOT SHARDS SHARD_BYTES): the tests' one safetensors writer.
GEN = Path(model_files.__file__).read_text(encoding="utf-8")

# The plays are files (tests/integration/playbooks); these names are what the tests below call them.
PLAYBOOKS = {"setup.yml": "model_sync_setup.yml", "sync.yml": "model_sync_push.yml"}


@pytest.fixture(scope="module")
def synclab(lab, tmp_path_factory):
    d = tmp_path_factory.mktemp("model_sync")
    r = play(lab, d, "setup.yml", model_generator=GEN, model=MODEL, shards=SHARDS, shard_size=SHARD_MB * 1024 * 1024)
    assert r["status"] == "successful", r
    lab.dir = d
    lab.workers = [h for h in lab.hosts if h != "spark-1"]
    return lab


def play(lab, d, playbook, check=False, **extravars):
    # ansible-runner keeps env/extravars and env/cmdline from the last call when given none: lab.play passes both.
    workers = [lab.fabric_ip(h) for h in lab.hosts if h != "spark-1"]
    extravars = dict(dict(bwlimit=0, sync_poll=2, src=MODEL, dest="/models/itest-a", sync_key=KEY,
                          sync_destinations=workers), **extravars)
    r, _failures = lab.play(d, "tests/integration/playbooks/" + PLAYBOOKS[playbook], extravars=extravars,
                            cmdline="--check" if check else "--forks 8")
    return r


def sync_result(r):
    for ev in r["events"]:
        res = ev.get("res") or {}
        if ev["host"] == "spark-1" and ("files_total" in res or "msg" in res and ev["event"] == "runner_on_failed"):
            return res
    raise AssertionError("no model_sync result in %s" % json.dumps(r)[-3000:])


def sums(lab, host, path):
    # The model's files; model_sync's marker (.sparkfleet-model) exists on destinations only.
    return lab.sh(host, "cd %s 2>/dev/null && find . -type f ! -path ./.sparkfleet-model -print0 | sort -z "
                         "| xargs -0 sha256sum" % path).stdout


def test_sync_then_second_run_unchanged(synclab):
    lab = synclab
    for h in lab.workers:
        lab.sh(h, "rm -rf /models/itest-a")
    r = play(lab, lab.dir, "sync.yml", src=MODEL, dest="/models/itest-a")
    res = sync_result(r)
    assert r["status"] == "successful", res
    assert res["changed"] is True
    assert res["files_total"] == SHARDS + 2
    assert res["files_transferred"] == (SHARDS + 2) * len(lab.workers)
    source = sums(lab, "spark-1", MODEL)
    for h in lab.workers:
        assert sums(lab, h, "/models/itest-a") == source
        assert res["destinations"][lab.fabric_ip(h)]["verified"] is True
    print("first sync: %s bytes in %s s, %s MB/s"
          % (res["bytes_transferred"], res["transfer_seconds"], res["mb_per_s"]))

    again = sync_result(play(lab, lab.dir, "sync.yml", src=MODEL, dest="/models/itest-a"))
    assert again["changed"] is False and again["files_transferred"] == 0


def test_check_mode_changes_nothing(synclab):
    lab = synclab
    for h in lab.workers:
        lab.sh(h, "rm -rf /models/itest-c")
    res = sync_result(play(lab, lab.dir, "sync.yml", check=True, src=MODEL, dest="/models/itest-c"))
    assert res["changed"] is True, res
    first = next(iter(res["destinations"].values()))
    assert len(first["would_transfer"]) == SHARDS + 2
    for h in lab.workers:
        assert lab.sh(h, "test -e /models/itest-c").returncode == 1


@pytest.mark.fault(name='sync killed at about half',
                   expected='no partial file under a final name; the re-run sends only what is missing')
def test_killed_run_resumes_without_resending_finished_files(synclab):
    lab = synclab
    target = lab.workers[0]
    lab.sh(target, "rm -rf /models/itest-k")
    # 4 MiB/s over 3 streams: the 48 MB model needs ~12 s; kill it once two files have landed.
    r = play(lab, lab.dir, "sync.yml", src=MODEL, dest="/models/itest-k", bwlimit=4096, sync_poll=0)
    assert r["status"] == "successful", r
    deadline = time.time() + 60
    while time.time() < deadline:
        n = lab.sh(target, "ls /models/itest-k 2>/dev/null | grep -c safetensors").stdout.strip()
        if n and int(n) >= 2:
            break
        time.sleep(0.2)
    # Kill the module and its helpers on the head: the process group of the sender (tcp transport: its ssh to the
    # receiver and the sendfile streams) or of an rsync (ssh fallback) we started.
    # A stream may end between pgrep and ps: retry until a live one names the group.
    p = lab.sh("spark-1", "for i in $(seq 50); do pid=$(pgrep -o -u spark -f '(rsync .*|send )/models/itest-k'); "
                           "pg=$(ps -o pgid= -p \"${pid:-0}\" | tr -d ' '); "
                           "[ -n \"$pg\" ] && /bin/kill -s KILL -- -$pg && echo killed $pg && break; sleep 0.1; done")
    assert "killed" in p.stdout, p.stdout + p.stderr
    # A killed run leaves no listener: the receiver exits once ssh drops its channel.
    deadline = time.time() + 20
    while time.time() < deadline and lab.sh(target, "pgrep -u spark -f 'receive /models/itest-k'").returncode == 0:
        time.sleep(0.5)
    assert lab.sh(target, "pgrep -u spark -f 'receive /models/itest-k'").returncode == 1, "the receiver outlived the run"
    # no listener of ours (Ray 2.53's agents listen as bare python3 processes: judged by their command lines)
    listeners = lab.sh(target, "for p in $(ss -ltnpH | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do"
                               " tr '\\0' ' ' </proc/$p/cmdline; echo; done").stdout
    assert "receive /models/itest-k" not in listeners, listeners
    landed = lab.sh(target, "cd /models/itest-k && ls").stdout.split()
    assert len(landed) < SHARDS + 2, "the run finished before it was killed"
    source = dict((line.split()[1][2:], line.split()[0]) for line in sums(lab, "spark-1", MODEL).splitlines())
    for line in sums(lab, target, "/models/itest-k").splitlines():
        digest, rel = line.split()[0], line.split()[1][2:]
        if not rel.startswith(".sparkfleet-sync"):
            assert source[rel] == digest, "%s is under its final name but incomplete" % rel

    staged = int(lab.sh(target, "cat /models/itest-k/.sparkfleet-sync/* 2>/dev/null | wc -c").stdout)
    res = sync_result(play(lab, lab.dir, "sync.yml", src=MODEL, dest="/models/itest-k"))
    finished = [f for f in landed if not f.startswith(".")]
    per = res["destinations"][lab.fabric_ip(target)]
    assert per["files_transferred"] == SHARDS + 2 - len(finished), (finished, per)
    assert sums(lab, target, "/models/itest-k") == sums(lab, "spark-1", MODEL)
    # The partial files were continued: only the bytes still missing moved again.
    assert per["transport"] == "tcp" and per["bytes_resumed"] == staged, per
    total = int(lab.sh("spark-1", "cat %s/* | wc -c" % MODEL).stdout)
    done = int(lab.sh(target, "cd /models/itest-k && cat %s | wc -c" % " ".join(finished)).stdout) if finished else 0
    assert per["bytes_transferred"] == total - done - staged, (per, total, done, staged)


@pytest.mark.fault(name='truncated shard on the head', expected='refused before a byte moves, naming the shard')
def test_corrupt_shard_on_source_fails_before_copying(synclab):
    lab = synclab
    bad = "/models/itest-bad"
    lab.sh("spark-1", "rm -rf {b} && cp -a {m} {b} && truncate -s -100 {b}/model-00002-of-{n:05d}.safetensors"
            .format(b=bad, m=MODEL, n=SHARDS))
    for h in lab.workers:
        lab.sh(h, "rm -rf " + bad)
    r = play(lab, lab.dir, "sync.yml", src=bad, dest=bad)
    res = sync_result(r)
    assert r["status"] == "failed"
    assert "model-00002-of-%05d.safetensors" % SHARDS in res["msg"] and "truncated" in res["msg"]
    for h in lab.workers:
        assert lab.sh(h, "test -e " + bad).returncode == 1, "something was copied to %s" % h
    lab.sh("spark-1", "rm -rf " + bad)


def test_a_finished_worker_feeds_the_next_node_through_the_forwarded_agent(synclab):
    """Tree fan-out over real sshd: spark-1 pushes to spark-2, then spark-2 (holding no key file,
    only the forwarded per-run agent) feeds the next destination. With two lab hosts the next one
    is spark-1's own fabric IP, into another directory."""
    lab = synclab
    first, second = lab.fabric_ip(lab.workers[0]), lab.fabric_ip("spark-1")
    for h in lab.hosts:
        lab.sh(h, "rm -rf /models/itest-tree")
    r = play(lab, lab.dir, "sync.yml", src=MODEL, dest="/models/itest-tree", sync_destinations=[first, second])
    res = sync_result(r)
    assert r["status"] == "successful", res
    assert res["destinations"][first]["fed_from"] == "source"
    assert res["destinations"][second]["fed_from"] == first
    assert res["rounds"] == [[["source", first]], [[first, second]]]
    assert res["destinations"][second]["transport"] == "tcp"  # the worker ran the fixed sender, no rsync relay
    source = sums(lab, "spark-1", MODEL)
    assert sums(lab, lab.workers[0], "/models/itest-tree") == source
    assert sums(lab, "spark-1", "/models/itest-tree") == source
    # The worker holds no private key of the head's: the hop used the forwarded agent.
    assert "sparkfleet_sync" not in lab.sh(lab.workers[0], "ls -a /home/spark/.ssh").stdout
    # ... and the per-run agent is gone from the head.
    assert lab.sh("spark-1", "pgrep -u spark -x ssh-agent").returncode == 1


@pytest.mark.fault(name='model_sync dest / or a directory of other things, delete=true',
                   expected='refused before any copy; nothing on the worker changes')
@pytest.mark.parametrize("dest", ["/", "/srv/userdata"])
def test_refuses_a_destination_that_is_not_a_model_directory(synclab, dest):
    """Issue 11.1: `delete=true` into `/` or into a directory of other things must never run."""
    lab = synclab
    target = lab.workers[0]
    lab.sh(target, "mkdir -p /srv/userdata/photos && echo keep > /srv/userdata/notes.txt")
    before = {h: lab.sh(h, "ls -A / /srv/userdata | sha256sum").stdout for h in lab.workers}
    r = play(lab, lab.dir, "sync.yml", src=MODEL, dest=dest, delete=True)
    res = sync_result(r)
    assert r["status"] == "failed", res
    if dest == "/":
        assert "system directory /" in res["msg"] and "nothing was copied" in res["msg"], res["msg"]
    else:
        assert "is not a model directory" in res["msg"] and "notes.txt" in res["msg"], res["msg"]
    for h in lab.workers:
        assert lab.sh(h, "ls -A / /srv/userdata | sha256sum").stdout == before[h]
    assert lab.sh(target, "cat /srv/userdata/notes.txt").stdout.strip() == "keep"
    lab.sh(target, "rm -rf /srv/userdata")


# CI takes this path in the unit tests, on real processes: tests/unit/plugins/modules/test_model_sync.py::
# test_a_rerun_stops_the_transfer_left_running_by_a_killed_controller and tests/unit/plugins/module_utils/
# test_model_sync_run.py::test_a_second_taker_stops_the_holder_and_what_it_started; over ssh between lab hosts: long.
@pytest.mark.long
@pytest.mark.fault(name='controller killed mid-sync and re-run at once',
                   expected="the re-run stops the orphaned transfer first, then sends only what is missing; "
                            "the worker's copy is marked incomplete until then")
def test_a_rerun_stops_the_transfer_a_killed_controller_left_running(synclab, observe):
    """Issue 18.2: the orphaned sync of a killed controller and the re-run's collided in the staging directory."""
    lab = synclab
    target = lab.workers[0]
    lab.sh(target, "rm -rf /models/itest-o")
    # poll 0: the controller leaves the module running on the head, as when it is killed mid-sync.
    r = play(lab, lab.dir, "sync.yml", src=MODEL, dest="/models/itest-o", bwlimit=1024, sync_poll=0)
    assert r["status"] == "successful", r
    deadline = time.time() + 60
    while time.time() < deadline:
        n = lab.sh(target, "ls /models/itest-o 2>/dev/null | grep -c safetensors").stdout.strip()
        if n and int(n) >= 1:
            break
        time.sleep(0.2)
    state = lab.sh(target, "cat /models/itest-o/.sparkfleet-model").stdout
    assert "copy=incomplete" in state, state  # marked before the first byte, for status.yml
    orphan = lab.sh("spark-1", "pgrep -u spark -f 'receive /models/itest-o'").stdout.split()  # its ssh
    assert orphan, "the first run is not sending any more"
    landed = lab.sh(target, "cd /models/itest-o && ls").stdout.split()
    r = play(lab, lab.dir, "sync.yml", src=MODEL, dest="/models/itest-o")
    res = sync_result(r)
    assert r["status"] == "successful", res
    text = json.dumps(r["events"])
    warned = [w for w in re.findall(r"a transfer of an earlier run[^\"\\]*", text) if "was stopped" in w]
    assert warned, (sorted(res), res.get("warnings"), res.get("deprecations"))
    observe(warned[0])
    for pid in orphan:
        assert lab.sh("spark-1", "kill -0 %s" % pid).returncode != 0, "the orphaned sender still runs"
    assert sums(lab, target, "/models/itest-o") == sums(lab, "spark-1", MODEL)
    per = res["destinations"][lab.fabric_ip(target)]
    total = int(lab.sh("spark-1", "cat %s/* | wc -c" % MODEL).stdout)
    # No collision: the re-run sent at most what was not in place when it started, never a file twice.
    assert per["bytes_transferred"] <= total, per
    assert per["files_transferred"] <= SHARDS + 2 - len([f for f in landed if not f.startswith(".")]) + 1, per
    state = lab.sh(target, "cat /models/itest-o/.sparkfleet-model").stdout
    assert "copy=complete" in state and "verified=yes" in state, state
    assert res["verified"] is True
