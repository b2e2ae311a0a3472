"""Issue 20: roles meet through the sparkfleet role (the shared floor), never sideways.

Read from the YAML of every role and playbook: which role includes which role's task file, and where modules that read
node facts are called.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "roles"


def tasks(path):
    """Every task (blocks flattened) of a task file."""
    def walk(items):
        for task in items or []:
            if not isinstance(task, dict):
                continue
            yield task
            for key in ("block", "rescue", "always"):
                yield from walk(task.get(key))
    return list(walk(yaml.safe_load(path.read_text())))


def role_task_files():
    return sorted(ROLES.glob("*/tasks/*.yml")) + sorted(ROLES.glob("*/handlers/*.yml"))


def includes():
    """(including role, included role, tasks_from) for every include_role/import_role in a role."""
    found = []
    for path in role_task_files():
        for task in tasks(path):
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
                if key in task:
                    target = task[key]["name"].split(".")[-1]
                    found.append((path.parts[-3], target, task[key].get("tasks_from", "main")))
    return found


def test_rdma_facts_is_called_from_one_task_file():
    calls = [str(path.relative_to(REPO)) for path in role_task_files() + sorted((REPO / "playbooks").glob("*.yml"))
             for task in tasks(path) if "sparkfleet.vllm.rdma_facts" in task]
    assert calls == ["roles/sparkfleet/tasks/fabric_facts.yml"]


def test_the_floor_s_task_files_are_reached_only_through_include_role():
    floor = {p.name for p in (ROLES / "sparkfleet" / "tasks").glob("*.yml")}
    assert "fabric_facts.yml" in floor
    used = {tasks_from for _r, target, tasks_from in includes() if target == "sparkfleet"}
    assert used <= floor and "fabric_facts.yml" in used


def production_yaml():
    """Every role and playbook file that Ansible templates (tasks, handlers, vars, defaults, templates)."""
    paths = [p for p in ROLES.glob("*/*/*") if p.suffix in (".yml", ".j2") and p.parts[-2] != "meta"]
    return sorted(paths + list((REPO / "playbooks").glob("*.yml")))


# What the floor derives once (roles/sparkfleet/vars/main.yml), and how a role would rebuild it by hand.
REBUILT = {
    "sparkfleet_head_host": ("groups['spark_head'][0]",),
    "sparkfleet_hosts": ("groups['spark_head'] + groups['spark_workers']",),
    "sparkfleet_head_fabric_ip": ("hostvars[sparkfleet_head_host].sparkfleet_fabric_ip",
                                  "hostvars[sparkfleet_head_host]['sparkfleet_fabric_ip']"),
    "sparkfleet_cluster_nodes": ("sparkfleet.vllm.cluster_nodes(", "'sparkfleet_fabric_ip')"),
}


@pytest.mark.parametrize("value", sorted(REBUILT))
def test_cluster_wide_values_are_computed_once_on_the_floor(value):
    """A role or playbook that needs the head, the nodes or their fabric IPs reads the floor's value (the workers'
    addresses: sparkfleet_cluster_nodes | rejectattr('head')), never rebuilds it from the groups or hostvars."""
    home = ROLES / "sparkfleet" / "vars" / "main.yml"
    assert "%s:" % value in home.read_text()
    rebuilt = {str(p.relative_to(REPO)) for p in production_yaml() if p != home
               for way in REBUILT[value] if way in p.read_text()}
    assert rebuilt == set(), "read %s instead: %s" % (value, sorted(rebuilt))


def test_no_role_includes_another_role_s_task_file():
    """What more than one role runs lives in roles/sparkfleet/tasks (issue 20)."""
    sideways = sorted((role, target, tf) for role, target, tf in includes() if target not in (role, "sparkfleet"))
    assert not sideways, "move these task files to roles/sparkfleet/tasks: %s" % sideways


ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "tasks").is_dir() or (p / "defaults").is_dir())
PRIVATE = re.compile(r"(?<![\w])_(%s)_[a-z0-9_]+" % "|".join(ROLE_NAMES))


def _code_lines(path):
    """The lines of a role file or playbook that are not comments (YAML or Jinja)."""
    text = re.sub(r"\{#.*?#\}", "", path.read_text(encoding="utf-8"), flags=re.S)
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if not line.lstrip().startswith("#")]


# The floor's one view of a role's derived values (its vars/main.yml, as that role derives them): the role_settings
# lookup with derived=true, whose `only` names them, read as `_sparkfleet_<role>_derived.<name>` (the image check asks
# with vllm_serve's flags and recipe, never restated on the floor).
DERIVED_VIEW = re.compile(r"query\('sparkfleet\.vllm\.role_settings', '(\w+)', derived=true,\s*only=\[([^\]]*)\]")


def derived_views():
    """role -> the derived names the floor's views of that role list (roles/sparkfleet/vars/main.yml)."""
    path = ROLES / "sparkfleet" / "vars" / "main.yml"
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    return {role: set(re.findall(r"'(_%s_\w+)'" % role, only)) for role, only in DERIVED_VIEW.findall(text)}


