"""Session fixtures for tests that need the local Spark lab (lab/labctl).

Run as root, preferably from the control namespace:
    lab/labctl ctl -- .venv/bin/pytest tests/integration -m lab
The `lab` fixture brings the lab up (idempotent) and skips cleanly when that is impossible here.
Set SPARKLAB_KEEP_LAB=1 to leave a lab this session brought up running afterwards (and to skip the
test that takes the lab down). SPARKLAB_HOSTS=N asks for N hosts; SPARKLAB_NAME=x tests a separate
lab instance (its own namespaces and state) instead of the shared one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LABCTL = REPO / "lab" / "labctl"
# SPARKLAB_NAME selects a separate lab instance (labctl's own variable); default: the shared one.
LAB_NAME = os.environ.get("SPARKLAB_NAME") or "sfl"
STATE = Path("/var/tmp/sparklab/lab" + ("" if LAB_NAME == "sfl" else "-" + LAB_NAME))
SSH_CONFIG = STATE / "ssh" / "config"
SSH_KEY = STATE / "ssh" / "id_ed25519"
INVENTORY = REPO / "inventories" / "lab" if LAB_NAME == "sfl" else STATE / "inventory"
VENV_BIN = REPO / ".venv" / "bin"


def _netns_inode(path):
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


class Lab:
    """Handles for driving the lab from a test, whichever namespace pytest runs in."""

    repo = REPO
    inventory = INVENTORY
    ssh_config = SSH_CONFIG
    ssh_key = SSH_KEY

    def __init__(self, hosts):
        self.hosts = hosts

    @staticmethod
    def netns(host):
        """The network namespace of a host (or of 'ctl' / 'sw')."""
        return "%s-%s" % (LAB_NAME, host)

    @staticmethod
    def run(argv, timeout=120, check=False, input=None, env_extra=None, cwd=None):
        env = dict(os.environ, **env_extra) if env_extra else None
        return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                              check=check, input=input, env=env, cwd=cwd)

    def labctl(self, *args, timeout=600, check=True):
        return self.run([LABCTL, *args], timeout=timeout, check=check)

    def ctl(self, *argv, timeout=120, check=False):
        """Run a command in the control namespace (where the controller side lives)."""
        return self.run([LABCTL, "ctl", "--", *argv], timeout=timeout, check=check)

    def root_ns(self, *argv, timeout=60):
        """Run a command in the machine's root network namespace (kthreadd is always there)."""
        return self.run(["nsenter", "-t", "2", "-n", "--", *argv], timeout=timeout)

    def ssh(self, host, command, timeout=60, check=False, extra=()):
        return self.ctl("ssh", "-F", SSH_CONFIG, "-o", "BatchMode=yes", *extra, host, command,
                        timeout=timeout, check=check)

    def host_exec(self, host, *argv, timeout=60):
        """Run a command inside a host's namespaces without ssh (labctl exec)."""
        return self.run([LABCTL, "exec", host, *argv], timeout=timeout)

    def ansible_run(self, **kwargs):
        """ansible_runner.run(**kwargs) executed in the control namespace; returns
        {status, rc, stats, events} (events: the runner_on_ok/failed/unreachable ones)."""
        env = dict(os.environ)
        env["PATH"] = "%s:%s" % (VENV_BIN, env.get("PATH", "/usr/bin:/bin"))
        code = (
            "import json, sys, ansible_runner\n"
            "kw = json.loads(sys.argv[1])\n"
            "r = ansible_runner.run(quiet=True, **kw)\n"
            "ev = [dict(event=e['event'], host=e.get('event_data', {}).get('host'),\n"
            "           res=e.get('event_data', {}).get('res')) for e in r.events\n"
            "      if e.get('event', '').startswith('runner_on_')]\n"
            "print(json.dumps(dict(status=r.status, rc=r.rc, stats=r.stats, events=ev), default=str))\n"
        )
        p = subprocess.run([str(LABCTL), "ctl", "--", str(VENV_BIN / "python"), "-c", code, json.dumps(kwargs)],
                           capture_output=True, text=True, timeout=600, env=env, cwd=str(REPO))
        assert p.returncode == 0, "ansible-runner crashed:\n%s\n%s" % (p.stdout[-3000:], p.stderr[-3000:])
        return json.loads(p.stdout.strip().splitlines()[-1])


