"""vllm_wait's logic (module_utils/engine/_vllm_wait.py): option checks, bounded reads, replaced files.

Property-based (hypothesis) for the options: whatever a task passes, the module answers (a refusal naming the
option, or a result), never a traceback.
"""

from __future__ import annotations

import calendar
import math
import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine import _vllm_wait
from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine._vllm_wait import (
    FileSource,
    since_epoch,
    tail_lines,
)
from ansible_collections.sparkfleet.vllm.plugins.modules import vllm_wait

# database=None: no .hypothesis directory in the checkout; failures print their example.
PROPS = settings(max_examples=150, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


class _Module(object):
    def fail_json(self, **kwargs):
        raise AssertionError(kwargs)


# ---- since ----

def test_since_takes_local_times_systemd_stamps_epochs_and_ago():
    local = time.mktime((2026, 11, 29, 10, 55, 0, 0, 0, -1))
    assert since_epoch("2026-11-29 10:55:00") == local
    assert since_epoch("2026-11-29T10:55") == local
    assert since_epoch("Sun 2026-11-29 10:55:00 UTC") == calendar.timegm((2026, 11, 29, 10, 55, 0, 0, 0, 0))
    assert since_epoch("@1796036100") == since_epoch("1796036100") == 1796036100
    assert since_epoch("10m", now=1000.0) == since_epoch("-10m", now=1000.0) == 400
    for bad in ("", "yesterday", "10 min ago", "2026-13-40 99:99:99", "@", "1e9", "--since=x"):
        assert since_epoch(bad) is None, bad


# ---- reading from the end ----

def test_tail_lines_keeps_the_newest_lines():
    text = "".join("%d\n" % i for i in range(10))
    assert tail_lines(text, 3) == ("7\n8\n9\n", len(text) - 6)
    assert tail_lines(text, 50) == (text, 0)


def test_a_first_read_starts_at_most_max_lines_before_the_end(tmp_path):
    log = tmp_path / "serve.log"
    log.write_bytes(b"x\n" * (_vllm_wait.MAX_LINES + 500) + b"last line\n")
    src = FileSource(_Module(), str(log), 0, 8 * 1024 * 1024)
    text = src.read()
    assert text.count("\n") == _vllm_wait.MAX_LINES
    assert text.endswith("last line\n")
    assert src.skipped_bytes == 501 * 2


def _read_all(src):
    out = []
    while True:
        text = src.read(65536)
        if not text:
            return "".join(out)
        out.append(text)


def test_a_file_replaced_by_a_longer_one_is_read_from_its_start(tmp_path):
    log = tmp_path / "serve.log"
    log.write_text("old run line 0\nold run line 1\n")
    src = FileSource(_Module(), str(log), 0, 1024 * 1024)
    assert _read_all(src) == "old run line 0\nold run line 1\n"
    new = tmp_path / "new.log"
    new.write_text("".join("new run line %d\n" % i for i in range(20)))
    os.rename(str(new), str(log))  # logrotate's create, or a copy over it: another inode, longer
    assert _read_all(src).startswith("new run line 0\n")
    assert src.replaced == 1


def test_a_file_rewritten_in_place_with_more_bytes_is_read_from_its_start(tmp_path):
    log = tmp_path / "serve.log"
    log.write_text("A" * 100 + "\n")
    src = FileSource(_Module(), str(log), 0, 1024 * 1024)
    _read_all(src)
    with open(str(log), "r+") as fh:  # the same inode, truncated and written again, longer than before
        fh.truncate(0)
        fh.write("B" * 300 + "\n")
    assert _read_all(src) == "B" * 300 + "\n"
    assert src.replaced == 1


def test_a_growing_file_is_not_taken_for_a_new_one(tmp_path):
    log = tmp_path / "serve.log"
    log.write_text("one\n")
    src = FileSource(_Module(), str(log), 0, 1024 * 1024)
    _read_all(src)
    with open(str(log), "a") as fh:
        fh.write("two\n")
    assert _read_all(src) == "two\n" and src.replaced == 0


def test_bounded_runs_the_tool_through_tail_c_under_timeout():
    seen = []

    class Runner(object):
        def bin(self, name):
            return "/bin/" + name

        def run(self, argv, timeout=None, kill_after=None):
            seen.append((argv, timeout, kill_after))

    _vllm_wait.bounded(Runner(), ["/bin/journalctl", "-u", "x"], 1000, 4.2, merge_stderr=True)
    argv, timeout, kill_after = seen[0]
    assert argv[:2] == ["/bin/bash", "-c"] and argv[3:] == ["bash", "/bin/journalctl", "-u", "x"]
    assert 'set -o pipefail; "$@" 2>&1 | tail -c 1001' == argv[2]
    assert (timeout, kill_after) == (5, 2)


# ---- options: every refusal names its option; no input makes a traceback ----

_BASE = {"log_file": "/nonexistent-sparkfleet-dir/serve.log", "timeout": 0}
_OPTIONS = ["log_file", "unit", "container", "since_offset", "cursor", "since", "url", "api_key", "model",
            "validate_certs", "timeout", "fail_on_timeout", "stall_timeout", "poll_interval", "rank_names",
            "max_bytes", "setting_names"]
_VALUES = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(10 ** 30), max_value=10 ** 30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "99999", "http://h:99999", "http://h:0", "https://[::1]:70000/",
                     "a\nb", "k\u00e9y", "--help", "-x", "@", "10m", "Sun 2026-11-29 10:55:00 UTC", "", " "]),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=8), st.one_of(st.text(max_size=8), st.integers(), st.none()), max_size=3),
)