def private_reads():
    """(file, line, name) for every `_<role>_*` name of another role in a role's files or a playbook (the floor may
    name one only in its derived view of that role, and read it through that view)."""
    found = []
    files = [p for role in ROLE_NAMES for part in ("tasks", "templates", "handlers", "vars", "defaults")
             for p in sorted((ROLES / role / part).rglob("*")) if p.is_file()]
    views = derived_views()
    for path in files + sorted((REPO / "playbooks").glob("*.yml")):
        own = path.relative_to(ROLES).parts[0] if ROLES in path.parents else None
        for number, line in _code_lines(path):
            for match in PRIVATE.finditer(line):
                role, name, before = match.group(1), match.group(0), line[:match.start()]
                viewed = own == "sparkfleet" and name in views.get(role, ()) and (
                    before.endswith("_sparkfleet_%s_derived." % role) or (before.endswith("'") and "only=" in line))
                if role not in (own, "sparkfleet") and not viewed:
                    found.append((str(path.relative_to(REPO)), number, name))
    return found


def test_the_floor_s_derived_views_name_what_the_role_derives():
    views = derived_views()
    assert views.get("vllm_serve") == {"_vllm_serve_args_cfg", "_vllm_serve_recipe"}
    for role, names in views.items():
        derived = set(yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text(encoding="utf-8")))
        assert names <= derived, "not in roles/%s/vars/main.yml: %s" % (role, sorted(names - derived))


def test_no_role_reads_another_role_s_private_variables():
    """A role's `_<role>_*` names are its own; what another role needs is a floor fact (`sparkfleet_*`, documented in
    roles/sparkfleet/README.md) or the floor's `_sparkfleet_*`."""
    assert not private_reads()


# Another role's result read off a node's hostvars (e.g. hostvars[head].vllm_serve_image_check, a registered result):
# a fact more than one role reads is a floor fact (sparkfleet_image_check, set by vllm_serve).
ACROSS = re.compile(r"hostvars\[[^\]]*\]\s*(?:\.|\[')(%s)_[a-z0-9_]+"
                    % "|".join(r for r in ROLE_NAMES if r != "sparkfleet"))


def test_no_role_reads_another_role_s_results_off_hostvars():
    found = []
    for path in [p for p in production_yaml() if p.parts[-3] != "sparkfleet"]:
        own = path.relative_to(ROLES).parts[0] if ROLES in path.parents else None
        found += [(str(path.relative_to(REPO)), n, m.group(0)) for n, line in _code_lines(path)
                  for m in ACROSS.finditer(line) if m.group(1) != own]
    assert found == []
    assert ACROSS.search("{{ hostvars[sparkfleet_head_host].vllm_serve_image_check.ray_version }}")


def test_the_private_read_check_sees_a_read(tmp_path, monkeypatch):
    """The check above is not blind: another role's private name in a task is found, the role's own is not."""
    fake = tmp_path / "roles"
    for role in ROLE_NAMES:
        (fake / role / "tasks").mkdir(parents=True)
    (fake / "ray_cluster" / "tasks" / "main.yml").write_text(
        "- name: X\n  ansible.builtin.debug:\n    msg: \"{{ _runtime_image_job }} {{ _ray_cluster_own }}\"\n"
        "# a comment naming _vllm_serve_x is no read\n")
    # the floor: through its derived view of a role, yes; bare, or a name the view does not list, no
    (fake / "sparkfleet" / "vars").mkdir()
    (fake / "sparkfleet" / "vars" / "main.yml").write_text(
        "_sparkfleet_vllm_serve_derived: \"{{ query('sparkfleet.vllm.role_settings', 'vllm_serve', derived=true,\n"
        "    only=['_vllm_serve_recipe'])[0]['values'] }}\"\n")
    (fake / "sparkfleet" / "tasks" / "main.yml").write_text(
        "- name: Y\n  ansible.builtin.debug:\n    msg: \"{{ _sparkfleet_vllm_serve_derived._vllm_serve_recipe }}\"\n"
        "- name: Z\n  ansible.builtin.debug:\n    msg: \"{{ _vllm_serve_recipe }} {{ _sparkfleet_vllm_serve_derived._vllm_serve_x }}\"\n")
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "p.yml").write_text("- hosts: all\n  tasks: [{debug: {msg: '{{ x._preflight_y }}'}}]\n")
    monkeypatch.setattr(sys.modules[__name__], "ROLES", fake)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert [(f, name) for f, _n, name in private_reads()] == [
        ("roles/ray_cluster/tasks/main.yml", "_runtime_image_job"),
        ("roles/sparkfleet/tasks/main.yml", "_vllm_serve_recipe"), ("roles/sparkfleet/tasks/main.yml", "_vllm_serve_x"),
        ("playbooks/p.yml", "_preflight_y")]


