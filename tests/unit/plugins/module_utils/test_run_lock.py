"""The deployment lock: who may take it, and the shell that takes it atomically on the head."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.host._run_lock import (
    acquire_script,
    beat_interval,
    decide,
    heartbeat_loop,
    heartbeat_script,
    lock_record,
    parse_held,
    parse_lock,
    refusal_message,
    release_script,
    takeover_message,
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


# The lock's states as another controller finds them: (holder, seconds since its last heartbeat on the head).
OTHER = lock_record("awx-job-7", 9, "t2", 400.0, "Deployment lock on the head", ttl=300)


@pytest.mark.parametrize("holder, beat_age, pids, verdict, why", [
    # fresh: nobody holds it
    (None, None, (), "take", "free"),
    # a live holder on another controller: its run refreshed the lock recently, whatever the lock's age
    (OTHER, 12, (), "refuse", "refreshed it 12 s ago"),
    (OTHER, 300, (), "refuse", "refreshed it 300 s ago"),
    # a dead holder on another controller: no heartbeat for longer than the TTL it stated
    (OTHER, 301, (), "take", "no heartbeat from awx-job-7 for 301 s, longer than the 300 s its run promised"),
    # a dead holder on this controller: its process is gone, however fresh its heartbeat
    (lock_record("ctl-a", 150, "t1", 990.0, ttl=300), 2, (), "take", "ansible-playbook process is gone"),
    (lock_record("ctl-a", 150, "t1", 990.0, ttl=300), 2, (150,), "refuse", "on this controller"),
    # stale, from before heartbeats (no TTL): only its age against the timeout counts
    (lock_record("awx-job-7", 9, "t2", 990.0), 5000, (), "refuse", "another controller"),
    (lock_record("awx-job-7", 9, "t2", 990.0 - 3601), 1, (), "take", "longer than 3600 s"),
    # a TTL but no heartbeat age read (an old head script): judged by age, never taken early
    (OTHER, None, (), "refuse", "another controller"),
])
def test_decide_on_the_lock_states(holder, beat_age, pids, verdict, why):
    got, reason = decide(holder, ME, 1000.0, 3600, alive(*pids), beat_age)
    assert (got, why in reason) == (verdict, True), reason


def test_takeover_message_names_who_held_it_since_when_and_why_it_is_safe():
    why = decide(OTHER, ME, 1000.0, 3600, alive(), 900)[1]
    msg = takeover_message("spark-1", "/run/sparkfleet/deploy.lock", OTHER, why)
    for part in ("spark-1", "took over", "/run/sparkfleet/deploy.lock", "awx-job-7", "pid 9",
                 "Deployment lock on the head", "since %s" % time.strftime("%H:%M UTC", time.gmtime(400.0)),
                 "no heartbeat from awx-job-7 for 900 s", "dead", "goes on"):
        assert part in msg, (part, msg)


def test_refusal_of_a_live_holder_says_when_it_last_refreshed_and_when_it_would_be_taken_over():
    msg = refusal_message("spark-1", "/run/sparkfleet/deploy.lock", OTHER, 1000.0, 3600, 40)
    for part in ("spark-1", "another deployment is running", "awx-job-7", "pid 9", "refreshed the lock 40 s ago",
                 "300 s after its last refresh", "remove /run/sparkfleet/deploy.lock on spark-1"):
        assert part in msg, (part, msg)


@pytest.mark.parametrize("ttl, interval", [(300, 50), (30, 5), (60, 10), (3600, 600)])
def test_the_heartbeat_comes_several_times_per_ttl(ttl, interval):
    assert beat_interval(ttl) == interval


@pytest.mark.parametrize("text, want", [
    ("17\n{\"token\": \"t\"}", (17, '{"token": "t"}')),
    ("", (None, "")),
    ('{"token": "t"}', (None, '{"token": "t"}')),   # a head that printed no age: the text is the lock
])
def test_parse_held(text, want):
    assert parse_held(text) == want


class FakeClock(object):
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def test_heartbeat_loop_beats_while_the_run_lives_then_releases_a_lock_the_run_left():
    clock, beats, released = FakeClock(), [], []
    alive_until = 95.0
    why = heartbeat_loop(lambda: beats.append(clock.t) or "BEAT", lambda: clock.t < alive_until,
                         lambda: released.append(clock.t), 30, sleep=clock.sleep, clock=clock)
    assert why == "released" and released == [95.0]
    assert beats == [30.0, 60.0, 90.0]


def test_heartbeat_loop_stops_once_the_lock_is_no_longer_ours_and_survives_a_failed_beat():
    clock, calls = FakeClock(), []

    def beat():
        calls.append(clock.t)
        if len(calls) == 1:
            raise RuntimeError("ssh: connect to host spark-1 port 22: Connection timed out")
        return "GONE" if len(calls) == 3 else "BEAT"

    why = heartbeat_loop(beat, lambda: True, lambda: pytest.fail("released a lock that is not ours"), 10,
                         sleep=clock.sleep, clock=clock)
    assert why == "gone" and calls == [10.0, 20.0, 30.0]


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
    age, text = parse_held(out.partition("\n")[2])
    assert out.startswith("HELD") and parse_lock(text)["token"] == "tok-1" and 0 <= age <= 5
    assert (tmp_path / "run" / "deploy.lock").stat().st_mode & 0o077 == 0
    # Not ours: stays.
    assert _sh(release_script(path, "tok-2")).startswith("NOT_OURS")
    # Compare-and-swap: a takeover based on an outdated view fails; on the current one it succeeds.
    assert _sh(takeover_script(path, "something else", second)).startswith("HELD")
    # A takeover judged on a stale heartbeat fails when a heartbeat came since (the lock is younger than the TTL).
    assert _sh(takeover_script(path, first, second, 300)).startswith("HELD")
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


def test_heartbeat_refreshes_only_our_lock_and_a_stale_one_is_taken_over(tmp_path):
    path = str(tmp_path / "deploy.lock")
    first = json.dumps(lock_record("ctl-a", 1, "tok-1", 1.0, ttl=300))
    second = json.dumps(lock_record("ctl-b", 2, "tok-2", 2.0, ttl=300))
    assert _sh(acquire_script(path, first)).startswith("ACQUIRED")
    os.utime(path, (time.time() - 1000, time.time() - 1000))   # its controller died 1000 s ago
    age, text = parse_held(_sh(acquire_script(path, second)).partition("\n")[2])
    assert age >= 1000
    assert decide(parse_lock(text), json.loads(second), time.time(), 3600, alive(), age)[0] == "take"
    assert _sh(heartbeat_script(path, "tok-2")).startswith("GONE")         # not ours: untouched
    assert time.time() - os.stat(path).st_mtime >= 1000
    assert _sh(takeover_script(path, text, second, 300)).startswith("ACQUIRED")
    assert _sh(heartbeat_script(path, "tok-1")).startswith("GONE")         # the dead run's beat finds it taken
    os.utime(path, (time.time() - 100, time.time() - 100))
    before = os.stat(path).st_mtime
    assert _sh(heartbeat_script(path, "tok-2")).startswith("BEAT")
    assert os.stat(path).st_mtime > before                                 # our beat moved it on


def test_the_detached_heartbeat_releases_the_lock_when_the_run_dies(tmp_path):
    """The process run_lock leaves on the controller: it outlives the task, refreshes the lock while the run's
    process lives and removes the lock once that process is gone (a failed run never reaches its release play)."""
    from ansible_collections.sparkfleet.vllm.plugins.action import run_lock as action

    path = str(tmp_path / "deploy.lock")
    beats = tmp_path / "beats"

    class Task(object):
        def _sh(self, script):
            with open(str(beats), "a") as handle:
                handle.write("x")
            return _sh(script).strip()

    run = subprocess.Popen(["sleep", "60"])
    try:
        assert _sh(acquire_script(path, json.dumps(lock_record("ctl-a", run.pid, "tok-1", 1.0, ttl=30))))\
            .startswith("ACQUIRED")
        action.ActionModule._heartbeat(Task(), path, "tok-1", run.pid, action._start_time(run.pid), 1)
        deadline = time.time() + 20
        while time.time() < deadline and not (beats.exists() and len(beats.read_text()) >= 2):
            time.sleep(0.2)
        assert len(beats.read_text()) >= 2 and os.path.exists(path), "no heartbeat while the run lives"
    finally:
        run.kill()
        run.wait()
    deadline = time.time() + 20
    while time.time() < deadline and os.path.exists(path):
        time.sleep(0.2)
    assert not os.path.exists(path), "the lock of a dead run stayed"
