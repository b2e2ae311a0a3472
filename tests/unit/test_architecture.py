"""docs/ARCHITECTURE.md's rules, checked on the code (issue 20): each rule the page states that a machine can check is
checked here or names the test that checks it, and every path the page names exists.

- calls go down only: which layer of plugins/ may import which (LAYER_IMPORTS);
- node-side helpers (module_utils) know no role: no role variable is named in their code (a hint names a setting);
- the page's paths exist; every rule names tests that exist, and the functions and tables it names are in them;
- every `file.py::function` the page names exists, and each of the three walks names a test that checks it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins"
PAGE = REPO / "docs" / "ARCHITECTURE.md"
PACKAGE = "ansible_collections.sparkfleet.vllm.plugins."

# Who may import whom inside plugins/ (module_utils is sent to the nodes with the modules; plugin_utils runs on the
# controller only, so nothing the nodes run may import it).
LAYER_IMPORTS = {
    "modules": {"module_utils"},
    "module_utils": {"module_utils"},
    "plugin_utils": {"plugin_utils", "module_utils"},
    "filter": {"plugin_utils", "module_utils"},
    "lookup": {"plugin_utils", "module_utils"},
    "callback": {"plugin_utils", "module_utils"},
    "action": {"plugin_utils", "module_utils"},
    "doc_fragments": set(),
}


def python_files(layer):
    """Every Python file of a layer, in its subpackages too (module_utils groups its files by concern)."""
    return sorted((PLUGINS / layer).rglob("*.py"))


def imported_layers(path):
    """The plugins/ layers a file imports from (every import statement, also those inside functions)."""
    layers = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        for name in names:
            if name.startswith(PACKAGE):
                layers.add(name[len(PACKAGE):].split(".")[0])
    return layers


def test_every_layer_of_plugins_is_known():
    present = {p.name for p in PLUGINS.iterdir() if p.is_dir() and list(p.glob("*.py"))}
    assert present <= set(LAYER_IMPORTS), sorted(present - set(LAYER_IMPORTS))


@pytest.mark.parametrize("layer", sorted(LAYER_IMPORTS))
def test_calls_go_down_only(layer):
    wrong = {str(p.relative_to(REPO)): sorted(imported_layers(p) - LAYER_IMPORTS[layer]) for p in python_files(layer)}
    assert {k: v for k, v in wrong.items() if v} == {}


def role_variables():
    """Every variable a role declares (argument specs, defaults) or the floor derives (roles/sparkfleet/vars)."""
    names = set()
    for spec in (REPO / "roles").glob("*/meta/argument_specs.yml"):
        for entry in (yaml.safe_load(spec.read_text(encoding="utf-8")).get("argument_specs") or {}).values():
            names |= set(entry.get("options") or {})
    for part in ("defaults", "vars"):
        for path in (REPO / "roles").glob("*/%s/main.yml" % part):
            names |= {k for k in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if not k.startswith("_")}
    return names


def code_strings(path):
    """The identifiers and string constants of a file's code (docstrings and comments are prose, not code)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value
        elif isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr


def test_module_utils_names_no_role_variable():
    """A hint in module_utils names a setting ({fabric_ip}, plugins/module_utils/_settings.py), which the roles map
    to their variables through setting_names; a setting's own key may equal a variable's name."""
    from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import SETTINGS

    variables = role_variables() - set(SETTINGS)
    assert "vllm_serve_api_key" in variables and "sparkfleet_fabric_ip" in variables
    pattern = re.compile(r"(?<![\w.])(%s)(?!\w)" % "|".join(sorted(map(re.escape, variables), key=len, reverse=True)))
    named = {}
    for path in python_files("module_utils"):
        found = sorted({m for text in code_strings(path) for m in pattern.findall(text)})
        if found:
            named[str(path.relative_to(REPO))] = found
    assert named == {}


def test_the_role_variable_check_sees_a_role_variable_in_code(tmp_path):
    """The check above reads code, not prose: a variable's name in a string constant is found, in a docstring not."""
    sample = tmp_path / "_sample.py"
    sample.write_text('"""Hints name sparkfleet_fabric_ip nowhere in code."""\nHINT = "set sparkfleet_fabric_ip"\n')
    assert list(code_strings(sample)) == ["HINT", "set sparkfleet_fabric_ip"]


TOP = {p.name for p in REPO.iterdir() if not p.name.startswith(".")}


def page_paths():
    """Repository paths the page names in backticks (a placeholder such as <role> is not a path)."""
    found = set()
    for text in re.findall(r"`([^`\s]+)`", PAGE.read_text(encoding="utf-8")):
        path = text.rstrip(".,:;)").split("::")[0]
        if "/" in path and path.split("/")[0] in TOP and "<" not in path and "*" not in path:
            found.add(path)
    return sorted(found)


def test_the_page_names_paths():
    assert len(page_paths()) >= 20