def _floor_settings():
    """The floor's `_sparkfleet_<role>` values (vars/main.yml): role -> the settings listed in its `only=[...]`."""
    text = (ROLES / "sparkfleet" / "vars" / "main.yml").read_text(encoding="utf-8")
    found = {}
    for name, body in yaml.safe_load(text).items():
        match = re.fullmatch(r"_sparkfleet_(\w+)", name)
        if match and match.group(1) in ROLE_NAMES and "role_settings" in str(body):
            assert re.search(r"role_settings', '%s'" % match.group(1), str(body)), name
            found[match.group(1)] = set(re.findall(r"'(%s_[a-z0-9_]+)'" % match.group(1), str(body)))
    return found


def test_the_floor_reads_another_role_s_settings_only_through_its_settings_lookup():
    """In the floor's task files and vars, another role's setting is read as `_sparkfleet_<role>.<setting>` (so it
    resolves where that role's defaults are not loaded, e.g. from preflight), each one listed in that lookup's `only`
    and a default of that role; a listed one is read."""
    settings = _floor_settings()
    assert set(settings) >= {"ray_cluster", "gpu_cleanup", "runtime_image", "vllm_serve", "model_sync"}
    read = {role: set() for role in settings}
    sources = [(path.name, "\n".join(line for _n, line in _code_lines(path)))
               for path in sorted((ROLES / "sparkfleet" / "tasks").glob("*.yml"))]
    floor_vars = yaml.safe_load((ROLES / "sparkfleet" / "vars" / "main.yml").read_text(encoding="utf-8"))
    sources += [("vars/main.yml: " + k, str(v)) for k, v in floor_vars.items()
                if not (k.startswith("_sparkfleet_") and k[len("_sparkfleet_"):] in settings)]
    for where, text in sources:
        # Jinja expressions, and the bare conditions of when/failed_when/until lists
        exprs = re.findall(r"\{\{.*?\}\}", text, re.S) + re.findall(
            r"(?m)^\s*(?:- (?!name:)|when: |failed_when: |until: )[^{\n]*$", text)
        for expr in exprs:
            for match in re.finditer(r"(?<![\w])(%s)_[a-z0-9_]+" % "|".join(ROLE_NAMES), expr):
                role, name = match.group(1), match.group(0)
                if role == "sparkfleet" or name == "sparkfleet_runtime_image_sync":  # runtime_image's result fact
                    continue
                if expr[:match.start()].endswith("sparkfleet.vllm."):   # a filter's name (vllm_serve_args), no read
                    continue
                assert role in settings and expr[:match.start()].endswith("_sparkfleet_%s." % role), \
                    "%s reads %s bare: read it as _sparkfleet_%s.%s" % (where, name, role, name)
                read[role].add(name)
    # the roles that run where another role's defaults are not loaded read its settings through the same views
    for path in [p for p in production_yaml() if p.parts[-3] != "sparkfleet"]:
        text = "\n".join(line for _n, line in _code_lines(path))
        for role, name in re.findall(r"_sparkfleet_(%s)\.((?:%s)_[a-z0-9_]+)" % ("|".join(settings), "|".join(settings)),
                                     text):
            read[role].add(name)
    for role, listed in settings.items():
        defaults = set(yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) or {})
        assert read[role] <= listed, "add to _sparkfleet_%s's only: %s" % (role, sorted(read[role] - listed))
        assert listed <= defaults, "not defaults of %s: %s" % (role, sorted(listed - defaults))
        assert listed <= read[role], "listed, never read: %s" % sorted(listed - read[role])


def floor_facts():
    """The run-time facts more than one role reads, as roles/sparkfleet/README.md documents them."""
    text = (ROLES / "sparkfleet" / "README.md").read_text(encoding="utf-8")
    section = text.split("Facts set during a run", 1)[1].split("\n\n", 2)[1]
    return set(re.findall(r"`(sparkfleet_[a-z0-9_]+)`", section))


def test_floor_facts_are_documented_and_set():
    """The run-time floor facts are the README's, and each is set (set_fact or register) by a role or floor file."""
    facts = floor_facts()
    assert {"sparkfleet_settings_validated", "sparkfleet_runtime_image_job", "sparkfleet_runtime_image_lacking",
            "sparkfleet_runtime_image_present", "sparkfleet_runtime_image_ref", "sparkfleet_runtime_image_ids",
            "sparkfleet_runtime_image_sync"} <= facts
    for fact in sorted(facts - {"sparkfleet_fabric"}):  # set by the modules that read the fabric
        setters = [path for path in role_task_files()
                   if re.search(r"^\s+(register: )?%s(:|\s|$)" % fact, path.read_text(encoding="utf-8"), re.M)]
        assert setters, "%s is documented as a floor fact but nothing sets it" % fact
