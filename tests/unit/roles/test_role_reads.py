"""Issue 43 item 2: a role reads another role's setting only through the floor's views, writes none, and states no
other role's default. Read from the templates as Jinja parses them, not as text.

The regex checks of test_floor.py saw `_<role>_*` names and `hostvars[..].<role>_*`; they let through a role reading
another role's public setting bare (healthcheck and qualify read vllm_serve_api_key and the served name, which only the
inventory could give them, since vllm_serve's defaults are not loaded in their plays: a default restated in two places),
preflight copying runtime_image's whole default load command, and preflight setting gpu_cleanup_ports, a "default" of
gpu_cleanup that gpu_cleanup never read. Here every string of a role's YAML that Ansible templates (and every bare
condition: when, failed_when, changed_when, until, that) and every template file is parsed by Jinja; the names it
loads, and the keys read off `hostvars[...]` or `vars`, are judged.
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

import jinja2
from jinja2 import nodes
import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "roles"
ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "tasks").is_dir() or (p / "defaults").is_dir())
FLOOR = "sparkfleet"
BARE_CONDITIONS = ("when", "failed_when", "changed_when", "until", "that")
SETTERS = ("ansible.builtin.set_fact", "set_fact")
_ENV = jinja2.Environment()
# a role's regex inside a template ("\\s") makes Jinja's lexer warn; the parse is what counts here
pytestmark = pytest.mark.filterwarnings("ignore:invalid escape sequence:DeprecationWarning")


def owner(name):
    """The role a variable name belongs to (`<role>_x` or `_<role>_x`), or None."""
    m = re.match(r"_?(%s)_" % "|".join(sorted(ROLE_NAMES, key=len, reverse=True)), name)
    return m.group(1) if m else None


def templated(obj, key=None):
    """Every Jinja source in a YAML value: templated strings, and bare conditions wrapped as expressions."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from templated(v, k)
    elif isinstance(obj, list):
        for v in obj:
            yield from templated(v, key)
    elif isinstance(obj, str):
        if key in BARE_CONDITIONS and "{{" not in obj and "{%" not in obj:
            yield "{{ %s }}" % obj
        elif "{{" in obj or "{%" in obj:
            yield obj


def loaded_names(source):
    """Names a Jinja source reads (those it assigns itself left out) and the keys it reads off hostvars[..] or vars."""
    tree = _ENV.parse(source)
    stored = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}
    found = {n.name for n in tree.find_all(nodes.Name) if n.ctx == "load"} - stored
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        base = node.node.node if isinstance(node.node, nodes.Getitem) else node.node
        if isinstance(base, nodes.Name) and base.name in ("hostvars", "vars"):
            if isinstance(node, nodes.Getattr):
                found.add(node.attr)
            elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
                found.add(node.arg.value)
    for call in tree.find_all(nodes.Call):     # lookup('vars', 'name') / lookup('ansible.builtin.vars', ...)
        args = [a.value for a in call.args if isinstance(a, nodes.Const)]
        if isinstance(call.node, nodes.Name) and call.node.name in ("lookup", "query", "q") and args \
                and str(args[0]).rsplit(".", maxsplit=1)[-1] == "vars":
            found.update(str(a) for a in args[1:])
    return found


def _tasks(items):
    for task in items or []:
        if isinstance(task, dict):
            yield task
            for key in ("block", "rescue", "always"):
                yield from _tasks(task.get(key))


def written_names(doc):
    """Variables a task file sets: task and block vars, set_fact keys, register names."""
    found = set()
    for task in _tasks(doc if isinstance(doc, list) else []):
        found.update((task.get("vars") or {}).keys())
        if task.get("register"):
            found.add(task["register"])
        for key in SETTERS:
            if isinstance(task.get(key), dict):
                found.update(k for k in task[key] if k != "cacheable")
    return found


def role_files(role, parts=("tasks", "handlers", "templates", "vars", "defaults")):
    return [p for part in parts for p in sorted((ROLES / role / part).rglob("*")) if p.is_file()]


