"""The sparkfleet.vllm.report callback in a real ansible-playbook run (localhost, no lab) and its pure helpers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _report

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BIN = os.path.dirname(sys.executable)

# Two "nodes" (local connection), plays tagged like site.yml's thin plays, one module result the report reads,
# the healthcheck's set_stats, and a failure that is ignored (not the run's failure).
PLAYBOOK = """
- name: Preflight
  hosts: nodes
  gather_facts: false
  tags: [preflight, always]
  tasks:
    - name: Check
      ansible.builtin.command: sleep 0.3
      changed_when: false
    - name: A failure that is ignored
      ansible.builtin.command: "false"
      changed_when: false
      ignore_errors: true

- name: Sync the model
  hosts: nodes
  gather_facts: false
  tags: [model_sync]
  tasks:
    - name: Pretend model_sync (a debug with its return fields is read the same way)
      ansible.builtin.set_fact:
        _x: 1
    - name: Sleep on the worker only
      ansible.builtin.command: sleep 1
      changed_when: false
      when: inventory_hostname == 'n2'

- name: Health check
  hosts: n1
  gather_facts: false
  tags: [healthcheck]
  tasks:
    - name: Publish
      ansible.builtin.set_stats:
        data:
          sparkfleet:
            endpoint: http://10.99.0.11:30000
            model: sparklab/tiny-moe
            tokens_per_s: 41.5
            versions: {vllm: 0.17.1, ray: 2.53.0, image: "sparklab/vllm-runtime:x"}
        per_host: false