def _skip_reason():
    if sys.platform != "linux":
        return "the lab needs Linux network namespaces"
    if os.geteuid() != 0:
        return "the lab needs root (network namespaces, mounts): run as root, e.g. lab/labctl ctl -- .venv/bin/pytest -m lab"
    missing = [t for t in ("nft", "ip", "nsenter", "unshare", "ssh", "debootstrap") if shutil.which(t) is None
               and not os.path.exists("/usr/sbin/" + t)]
    if missing:
        return "missing tools for the lab: %s (apt-get install $(cat lab/requirements-apt.txt))" % ", ".join(missing)
    return None


@pytest.fixture(scope="session")
def lab():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    was_up = (STATE / "hosts" / "spark-1" / "unshare.pid").exists()
    args = ["--hosts", os.environ["SPARKLAB_HOSTS"]] if os.environ.get("SPARKLAB_HOSTS") else []
    p = subprocess.run([str(LABCTL), "up", *args], capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        pytest.fail("lab/labctl up failed (rc %d):\n%s%s" % (p.returncode, p.stdout[-2000:], p.stderr[-4000:]))
    hosts = ["spark-%d" % i for i in range(1, int((STATE / "nhosts").read_text().strip()) + 1)]
    yield Lab(hosts)
    if not was_up and not os.environ.get("SPARKLAB_KEEP_LAB"):
        subprocess.run([str(LABCTL), "down"], capture_output=True, text=True, timeout=300)


# --------------------------------------------------------------------------- the fault table
# A test marked @pytest.mark.fault(name=..., expected=...) injects a fault (or feeds bad input) and asserts the
# outcome a user must see. Every run writes tests/output/fault-table.md: fault, expected, observed, verdict.
# The `observe` fixture lets a test state what it saw (the message the user got, the time it took).

FAULT_TABLE = REPO / "tests" / "output" / "fault-table.md"
_FAULT_ROWS = []


@pytest.fixture
def observe(request):
    """observe(text): note what the user saw, for the fault table's 'observed' column."""
    notes = []
    request.node.user_properties.append(("observed", notes))
    return lambda text: notes.append(" ".join(str(text).split())[:300])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    mark = item.get_closest_marker("fault")
    if mark is None or report.when != "call" and not (report.when == "setup" and report.failed):
        return
    notes = [n for k, v in item.user_properties if k == "observed" for n in v]
    if report.passed:
        verdict, seen = "pass", "; ".join(notes) or "as expected"
    elif report.skipped:
        verdict, seen = "skipped", str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else "skipped"
    else:
        lines = [ln for ln in str(report.longrepr).splitlines() if ln.startswith("E ")]
        verdict, seen = "FAIL", " ".join((lines[0] if lines else "error")[1:].split())[:300]
    _FAULT_ROWS.append((mark.kwargs.get("name") or item.name, mark.kwargs.get("expected", ""), seen, verdict,
                        item.nodeid))


def pytest_sessionfinish(session, exitstatus):
    if not _FAULT_ROWS:
        return
    FAULT_TABLE.parent.mkdir(parents=True, exist_ok=True)
    cell = lambda text: str(text).replace("|", "\\|")  # noqa: E731
    lines = ["# Fault and bad-input table", "",
             "Written by the last run of the lab tests marked `fault` (%s, %d rows). Full suite: `scripts/faults.sh`."
             % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), len(_FAULT_ROWS)), "",
             "| fault / bad input | expected | observed | verdict | test |", "|---|---|---|---|---|"]
    lines += ["| %s |" % " | ".join(cell(c) for c in row) for row in _FAULT_ROWS]
    FAULT_TABLE.write_text("\n".join(lines) + "\n")
