"""The old stack back beside ours (issue 45, item 5): decided for us at boot, named by status.yml after it.

gpu_cleanup keeps the stale units and containers the run knew on each node (gpu_cleanup_record) and installs
sparkfleet-stale-stop, a oneshot our Ray unit wants and is ordered after, which stops them again. Before, an old unit
an operator enabled again won the boot race half the time and ran beside ours, holding GPU and unified memory, while
status.yml said "none found" and listed anonymous GPU holders. Needs a lab staged with the old stack (lab/stage.sh's
default; tests/integration/test_oldstack.py) and serving (the `serving` fixture).

The old unit used: vllm-embeddings on the head, a foreground `docker run` of the container vllm_embeddings (restart
policy unless-stopped) holding /dev/nvidia0 (lab/oldstack/vllm-embeddings.service).
"""

from __future__ import annotations

import json
import time

import pytest

pytestmark = pytest.mark.lab

HEAD = "spark-1"
RECORD = "/var/lib/sparkfleet/stale-stack.json"
OLD_UNIT, OLD_CONTAINER = "vllm-embeddings", "vllm_embeddings"


def _staged(lab):
    return lab.host_exec(HEAD, "test", "-f", "/etc/systemd/system/%s.service" % OLD_UNIT).returncode == 0


def _container(lab, name):
    """'running unless-stopped', or '' when the container does not exist."""
    return lab.host_exec(HEAD, "docker", "inspect", "-f", "{{.State.Status}} {{.HostConfig.RestartPolicy.Name}}",
                         name).stdout.strip()


def _guarded(lab, tmp_path):
    """gpu_cleanup run on the serving lab (a lab deployed before the record existed gets it now): the record names the
    old unit and its container, the guard is installed and our Ray wants it."""
    if not _staged(lab):
        pytest.skip("this lab was staged without the old stack (lab/stage.sh --clean)")
    r, failures = lab.play(tmp_path / "cleanup", "playbooks/gpu_cleanup.yml")
    assert r["status"] == "successful" and not failures, lab.messages(failures)[-2000:]
    record = json.loads(lab.host_exec(HEAD, "cat", RECORD).stdout)
    assert OLD_UNIT + ".service" in record["units"] and OLD_CONTAINER in record["containers"], record
    ray = lab.host_exec(HEAD, "systemctl", "cat", "sparkfleet-ray").stdout
    assert "Wants=sparkfleet-stale-stop.service" in ray and "After=sparkfleet-stale-stop.service" in ray, ray
    guard = lab.host_exec(HEAD, "systemctl", "cat", "sparkfleet-stale-stop").stdout
    assert "systemctl stop" in guard and OLD_UNIT + ".service" in guard and OLD_CONTAINER in guard, guard


def _put_back(lab):
    """The old unit stopped and disabled again, its container stopped without a restart policy (as gpu_cleanup
    leaves them: test_oldstack's assert_old_stack_gone_and_kept)."""
    lab.sh(HEAD, "systemctl disable --now %s; docker update --restart=no %s; docker stop -t 10 %s"
           % (OLD_UNIT, OLD_CONTAINER, OLD_CONTAINER), timeout=120)


def _reboot(lab, host, limit=600):
    lab.labctl("reboot", host, timeout=900, check=False)
    t0 = time.time()
    while time.time() - t0 < limit:
        if lab.systemctl(host, "is-active", "ssh") == "active":
            return
        time.sleep(3)
    pytest.fail("%s did not come back within %d s of its reboot" % (host, limit))


def _boot_journal(lab):
    """This boot's journal entries about the three units, oldest first: (monotonic µs, unit, JOB_TYPE, JOB_RESULT,
    message). PID 1's job messages carry UNIT; a unit's own output carries _SYSTEMD_UNIT."""
    out = lab.sh(HEAD, "journalctl -b -o json --no-pager -u sparkfleet-ray -u sparkfleet-stale-stop -u %s" % OLD_UNIT,
                 timeout=120).stdout
    rows = []
    for line in out.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        unit = e.get("UNIT") or e.get("_SYSTEMD_UNIT")
        rows.append((int(e["__MONOTONIC_TIMESTAMP"]), unit, e.get("JOB_TYPE"), e.get("JOB_RESULT"),
                     str(e.get("MESSAGE"))[:160]))
    return sorted(rows)