"""


def run_playbook(tmp_path, name, playbook, extra_env=None):
    (tmp_path / name).write_text(playbook)
    (tmp_path / "hosts.yml").write_text(
        "nodes:\n  hosts:\n    n1: {ansible_connection: local, ansible_python_interpreter: %s}\n"
        "    n2: {ansible_connection: local, ansible_python_interpreter: %s}\n" % (sys.executable, sys.executable))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update({"ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "SPARKFLEET_REPORT_DIR": str(tmp_path / "reports"),
                "ANSIBLE_CALLBACKS_ENABLED": "sparkfleet.vllm.report", "ANSIBLE_NOCOLOR": "1"})
    env.update(extra_env or {})
    return subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), name],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=180, check=False)


@pytest.fixture(scope="module")
def deploy_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    p = run_playbook(tmp, "site.yml", PLAYBOOK)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return tmp, p


def test_report_written_for_the_deploy_with_phases_per_node(deploy_run):
    tmp, p = deploy_run
    latest = tmp / "reports" / "latest"
    report = json.loads((latest / "report.json").read_text())
    assert report["playbook"] == "site.yml" and report["status"] == "successful"
    assert [r["phase"] for r in report["phases"]["n1"]] == ["preflight", "model_sync", "healthcheck"]
    assert [r["phase"] for r in report["phases"]["n2"]] == ["preflight", "model_sync"]
    n2_sync = report["phases"]["n2"][1]
    assert n2_sync["seconds"] >= 0.9 and n2_sync["start_s"] >= report["phases"]["n2"][0]["end_s"] - 0.01
    assert all(r["status"] == "ok" for rows in report["phases"].values() for r in rows)  # ignored failure
    assert report["failure"] is None
    assert report["tokens_per_s"] == 41.5 and report["versions"]["ray"] == "2.53.0"
    # The table is printed at the end, with the directory it went to.
    assert "sparkfleet report: site.yml successful" in p.stdout
    assert "sparkfleet report: %s" % os.path.realpath(latest) in p.stdout
    assert (latest / "timeline.png").stat().st_size > 10000


def test_status_prints_the_latest_report_table(deploy_run):
    tmp, _p = deploy_run
    # status.yml's first play reads the table from the same directory (its other plays need the cluster).
    (tmp / "status_only.yml").write_text("- name: Status\n  ansible.builtin.import_playbook: %s\n"
                                         % os.path.join(ROOT, "playbooks", "status.yml"))
    (tmp / "head.yml").write_text("spark_head:\n  hosts:\n    n1: {ansible_connection: local, ansible_python_interpreter: %s}\n"
                                  % sys.executable)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), SPARKFLEET_REPORT_DIR=str(tmp / "reports"),
               ANSIBLE_NOCOLOR="1")
    # Only the first play matters here (the cluster's plays fail without a cluster, after it).
    r = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(tmp / "head.yml"), "status_only.yml"],
                       cwd=str(tmp), env=env, capture_output=True, text=True, timeout=180, check=False)
    out = r.stdout
    assert "sparkfleet report: site.yml successful" in out, out[-3000:]
    assert "model_sync" in out and "41.5 tokens/s" in out


def test_no_report_for_other_playbooks(tmp_path):
    p = run_playbook(tmp_path, "stop.yml", PLAYBOOK)
    assert p.returncode == 0
    assert not (tmp_path / "reports").exists()


def test_a_failed_deploy_names_the_failure_in_the_report(tmp_path):
    failing = PLAYBOOK.replace("ansible.builtin.command: sleep 1", "ansible.builtin.fail: {msg: worker disk full}")
    p = run_playbook(tmp_path, "site.yml", failing)
    assert p.returncode != 0
    report = json.loads((tmp_path / "reports" / "latest" / "report.json").read_text())
    assert report["status"] == "failed"
    assert report["failure"]["host"] == "n2" and report["failure"]["phase"] == "model_sync"
    assert report["failure"]["msg"] == "worker disk full"
    assert [r["status"] for r in report["phases"]["n2"]] == ["ok", "failed"]
    assert "failed: Sleep on the worker only on n2" in p.stdout


def test_phase_of_prefers_the_play_tag_then_role_then_play():
    assert _report.phase_of(["runtime_image", "always"], "sparkfleet.vllm.vllm_serve", "x") == "runtime_image"
    assert _report.phase_of(["always"], "sparkfleet.vllm.vllm_serve", "Restart") == "vllm_serve"
    assert _report.phase_of(["always"], None, "Deployment lock", "sparkfleet.vllm.run_lock") == "run_lock"
    assert _report.phase_of([], None, "Deployment lock") == "Deployment lock"
    assert _report.phase_of([], None, "Restart vLLM", "ansible.builtin.include_role") is None


def test_capture_keeps_only_known_fields_and_skips_hidden_results():
    got = _report.capture("sparkfleet.vllm.model_sync", {"mb_per_s": 612.5, "bytes_transferred": 10, "rounds": []})
    assert got == ("model_sync", {"mb_per_s": 612.5, "bytes_transferred": 10})
    assert _report.capture("sparkfleet.vllm.model_sync", {"censored": "hidden"}) is None
    assert _report.capture("ansible.builtin.uri", {"json": {}}) is None


def test_table_and_chart_from_a_report(tmp_path):
    class Clock(object):
        t = 1000.0

        def __call__(self):
            return self.t

    now = Clock()
    clock = _report.PhaseClock(now=now)
    for phase, secs in (("preflight", 4), ("runtime_image", 30), ("gpu_cleanup", 3), ("model_sync", 190),
                        ("ray_cluster", 25), ("vllm_serve", 130), ("healthcheck", 6)):
        for host in ("spark-1", "spark-2"):
            if phase in ("vllm_serve", "healthcheck") and host == "spark-2":
                continue
            clock.start(host, phase)
        now.t += secs
        for host in ("spark-1", "spark-2"):
            if phase in ("vllm_serve", "healthcheck") and host == "spark-2":
                continue
            clock.result(host, phase, "ok")
    captured = {"model_sync": {"bytes_transferred": 119e9, "transfer_seconds": 190.0, "mb_per_s": 626.3}}
    stats = {"sparkfleet": {"tokens_per_s": 27.1, "model": "m", "endpoint": "http://h:30000"}}
    report = _report.build("site.yml", clock, captured, stats, {}, None, now=now)
    lines = _report.table(report)
    assert lines[0].startswith("sparkfleet report: site.yml successful in 6m28s")
    assert any(ln.split()[:2] == ["model_sync", "3m10s"] for ln in lines), lines
    assert any("119000.0 MB in 3m10s (626.3 MB/s)" in ln for ln in lines)
    written = _report.write(report, str(tmp_path / "r"))
    assert os.path.getsize(written["chart"]) > 10000