def written_by_runs():
    """The root-anchored directories .gitignore lists (tests/output/, sparkfleet-runs/): runs create them, so a fresh
    clone has none of them until a test or a deployment writes there."""
    lines = (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
    return tuple(line[1:] for line in lines if line.startswith("/") and line.endswith("/"))


@pytest.mark.parametrize("path", page_paths())
def test_every_path_the_page_names_exists(path):
    if path.startswith(written_by_runs()):
        assert (REPO / path).parent.exists(), "docs/ARCHITECTURE.md names %s, under no directory" % path
        return
    assert (REPO / path).exists(), "docs/ARCHITECTURE.md names %s, which does not exist" % path


def _drawing_script():
    import importlib.util
    spec = importlib.util.spec_from_file_location("architecture_drawing", REPO / "scripts" / "architecture_drawing.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_the_drawing_is_the_one_the_yaml_gives():
    gen = _drawing_script()
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert gen.section() in text, "docs/ARCHITECTURE.md's drawing is stale: run scripts/architecture_drawing.py --write"


def test_the_drawing_sees_a_play_a_floor_file_and_a_cross_role_read(tmp_path, monkeypatch):
    # A tree of one playbook and two roles: the play, the floor file it reaches, the role reading another's files and
    # a task file nothing reaches must each show.
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "site.yml").write_text(
        "- name: P\n  hosts: spark\n  roles: [sparkfleet.vllm.alpha]\n"
        "  tasks:\n    - ansible.builtin.include_role: {name: sparkfleet.vllm.beta, tasks_from: extra.yml}\n")
    for role, tasks in (("alpha", "- sparkfleet.vllm.widget: {src: \"{{ role_path }}/../beta/files/x\"}\n"
                                  "- ansible.builtin.include_role: {name: sparkfleet.vllm.sparkfleet, tasks_from: f.yml}\n"),
                        ("beta", "- ansible.builtin.debug: {msg: hi}\n"), ("sparkfleet", "")):
        (tmp_path / "roles" / role / "tasks").mkdir(parents=True)
        (tmp_path / "roles" / role / "tasks" / "main.yml").write_text(tasks or "[]\n")
    (tmp_path / "roles" / "beta" / "tasks" / "extra.yml").write_text("[]\n")
    (tmp_path / "roles" / "beta" / "tasks" / "unused.yml").write_text("[]\n")
    (tmp_path / "roles" / "sparkfleet" / "tasks" / "f.yml").write_text("[]\n")
    (tmp_path / "roles" / "sparkfleet" / "tasks" / "g.yml").write_text("[]\n")
    gen = _drawing_script()
    monkeypatch.setattr(gen, "ROOT", str(tmp_path))
    out = gen.drawing()
    assert re.search(r"site\.yml +spark +alpha, beta/extra", out), out
    assert "widget" in out and "floor: f; reads files of beta" in out
    assert re.search(r"f\.yml +alpha", out) and re.search(r"g\.yml +DEAD", out)
    assert "roles/beta/tasks/unused.yml" in out and "roles/beta/tasks/extra.yml" not in out.split("reaches:")[-1]


def defined_names(paths):
    """The functions, classes and assigned names the Python files under paths define (a directory: every file in it)."""
    names = set()
    for path in paths:
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def section(title):
    text = PAGE.read_text(encoding="utf-8")
    return text.split("\n## %s\n" % title, 1)[1].split("\n## ", 1)[0]


def rule_rows():
    """(rule, held-by cell) of each row of the rules table (a cell may hold an escaped pipe, \\|)."""
    rows = []
    for line in section("The rules, and what holds each").splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 2 and cells[0] != "rule" and not set(cells[0]) <= set("-"):
            rows.append(tuple(cells))
    return rows


def test_the_rules_table_is_read():
    assert len(rule_rows()) >= 15


@pytest.mark.parametrize("rule, held_by", rule_rows(), ids=[r[0][:40] for r in rule_rows()])
def test_every_rule_names_tests_that_exist_and_the_functions_it_names_are_in_them(rule, held_by):
    ticked = re.findall(r"`([^`]+)`", held_by)
    tests = [t for t in ticked if t.startswith("tests/")]
    assert tests, "the rule %r names no test" % rule[:60]
    missing = [t for t in tests if not (REPO / t).exists()]
    assert missing == [], "the rule %r names tests that do not exist: %s" % (rule[:60], missing)
    names = [t for t in ticked if re.match(r"^[A-Za-z_]\w*$", t)]
    unknown = sorted(set(names) - defined_names([REPO / t for t in tests]))
    assert unknown == [], "the rule %r names %s, defined in none of %s" % (rule[:60], unknown, tests)


def page_test_references():
    """Every `path.py::name` the page names (a walk's or a rule's test, by file and function)."""
    return sorted(set(re.findall(r"`([\w./-]+\.py)::(\w+)`", PAGE.read_text(encoding="utf-8"))))


@pytest.mark.parametrize("path, name", page_test_references(), ids=["::".join(r) for r in page_test_references()])
def test_every_test_the_page_names_by_function_exists(path, name):
    assert name in defined_names([REPO / path]), "docs/ARCHITECTURE.md names %s::%s, which does not exist" % (
        path, name)


def test_each_walk_names_a_test_that_checks_it():
    walks = re.split(r"\n\*\*(?=A )", section("Three walks"))[1:]
    assert [w.split(".**")[0] for w in walks] == ["A failure class of vLLM", "A NIC type", "A model sync transport"]
    for walk in walks:
        assert re.search(r"`tests/[\w./-]+\.py::test_\w+`", walk), walk[:60]


def test_the_name_checks_see_a_missing_function(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text("TABLE = {}\n\n\ndef test_present():\n    pass\n")
    assert {"TABLE", "test_present"} <= defined_names([sample]) and "test_absent" not in defined_names([tmp_path])
