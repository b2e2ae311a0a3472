"""The sparkfleet.vllm.report callback in a real ansible-playbook run (localhost, no lab) and its pure helpers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _report
from ansible_collections.sparkfleet.vllm.tests.unit.support.playbook import run_playbook as run_ansible_playbook

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


def run_playbook(tmp_path, name, playbook, extra_env=None, args=()):
    (tmp_path / name).write_text(playbook)
    (tmp_path / "hosts.yml").write_text(
        "nodes:\n  hosts:\n    n1: {ansible_connection: local, ansible_python_interpreter: %s}\n"
        "    n2: {ansible_connection: local, ansible_python_interpreter: %s}\n"
        "spark:\n  children:\n    spark_head:\n      hosts:\n        n1:\n" % (sys.executable, sys.executable))
    return run_ansible_playbook(name, *args, inventory=tmp_path / "hosts.yml", cwd=tmp_path,
                                report_dir=tmp_path / "reports",
                                env=dict({"ANSIBLE_CALLBACKS_ENABLED": "sparkfleet.vllm.report"}, **(extra_env or {})))


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


def test_the_report_counts_node_round_trips_per_node(deploy_run):
    tmp, p = deploy_run
    report = json.loads((tmp / "reports" / "latest" / "report.json").read_text())
    # n1: the check and the ignored failure (set_fact and set_stats stay on the controller); n2: those and its sleep.
    assert report["round_trips"] == {"n1": 2, "n2": 3}
    assert "node round trips: n1 2, n2 3 (5 in all)" in p.stdout


@pytest.mark.parametrize("action,looped,result,expected", [
    ("ansible.builtin.command", False, {"rc": 0}, ("n1", 1)),
    ("ansible.builtin.set_fact", False, {"ansible_facts": {}}, ("n1", 0)),
    ("sparkfleet.vllm.node_facts", False, {"skipped": True}, ("n1", 0)),
    ("ansible.builtin.stat", True, {"results": [{"stat": {}}, {"skipped": True}, {"stat": {}}]}, ("n1", 2)),
    # a wait that polls itself (plugins/plugin_utils/_poll.py): each poll ran its module on the node
    ("sparkfleet.vllm.vllm_wait", False, {"ready": True, "polls": 7}, ("n1", 7)),
    ("sparkfleet.vllm.vllm_wait", False, {"ready": True, "polls": True}, ("n1", 1)),
    ("ansible.builtin.uri", False, {"_ansible_delegated_vars": {"ansible_delegated_host": "n2",
                                                                "ansible_connection": "ssh"}}, ("n2", 1)),
    ("ansible.builtin.uri", False, {"_ansible_delegated_vars": {"ansible_delegated_host": "localhost",
                                                                "ansible_connection": "local"}}, ("localhost", 0)),
])
def test_round_trips_of_one_result(action, looped, result, expected):
    assert _report.round_trips("n1", action, looped, result) == expected


def test_status_prints_the_latest_report_table(deploy_run):
    tmp, _p = deploy_run
    # status.yml's first play reads the table from the same directory (its other plays need the cluster).
    (tmp / "status_only.yml").write_text("- name: Status\n  ansible.builtin.import_playbook: %s\n"
                                         % os.path.join(ROOT, "playbooks", "status.yml"))
    # Only the first play matters here (the cluster's plays fail without a cluster, after it).
    r = run_ansible_playbook("status_only.yml", inventory=tmp / "hosts.yml", cwd=tmp, report_dir=tmp / "reports")
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


# --- issue 19: empty runs, skipped phases, NCCL and vLLM's startup, the object API, the chart in the artifacts ----

VLLM_LOG = os.path.join(ROOT, "tests", "unit", "plugins", "modules", "fixtures", "vllm_wait", "ok_v1_010_ray.log.gz")

# site.yml's shape: the inventory check first, a phase whose every task is skipped (site.yml's "wait for the image
# when no Ray play did"), the serving phase's vllm_wait reading a real vLLM log, the healthcheck's set_stats.
SERVE_PLAYBOOK = """
- name: Check the inventory
  ansible.builtin.import_playbook: %(root)s/playbooks/inventory_check.yml

- name: Preflight
  hosts: spark
  gather_facts: false
  tags: [preflight, always]
  tasks:
    - name: Check
      ansible.builtin.command: sleep 0.2
      changed_when: false

- name: Wait for the image transfer when no Ray play did
  hosts: spark
  gather_facts: false
  tags: [runtime_image, always]
  tasks:
    - name: Nothing to wait for
      ansible.builtin.command: sleep 5
      changed_when: false
      when: false

