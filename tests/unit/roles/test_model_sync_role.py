"""The model_sync role's sync-key line, rendered by Ansible and read back the way sshd and the shell read it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from ansible_collections.sparkfleet.vllm.tests.unit.support.playbook import run_playbook

REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "roles" / "model_sync" / "tasks" / "main.yml"


def _authorized_line():
    """The authorized_keys line the role writes on a worker (an entry of its one config_files run)."""
    for task in yaml.safe_load(TASKS.read_text()):
        files = (task.get("sparkfleet.vllm.config_files") or {}).get("files", [])
        if isinstance(files, str):      # the workers' files, with the model's check appended: in the task's vars
            files = (task.get("vars") or {}).get("_model_sync_worker_files", [])
        for entry in files:
            if isinstance(entry, dict) and entry.get("state") == "line" and entry["path"].endswith("/.ssh/authorized_keys"):
                return entry["line"]
    raise AssertionError("no authorized_keys line in %s" % TASKS)


def _sshd_command(line):
    """The forced command sshd runs for an authorized_keys line: command="..." with \\" read as a quote."""
    start = line.index('command="') + len('command="')
    out, i = [], start
    while line[i] != '"':
        if line[i] == "\\" and line[i + 1] == '"':
            i += 1
        out.append(line[i])
        i += 1
    return "".join(out), line[i + 1:]


@pytest.mark.parametrize("dest", ["/models/Qwen \"3.5\" it's here", "/models/plain"])
def test_a_quote_in_the_model_dir_never_breaks_the_keys_forced_command(tmp_path, dest):
    """Issue 17.13: a `"` in the model directory must not end command="..." early (the rest would become options)."""
    pub = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB sparkfleet model sync"
    playbook = tmp_path / "p.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False,
        "vars": {"sparkfleet_fabric_subnet": "10.99.1.0/24", "model_sync_forced_command": "/usr/local/lib/s.py",
                 "model_sync_dest": dest, "model_sync_allowed_commands": "/usr/local/lib/a.json",
                 "sparkfleet_head_host": "localhost"},
        "tasks": [{"ansible.builtin.set_fact": {"_model_sync_pub_key": pub}},
                  {"ansible.builtin.copy": {"content": _authorized_line(), "dest": str(tmp_path / "line")}}],
    }]))
    proc = run_playbook(playbook, local=True, timeout=120, report_dir=tmp_path / "r")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = (tmp_path / "line").read_text()
    assert line.startswith('restrict,agent-forwarding,from="10.99.1.0/24",command="')
    command, rest = _sshd_command(line)
    assert rest == " " + pub, json.dumps(line)  # nothing of the path leaked into the options or the key
    assert shlex.split(command) == ["/usr/bin/python3", "/usr/local/lib/s.py", dest, "/usr/local/lib/a.json"]
