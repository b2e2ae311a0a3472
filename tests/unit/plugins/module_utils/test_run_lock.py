"""The deployment lock: who may take it, and the shell that takes it atomically on the head."""

from __future__ import annotations

import json
import subprocess

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils._run_lock import (
    acquire_script,
    decide,
    lock_record,
    parse_lock,
    refusal_message,
    release_script,
    takeover_script,
)

ME = lock_record("ctl-a", 200, "ctl-a-200-x", 1000.0, "site.yml")


def alive(*pids):
    return lambda pid: pid in pids


@pytest.mark.parametrize("holder, pids, verdict, why", [
    (None, (), "take", "free"),
    (ME, (), "take", "ours"),
    (lock_record("ctl-a", 150, "t1", 900.0), (150,), "refuse", "running ansible-playbook on this controller"),
    (lock_record("ctl-a", 150, "t1", 900.0), (), "take", "pid 150 on ctl-a) has ended"),
    (lock_record("awx-job-7", 9, "t2", 990.0), (), "refuse", "another controller"),
    (lock_record("awx-job-7", 9, "t2", 990.0 - 3600), (), "take", "longer than 3600 s"),
])
def test_decide(holder, pids, verdict, why):
    got, reason = decide(holder, ME, 1000.0, 3600, alive(*pids))
    assert got == verdict and why in reason


@pytest.mark.parametrize("text", ["", "garbage", "[]", '{"pid": 3}', '{"token": ""}'])
def test_torn_or_foreign_lock_text_counts_as_free(text):
    assert parse_lock(text) is None


def test_refusal_names_holder_and_ways_out():
    msg = refusal_message("spark-1", "/run/sparkfleet/deploy.lock", lock_record("awx-job-7", 9, "t", 940.0, "Deploy"),
                          1000.0, 3600)
    for part in ("spark-1", "awx-job-7", "pid 9", "Deploy", "60 s ago", "3600 s", "remove /run/sparkfleet/deploy.lock"):
        assert part in msg


def _sh(script):
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout


def test_scripts_take_once_refuse_the_second_and_release_only_their_own(tmp_path):
    path = str(tmp_path / "run" / "deploy.lock")
    first = json.dumps(lock_record("ctl-a", 1, "tok-1", 1.0))
    second = json.dumps(lock_record("ctl-b", 2, "tok-2", 2.0))
    assert _sh(acquire_script(path, first)).startswith("ACQUIRED")
    out = _sh(acquire_script(path, second))
    assert out.startswith("HELD") and parse_lock(out.partition("\n")[2])["token"] == "tok-1"
    assert (tmp_path / "run" / "deploy.lock").stat().st_mode & 0o077 == 0
    # Not ours: stays.
    assert _sh(release_script(path, "tok-2")).startswith("NOT_OURS")
    # Compare-and-swap: a takeover based on an outdated view fails; on the current one it succeeds.
    assert _sh(takeover_script(path, "something else", second)).startswith("HELD")
    assert _sh(takeover_script(path, first, second)).startswith("ACQUIRED")
    assert parse_lock(open(path).read())["token"] == "tok-2"
    assert _sh(release_script(path, "tok-2")).startswith("RELEASED")
    assert not (tmp_path / "run" / "deploy.lock").exists()


def test_the_run_token_is_the_same_in_every_task_fork():
    """Each task runs in a fresh fork of ansible-playbook: the token must not live in a task's memory."""
    import os
    from ansible_collections.sparkfleet.vllm.plugins.action import run_lock as action

    first = action._run_identity()
    child = os.fork()
    if child == 0:  # a second "task": a new fork of the same parent
        os._exit(0 if action._run_identity() == first else 1)
    _pid, status = os.waitpid(child, 0)
    assert os.WEXITSTATUS(status) == 1  # the child's parent is this process, not ours: another run
    # Two forks of this process agree with each other.
    results = []
    for _i in range(2):
        r, w = os.pipe()
        child = os.fork()
        if child == 0:
            os.write(w, repr(action._run_identity()).encode())
            os._exit(0)
        os.close(w)
        os.waitpid(child, 0)
        results.append(os.read(r, 4096))
        os.close(r)
    assert results[0] == results[1] and str(os.getpid()).encode() in results[0]