- name: Serve
  hosts: spark_head
  gather_facts: false
  tags: [vllm_serve]
  tasks:
    - name: Wait for vLLM
      sparkfleet.vllm.vllm_wait:
        log_file: %(log)s
        timeout: 0

- name: Health check
  hosts: spark_head
  gather_facts: false
  tags: [healthcheck]
  tasks:
    - name: Publish
      ansible.builtin.set_stats:
        data:
          sparkfleet:
            nccl_transports: {n1: IB, n2: Socket}
        per_host: false
        aggregate: true
"""


def _spark_inventory(tmp_path):
    host = "{ansible_connection: local, ansible_python_interpreter: %s}" % sys.executable
    (tmp_path / "hosts.yml").write_text(
        "spark:\n  children:\n    spark_head:\n      hosts:\n        n1: %s\n"
        "    spark_workers:\n      hosts:\n        n2: %s\n" % (host, host))


@pytest.fixture(scope="module")
def serve_run(tmp_path_factory):
    import gzip
    import ansible_runner
    tmp = tmp_path_factory.mktemp("serve")
    log = tmp / "vllm.log"
    with gzip.open(VLLM_LOG, "rb") as f:
        log.write_bytes(f.read())
    _spark_inventory(tmp)
    (tmp / "project").mkdir()
    (tmp / "pdd").mkdir()
    (tmp / "project" / "site.yml").write_text(SERVE_PLAYBOOK % {"root": ROOT, "log": log})
    env = {"ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "SPARKFLEET_REPORT_DIR": str(tmp / "reports"),
           "ANSIBLE_CALLBACKS_ENABLED": "sparkfleet.vllm.report", "ANSIBLE_NOCOLOR": "1"}
    old_path = os.environ.get("PATH", "")
    os.environ["PATH"] = BIN + os.pathsep + old_path
    try:
        runner = ansible_runner.run(private_data_dir=str(tmp / "pdd"), project_dir=str(tmp / "project"),
                                    playbook="site.yml", inventory=str(tmp / "hosts.yml"), envvars=env, quiet=True)
    finally:
        os.environ["PATH"] = old_path
    stdout = runner.stdout.read()
    assert runner.status == "successful", stdout[-4000:]
    stats = [e for e in runner.events if e["event"] == "playbook_on_stats"][0]["event_data"]
    report_dir = os.path.realpath(tmp / "reports" / "latest")
    return report_dir, json.loads(open(os.path.join(report_dir, "report.json")).read()), stdout, stats


def test_a_phase_whose_every_task_skipped_is_no_row_and_the_inventory_check_is_not_a_phase(serve_run):
    _dir, report, stdout, _stats = serve_run
    assert [r["phase"] for r in report["phases"]["n1"]] == ["preflight", "vllm_serve", "healthcheck"]
    assert [r["phase"] for r in report["phases"]["n2"]] == ["preflight"]
    assert "localhost" not in report["phases"]
    table = stdout.split("sparkfleet report: site.yml successful", 1)[1]
    assert "runtime_image" not in table and "inventory_check" not in table, table


def test_nccl_transport_per_node_and_vllm_startup_phases_in_the_table(serve_run):
    _dir, report, stdout, _stats = serve_run
    assert report["nccl_transports"] == {"n1": "IB", "n2": "Socket"}
    startup = report["vllm_startup"]
    assert startup["this_run"] and startup["host"] == "n1"
    names = [r["phase"] for r in startup["phases"]]
    # vLLM's order, zero-length phases (ready: 0) left out, laid end to end inside the serving phase
    assert names == ["starting", "engine_init", "placement", "loading_weights", "profiling", "cuda_graphs",
                     "api_starting"], names
    assert all(a["end_s"] == b["start_s"] for a, b in zip(startup["phases"], startup["phases"][1:]))
    lines = stdout.split("sparkfleet report: site.yml successful", 1)[1].splitlines()
    assert any(ln.split() == ["NCCL", "transport", "IB", "Socket"] for ln in lines), lines
    serve = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["vllm_serve"])
    assert lines[serve + 1].split()[:3] == ["starting", "8.0", "s"], lines
    assert lines[serve + 4].split()[:2] == ["loading_weights", "12m27s"], lines


def test_the_chart_path_is_in_the_artifacts_and_printed(serve_run):
    report_dir, _report_json, stdout, stats = serve_run
    published = stats["artifact_data"]["sparkfleet"]["report"]
    assert os.path.realpath(published["dir"]) == report_dir
    assert published["chart"] == os.path.join(published["dir"], "timeline.png")
    assert os.path.getsize(published["chart"]) > 10000
    assert "sparkfleet report: chart %s" % published["chart"] in stdout
    # set_stats aggregates: the healthcheck's results sit beside the report's path.
    assert stats["artifact_data"]["sparkfleet"]["nccl_transports"] == {"n1": "IB", "n2": "Socket"}


def test_an_empty_run_fails_and_still_writes_its_report(tmp_path):
    """`site.yml -i /nonexistent`: non-zero, the report names the failure, no matplotlib warning, no chart."""
    p = run_ansible_playbook(os.path.join(ROOT, "site.yml"), inventory=tmp_path / "nonexistent", cwd=tmp_path,
                             report_dir=tmp_path / "r")
    out = p.stdout + p.stderr
    assert p.returncode != 0, out[-3000:]
    assert "number sections" not in out and "Traceback" not in out, out[-3000:]
    (run,) = [d for d in (tmp_path / "r").iterdir() if d.name.endswith("-site")]
    report = json.loads((run / "report.json").read_text())
    assert report["status"] == "failed" and report["phases"] == {}
    assert "inventory: group 'spark' is missing" in report["failure"]["msg"]
    assert not (run / "timeline.png").exists()
    assert "sparkfleet report: no chart (no phase ran on any node" in out
    # Issue 41.13: an empty run is no deploy: `latest` (what status shows) does not move to it.
    assert not (tmp_path / "r" / "latest").exists()
    assert "latest stays where it was (no node ran a task)" in out


def test_a_check_run_writes_its_report_but_latest_stays_on_the_real_run(tmp_path):
    """Issue 41.13: status showed whatever was `latest`, a --check run's prediction included."""
    p = run_playbook(tmp_path, "site.yml", PLAYBOOK)
    assert p.returncode == 0, p.stdout[-3000:]
    real = os.path.realpath(tmp_path / "reports" / "latest")
    report = json.loads((tmp_path / "reports" / "latest" / "report.json").read_text())
    assert report["check_mode"] is False and report["nodes_ran"] == ["n1", "n2"]
    assert report["inventory"] == [str(tmp_path / "hosts.yml")]
    time.sleep(1.1)   # a new report directory (its name has the second)
    p = run_playbook(tmp_path, "site.yml", PLAYBOOK, args=["--check"])
    assert p.returncode == 0, p.stdout[-3000:]
    assert os.path.realpath(tmp_path / "reports" / "latest") == real
    runs = sorted(d for d in (tmp_path / "reports").iterdir() if d.name != "latest")
    assert len(runs) == 2 and json.loads((runs[-1] / "report.json").read_text())["check_mode"] is True
    assert "latest stays where it was (a --check run)" in p.stdout


