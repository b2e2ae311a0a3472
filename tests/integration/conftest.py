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
import random
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
# The same addresses in every lab instance (they exist only inside its namespaces).
API = "http://10.99.0.11:30000"
MODEL = "sparklab/tiny-moe"
# A playbook run through ansible-runner: the subprocess bound; the runner ends the playbook 40 s before it.
RUNNER_TIMEOUT = 600
# The lab inventory's API key (its password lookup, for every lab instance): read it, never write it.
API_KEY_FILE = Path("/var/tmp/sparklab/lab/api-key")
# The runtime image's tag as lab/runtime/build.sh wrote it for this lab instance (each instance keeps its own).
RUNTIME_IMAGE_FILE = Path("/var/tmp/sparklab/share/runtime-image.txt")
if LAB_NAME != "sfl" and Path("/var/tmp/sparklab/share/runtime-image-%s.txt" % LAB_NAME).exists():
    RUNTIME_IMAGE_FILE = Path("/var/tmp/sparklab/share/runtime-image-%s.txt" % LAB_NAME)


def _netns_inode(path):
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


class Lab:
    """Handles for driving the lab from a test, whichever namespace pytest runs in."""

    repo = REPO
    inventory = INVENTORY
    api_url = API
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
            # ansible-runner's own timeout ends the playbook (a session of its own that a killed parent leaves
            # running, holding the deploy lock for the tests after it) before the subprocess bound below.
            "r = ansible_runner.run(quiet=True, timeout=kw.pop('runner_timeout'), **kw)\n"
            "ev = [dict(event=e['event'], host=e.get('event_data', {}).get('host'),\n"
            "           res=e.get('event_data', {}).get('res')) for e in r.events\n"
            "      if e.get('event', '').startswith('runner_on_')]\n"
            "print(json.dumps(dict(status=r.status, rc=r.rc, stats=r.stats, events=ev), default=str))\n"
        )
        kwargs = dict(kwargs, runner_timeout=RUNNER_TIMEOUT - 40)
        p = subprocess.run([str(LABCTL), "ctl", "--", str(VENV_BIN / "python"), "-c", code, json.dumps(kwargs)],
                           capture_output=True, text=True, timeout=RUNNER_TIMEOUT, env=env, cwd=str(REPO))
        assert p.returncode == 0, "ansible-runner crashed:\n%s\n%s" % (p.stdout[-3000:], p.stderr[-3000:])
        return json.loads(p.stdout.strip().splitlines()[-1])

    # ------------------------------------------------------------------ playbooks
    def play(self, data_dir, playbook, cmdline="", extravars=None, envvars=None):
        """A playbook (a path under the repository) on the lab inventory through ansible-runner, with the
        repository's ansible.cfg: (result, failures), failures being the failed or unreachable task events that
        were not ignored. cmdline and extravars are always passed (ansible-runner would reuse the env/ files an earlier
        run left in the same directory)."""
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        r = self.ansible_run(private_data_dir=str(data_dir), playbook=str(REPO / playbook),
                             inventory=str(self.inventory), cmdline=cmdline, extravars=extravars or {},
                             envvars=dict({"ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}, **(envvars or {})))
        failures = [e for e in r["events"] if e["event"] in ("runner_on_failed", "runner_on_unreachable")
                    and not (e.get("res") or {}).get("_ansible_ignore_errors")]
        return r, failures

    @staticmethod
    def changed_total(r):
        """How many tasks a run changed, over every host."""
        return sum((r["stats"] or {}).get("changed", {}).values())

    @staticmethod
    def messages(failures):
        """Every failed task's result, as one JSON text to search."""
        return json.dumps([f.get("res") for f in failures])

    def stage(self, *args):
        """lab/stage.sh ARGS (the image and the model on the head and, unless our deployment runs or --clean, the
        operators' old stack on every host, as their Sparks are before site.yml); returns the runtime image's tag."""
        staged = self.run([REPO / "lab" / "stage.sh", *args], timeout=900)
        assert staged.returncode == 0, staged.stderr[-3000:]
        return RUNTIME_IMAGE_FILE.read_text().strip()

    def site(self, data_dir, cmdline="", envvars=None):
        """site.yml with the inventory's settings (what a test leaves behind); fails the test unless it succeeds."""
        r, failures = self.play(data_dir, "site.yml", cmdline=cmdline, envvars=envvars)
        assert r["status"] == "successful" and not failures, failures[-3:] or r
        return r

    def deploy(self, data_dir, cmdline="", keep_workers=False):
        """Stage, then site.yml; returns the run. Staging takes the image off the workers (the transfer is proven
        again) unless keep_workers."""
        self.stage(*(["--keep-workers"] if keep_workers else []))
        return self.site(data_dir, cmdline=cmdline)

    # ------------------------------------------------------------------ on the hosts
    @staticmethod
    def fabric_ip(host, twin="a"):
        """A host's fabric address: twin A (enp1s0f1np1, 10.99.1.x) or twin B (enP2p1s0f1np1, 10.99.2.x)."""
        return "10.99.%d.%d" % (1 if twin == "a" else 2, 10 + int(host.split("-")[1]))

    def sh(self, host, command, timeout=120):
        """A shell command inside a lab host (labctl exec, no ssh): test plumbing, not the subject."""
        return self.host_exec(host, "sh", "-c", command, timeout=timeout)

    def systemctl(self, host, *args):
        return self.host_exec(host, "systemctl", *args).stdout.strip()

    def services(self, host):
        """What a deployment owns on a host: unit files, their states, running containers (IDs: a restart shows).
        The watchdogs' and the monitoring textfile's oneshot services are named without their state, their timers
        without their sub-state (running while the service runs): the timers start them every few seconds. Fields,
        not systemctl's columns (their width follows the widest value listed)."""
        return self.sh(host, "sha256sum /etc/systemd/system/sparkfleet-*.service 2>/dev/null; "
                             "systemctl list-units 'sparkfleet-*' --all --no-legend --plain 2>/dev/null"
                             " | awk '$1 ~ /-(watchdog|monitoring-textfile)[.]service$/ {print $1; next}"
                             " $1 ~ /[.]timer$/ {print $1, $2, $3; next} {print $1, $2, $3, $4}'; "
                             "docker ps --no-trunc --format '{{.ID}} {{.Image}} {{.Status}}' | sed 's/Up .*/Up/'").stdout

    # ------------------------------------------------------------------ the served API
    @staticmethod
    def api_key():
        return API_KEY_FILE.read_text().strip()

    def api(self, path, body=None, key=True, timeout=60):
        """A real request to the served API from the control namespace (the controller's side), with the lab's API
        key (key=True), another one (a string) or none (False): (HTTP code, body: JSON decoded when it is JSON),
        or (None, curl's error) when nothing answered."""
        argv = ["curl", "-sS", "-m", str(timeout), "-w", "\n%{http_code}"]
        if key:
            argv += ["-H", "Authorization: Bearer " + (self.api_key() if key is True else key)]
        if body is not None:
            argv += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
        p = self.ctl(*argv, API + path, timeout=timeout + 30)
        text, _, code = p.stdout.rpartition("\n")
        if not code.isdigit() or code == "000":
            return None, p.stderr.strip() or text
        try:
            return int(code), json.loads(text)
        except ValueError:
            return int(code), text

    def completion(self, prompt="Hello", max_tokens=2, timeout=60):
        """A real completion: (HTTP code or None, body)."""
        return self.api("/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens},
                        timeout=timeout)

    def serves(self, timeout=20):
        """Whether the API completes a real request now (an active unit is not enough: vLLM may still be loading).
        False before the first site.yml made the lab's API key: nothing of ours can serve yet (a fresh lab, as
        `scripts/faults.sh -k supervision` starts with)."""
        if not API_KEY_FILE.exists():
            return False
        return self.completion("up?", max_tokens=1, timeout=timeout)[0] == 200

    def status(self, data_dir):
        """playbooks/status.yml: (whether it exited 0, the head's messages as one text)."""
        r, failures = self.play(data_dir, "playbooks/status.yml")
        seen = json.dumps([e.get("res") for e in r["events"] if e["host"] == self.hosts[0]])
        return r["status"] == "successful" and not failures, seen

    @staticmethod
    def wait_for(predicate, limit, step=3):
        """Seconds until predicate() holds, polled every step seconds; None past limit (a bounded wait)."""
        t0 = time.time()
        while time.time() - t0 < limit:
            if predicate():
                return time.time() - t0
            time.sleep(step)
        return None

    def wait_serving(self, limit=300, fail=True):
        """Seconds until the API completes a request again (bounded); past the limit, fails the test (fail=True) or
        returns None."""
        t0 = time.time()
        while time.time() - t0 < limit:
            if self.completion("back", timeout=20)[0] == 200:
                return time.time() - t0
            time.sleep(3)
        if fail:
            pytest.fail("the API did not complete a request within %d s" % limit)
        return None

    # The session's first deployment made by a fixture (stage, then site.yml -v): {"run", "output"} (tests of the
    # deployment itself read it: the `deployment` fixture).
    deployment = None

    def ensure_serving(self, data_dir):
        """A lab that serves: at once when the API completes a real request, or once an engine that is starting
        serves, else deployed (stage + site.yml at -v; an image already on a worker stays there). Returns the site.yml
        run, or None when the lab served without one. The session's first deployment is kept (Lab.deployment)."""
        if self.serves():
            return None
        # an engine that is starting (a test before restarted it) serves sooner than a deployment would
        if self.systemctl(self.hosts[0], "is-active", "sparkfleet-vllm") in ("active", "activating") \
                and self.wait_serving(limit=180, fail=False) is not None:
            return None
        self.stage("--keep-workers")
        return self._deployed(data_dir, self.site(data_dir, cmdline="-v"))

    def _deployed(self, data_dir, run):
        if Lab.deployment is None:
            Lab.deployment = {"run": run, "output": self.run_output(data_dir)}
        return run

    @staticmethod
    def run_output(data_dir):
        """Everything a run through ansible-runner showed and recorded: the stdout a user saw and every event kept."""
        artifacts = Path(data_dir) / "artifacts"
        return [p.read_text(errors="replace") for pattern in ("*/stdout", "*/job_events/*")
                for p in sorted(artifacts.glob(pattern))]


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


@pytest.fixture(scope="module")
def staged(lab):
    """The lab as the operators' Sparks are before a deployment, or past it: the runtime image and the model on the
    head (lab/stage.sh --keep-workers: on a fresh lab also the old stack; a deployment that runs is left alone).
    Returns the runtime image's tag. For a module that runs a play needing the image or the model, not serving."""
    return lab.stage("--keep-workers")


@pytest.fixture(scope="module")
def serving(lab, tmp_path_factory):
    """A lab that serves, for a module that needs one and does not test the deployment itself: returns at once when
    the API completes a real request, else stages and runs site.yml (the run, or None when it already served)."""
    return lab.ensure_serving(tmp_path_factory.mktemp("serving"))


@pytest.fixture(scope="session")
def deployment(lab, tmp_path_factory):
    """A deployment of this session, for tests of the deployment itself (its run, its whole -v output):
    {"run", "output"}. The first one a `serving` fixture made (in a run of the whole suite: from the operators' old
    stack on a fresh lab), else one made now (lab/stage.sh, then site.yml -v, whatever the lab runs already)."""
    if Lab.deployment is None:
        data_dir = tmp_path_factory.mktemp("deployment")
        lab._deployed(data_dir, lab.deploy(data_dir, cmdline="-v"))
    return Lab.deployment


# --------------------------------------------------------------------------- the fault table
# A test marked @pytest.mark.fault(name=..., expected=...) injects a fault (or feeds bad input) and asserts the
# outcome a user must see. Every run writes tests/output/fault-table.md: fault, expected, observed, verdict, and the
# run (date and commit) on every row, so that scripts/fault-table.py can merge a partial run's rows into
# docs/fault-table.md with each row saying when it was observed.
# The `observe` fixture lets a test state what it saw (the message the user got, the time it took).

FAULT_TABLE = REPO / "tests" / "output" / "fault-table.md"
_FAULT_ROWS = []


@pytest.fixture
def observe(request):
    """observe(text): note what the user saw, for the fault table's 'observed' column."""
    notes = []
    request.node.user_properties.append(("observed", notes))
    return lambda text: notes.append(" ".join(str(text).split())[:300])


# --------------------------------------------------------------------------- lab states and the modules' order
# A module brings the lab to the state its tests need with its fixtures: `serving` (the lab serves; deployed when it
# does not), a fixture of its own that stages and runs site.yml (lab.deploy), or none (whatever the lab is). What it
# leaves behind is declared once, beside its tests, and checked when it ends (`_leaves_as_declared`):
#   pytestmark = [pytest.mark.lab, pytest.mark.leaves("serving")]
# "serving": the API completes a real request; "fresh": the lab was taken down and up (no image, no model, no
# deployment); "anything": whatever its tests end in (a stopped cluster, a lab past stop.yml). Without the mark a
# module leaves the lab as it found it: serving if it served.
# The order is computed from those two facts, never kept by hand: the modules' outcomes do not depend on it (run them
# in any order with SPARKLAB_ORDER=shuffle, or SPARKLAB_ORDER=shuffle:SEED), only the cost does: a module that needs a
# serving lab after one that left anything pays a deployment (about 60-100 s on CI's machine).
LEAVES = ("serving", "fresh", "anything")


def module_needs(items):
    """'serving' when a test of the module requests the `serving` fixture (itself or through another fixture), else
    None (the module's own fixtures bring what it needs)."""
    return "serving" if any("serving" in getattr(item, "fixturenames", ()) for item in items) else None


def module_leaves(items):
    """What the module declares it leaves (pytest.mark.leaves), None when it leaves the lab as it found it."""
    for item in items:
        mark = item.get_closest_marker("leaves")
        if mark is not None:
            if len(mark.args) != 1 or mark.args[0] not in LEAVES:
                raise pytest.UsageError("%s: pytest.mark.leaves takes one of %s, not %r"
                                        % (item.path.name, ", ".join(LEAVES), mark.args))
            return mark.args[0]
    return None


def order_rank(needs, leaves):
    """Where a module goes: a lab taken down and up first (every later module starts from it anyway); then the modules
    that need no particular state and leave the lab as found; the ones that deploy and leave it serving; the ones
    that need it serving and keep it so; then those that need it serving and may leave anything (each after the first
    pays a deployment); last those that need nothing and may leave anything."""
    if leaves == "fresh":
        return 0
    if needs is None:
        return {None: 1, "serving": 2, "anything": 5}[leaves]
    return 4 if leaves == "anything" else 3


def module_order(modules, needs, leaves, shuffle=None):
    """The modules (in collection order) sorted by order_rank, stable; shuffled instead with SPARKLAB_ORDER=shuffle."""
    if shuffle is not None:
        order = list(modules)
        random.Random(shuffle).shuffle(order)
        return order
    return sorted(modules, key=lambda m: order_rank(needs[m], leaves[m]))


def _shuffle_seed():
    order = os.environ.get("SPARKLAB_ORDER", "")
    if not order:
        return None
    kind, _, seed = order.partition(":")
    if kind != "shuffle" or seed and not seed.isdigit():
        raise pytest.UsageError("SPARKLAB_ORDER is 'shuffle' or 'shuffle:SEED' (a whole number), not %r" % order)
    return int(seed) if seed else int(time.time())


def pytest_collection_modifyitems(config, items):
    by_module = {}
    for item in items:
        by_module.setdefault(item.path, []).append(item)
    needs = {m: module_needs(its) for m, its in by_module.items()}
    leaves = {m: module_leaves(its) for m, its in by_module.items()}
    seed = _shuffle_seed()
    if seed is not None:
        config.stash[_SEED] = seed
    rank = {m: n for n, m in enumerate(module_order(list(by_module), needs, leaves, seed))}
    items.sort(key=lambda item: rank[item.path])     # stable: a module's tests keep their order


_SEED = pytest.StashKey()


def pytest_report_header(config):
    seed = config.stash.get(_SEED, None)
    return None if seed is None else "lab modules shuffled: SPARKLAB_ORDER=shuffle:%d repeats this order" % seed


@pytest.fixture(scope="module", autouse=True)
def _leaves_as_declared(request):
    """After a lab module whose tests all passed: the lab serves if the module declares it leaves it serving, or found
    it serving and declares nothing. A module that leaves it otherwise makes the next one pay a deployment: its
    declaration (pytest.mark.leaves) is then wrong, and this says which module it was."""
    module = request.node
    if module.get_closest_marker("lab") is None or _skip_reason():
        yield
        return
    lab = request.getfixturevalue("lab")
    declared = module_leaves([module])
    before = lab.serves()
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed != failed or declared in ("fresh", "anything"):
        return
    if declared == "serving" or before:
        if lab.wait_serving(limit=180, fail=False) is None:
            pytest.fail("%s left the lab not serving (it %s): declare pytest.mark.leaves(\"anything\") in the module, "
                        "or leave it serving" % (module.path.name, "declares leaves(\"serving\")" if declared
                                                  else "found it serving and declares no pytest.mark.leaves"))


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
                        item.nodeid, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())))


