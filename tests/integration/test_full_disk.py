"""Issue 45, item 2: a full disk on the head never switches self-healing off, and is named.

The head's /var/lib/sparkfleet (the supervision log, the deploy's state) is made a 4 MiB filesystem and filled to the
last block, then the engine is paused (it answers /health and generates nothing). The liveness timer must still restart
it (its counters live in /run; the supervision log is best effort), status.yml must name the space left there, and
preflight must warn below preflight_min_free_mb naming the variables. Before: both watchdogs died every 15 s with
ENOSPC and the hung engine was never restarted.
    SPARKLAB_KEEP_LAB=1 lab/labctl ctl -- .venv/bin/pytest tests/integration/test_full_disk.py -m lab
"""

from __future__ import annotations

import json
import time

import pytest

pytestmark = pytest.mark.lab

HEAD = "spark-1"
STATE = "/var/lib/sparkfleet"
UNIT = "sparkfleet-vllm"
# A small filesystem over the state directory, holding what was there (Ray's directory, bind-mounted into its running
# container before, stays where the container has it; a copy of the rest keeps the deploy's state readable).
FILL = ("set -e; d=$(mktemp -d /run/sparklab-fulldisk.XXXXXX); cp -a %(s)s/. $d/ 2>/dev/null || true; "
        "mount -t tmpfs -o size=4m sparklab-fulldisk %(s)s; "
        "for f in $(ls -A $d); do [ \"$f\" = ray ] || cp -a \"$d/$f\" %(s)s/ 2>/dev/null || true; done; mkdir -p %(s)s/ray; "
        "dd if=/dev/zero of=%(s)s/.ballast bs=64k 2>/dev/null || true; rm -rf $d; df -P -B1K %(s)s | tail -n 1"
        % {"s": STATE})


@pytest.mark.long
@pytest.mark.fault(name="the head's disk full where we write (/var/lib/sparkfleet: 0 bytes left), then the engine"
                        " paused",
                   expected="the liveness timer still restarts the hung engine; status.yml names the space left there;"
                            " preflight warns below preflight_min_free_mb naming the variables; once space is back the"
                            " API answers with no human step")
def test_a_full_disk_on_the_head_keeps_self_healing_on_and_is_named(lab, serving, tmp_path, observe):
    assert lab.serves(), "the lab does not serve before the fault"
    df = lab.sh(HEAD, FILL).stdout.split()
    assert df and df[3] == "0", df               # not a block left
    try:
        paused_run = lab.systemctl(HEAD, "show", "-p", "InvocationID", "--value", UNIT)
        t0 = time.time()
        lab.labctl("break", "engine-pause", HEAD)
        ok, seen = lab.status(tmp_path / "full")
        assert "MB free on /var/lib/sparkfleet" in seen or "0 MB free" in seen, seen[-3000:]
        # the watchdog acts with no space to write: it restarts the hung engine (whether the new engine can start on
        # a full disk is the engine's affair: Ray's driver writes its session logs there too)
        acted = lab.wait_for(lambda: lab.systemctl(HEAD, "show", "-p", "InvocationID", "--value", UNIT)
                             not in (paused_run, ""), 300)
        assert acted is not None, "the hung engine was not restarted within 300 s with the head's disk full"
        observe("disk full (0 bytes left on %s): the paused engine restarted %.0f s after the pause"
                % (STATE, time.time() - t0))
        failed = lab.sh(HEAD, "systemctl --failed --no-legend 'sparkfleet-*' || true").stdout.strip()
        assert failed == "", failed               # no watchdog of ours died of ENOSPC
        r, _failures = lab.play(tmp_path / "preflight", "playbooks/preflight.yml")
        warned = [w for e in r["events"] if e["event"] == "runner_on_ok" and e.get("host") == HEAD
                  for w in (e.get("res") or {}).get("warnings") or []]
        said = [w for w in warned if "MiB free on the filesystem of %s" % STATE in w]
        assert said, json.dumps(warned)[:3000]
        assert "sparkfleet_ray_tmp_dir" in said[0] and "1024 MiB floor" in said[0], said
        observe("preflight: " + said[0][:200])
    finally:
        lab.labctl("fix", "engine-pause", HEAD, check=False)
        lab.sh(HEAD, "umount %s || umount -l %s" % (STATE, STATE))
    assert lab.sh(HEAD, "findmnt -n %s || true" % STATE).stdout.strip() == ""
    t1 = time.time()
    back = lab.wait_for(lambda: lab.serves(timeout=10), 300)
    assert back is not None, "the API did not answer within 300 s of the space coming back, with no human step"
    observe("space back: serving %.0f s later, no human step" % (time.time() - t1))
    ok, seen = lab.status(tmp_path / "after")
    assert ok, seen[-3000:]