def test_status_does_not_show_another_inventory_s_report(deploy_run, tmp_path):
    """Issue 41.13: the latest report is of the hosts.yml inventory; status for another one says so."""
    tmp, _p = deploy_run
    (tmp_path / "status_only.yml").write_text("- name: Status\n  ansible.builtin.import_playbook: %s\n"
                                              % os.path.join(ROOT, "playbooks", "status.yml"))
    (tmp_path / "other.yml").write_text("spark:\n  children:\n    spark_head:\n      hosts:\n"
                                        "        n1: {ansible_connection: local, ansible_python_interpreter: %s}\n"
                                        % sys.executable)
    r = run_ansible_playbook("status_only.yml", inventory=tmp_path / "other.yml", cwd=tmp_path,
                             report_dir=tmp / "reports")
    out = " ".join(r.stdout.split())
    assert "sparkfleet report: site.yml successful" not in out, out[-3000:]
    assert "is of another inventory (%s), not shown" % (tmp / "hosts.yml") in out, out[-3000:]


def test_the_chart_uses_matplotlib_object_api_only(tmp_path):
    """No pyplot (global state, a GUI backend chosen at import) inside Ansible's process."""
    code = (
        "import sys, json\n"
        "from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _report\n"
        "r = {'playbook': 'site.yml', 'status': 'successful', 'seconds': 10, 'started': 'x',\n"
        "     'phases': {'a': [{'phase': 'preflight', 'start_s': 0, 'end_s': 4, 'seconds': 4, 'status': 'ok'}]}}\n"
        "print(_report.timeline(r, sys.argv[1]))\n"
        "print('pyplot' if 'matplotlib.pyplot' in sys.modules else 'no pyplot')\n")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "t.png")], capture_output=True, text=True,
                       timeout=120, check=False, cwd=ROOT,
                       env=dict(os.environ, MPLBACKEND="TkAgg", PYTHONPATH=os.path.join(ROOT, "collections")))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [str(tmp_path / "t.png"), "no", "pyplot"], p.stdout
    assert os.path.getsize(tmp_path / "t.png") > 5000


