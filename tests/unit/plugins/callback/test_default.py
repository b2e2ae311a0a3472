"""sparkfleet.vllm.default (issue 41.14): a wait's poll prints its summary, not "FAILED - RETRYING", once per poll."""

from __future__ import annotations

import os

from ansible_collections.sparkfleet.vllm.plugins.callback.default import retry_line
from ansible_collections.sparkfleet.vllm.tests.unit.support.playbook import local_inventory, run_playbook

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

# debug var=summary returns {"summary": ...} at the top of the result, as vllm_wait and ray_cluster_check do.
PLAYBOOK = """
- name: Waits
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Wait for the shards
      ansible.builtin.debug:
        var: summary
      vars:
        summary: loading_weights 3/8 shards (37%), ETA 5 s
      register: _r
      until: false
      retries: 2
      delay: 0
      ignore_errors: true
    - name: Wait without a summary
      ansible.builtin.set_fact:
        _x: 1
      register: _r2
      until: false
      retries: 1
      delay: 0
      ignore_errors: true
"""


def test_a_poll_with_a_summary_prints_it_instead_of_failed_retrying(tmp_path):
    (tmp_path / "waits.yml").write_text(PLAYBOOK)
    p = run_playbook("waits.yml", inventory=local_inventory(tmp_path / "hosts.yml"), cwd=tmp_path,
                     report_dir=tmp_path / "r")
    out = p.stdout
    assert p.returncode == 0, out[-3000:] + p.stderr[-2000:]
    waits = out.split("TASK [Wait for the shards]")[1].split("TASK [Wait without a summary]")[0]
    assert "FAILED - RETRYING" not in waits, waits
    assert waits.count("localhost - loading_weights 3/8 shards (37%), ETA 5 s") == 2, waits   # once per poll
    assert "(poll 1 of 3)" in waits and "(poll 2 of 3)" in waits
    # Without a summary the default's line stays.
    assert "FAILED - RETRYING: [localhost]: Wait without a summary (1 retries left)." in out


def test_retry_line():
    assert retry_line("spark-1", {"summary": "a\n  b", "attempts": 4, "retries": 121}, now=0).endswith(
        "spark-1 - a b (poll 4 of 121)")
    assert retry_line("spark-1", {"msg": "x"}) is None
    assert retry_line("spark-1", "not a dict") is None
