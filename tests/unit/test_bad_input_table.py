"""tests/unit/conftest.py's bad-input table: the same rows, in the same order, whether the unit tests run in one
process or spread over pytest-xdist workers (CI's unit stage runs `-n 2`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parent / "conftest.py"
COLUMNS = "| fault / bad input | expected | observed | verdict | test | run |"

# Two files, so that a run on two workers splits them; each row's verdict and observed text come from its own test.
TESTS = {
    "test_b.py": '''
import pytest

@pytest.mark.bad_input(name="a port", expected="refused, naming the port")
@pytest.mark.parametrize("port", ["0", "70000", "x|y"])
def test_port(port, observe):
    observe("port %s refused" % port)

@pytest.mark.bad_input(name="a mode", expected="refused")
def test_mode_fails():
    assert 1 == 2, "the mode was accepted"

def test_not_a_bad_input():
    pass
''',
    "test_a.py": '''
import pytest

@pytest.mark.bad_input(name="a path", expected="refused, naming the path")
@pytest.mark.parametrize("path", ["/tmp/x", "rel"])
def test_path(path, observe):
    observe("path %s refused" % path)

@pytest.mark.bad_input(expected="skipped here")
def test_skipped():
    pytest.skip("not on this machine")
''',
}


def _run(tmp_path, name, *args):
    """Run the little suite in a fresh tree laid out like the repo's (tests/unit/conftest.py writes
    tests/output/bad-input-table.md two levels up); return the table's rows without their run time."""
    root = tmp_path / name
    unit = root / "tests" / "unit"
    unit.mkdir(parents=True)
    shutil.copy(CONFTEST, unit / "conftest.py")
    for file, text in TESTS.items():
        (unit / file).write_text(text)
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    bad_input(name, expected): a bad input\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SPARKFLEET_"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "tests/unit", *args], cwd=root, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]   # test_mode_fails fails
    assert "1 failed, 6 passed, 1 skipped" in proc.stdout, proc.stdout[-3000:]
    table = root / "tests" / "output" / "bad-input-table.md"
    assert table.is_file(), "no table after pytest %s:\n%s" % (" ".join(args), proc.stdout[-3000:])
    text = table.read_text()
    assert COLUMNS in text and re.search(r"\(\d{4}-\d\d-\d\d \d\d:\d\d UTC, 7 rows, commit unknown\)", text), text
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and ln != COLUMNS]
    return [re.sub(r"\| \d{4}-\d\d-\d\d \d\d:\d\d UTC, commit unknown \|$", "| RUN |", ln) for ln in rows]


def test_the_table_is_the_same_serially_and_on_two_workers(tmp_path):
    serial = _run(tmp_path, "serial")
    assert serial == [
        "| a path: /tmp/x | refused, naming the path | path /tmp/x refused | pass "
        "| tests/unit/test_a.py::test_path[/tmp/x] | RUN |",
        "| a path: rel | refused, naming the path | path rel refused | pass "
        "| tests/unit/test_a.py::test_path[rel] | RUN |",
        "| test_skipped | skipped here | skipped | skipped | tests/unit/test_a.py::test_skipped | RUN |",
        "| a mode | refused | AssertionError: the mode was accepted | FAIL "
        "| tests/unit/test_b.py::test_mode_fails | RUN |",
        "| a port: 0 | refused, naming the port | port 0 refused | pass | tests/unit/test_b.py::test_port[0] | RUN |",
        "| a port: 70000 | refused, naming the port | port 70000 refused | pass "
        "| tests/unit/test_b.py::test_port[70000] | RUN |",
        "| a port: x\\|y | refused, naming the port | port x\\|y refused | pass "
        "| tests/unit/test_b.py::test_port[x\\|y] | RUN |",
    ], serial
    pytest.importorskip("xdist")
    assert _run(tmp_path, "xdist", "-n", "2") == serial