def escapes(role, files):
    """(file, what, name) for every read of another role's variable and every write of one, in a role's files."""
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".j2":
            sources, doc = [text], None
        else:
            doc = yaml.safe_load(text)
            sources = list(templated(doc))
        where = str(path.relative_to(path.parents[2])) if len(path.parents) > 2 else str(path)
        for source in sources:
            found += [(where, "reads", n) for n in sorted(loaded_names(source)) if owner(n) not in (None, role, FLOOR)]
        if doc is not None and path.parent.name in ("tasks", "handlers"):
            found += [(where, "sets", n) for n in sorted(written_names(doc)) if owner(n) not in (None, role, FLOOR)]
        if doc is not None and path.parent.name in ("defaults", "vars") and isinstance(doc, dict):
            found += [(where, "defines", n) for n in sorted(doc) if owner(str(n)) not in (None, role, FLOOR)]
    return found


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_a_role_reads_and_sets_only_its_own_variables_and_the_floor_s(role):
    found = escapes(role, role_files(role))
    assert not found, ("%s: read another role's setting through the floor's view (_sparkfleet_<role>.<setting> in "
                       "roles/sparkfleet/vars/main.yml), and never set or define one: %s" % (role, found))


def test_no_two_roles_state_the_same_default():
    """A default written out in two roles drifts (preflight once held a copy of runtime_image's load command)."""
    seen = {}
    copies = []
    for role in ROLE_NAMES:
        path = ROLES / role / "defaults" / "main.yml"
        for name, value in (yaml.safe_load(path.read_text()) or {}).items() if path.exists() else ():
            # a value read through the floor (a view of the role that owns it) is a reference, not a copy
            if isinstance(value, str) and len(value) >= 40 and "_sparkfleet_" not in value:
                if value in seen and seen[value][0] != role:
                    copies.append((seen[value], (role, name)))
                seen.setdefault(value, (role, name))
    assert not copies, copies


@pytest.mark.parametrize("snippet, expected", [
    ("- name: x\n  ansible.builtin.debug:\n    msg: \"{{ vllm_serve_api_key | default('') }}\"\n",
     [("reads", "vllm_serve_api_key")]),
    ("- name: x\n  ansible.builtin.debug:\n    msg: x\n  when: ray_cluster_firewall | bool\n",
     [("reads", "ray_cluster_firewall")]),
    ("- name: x\n  ansible.builtin.debug:\n    msg: \"{{ hostvars[h]['model_sync_user'] }} {{ vars['_gpu_cleanup_p'] }}\"\n",
     [("reads", "_gpu_cleanup_p"), ("reads", "model_sync_user")]),
    ("- name: x\n  ansible.builtin.debug:\n    msg: \"{{ lookup('ansible.builtin.vars', 'runtime_image_name') }}\"\n",
     [("reads", "runtime_image_name")]),
    ("- name: x\n  ansible.builtin.include_role: {name: sparkfleet.vllm.sparkfleet, tasks_from: gpu_plan.yml}\n"
     "  vars:\n    gpu_cleanup_ports: []\n", [("sets", "gpu_cleanup_ports")]),
    # the role's own names, the floor's, the floor's views and loop variables are fine
    ("- name: x\n  ansible.builtin.debug:\n    msg: \"{{ healthcheck_x }} {{ sparkfleet_api_url }} "
     "{{ _sparkfleet_vllm_serve.vllm_serve_api_key }} {% for vllm_serve_y in z %}{{ vllm_serve_y }}{% endfor %}\"\n",
     []),
])
def test_the_check_sees_each_escape(tmp_path, snippet, expected):
    path = tmp_path / "roles" / "healthcheck" / "tasks" / "main.yml"
    path.parent.mkdir(parents=True)
    path.write_text(snippet)
    assert [(what, name) for _f, what, name in escapes("healthcheck", [path])] == expected


# ---- one register name per task
# A task that is skipped still registers its result (ansible-core records the skip under the name), so two tasks of
# one task file registering one name let the second erase what the first found whenever it is skipped. Seen on main:
# runtime_image's "Read the pulled image on the head" (skipped on every run where the head held the image) erased the
# first read, and distribute.yml looked for the image on the workers without its content; model_sync's two manifest
# records shared a name the same way.
TASK_FILES = sorted(ROLES.glob("*/tasks/*.yml")) + sorted(ROLES.glob("*/handlers/*.yml"))


def shared_registers(doc):
    """Names registered by more than one task of a task file, with the tasks' names."""
    by_name = collections.defaultdict(list)
    for task in _tasks(doc):
        if task.get("register"):
            by_name[task["register"]].append(task.get("name", "?"))
    return {name: tasks for name, tasks in by_name.items() if len(tasks) > 1}


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_each_register_name_belongs_to_one_task(path):
    assert shared_registers(yaml.safe_load(path.read_text(encoding="utf-8"))) == {}


def test_the_check_sees_two_tasks_sharing_a_name():
    doc = yaml.safe_load("- name: a\n  ansible.builtin.command: x\n  register: r\n"
                         "- block:\n    - name: b\n      ansible.builtin.command: y\n      register: r\n      when: z\n")
    assert shared_registers(doc) == {"r": ["a", "b"]}
