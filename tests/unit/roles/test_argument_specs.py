"""Every role's meta/argument_specs.yml matches what the role defines and reads.

- every variable of defaults/main.yml has a spec entry, and every spec entry a default or a use in the role;
- every default is used somewhere (a task, template, handler, var, another role or a playbook): no dead variables;
- every sparkfleet_* variable a role reads that the common role (roles/sparkfleet) does not define is declared in the
  role's spec, and required there when the role cannot work without it;
- descriptions are the role's own: no two options of a role share one (a copied comment describes neither);
- literal spec defaults equal defaults/main.yml.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())
COMMON = "sparkfleet"
# Inputs a role may read with a fallback of its own (checked by preflight, optional for the role).
OPTIONAL_INPUTS = {"sparkfleet_mgmt_ip", "sparkfleet_fabric_interface"}
# Inputs that have meaning only for preflight, which reports them missing itself (a spec would stop it first).
PREFLIGHT = "preflight"


def _yaml(path):
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _spec(role):
    specs = _yaml(REPO / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]
    # the common role documents its settings under `settings` (a `main` spec would run before preflight's checks)
    return specs["settings" if role == COMMON else "main"].get("options") or {}


def _defaults(role):
    return _yaml(REPO / "roles" / role / "defaults" / "main.yml")


# Role vars that hold variable names as text (hints, renamed variables): names, not reads.
NAMES_ONLY = {"sparkfleet_setting_names", "_preflight_renamed_vars", "_preflight_path_vars", "_preflight_checked_roles"}


def _read(path):
    text = path.read_text(encoding="utf-8")
    if path.parent.name == "vars" and path.suffix == ".yml":
        data = yaml.safe_load(text) or {}
        if NAMES_ONLY & set(data):
            text = yaml.safe_dump({k: v for k, v in data.items() if k not in NAMES_ONLY})
    return text


def _text(paths):
    return "\n".join(_read(p) for p in paths if p.is_file())


def _role_files(role, parts=("tasks", "templates", "handlers", "vars", "defaults", "files")):
    base = REPO / "roles" / role
    return [p for part in parts for p in sorted((base / part).rglob("*")) if p.is_file()]


def _uses(text, name):
    return re.search(r"(?<![\w.])%s(?![\w])" % re.escape(name), text) is not None


def _common_names():
    return set(_defaults(COMMON)) | set(_yaml(REPO / "roles" / COMMON / "vars" / "main.yml"))


def _floor_facts():
    """The facts set during a run that the common role's README documents for every role (sparkfleet_fabric, the
    runtime image's state...): set by one role or module, read by others, never an input."""
    text = (REPO / "roles" / COMMON / "README.md").read_text(encoding="utf-8")
    section = text.split("Facts set during a run", 1)[1].split("\n\n", 2)[1]
    return set(re.findall(r"`(sparkfleet_[a-z0-9_]+)`", section))


def test_every_role_depends_on_the_common_role():
    for role in ROLES:
        if role == COMMON:
            continue
        deps = _yaml(REPO / "roles" / role / "meta" / "main.yml").get("dependencies") or []
        names = [d["role"] if isinstance(d, dict) else d for d in deps]
        assert "sparkfleet.vllm." + COMMON in names, "%s: meta/main.yml must depend on sparkfleet.vllm.%s" % (role, COMMON)


@pytest.mark.parametrize("role", ROLES)
def test_every_default_has_a_spec_entry(role):
    missing = sorted(set(_defaults(role)) - set(_spec(role)))
    assert not missing, "%s: defaults without a meta/argument_specs.yml entry: %s" % (role, missing)


def _floor_files(role):
    """The shared task files of the common role that role includes (`tasks_from:` of sparkfleet.vllm.sparkfleet): what
    they read, the role reads through them."""
    text = _text(_role_files(role, ("tasks", "handlers")))
    names = set(re.findall(r"name: sparkfleet\.vllm\.%s\s+tasks_from: ([\w.]+)" % COMMON, text))
    todo = set(names)
    while todo:  # and the floor files those include
        floor = REPO / "roles" / COMMON / "tasks" / todo.pop()
        found = set(re.findall(r"include_tasks: ([\w.]+)", floor.read_text(encoding="utf-8"))) - names
        names |= found
        todo |= found
    return [REPO / "roles" / COMMON / "tasks" / n for n in sorted(names)]


def _with_floor_values(text):
    """text, and the definition of every value of the common role it reads (transitively): a role that reads
    sparkfleet_cluster_nodes reads each node's sparkfleet_fabric_ip through it."""
    values = {k: str(v) for k, v in _yaml(REPO / "roles" / COMMON / "vars" / "main.yml").items() if k not in NAMES_ONLY}
    values.update({k: str(v) for k, v in _defaults(COMMON).items()})
    for key, value in list(values.items()):    # a view of another role's settings reads what their defaults read
        view = re.search(r"role_settings', '(\w+)'", value)
        if view:
            theirs = _defaults(view.group(1))
            listed = re.findall(r"'(%s_\w+)'" % view.group(1), value)
            values[key] += "\n" + "\n".join(str(theirs[n]) for n in listed if n in theirs)
    seen = set()
    while True:
        new = [k for k in values if k not in seen and _uses(text, k)]
        if not new:
            return text
        seen.update(new)
        text += "\n" + "\n".join(values[k] for k in new)