@pytest.mark.long  # a reboot of the head and the engine's start after it: ~5 min
@pytest.mark.fault(name="an old-stack unit enabled again (its container holds the GPU), then the head rebooted",
                   expected="at boot it is stopped (unit and container, restart policy off) before our Ray starts; "
                            "status.yml meanwhile never hides it; the cluster serves again")
def test_an_old_unit_back_at_boot_is_stopped_before_ours_start(lab, serving, tmp_path, observe):
    _guarded(lab, tmp_path)
    enabled = lab.host_exec(HEAD, "systemctl", "enable", OLD_UNIT)
    assert enabled.returncode == 0, enabled.stderr
    assert lab.systemctl(HEAD, "is-enabled", OLD_UNIT) == "enabled"
    try:
        _reboot(lab, HEAD)
        # status.yml while ours come up: honest about the old stack whatever the moment (named while its container
        # runs, never while it is stopped)
        before = _container(lab, OLD_CONTAINER)
        _ok, seen = lab.status(tmp_path / "status-booting")
        after = _container(lab, OLD_CONTAINER)
        if before.startswith("running") and after.startswith("running"):
            assert "an old stack runs beside ours" in seen and "container %s (running" % OLD_CONTAINER in seen, seen
        if not before.startswith("running") and not after.startswith("running"):
            assert "container %s (running" % OLD_CONTAINER not in seen, seen
        took = lab.wait_serving(600)
        rows = _boot_journal(lab)
        old_started = [t for t, u, job, res, _m in rows if u == OLD_UNIT + ".service" and job == "start"]
        old_stopped = [t for t, u, job, res, _m in rows if u == OLD_UNIT + ".service" and job == "stop" and res == "done"]
        guard_done = [t for t, u, job, res, _m in rows if u == "sparkfleet-stale-stop.service" and job == "start"
                      and res == "done"]
        ray_first = [t for t, u, _j, _r, _m in rows if u == "sparkfleet-ray.service"]
        shown = "\n".join("%d %s %s %s %s" % r for r in rows)[-3000:]
        assert old_started, "the old unit did not start at boot (enabled): nothing was raced\n" + shown
        assert guard_done and ray_first and old_stopped, shown
        # the old unit was stopped, and the guard finished, before anything of our Ray ran
        assert old_stopped[0] < ray_first[0] and guard_done[0] < ray_first[0], shown
        assert lab.systemctl(HEAD, "is-active", OLD_UNIT) != "active"
        state = _container(lab, OLD_CONTAINER)
        assert state.split() and state.split()[0] != "running" and state.split()[1] == "no", state
        # an operator's `enable` is theirs: the guard stops, it does not disable (the next site.yml does)
        ok, seen = lab.status(tmp_path / "status-serving")
        assert ok and "an old stack runs beside ours" not in seen, seen
        observe("old unit stopped %.1f s after boot start, guard done, our Ray first logged %.1f s in; serving "
                "%.0f s after ssh was back" % (old_stopped[0] / 1e6, ray_first[0] / 1e6, took))
    finally:
        _put_back(lab)


@pytest.mark.fault(name="an old-stack unit started by hand beside a serving deployment",
                   expected="status.yml names unit, container, what it holds and 'will stop at the next site.yml', "
                            "still exits 0 while ours serves")
def test_an_old_unit_started_after_boot_is_named_by_status(lab, serving, tmp_path, observe):
    _guarded(lab, tmp_path)
    try:
        assert lab.host_exec(HEAD, "systemctl", "start", OLD_UNIT).returncode == 0
        deadline = time.time() + 60
        while not _container(lab, OLD_CONTAINER).startswith("running"):
            assert time.time() < deadline, "the old container never ran: " + _container(lab, OLD_CONTAINER)
            time.sleep(1)
        ok, seen = lab.status(tmp_path / "status")
        assert ok, seen[-3000:]   # ours serves: the old stack is said on its own line, not as a failure
        assert "an old stack runs beside ours" in seen, seen[-3000:]
        assert "unit %s.service (active/running" % OLD_UNIT in seen
        assert "container %s (running, restart policy unless-stopped)" % OLD_CONTAINER in seen
        assert "It will stop at the next site.yml (gpu_cleanup) and before sparkfleet-ray's next start" in seen
        assert "it holds the GPU: pid " in seen and "in container %s" % OLD_CONTAINER in seen, seen[-3000:]
        # the GPU holders line names the container, not an anonymous pid
        assert "(container %s" % OLD_CONTAINER in seen
        start = seen.index("an old stack runs beside ours")
        observe(seen[start:start + 300])
    finally:
        _put_back(lab)