@pytest.fixture
def quiet_module(monkeypatch, node_commands):
    """The module without its I/O: tools resolve, commands and the API are never reached, one read and out."""
    def no_command(args):
        raise AssertionError("a command ran: %r" % (args,))
    node_commands(no_command, unwrap=False)
    monkeypatch.setattr(_vllm_wait.StartupWaiter, "step", lambda self: "read")


@PROPS
@given(option=st.sampled_from(_OPTIONS), value=_VALUES)
def test_any_value_of_any_option_is_answered_and_a_refusal_names_it(run_module, quiet_module, option, value):
    args = dict(_BASE)
    args[option] = value
    res = run_module(vllm_wait, args)  # an exception other than the module's answer fails the test
    if res.get("failed"):
        assert option in res["msg"], (option, value, res["msg"])
        if option == "api_key" and isinstance(value, str) and len(value) > 3:
            assert value not in res["msg"]


@pytest.mark.parametrize("option, value", [
    ("poll_interval", float("nan")), ("poll_interval", "nan"), ("poll_interval", "inf"), ("poll_interval", 0),
    ("poll_interval", 1e9), ("timeout", 10 ** 12), ("stall_timeout", -1), ("max_bytes", 2 ** 40),
    ("since_offset", -3), ("url", "http://10.99.0.11:99999"), ("url", "http://10.99.0.11:0"),
    ("api_key", "line\nbreak"), ("api_key", "cl\u00e9"), ("api_key", "two words"), ("unit", "-x"),
    ("container", "--help"), ("cursor", "a\nb"), ("since", "yesterday"), ("rank_names", {"10.0.0.1": 3}),
    # ansible-core's own int check raises on these instead of refusing them
    ("max_bytes", float("inf")), ("timeout", "nan"), ("since_offset", "-INF"),
])
def test_unusable_values_are_refused_at_once_naming_the_option(run_module, quiet_module, main_sleeps, option, value):
    args = dict(_BASE, url="http://10.99.0.11:30000", timeout=600)
    args.pop("log_file")
    args[option] = value
    res = run_module(vllm_wait, args)
    assert res.get("failed") is True and option in res["msg"], res
    assert "Traceback" not in res["msg"]
    assert main_sleeps == []  # refused before any wait, not after timeout


def test_poll_interval_must_be_a_finite_number():
    p = dict(timeout=1, stall_timeout=0, since_offset=0, poll_interval=math.inf, max_bytes=65536, url=None,
             api_key=None, unit=None, container=None, cursor=None, since=None, log_file=None, rank_names={},
             setting_names={})
    assert "poll_interval" in _vllm_wait.option_problem(p)[0]
    p["poll_interval"] = 0.5
    assert _vllm_wait.option_problem(p) is None
