"""Shared unit-test harness: run a module's main() in-process and capture its result."""

from __future__ import annotations

import json
import os
import re
import threading
import time

import pytest
from hypothesis import settings

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


# Property tests draw the same examples on every run (a suite that passes passes again); a test's own settings()
# keep their other values. SPARKFLEET_PROPERTY_EXAMPLES=N draws N fresh random examples per test instead.
if os.environ.get("SPARKFLEET_PROPERTY_EXAMPLES"):
    settings.register_profile("sparkfleet", max_examples=int(os.environ["SPARKFLEET_PROPERTY_EXAMPLES"]))
else:
    settings.register_profile("sparkfleet", derandomize=True)
settings.load_profile("sparkfleet")


class _ModuleExit(Exception):
    def __init__(self, result):
        super().__init__(result)
        self.result = result


def _exit_json(self, **kwargs):
    kwargs.setdefault("changed", False)
    raise _ModuleExit(kwargs)


def _fail_json(self, msg, **kwargs):
    kwargs["failed"] = True
    kwargs["msg"] = msg
    raise _ModuleExit(kwargs)


@pytest.fixture
def main_sleeps(monkeypatch):
    """The waits the code under test asked for on the test's own thread, in seconds, in order.

    Tests judge a wait by what the code decided (no wait at all, one poll, the deadline it chose), never by the
    wall clock of a shared machine: helper threads that play a writer or a late file sleep as they please and
    are not counted."""
    asked = []
    real_sleep = time.sleep
    main = threading.current_thread()

    def sleep(seconds):
        if threading.current_thread() is main:
            asked.append(seconds)
        real_sleep(seconds)
    monkeypatch.setattr(time, "sleep", sleep)
    return asked


class NodeCommands(object):
    """The one stand-in for a node's commands in module tests (AnsibleModule.run_command and get_bin_path).

    ``answer`` says what each command prints, as (rc, stdout, stderr): one tuple for every command, a dict from the
    tool's name to a tuple or a callable, a list answered in order (then (0, "", "")), or a callable. A callable gets
    the tool's own argv (``unwrap``: coreutils' ``timeout`` and ``bash -c '"$@" [2>&1] | tail -c N'`` taken off, as
    the real ones would act: the output merged and cut) or, with ``unwrap=False``, the argv as the module ran it.
    ``bins`` (a set, read at each call) are the tools found in ``bin_dir`` (None: every tool but ``missing``).
    Kept per call: ``ran`` (argv as run), ``calls`` (the tools' argv), ``limits`` (timeout's seconds, or None),
    ``kwargs`` (run_command's keyword arguments: data, environ_update...)."""

    def __init__(self, answer, bins=None, bin_dir="/usr/bin", unwrap=True, missing=()):
        self.answer = answer
        self.bins = bins
        self.missing = set(missing)
        self.bin_dir = bin_dir
        self.unwrap = unwrap
        self.ran, self.calls, self.limits, self.kwargs = [], [], [], []

    def bin_path(self, module, name, required=False, opt_dirs=None):
        found = name in self.bins if self.bins is not None else name not in self.missing
        return self.bin_dir.rstrip("/") + "/" + name if found else None

    def run(self, module, argv, **kwargs):
        argv = list(argv)
        self.ran.append(argv)
        self.kwargs.append(kwargs)
        limit, script = None, None
        if os.path.basename(str(argv[0])) == "timeout":
            at = 3 if argv[1] == "-k" else 1
            limit, argv = float(argv[at]), argv[at + 1:]
        if os.path.basename(str(argv[0])) == "bash" and argv[1] == "-c" and '"$@"' in argv[2]:
            script, argv = argv[2], argv[4:]
        self.limits.append(limit)
        self.calls.append(argv)
        rc, out, err = self._answer(argv if self.unwrap else self.ran[-1])
        if script is not None:
            if "2>&1" in script:
                out, err = out + err, ""
            tail = re.search(r"tail -c (\d+)", script)
            if tail:
                out = out.encode("utf-8", "surrogateescape")[-int(tail.group(1)):].decode("utf-8", "surrogateescape")
        return rc, out, err

    def _answer(self, argv):
        answer = self.answer
        if isinstance(answer, dict):
            answer = answer[os.path.basename(str(argv[0]))]
        elif isinstance(answer, list):
            return answer.pop(0) if answer else (0, "", "")
        return answer(argv) if callable(answer) else answer


@pytest.fixture
def node_commands(monkeypatch):
    """install(answer, bins=None, bin_dir="/usr/bin", unwrap=True, missing=()) -> NodeCommands, patched into
    AnsibleModule."""
    def install(answer, **options):
        fake = NodeCommands(answer, **options)

        def run_command(module, argv, **kwargs):
            return fake.run(module, argv, **kwargs)

        def get_bin_path(module, name, required=False, opt_dirs=None):
            return fake.bin_path(module, name, required, opt_dirs)
        monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
        monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
        return fake
    return install