@pytest.mark.parametrize("role", ROLES)
def test_every_spec_entry_has_a_default_or_a_use(role):
    defaults = _defaults(role)
    text = _with_floor_values(
        _text(_role_files(role, ("tasks", "templates", "handlers", "vars", "defaults")) + _floor_files(role)))
    orphans = [name for name in _spec(role) if name not in defaults and not _uses(text, name)]
    assert not orphans, "%s: spec entries the role neither defaults nor reads: %s" % (role, orphans)


@pytest.mark.parametrize("role", ROLES)
def test_no_dead_defaults(role):
    """A default nothing reads is a knob that does nothing."""
    own = _role_files(role, ("tasks", "templates", "handlers", "vars", "files"))
    others = [p for r in (REPO / "roles").iterdir() if r.name != role for p in _role_files(r.name)]
    playbooks = sorted((REPO / "playbooks").glob("*.yml"))
    defaults_file = REPO / "roles" / role / "defaults" / "main.yml"
    defaults_text = re.sub(r"(?m)^\s*#.*$", "", defaults_file.read_text(encoding="utf-8")) if defaults_file.is_file() else ""
    text = _text(own + others + playbooks)
    dead = []
    for name in _defaults(role):
        # used by another default of the role (value side only) counts too
        in_defaults = re.search(r"(?m)^\s*\w+:.*(?<![\w.])%s(?![\w])" % re.escape(name),
                                "\n".join(line for line in defaults_text.splitlines() if not line.startswith(name + ":")))
        if not _uses(text, name) and not in_defaults:
            dead.append(name)
    assert not dead, "%s: defaults nothing reads: %s" % (role, dead)


@pytest.mark.parametrize("role", [r for r in ROLES if r != COMMON])
def test_the_cluster_inputs_a_role_reads_are_in_its_spec(role):
    text = _text(_role_files(role, ("tasks", "templates", "handlers", "vars", "defaults")) + _floor_files(role))
    text = re.sub(r"(?m)^\s*#.*$", "", text)
    read = set(re.findall(r"(?<![\w.'\"/])(sparkfleet_[a-z0-9_]+)", text))
    spec = _spec(role)
    undeclared = sorted(read - _common_names() - set(spec) - _floor_facts())
    assert not undeclared, "%s reads %s: declare them in meta/argument_specs.yml" % (role, undeclared)
    for name in sorted(read & set(spec)):
        if name in _common_names():
            continue
        # required when some read has no fallback: `name | default(...)` everywhere makes it optional
        bare = [m for m in re.finditer(r"(?<![\w.'\"/])%s(?!\w)" % name, text)
                if not re.match(r"\s*\|\s*default\(", text[m.end():])]
        wanted = role != PREFLIGHT and name not in OPTIONAL_INPUTS and bool(bare)
        assert bool(spec[name].get("required")) == wanted, \
            "%s: %s must %sbe required: true" % (role, name, "" if wanted else "not ")


def test_common_settings_are_not_redeclared_by_roles():
    common = _common_names()
    for role in ROLES:
        if role == COMMON:
            continue
        again = sorted(set(_spec(role)) & common)
        assert not again, "%s re-declares the common role's %s; roles read them from sparkfleet.vllm.%s" % (role, again, COMMON)


@pytest.mark.parametrize("role", ROLES)
def test_descriptions_are_not_shared(role):
    seen = {}
    for name, option in _spec(role).items():
        desc = option.get("description")
        assert desc, "%s: %s has no description" % (role, name)
        key = " ".join(desc) if isinstance(desc, list) else desc
        assert key not in seen, "%s: %s and %s share one description: %r" % (role, seen[key], name, key)
        seen[key] = name


@pytest.mark.parametrize("role", ROLES)
def test_literal_defaults_match(role):
    defaults = _defaults(role)
    for name, option in _spec(role).items():
        if name not in defaults:
            assert "default" not in option, "%s: %s has a spec default but none in defaults/main.yml" % (role, name)
            continue
        value = defaults[name]
        if "{{" in str(value):
            assert "default" not in option, "%s: %s is templated; say its default in the description" % (role, name)
            continue
        if value is None:
            assert option.get("default") is None, (role, name)
            continue
        assert option.get("default") == value, "%s: %s spec default %r != defaults/main.yml %r" % (
            role, name, option.get("default"), value)
        assert not option.get("required"), "%s: %s is required but has a default" % (role, name)


@pytest.mark.parametrize("role", [r for r in ROLES if r != COMMON])
def test_every_role_variable_read_is_defined(role):
    """A <role>_* variable read by the role's tasks, templates or handlers exists: a default, a role var, a spec
    entry, or a name the role registers or sets (a removed default still read fails here, not in a failure path)."""
    files = _role_files(role, ("tasks", "templates", "handlers", "vars"))
    text = "\n".join(line for line in _text(files).splitlines() if not line.lstrip().startswith("#"))
    prefix = role + "_"
    read = set(re.findall(r"(?<![\w.'\"/-])(%s[a-z0-9_]+)" % re.escape(prefix), text))
    read -= set(re.findall(r"(%s[a-z0-9_]+) is not defined" % re.escape(prefix), text))  # retired names refused
    defined = set(_defaults(role)) | set(_spec(role)) | set(_yaml(REPO / "roles" / role / "vars" / "main.yml"))
    defined |= set(re.findall(r"^\s*register:\s*(\w+)", text, re.M))
    defined |= set(re.findall(r"^\s+(%s[a-z0-9_]+):" % re.escape(prefix), text, re.M))  # set_fact / vars keys
    missing = sorted(n for n in read - defined if not n.endswith("_"))
    assert not missing, "%s reads %s, which nothing defines" % (role, missing)
