# -*- coding: utf-8 -*-
"""What AWX shows of a wait's polls (issue 41 item 14). AWX runs playbooks through ansible-runner with its own stdout
callback (awx_display), which prints every `until` retry as "FAILED - RETRYING ... (N retries left)" whatever this
collection's callbacks do. The collection's waits poll themselves instead (plugins/plugin_utils/_poll.py): run one
through ansible-runner as AWX does and read its event stream - no retry event, no FAILED line, one `verbose` event
per poll carrying its progress line; and the same lines in a terminal (ansible-playbook with the default callback).
The `until` task shows what AWX did before, so the test would see the difference."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from ansible_collections.sparkfleet.vllm.tests.unit.support.playbook import run_playbook

ansible_runner = pytest.importorskip("ansible_runner")

ROOT = Path(__file__).resolve().parents[3]
BIN = os.path.dirname(sys.executable)
POLL_LINE = re.compile(r"^  \[\d\d:\d\d:\d\d\] localhost - (.*) \(poll (\d+) of 30\)$")

# A background job that ends after about 3 s, followed as roles/model_sync/tasks/download.yml follows `hf download`.
WAIT = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Start the download in the background
      ansible.builtin.shell: "sleep 3; echo fetched"
      async: 60
      poll: 0
      register: job

    - name: Wait for the model download
      sparkfleet.vllm.download_progress:
        path: {model}
        job_file: "{{{{ job.results_file }}}}"
        wait_polls: 30
        wait_delay: 0.5
      register: polled

    - name: Keep what the wait returned
      ansible.builtin.copy:
        content: "{{{{ polled | to_json }}}}"
        dest: {out}
"""

UNTIL = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Wait for the third poll
      ansible.builtin.shell: "n=$(cat {count} 2>/dev/null || echo 0); echo $((n+1)) > {count}; [ $n -ge 2 ]"
      register: polled
      until: polled.rc == 0
      retries: 5
      delay: 1
      changed_when: false
"""


def _model(tmp_path):
    model = tmp_path / "model"
    (model / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (model / "model.safetensors.index.json").write_text('{"metadata": {"total_size": 4000000}, "weight_map": {}}')
    (model / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 2000000)
    (model / ".cache" / "huggingface" / "download" / "model-00002-of-00002.safetensors.f00d.incomplete").write_bytes(
        b"\0" * 500000)
    return model


def _env(tmp_path):
    return {"PATH": BIN + os.pathsep + os.environ.get("PATH", ""),
            "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"), "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable, "HOME": str(tmp_path)}


def _runner(tmp_path, playbook):
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "wait.yml").write_text(playbook)
    run = ansible_runner.run(private_data_dir=str(tmp_path), playbook="wait.yml", quiet=True, envvars=_env(tmp_path),
                             settings={"suppress_ansible_output": True})
    return run, list(run.events)


def test_awx_shows_a_line_per_poll_of_a_wait_and_no_failed_retrying(tmp_path):
    import json

    out = tmp_path / "polled.json"
    run, events = _runner(tmp_path, WAIT.format(model=_model(tmp_path), out=out))
    assert run.rc == 0, [e.get("stdout") for e in events]
    polled = json.loads(out.read_text())
    assert polled["finished"] and polled["rc"] == 0 and polled["stdout_lines"] == ["fetched"]
    assert polled["polls"] >= 2, polled   # the job runs 3 s, polls come every 0.5 s and more

    assert not [e for e in events if e.get("event") == "runner_retry"]
    assert not [e for e in events if "FAILED - RETRYING" in (e.get("stdout") or "")]
    lines = [e["stdout"] for e in events if e.get("event") == "verbose" and POLL_LINE.match(e.get("stdout") or "")]
    assert [int(POLL_LINE.match(x).group(2)) for x in lines] == list(range(1, polled["polls"] + 1)), lines
    # bytes of the finished shard and of the one being written, of the index's total
    assert "2.5 MB of 4.0 MB (62%%) in %s" % (tmp_path / "model") in lines[0], lines[0]
    assert POLL_LINE.match(lines[-1]).group(1).startswith("ended (rc 0): "), lines[-1]
    # the poll lines come between the task's start and its result, as a terminal shows them
    kinds = [e.get("event") for e in events if e.get("event") != "verbose" or e["stdout"] in lines]
    start = kinds.index("playbook_on_task_start", kinds.index("runner_on_ok"))
    assert kinds[start + 1:start + 2 + len(lines)] == ["runner_on_start"] + ["verbose"] * len(lines), kinds
    assert "no `FAILED - RETRYING` line" in (ROOT / "docs" / "awx.md").read_text()


def test_an_until_loop_is_what_prints_failed_retrying_in_awx(tmp_path):
    run, events = _runner(tmp_path, UNTIL.format(count=tmp_path / "count"))
    retries = [e["stdout"] for e in events if e.get("event") == "runner_retry"]
    assert run.rc == 0, [e.get("stdout") for e in events]
    assert len(retries) == 2
    assert all("FAILED - RETRYING: [localhost]: Wait for the third poll" in line for line in retries)


def test_a_terminal_shows_the_same_line_per_poll_and_the_report_counts_each_poll(tmp_path):
    import json

    (tmp_path / "wait.yml").write_text(WAIT.format(model=_model(tmp_path), out=tmp_path / "polled.json"))
    proc = run_playbook("wait.yml", local=True, cwd=tmp_path, report_dir=tmp_path / "reports", timeout=120,
                        env=dict(_env(tmp_path), SPARKFLEET_REPORT_PLAYBOOKS="wait.yml",
                                 ANSIBLE_CALLBACKS_ENABLED="sparkfleet.vllm.report"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [x for x in proc.stdout.splitlines() if POLL_LINE.match(x)]
    assert len(lines) >= 2 and "FAILED" not in proc.stdout, proc.stdout
    task = proc.stdout.index("TASK [Wait for the model download]")
    assert task < proc.stdout.index(lines[0]) < proc.stdout.index(lines[-1]) < proc.stdout.index("ok: [localhost]", task)
    polled = json.loads((tmp_path / "polled.json").read_text())
    assert polled["polls"] == len(lines)
    # the job's start, each poll, the copy: the round trips a re-run's cap counts (tests/integration/test_site.py)
    report = json.loads(next((tmp_path / "reports").glob("*-wait/report.json")).read_text())
    assert report["round_trips"] == {"localhost": 1 + len(lines) + 1}, report["round_trips"]