@pytest.fixture
def run_module(monkeypatch):
    """Return a callable: run_module(module, args, check_mode=False) -> result dict.

    The result is what the module passed to exit_json/fail_json; failures carry failed=True.
    The result is round-tripped through JSON so tests see what Ansible would see.
    """
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)

    def _run(module, args, check_mode=False):
        args = dict(args)
        if check_mode:
            args["_ansible_check_mode"] = True
        with patch_module_args(args):
            try:
                module.main()
            except _ModuleExit as exc:
                return json.loads(json.dumps(exc.result, default=str))
        raise AssertionError("module returned without calling exit_json or fail_json")

    return _run


# --------------------------------------------------------------------------- the bad-input table
# A unit test marked @pytest.mark.bad_input(name=..., expected=...) feeds one bad input (a variable, a filter or module
# option) and asserts the refusal a user must see. Every run writes tests/output/bad-input-table.md with the same
# columns as the lab's fault table (input, expected, observed, verdict, test, run); scripts/fault-table.py merges it
# into the "Bad input" section of docs/fault-table.md. A parametrized test gives each case an id: it is the row's input.
# The `observe` fixture records what the user saw (the refusal's text).

import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

from xdist import is_xdist_worker  # noqa: E402  (pytest-xdist: CI's unit stage runs on every core)

BAD_INPUT_TABLE = Path(__file__).resolve().parents[2] / "tests" / "output" / "bad-input-table.md"
_BAD_ROWS = []   # (input, expected, observed, verdict, test id, run time), one per test, in the order they ended
BAD_INPUT_PROPERTY = "bad_input_row"


@pytest.fixture
def observe(request):
    """observe(text): note what the user saw, for the bad-input table's 'observed' column."""
    notes = []
    request.node.user_properties.append(("observed", notes))

    def note(text):
        notes.append(" ".join(str(text).split())[:300])
    return note


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach the test's row to its report: under pytest-xdist the report (user_properties included) goes from the
    worker that ran the test to the controller, which writes the table (pytest_runtest_logreport below)."""
    outcome = yield
    report = outcome.get_result()
    mark = item.get_closest_marker("bad_input")
    if mark is None or report.when != "call" and not (report.when == "setup" and report.failed):
        return
    notes = [n for k, v in item.user_properties if k == "observed" for n in v]
    if report.passed:
        verdict, seen = "pass", "; ".join(notes) or "as expected"
    elif report.skipped:
        verdict, seen = "skipped", "skipped"
    else:
        lines = [ln for ln in str(report.longrepr).splitlines() if ln.startswith("E ")]
        verdict, seen = "FAIL", " ".join((lines[0] if lines else "error")[1:].split())[:300]
    name = mark.kwargs.get("name") or item.name
    case = getattr(getattr(item, "callspec", None), "id", None)
    report.user_properties.append((BAD_INPUT_PROPERTY, [
        "%s: %s" % (name, case) if case else name, mark.kwargs.get("expected", ""), seen, verdict, item.nodeid,
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())]))


def pytest_runtest_logreport(report):
    """Collect the rows where the table is written: in the one process of a serial run, on xdist's controller."""
    _BAD_ROWS.extend(tuple(v) for k, v in report.user_properties if k == BAD_INPUT_PROPERTY)


def _commit():
    git = ["git", "-C", str(BAD_INPUT_TABLE.parents[2])]
    try:
        head = subprocess.run(git + ["rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=60,
                              check=False)
        dirty = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                               timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return "commit unknown"
    if head.returncode != 0 or not head.stdout.strip():
        return "commit unknown"
    return head.stdout.strip() + (" +changes" if dirty.stdout.strip() else "")


def pytest_sessionfinish(session, exitstatus):
    if not _BAD_ROWS or is_xdist_worker(session):   # a worker's rows went to the controller with its reports
        return
    rows = sorted(_BAD_ROWS, key=lambda row: row[4])   # by test id: the same file whichever worker ran what
    BAD_INPUT_TABLE.parent.mkdir(parents=True, exist_ok=True)

    def cell(text):
        return str(text).replace("|", "\\|").replace("\n", " ")
    commit = _commit()
    lines = ["# Bad-input table", "",
             "Written by the last run of the unit tests marked `bad_input` (%s, %d rows, %s);"
             " `scripts/fault-table.py` merges these rows into docs/fault-table.md."
             % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), len(rows),
                commit if commit == "commit unknown" else "commit " + commit), "",
             "| fault / bad input | expected | observed | verdict | test | run |", "|---|---|---|---|---|---|"]
    lines += ["| %s |" % " | ".join(cell(c) for c in row[:5] + ("%s, %s" % (row[5], commit),)) for row in rows]
    BAD_INPUT_TABLE.write_text("\n".join(lines) + "\n")
