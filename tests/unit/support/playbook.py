"""The one way unit tests run ansible-playbook (issue 43.5): the repository's ansible.cfg, no colour, none of the
caller's ANSIBLE_* or SPARKFLEET_* settings (a developer's shell or a lab run must not change what a test sees), the
deploy report written under the test's own directory, and a bound on the run. tests/unit/test_test_rules.py fails on
a test that starts ansible-playbook any other way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def ansible_env(report_dir=None, **extra):
    """The environment of a test's Ansible run; ``extra`` adds or replaces variables (e.g. a callback)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SPARKFLEET_"))}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    if report_dir is not None:
        env["SPARKFLEET_REPORT_DIR"] = str(report_dir)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_playbook(playbook, *args, inventory=None, local=False, cwd=None, report_dir=None, env=None, timeout=180):
    """Run ``playbook`` with ``args``; returns the CompletedProcess (text). ``local``: against localhost only, with
    this interpreter (no inventory file needed); else ``inventory`` is given to -i when set. The report goes to
    ``report_dir`` (default: under ``cwd`` when given, else a new temporary directory), never to the repository's."""
    argv = [str(ANSIBLE_PLAYBOOK)]
    if local:
        argv += ["-c", "local", "-i", "localhost,", "-e", "ansible_python_interpreter=%s" % sys.executable]
    elif inventory is not None:
        argv += ["-i", str(inventory)]
    argv += [str(a) for a in args] + [str(playbook)]
    if report_dir is None:
        report_dir = Path(cwd) / "sparkfleet-report" if cwd else tempfile.mkdtemp(prefix="sparkfleet-report-")
    return subprocess.run(argv, cwd=str(cwd or REPO), env=ansible_env(report_dir, **(env or {})),
                          capture_output=True, text=True, timeout=timeout, check=False)


def local_inventory(path):
    """Write an inventory of localhost (local connection, this interpreter) to ``path``; returns it."""
    Path(path).write_text("all:\n  hosts:\n    localhost: {ansible_connection: local, ansible_python_interpreter: %s}\n"
                          % sys.executable)
    return path
