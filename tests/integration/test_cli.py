"""`sparkfleet status -i <lab inventory>` from the control namespace, as a user runs it after a deploy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.lab


def sparkfleet(lab, tmp_path, *args, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(PYTHONPATH=str(lab.repo / "cli"), PATH="%s:%s" % (lab.repo / ".venv" / "bin", env.get("PATH", "")))
    return subprocess.run([str(lab.repo / "lab" / "labctl"), "ctl", "--", str(lab.repo / ".venv" / "bin" / "python"),
                           "-m", "sparkfleet_cli", *args, "--reports", str(tmp_path / "reports")],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=str(lab.repo))


def test_status_exit_0_names_every_node_and_keeps_the_event_log(lab, serving, tmp_path):
    p = sparkfleet(lab, tmp_path, "status", "-i", str(lab.inventory))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    out = p.stdout
    assert "status: done in" in out
    for host in lab.hosts:
        assert "  %s ok=" % host in out and "failed=0 unreachable=0" in out
    assert "no deploy report under %s" % (tmp_path / "reports") in out  # no deploy ran with these --reports
    # After a deploy's report, status prints its table (status.yml shows the same first).
    report = tmp_path / "reports" / "20260101T000000Z-site"
    report.mkdir()
    (report / "report.txt").write_text("sparkfleet report: site.yml successful in 3m38s\n  phase  spark-1\n")
    # a deploy's report names its inventory (report.json, as ansible-playbook had it: the real path)
    (report / "report.json").write_text(json.dumps({"inventory": [os.path.realpath(str(lab.inventory))]}))
    (tmp_path / "reports" / "latest").symlink_to(report.name)
    p = sparkfleet(lab, tmp_path, "status", "-i", str(lab.inventory))
    assert p.returncode == 0 and "last deploy (%s):\nsparkfleet report: site.yml successful" % report in p.stdout, \
        p.stdout[-3000:]
    # another inventory's report is never shown as this cluster's (issue 41.13)
    (report / "report.json").write_text(json.dumps({"inventory": ["/elsewhere/inventory"]}))
    p2 = sparkfleet(lab, tmp_path, "status", "-i", str(lab.inventory))
    assert "is of another inventory (/elsewhere/inventory), not shown" in p2.stdout, p2.stdout[-3000:]
    assert "sparkfleet report: site.yml successful" not in p2.stdout
    log = out.strip().splitlines()[-1]
    assert log.startswith("events: ")
    events = [json.loads(line) for line in open(log[len("events: "):])]
    assert events[-1]["event"] == "playbook_on_stats"
    assert {e["event_data"].get("host") for e in events if e["event"] == "runner_on_ok"} >= set(lab.hosts)


def test_status_unreachable_head_exits_3_with_a_hint(lab, tmp_path):
    inv = tmp_path / "inventory"
    shutil.copytree(lab.inventory, inv)
    head = inv / "host_vars" / "spark-1.yml"
    head.write_text(head.read_text().replace("ansible_host: 10.99.0.11", "ansible_host: 10.99.0.99"))
    p = sparkfleet(lab, tmp_path, "status", "-i", str(inv))
    assert p.returncode == 3, p.stdout[-3000:]
    assert "FAILED: unreachable on spark-1" in p.stderr   # errors go to stderr (issue 19.6)
    assert "hint: check ssh to spark-1" in p.stderr
