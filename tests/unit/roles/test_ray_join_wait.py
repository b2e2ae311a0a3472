"""ray_cluster's join wait: which results end its retries (the task's own `until`, evaluated by ansible-playbook)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from ansible_collections.sparkfleet.vllm.tests.unit.support.playbook import run_playbook

REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "roles" / "ray_cluster" / "tasks" / "main.yml"

# (what a try of ray_cluster_check returned, whether the wait ends there)
CASES = [
    ("whole and proven", {"missing": [], "mismatched": [], "error": None, "probed": True}, True),
    ("whole", {"missing": [], "mismatched": [], "error": None}, True),
    ("a node missing", {"missing": ["spark-2"], "mismatched": [], "error": None}, False),
    ("a wrong IP ends it at once", {"missing": [], "mismatched": ["spark-2"], "error": None}, True),
    # Ray's container restarting under systemd: the module fails, its result has no `missing`
    ("a failed try", {"failed": True, "msg": "spark-1: container sparkfleet-ray is not running"}, False),
    ("a driver that did not connect", {"missing": [], "error": "ray.init() did not return within 20.0 s"}, False),
]


def _until():
    for task in yaml.safe_load(TASKS.read_text()):
        if task.get("name", "").startswith("Wait until every node has joined Ray"):
            return task["until"].strip()
    raise AssertionError("no join wait in %s" % TASKS)


def test_the_join_wait_retries_until_the_cluster_is_whole(tmp_path):
    out = tmp_path / "ends.json"
    playbook = tmp_path / "p.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False,
        "vars": {"cases": [c[1] for c in CASES]},
        "tasks": [
            {"ansible.builtin.set_fact": {"ends": "{{ (ends | default([])) + [%s] }}" % _until()},
             "vars": {"_ray_cluster_members": "{{ item }}"}, "loop": "{{ cases }}"},
            {"ansible.builtin.copy": {"content": "{{ ends | to_json }}", "dest": str(out)}},
        ],
    }]))
    proc = run_playbook(playbook, local=True, timeout=120, report_dir=tmp_path / "r")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(out.read_text())
    assert {case[0]: bool(e) for case, e in zip(CASES, got)} == {case[0]: case[2] for case in CASES}
