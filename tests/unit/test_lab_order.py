"""The lab test modules' order comes from what each needs and leaves (tests/integration/conftest.py), not a list.

Issue 43 item 5: the modules' order was hand-kept (SERVING_AFTER, FIRST); a module that needed a deployed lab passed
only after another had deployed it. Now each module brings the lab to the state it needs with its fixtures
(`staged`, `serving`, `deployment`), declares what it leaves (pytest.mark.leaves, checked when it ends), and the
order is derived from those facts for cost alone.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFTEST = REPO / "tests" / "integration" / "conftest.py"


def _conftest():
    spec = importlib.util.spec_from_file_location("_lab_conftest_under_test", CONFTEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lab_conftest = _conftest()


def test_a_lab_taken_down_goes_first_and_a_module_that_may_leave_anything_after_those_that_need_serving():
    needs = {"a": None, "b": "serving", "c": None, "d": "serving", "e": None, "f": None, "g": "serving"}
    leaves = {"a": "anything", "b": "anything", "c": None, "d": None, "e": "fresh", "f": "serving", "g": None}
    order = lab_conftest.module_order(list("abcdefg"), needs, leaves)
    # e (down and up) first; c (neutral); f (deploys, leaves serving); d, g (need serving, keep it, file order);
    # b (needs serving, may leave anything); a (needs nothing, may leave anything) last
    assert order == ["e", "c", "f", "d", "g", "b", "a"]


def test_a_shuffled_order_is_every_module_once_and_repeats_with_its_seed():
    modules = ["m%d" % n for n in range(12)]
    none = dict.fromkeys(modules)
    one = lab_conftest.module_order(modules, none, none, shuffle=7)
    assert sorted(one) == sorted(modules) and one != modules
    assert lab_conftest.module_order(modules, none, none, shuffle=7) == one


@pytest.mark.parametrize("value, ok", [("", None), ("shuffle", True), ("shuffle:42", 42), ("random", False),
                                       ("shuffle:x", False)])
def test_sparklab_order_takes_shuffle_or_shuffle_with_a_seed(monkeypatch, value, ok):
    monkeypatch.setenv("SPARKLAB_ORDER", value)
    if ok is False:
        with pytest.raises(pytest.UsageError, match="SPARKLAB_ORDER is 'shuffle' or 'shuffle:SEED'"):
            lab_conftest._shuffle_seed()
    elif ok is None:
        assert lab_conftest._shuffle_seed() is None
    elif ok is True:
        assert isinstance(lab_conftest._shuffle_seed(), int)
    else:
        assert lab_conftest._shuffle_seed() == ok


class _Item:
    def __init__(self, name, fixturenames=(), leaves=None):
        self.path = Path(name)
        self.fixturenames = list(fixturenames)
        self._leaves = leaves

    def get_closest_marker(self, name):
        if name != "leaves" or self._leaves is None:
            return None
        return pytest.mark.leaves(*self._leaves).mark


def test_needs_come_from_the_fixtures_and_leaves_from_the_mark():
    assert lab_conftest.module_needs([_Item("t.py", ["lab"]), _Item("t.py", ["lab", "serving"])]) == "serving"
    assert lab_conftest.module_needs([_Item("t.py", ["lab", "staged"])]) is None
    assert lab_conftest.module_leaves([_Item("t.py", leaves=("anything",))]) == "anything"
    assert lab_conftest.module_leaves([_Item("t.py")]) is None
    with pytest.raises(pytest.UsageError, match="pytest.mark.leaves takes one of serving, fresh, anything"):
        lab_conftest.module_leaves([_Item("t.py", leaves=("stopped",))])


def test_the_integration_conftest_names_no_test_module():
    """No list of modules to run first or after another: the order is computed (this fails on SERVING_AFTER)."""
    names = [node.value for node in ast.walk(ast.parse(CONFTEST.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and re.fullmatch(r"test_\w+(\.py)?", node.value)]
    assert names == [], names


# Loaded into the collecting pytest: each module in the order it will run, with the fixtures its tests request and
# its pytest.mark.leaves, as pytest itself resolves them (not read from the source text).
_PROBE = """
import json


def pytest_collection_finish(session):
    modules = {}
    for item in session.items:
        entry = modules.setdefault(item.path.name, {"fixtures": set(), "leaves": None})
        entry["fixtures"].update(item.fixturenames)
        mark = item.get_closest_marker("leaves")
        entry["leaves"] = mark.args[0] if mark else entry["leaves"]
    print("LAB-ORDER " + json.dumps([[name, sorted(e["fixtures"]), e["leaves"]] for name, e in modules.items()]))
"""


def test_the_collected_order_keeps_the_modules_that_need_a_serving_lab_together(tmp_path):
    """What the whole suite's order is today, collected as CI collects it: the module that takes the lab down first, no
    module that needs a serving lab and keeps it after the first one that may leave anything."""
    (tmp_path / "lab_order_probe.py").write_text(_PROBE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p",
                        "lab_order_probe", "-m", "lab and not long", "tests/integration"],
                       capture_output=True, text=True, cwd=str(REPO), timeout=300, check=False, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (line,) = [ln for ln in p.stdout.splitlines() if ln.startswith("LAB-ORDER ")]
    modules = json.loads(line[len("LAB-ORDER "):])
    names = [name for name, _fixtures, _leaves in modules]
    assert [name for name, _f, leaves in modules if leaves == "fresh"] == names[:1] == ["test_lab.py"], names
    first_anything = min(n for n, (_name, _f, leaves) in enumerate(modules) if leaves == "anything")
    late = [name for name, fixtures, leaves in modules[first_anything + 1:] if "serving" in fixtures
            and leaves != "anything"]
    assert late == [], (names, late)
    # the modules that needed a deployed lab only because another had deployed it now ask for it
    needs = {name: set(fixtures) for name, fixtures, _leaves in modules}
    assert "staged" in needs["test_model_download.py"] and "staged" in needs["test_prepare.py"]
    assert {"serving", "deployment"} <= needs["test_security.py"] and {"serving", "deployment"} <= needs["test_site.py"]
