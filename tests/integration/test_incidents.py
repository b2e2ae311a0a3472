"""Issue 39.6: a hang caught with its evidence.

`labctl break collective-hang spark-2` makes the next request step hang as two-Spark TP=2 engines hang (vllm#42354): the
worker's rank spins at 100 % CPU outside the collective, the head's rank waits in its all-reduce, /health keeps
answering 200 and no token comes back (lab/standin/sparklab_vllm/hang.py). The head's liveness timer must save an
incident before it restarts the engine: the stacks of both nodes' ranks, their environment without secrets, each
node's journal, memory, process table and dmesg, and a cause read from the stacks; then the engine serves again and
status.yml names the incident and fetches it. About three minutes: `long`.
    SPARKLAB_NAME=x SPARKLAB_KEEP_LAB=1 lab/labctl ctl -- .venv/bin/pytest tests/integration/test_incidents.py -m lab
"""

from __future__ import annotations

import json
import threading
import time

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.long]

HEAD = "spark-1"
LOG = "/var/lib/sparkfleet/watchdog/supervision.log"
INCIDENTS = "/var/lib/sparkfleet/incidents"


def restarts_since(lab, since):
    out = lab.sh(HEAD, "cat %s 2>/dev/null || true" % LOG).stdout
    rows = []
    for line in out.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("time", 0) >= since and entry.get("event") == "restart" and entry.get("unit") == "sparkfleet-vllm":
            rows.append(entry)
    return rows


@pytest.mark.fault(name="collective hang: the worker's rank spins, the head's waits in all_reduce, /health answers 200",
                   expected="the liveness timer saves an incident on the head (both nodes' stacks, env without "
                            "secrets, journals, memory, ps, dmesg; cause 'collective hang: spark-2 rank 1 spinning "
                            "in ..., spark-1 rank 0 waiting in all_reduce'), restarts the engine, which serves again; "
                            "status.yml names the incident and fetches it")
def test_a_collective_hang_is_saved_with_its_stacks_before_the_restart(lab, serving, tmp_path, observe):
    worker = lab.hosts[1]
    assert lab.serves(), "the lab does not serve before the fault"
    t0 = time.time()
    lab.labctl("break", "collective-hang", worker)
    try:
        hung = {}
        # the request that hangs: it never completes while the ranks hang (the restart ends it)
        th = threading.Thread(target=lambda: hung.update(r=lab.completion("hang", timeout=40)), daemon=True)
        th.start()
        time.sleep(8)
        code, _body = lab.api("/health", key=False, timeout=10)
        assert code == 200, "/health must keep answering while the ranks hang (got %r)" % code
        th.join(60)
        assert hung.get("r", (None,))[0] != 200, "the request completed although the ranks hang: %r" % hung
        saved = lab.wait_for(lambda: any(e.get("incident") for e in restarts_since(lab, t0)), 300, step=5)
        assert saved is not None, ("no restart with an incident within 300 s of the hang: %s"
                                   % restarts_since(lab, t0))
        entry = [e for e in restarts_since(lab, t0) if e.get("incident")][0]
        d = entry["incident"]
        observe("restart %.0f s after the hang: %s" % (entry["time"] - t0, entry["cause"][:220]))
        assert d.startswith(INCIDENTS + "/") and d.endswith("-collective-hang"), entry
        cause = lab.sh(HEAD, "cat %s/cause.txt" % d).stdout.strip()
        assert cause.startswith("collective hang: "), cause
        assert "%s rank 1 spinning in " % worker in cause and "spin_barrier" in cause, cause
        assert "%s rank 0 waiting in all_reduce" % HEAD in cause, cause
        assert cause in entry["cause"], entry
        summary = json.loads(lab.sh(HEAD, "cat %s/incident.json" % d).stdout)
        assert summary["nodes"] == {HEAD: "captured", worker: "captured"}, summary
        stacks = {h: lab.sh(HEAD, "cat %s/%s/stacks.txt" % (d, h)).stdout for h in (HEAD, worker)}
        # py-spy's dumps of the ranks: the worker's spinning outside the collective, the head's inside it
        assert "Thread " in stacks[worker] and "spin_barrier" in stacks[worker], stacks[worker][-3000:]
        assert "RayWorkerWrapper" in stacks[HEAD] and "all_reduce" in stacks[HEAD], stacks[HEAD][-3000:]
        for h in (HEAD, worker):
            files = lab.sh(HEAD, "cd %s/%s && ls" % (d, h)).stdout.split()
            for f in ("stacks.txt", "env.txt", "memory.txt", "ps.txt", "dmesg.txt", "journal-sparkfleet-ray.txt"):
                assert f in files, (h, files)
            assert "MemTotal" in lab.sh(HEAD, "cat %s/%s/memory.txt" % (d, h)).stdout
        env = lab.sh(HEAD, "cat %s/*/env.txt" % d).stdout
        assert "RAY_" in env or "NCCL_" in env, env[:2000]
        everything = lab.sh(HEAD, "cat -v %s/*/* %s/*.* 2>/dev/null" % (d, d), timeout=60).stdout
        assert lab.api_key() not in everything, "the API key is in the incident"
        assert "VLLM_API_KEY" not in env
        size = int(lab.sh(HEAD, "du -sk %s | cut -f1" % d).stdout.strip())
        assert size < 4096, "the incident holds %d KiB" % size
        observe("incident %s (%d KiB): %s" % (d.rsplit("/", 1)[-1], size, cause))
        back = lab.wait_serving(300)
        observe("API back %.0f s after the hang" % (time.time() - t0))
        assert back is not None
    finally:
        lab.labctl("fix", "collective-hang", worker, check=False)
    reports = tmp_path / "reports"
    r, _failures = lab.play(tmp_path / "status", "playbooks/status.yml",
                            envvars={"SPARKFLEET_REPORT_DIR": str(reports)})
    seen = json.dumps([e.get("res") for e in r["events"] if e["host"] == HEAD])
    name = d.rsplit("/", 1)[-1]
    assert "newest incident: %s" % name in seen and "collective hang: " in seen, seen[-3000:]
    fetched = reports / "incidents" / HEAD / name
    assert (fetched / "cause.txt").read_text().strip() == cause
    assert "spin_barrier" in (fetched / worker / "stacks.txt").read_text()
