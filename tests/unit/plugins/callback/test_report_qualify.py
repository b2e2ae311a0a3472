"""The report callback's qualify section in a real ansible-playbook run (localhost): what the qualify role publishes
with set_stats lands in report.json, qualify.txt / .json / .png and the printed table."""

from __future__ import annotations

import json
import os
import sys
from ansible_collections.sparkfleet.vllm.tests.unit.support.playbook import run_playbook

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

# The role's last steps on made-up measurements: the real filter, set_stats as the role publishes it.
PLAYBOOK = """
- name: Qualify
  hosts: n1
  gather_facts: false
  tags: [qualify]
  vars:
    measured:
      n1: {fabric: {interface: eth0, mtu: 9000, hca: [], rdma_char_devices: []}, fabric_results: [], allreduce: null,
           disk: {gbps: 5.2, bytes_read: 1000, bytes_total: 1000, threads: 4}}
      n2: {fabric: {interface: eth0, mtu: 1500, hca: [], rdma_char_devices: []}, fabric_results: [], allreduce: null,
           disk: {gbps: 1.1, bytes_read: 1000, bytes_total: 1000, threads: 4}}
    load:
      tool: client
      levels:
        - {concurrency: 1, ok: 8, requests: 8, output_tok_s: 25.0, ttft_ms: {p50: 200.0}, itl_ms: {p50: 40.0}}
        - {concurrency: 4, ok: 8, requests: 8, output_tok_s: 80.0, ttft_ms: {p50: 300.0}, itl_ms: {p50: 55.0}}
  tasks:
    - name: Judge
      ansible.builtin.set_fact:
        section: "{{ measured | sparkfleet.vllm.qualify_report(serving=load, context={'head': 'n1', 'model': 'm'}) }}"
    - name: Publish
      ansible.builtin.set_stats:
        data:
          sparkfleet:
            qualify: "{{ section }}"
        per_host: false
"""


def run(tmp_path, name):
    (tmp_path / name).write_text(PLAYBOOK)
    (tmp_path / "hosts.yml").write_text(
        "all:\n  hosts:\n    n1: {ansible_connection: local, ansible_python_interpreter: %s}\n" % sys.executable)
    return run_playbook(name, inventory=tmp_path / "hosts.yml", cwd=tmp_path, report_dir=tmp_path / "reports",
                        env={"ANSIBLE_CALLBACKS_ENABLED": "sparkfleet.vllm.report"})


def test_the_qualify_section_is_written_and_printed(tmp_path):
    p = run(tmp_path, "qualify.yml")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    latest = tmp_path / "reports" / "latest"
    report = json.loads((latest / "report.json").read_text())
    assert report["playbook"] == "qualify.yml"
    lines = report["qualify"]["lines"]
    disk = {ln["where"].split()[0]: ln for ln in lines if ln["figure"].startswith("cold sequential read")}
    assert disk["n1"]["verdict"] == "as expected" and disk["n2"]["verdict"] == "below"
    assert json.loads((latest / "qualify.json").read_text())["summary"] == report["qualify"]["summary"]
    assert (latest / "qualify.txt").read_text().startswith("qualify: ")
    assert (latest / "qualify.png").stat().st_size > 10000
    assert "cold sequential read of the model" in p.stdout and "sparkfleet report: %s" % os.path.realpath(latest) \
        in p.stdout


def test_another_playbook_name_gets_no_report(tmp_path):
    p = run(tmp_path, "other.yml")
    assert p.returncode == 0
    assert not (tmp_path / "reports").exists()
