# -*- coding: utf-8 -*-
"""What AWX shows of a wait's polls (issue 41 item 14): AWX runs playbooks through ansible-runner with its own stdout
callback (awx_display), so the collection's sparkfleet.vllm.default does not print there. Run a task that polls with
`until` through ansible-runner as AWX does and read its event stream: docs/awx.md must say what an AWX user sees."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ansible_runner = pytest.importorskip("ansible_runner")

ROOT = Path(__file__).resolve().parents[3]

PLAYBOOK = """
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


def test_awx_shows_each_poll_as_failed_retrying_and_the_awx_doc_says_so(tmp_path):
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "wait.yml").write_text(PLAYBOOK.format(count=tmp_path / "count"))
    env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    run = ansible_runner.run(private_data_dir=str(tmp_path), playbook="wait.yml", quiet=True, envvars=env,
                             settings={"suppress_ansible_output": True})
    events = list(run.events)
    retries = [e["stdout"] for e in events if e.get("event") == "runner_retry"]
    assert run.rc == 0, [e.get("stdout") for e in events]
    assert len(retries) == 2
    assert all("FAILED - RETRYING: [localhost]: Wait for the third poll" in line for line in retries)
    assert "`FAILED - RETRYING: [spark-1]: ... (N retries left).`" in (ROOT / "docs" / "awx.md").read_text()