def test_sections_are_extensible(monkeypatch):
    monkeypatch.setattr(_report, "SECTIONS", _report.SECTIONS + [lambda r: ["  qualify: %s" % r.get("extra")]])
    monkeypatch.setattr(_report, "FIELDS", _report.FIELDS + [("extra", lambda stats, captured: stats.get("x"))])

    class Clock(object):
        def __call__(self):
            return 5.0
    report = _report.build("site.yml", _report.PhaseClock(now=Clock()), {}, {"sparkfleet": {"x": 7}}, {}, None,
                           now=Clock())
    assert _report.table(report)[-1] == "  qualify: 7"


@pytest.mark.parametrize("sync, line", [
    ({"bytes_transferred": 0, "verified": True}, "nothing to send (every worker has the model, verified)"),
    ({"bytes_transferred": 0, "verified": False}, "nothing to send (every worker has the model, not verified in this run)"),
    ({"bytes_transferred": 0}, "not verified in this run"),
    ({"bytes_transferred": 0, "verified": False, "failed": True}, "the model sync failed"),
])
def test_the_report_says_verified_only_when_model_sync_verified(sync, line):
    """Issue 18.2: a run that refused (or did not verify) never reports every worker's copy verified."""
    got = _report.capture("sparkfleet.vllm.model_sync", sync)
    report = _report.build("site.yml", _report.PhaseClock(), dict([got]), {}, {}, None)
    text = "\n".join(_report.table(report))
    assert line in text, text
    if not sync.get("verified"):
        assert "model, verified)" not in text


# A worker that goes away under the run: the head's Ray check fails first with Ray's late error, then the worker's
# next task finds its ssh gone (n2 is an ssh host on a closed port of this machine: refused at once, nothing leaves it).
NODE_AWAY = """
- name: Run Ray
  hosts: nodes
  gather_facts: false
  tags: [ray_cluster]
  tasks:
    - name: Prove the Ray cluster
      ansible.builtin.fail:
        msg: >-
          Ray cluster check failed: a task pinned to n2 (registered 10.99.1.12) failed: TaskUnschedulableError: The
          task is not schedulable: The node specified via NodeAffinitySchedulingStrategy doesn't exist any more or is
          infeasible, and soft=False was specified.
      when: inventory_hostname == 'n1'
    - name: Reach the worker
      ansible.builtin.ping:
"""


def test_a_node_that_went_away_is_the_run_s_one_failure_not_ray_s_late_error(tmp_path):
    (tmp_path / "site.yml").write_text(NODE_AWAY)
    (tmp_path / "hosts.yml").write_text(
        "nodes:\n  hosts:\n    n1: {ansible_connection: local, ansible_python_interpreter: %s}\n"
        "    n2: {ansible_connection: ssh, ansible_host: 127.0.0.1, ansible_port: 1, ansible_user: nobody}\n"
        % sys.executable)
    p = run_ansible_playbook("site.yml", inventory=tmp_path / "hosts.yml", cwd=tmp_path, report_dir=tmp_path / "reports",
                             env={"ANSIBLE_CALLBACKS_ENABLED": "sparkfleet.vllm.report",
                                  "ANSIBLE_SSH_CONTROL_PATH_DIR": tmp_path / "cp", "ANSIBLE_TIMEOUT": "5"})
    assert p.returncode != 0
    out = p.stdout + p.stderr
    line = [ln for ln in out.splitlines() if ln.startswith("sparkfleet: ")]
    assert len(line) == 1, out[-3000:]
    assert line[0].startswith("sparkfleet: n2 went away during the run (left the Ray cluster at ")
    assert line[0].endswith("it also stopped answering ssh): when it is back, run site.yml again")
    report = json.loads((tmp_path / "reports" / "latest" / "report.json").read_text())
    failure = report["failure"]
    assert failure["class"] == "node_away" and failure["host"] == "n2"
    assert failure["msg"] == line[0][len("sparkfleet: "):]
    assert "TaskUnschedulableError" in failure["detail"]
    assert "failed: Prove the Ray cluster on n2 (node_away): n2 went away" in p.stdout
    assert "first error: Ray cluster check failed" in p.stdout
