"""Rules the tests keep themselves (issue 43 item 5): no assert times itself; one stand-in for node commands; one
way to run ansible-playbook (tests/unit/support/playbook.py).

CI and this machine are shared 2-core boxes whose load swings from 1 to 16: a bound on how long something took is
either loose enough to test nothing or a flake. A test judges what the code decided instead (no wait at all, the
waits it asked for through the ``main_sleeps`` fixture, the deadline it gave a command, the state it ended in), and
figures go to bench/ as ratios measured side by side. Lower bounds stay allowed: load only makes things longer
("never killed before its grace" cannot flake).

The check reads the tests' syntax trees: a reading is a call of time.time/monotonic/perf_counter, a name assigned
from an expression holding one (in the same function), or a result's ``elapsed``; an upper bound is ``reading < x``,
``reading <= x``, ``x > reading`` or ``x >= reading``, also inside a chain such as ``0.3 < reading < 5``.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEST_DIRS = ("tests/unit", "tests/integration", "tests/lab")
CLOCKS = {"time", "monotonic", "perf_counter"}
RESULT_TIMES = {"elapsed"}


def _is_clock_call(node):
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CLOCKS
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "time")


def _reads_clock(node, derived):
    """Whether an expression is a clock reading, or arithmetic on one: a call of the clock, a name derived from one, a
    result's elapsed, and +, -, *, /, round(), abs(), float(), int(), min(), max() of those. A reading passed into
    another call (restarts_since(lab, t0)) gives that call's result, not a time."""
    if _is_clock_call(node):
        return True
    if isinstance(node, ast.Name):
        return node.id in derived
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value in RESULT_TIMES
    if isinstance(node, ast.BinOp):
        return _reads_clock(node.left, derived) or _reads_clock(node.right, derived)
    if isinstance(node, ast.UnaryOp):
        return _reads_clock(node.operand, derived)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
            "round", "abs", "float", "int", "min", "max"):
        return any(_reads_clock(a, derived) for a in node.args)
    return False


def _derived_names(func):
    """Names assigned (in this function) from an expression that reads the clock, to a fixed point."""
    derived = set()
    changed = True
    while changed:
        changed = False
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and _reads_clock(node.value, derived):
                targets = []
                for t in node.targets:
                    targets.extend(t.elts if isinstance(t, ast.Tuple) else [t])
                for t in targets:
                    if isinstance(t, ast.Name) and t.id not in derived:
                        derived.add(t.id)
                        changed = True
    return derived


def _deadline_names(func):
    """A deadline (``deadline = time.monotonic() + 30``) bounds a wait loop, never an assert: left out on purpose
    only where its name says so."""
    return {n for n in _derived_names(func) if "deadline" in n}


def upper_bounds(source, filename="<test>"):
    """(line, text) of every assert in ``source`` that bounds a wall-clock reading from above."""
    tree = ast.parse(source, filename)
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        derived = _derived_names(func) - _deadline_names(func)
        for node in ast.walk(func):
            if not isinstance(node, ast.Assert):
                continue
            for cmp in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                operands = [cmp.left] + list(cmp.comparators)
                for i, op in enumerate(cmp.ops):
                    left, right = operands[i], operands[i + 1]
                    if any(isinstance(x, ast.Name) and "deadline" in x.id for x in (left, right)):
                        continue        # a wait loop's guard ("it never came"), not a measure of speed
                    if ((isinstance(op, (ast.Lt, ast.LtE)) and _reads_clock(left, derived))
                            or (isinstance(op, (ast.Gt, ast.GtE)) and _reads_clock(right, derived))):
                        found.append((node.lineno, ast.get_source_segment(source, node)))
                        break
    return found


def _test_files():
    for d in TEST_DIRS:
        yield from sorted((ROOT / d).rglob("*.py"))