def _tested_commit():
    """The commit the tests ran from, with '+changes' when the checkout's tracked files differ from it."""
    git = ["git", "-C", str(REPO)]
    try:
        head = subprocess.run(git + ["rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=60)
        changes = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                 text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "commit unknown"
    if head.returncode != 0 or not head.stdout.strip():
        return "commit unknown"
    return head.stdout.strip() + (" +changes" if changes.stdout.strip() else "")


def pytest_sessionfinish(session, exitstatus):
    if not _FAULT_ROWS:
        return
    FAULT_TABLE.parent.mkdir(parents=True, exist_ok=True)
    cell = lambda text: str(text).replace("|", "\\|")  # noqa: E731
    commit = _tested_commit()
    lines = ["# Fault and bad-input table", "",
             "Written by the last run of the lab tests marked `fault` (%s, %d rows, commit %s). Full suite:"
             " `scripts/faults.sh`; `scripts/fault-table.py` merges these rows into docs/fault-table.md."
             % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), len(_FAULT_ROWS), commit), "",
             "| fault / bad input | expected | observed | verdict | test | run |", "|---|---|---|---|---|---|"]
    lines += ["| %s |" % " | ".join(cell(c) for c in row[:5] + ("%s, %s" % (row[5], commit),)) for row in _FAULT_ROWS]
    FAULT_TABLE.write_text("\n".join(lines) + "\n")