@pytest.mark.parametrize("path", list(_test_files()), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_assert_bounds_the_wall_clock_from_above(path):
    found = upper_bounds(path.read_text(encoding="utf-8"), str(path))
    assert not found, "%s: timed assertions (judge what the code decided, measure in bench/): %s" % (
        path.relative_to(ROOT), found)


@pytest.mark.parametrize("snippet", [
    "def t():\n    t0 = time.time()\n    run()\n    assert time.time() - t0 < 5\n",
    "def t():\n    t0 = time.monotonic()\n    run()\n    took = time.monotonic() - t0\n    assert took < 3, took\n",
    "def t():\n    res = run()\n    assert res['elapsed'] < 2\n",
    "def t():\n    start = time.perf_counter()\n    run()\n    assert 10 > time.perf_counter() - start\n",
    "def t():\n    a = time.time()\n    b = a + 1\n    assert ok and 0.3 < b <= 5\n",
])
def test_the_check_finds_a_timed_assert(snippet):
    assert upper_bounds(snippet)


@pytest.mark.parametrize("snippet", [
    "def t():\n    res = run()\n    assert res['exit_s'] >= 2.0\n",                        # a lower bound
    "def t():\n    deadline = time.time() + 30\n    while time.time() < deadline:\n        pass\n",   # a wait loop
    "def t():\n    deadline = time.time() + 9\n    while not ok():\n        assert time.time() < deadline, 'never'\n",
    "def t(main_sleeps):\n    run()\n    assert sum(main_sleeps) < 4\n",                  # what the code asked for
    "def t():\n    assert time.time() - os.stat(p).st_mtime >= 1000\n",                      # an age, from below
])
def test_the_check_lets_decisions_and_lower_bounds_through(snippet):
    assert not upper_bounds(snippet)


# ---- one stand-in for a node's commands (issue 43 item 5) ----

def _patches_run_command(source, filename):
    """Lines where ``source`` replaces AnsibleModule.run_command itself (setattr with the name "run_command")."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "setattr"
                and any(isinstance(a, ast.Constant) and a.value == "run_command" for a in node.args)):
            found.append(node.lineno)
    return found


def test_module_tests_share_one_stand_in_for_node_commands():
    # tests/unit/conftest.py's NodeCommands (the node_commands fixture) is the one fake run_command: it unwraps the
    # timeout and tail wrappers as the real tools act and records argv, limits and stdin the same way for every test.
    offenders = {}
    for path in (ROOT / "tests" / "unit").rglob("*.py"):
        if path.name == "conftest.py" and path.parent == ROOT / "tests" / "unit":
            continue
        lines = _patches_run_command(path.read_text(encoding="utf-8"), str(path))
        if lines:
            offenders[str(path.relative_to(ROOT))] = lines
    assert not offenders, "use the node_commands fixture instead of patching run_command: %s" % offenders


def test_the_stand_in_check_sees_a_hand_rolled_fake():
    assert _patches_run_command(
        "def f(monkeypatch):\n    monkeypatch.setattr(basic.AnsibleModule, 'run_command', lambda *a, **k: (0, '', ''))\n",
        "<t>") == [2]


_PROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}


def _starts_ansible_playbook(source, filename):
    """Lines where ``source`` starts ansible-playbook through subprocess itself (the program's name in the call)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _PROCESS_CALLS
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "subprocess"
                and any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                        and n.value.rstrip("/").endswith("ansible-playbook")
                        for a in node.args[:1] for n in ast.walk(a))):
            found.append(node.lineno)
    return found


def test_unit_tests_run_ansible_playbook_one_way():
    # tests/unit/support/playbook.py's run_playbook: the repository's ansible.cfg, none of the caller's ANSIBLE_* or
    # SPARKFLEET_* settings, the report under the test's directory, a bound. (test_first_hour.py runs the
    # ansible-playbook of a fresh venv as a new user would, through its own shell helper: that is its subject.)
    offenders = {}
    for path in (ROOT / "tests" / "unit").rglob("*.py"):
        if path == ROOT / "tests" / "unit" / "support" / "playbook.py":
            continue
        lines = _starts_ansible_playbook(path.read_text(encoding="utf-8"), str(path))
        if lines:
            offenders[str(path.relative_to(ROOT))] = lines
    assert not offenders, "run ansible-playbook through tests/unit/support/playbook.py's run_playbook: %s" % offenders


@pytest.mark.parametrize("snippet", [
    "import subprocess\nsubprocess.run([str(BIN / 'ansible-playbook'), '-i', 'h', 'p.yml'])\n",
    "import subprocess\nsubprocess.Popen([os.path.join(d, 'ansible-playbook'), 'p.yml'], env=e)\n",
])
def test_the_runner_check_sees_a_home_made_runner(snippet):
    assert _starts_ansible_playbook(snippet, "<t>") == [2]
