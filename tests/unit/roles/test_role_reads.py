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


# ---- one home per behaviour (issue 43 item 1)
# A role runs only its own task files and the floor's (include_role/import_role of sparkfleet.vllm.sparkfleet); a play
# runs one role's (and the floor's). Once site.yml's runtime_image play ran vllm_serve's image_check.yml and
# ray_cluster's fabric_reach.yml, whose private fact (_ray_cluster_fabric_reached) ray_cluster read back in a later
# play: neither the roles' own Jinja nor test_floor's include list saw it.
ROLE_INCLUDES = ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role")
TASK_INCLUDES = ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks", "include_tasks", "import_tasks")
PLAY_TASKS = ("pre_tasks", "tasks", "post_tasks", "handlers")


def _role_name(name):
    return str(name).rsplit(".", maxsplit=1)[-1]


def reached_roles(tasks):
    """(role, tasks_from, file) for every include_role/import_role; (None, file, leaves) for include_tasks/import_tasks
    whose file leaves the role (a ../ or roles/ path, role_path)."""
    found = []
    for task in _tasks(tasks):
        for key in ROLE_INCLUDES:
            if isinstance(task.get(key), dict):
                found.append((_role_name(task[key].get("name", "")), task[key].get("tasks_from", "main.yml")))
        for key in TASK_INCLUDES:
            if key in task:
                arg = task[key].get("file", "") if isinstance(task[key], dict) else str(task[key])
                if ".." in arg or "roles/" in arg or "role_path" in arg:
                    found.append((None, arg))
    return found


def sideways(role, doc):
    """What a role's task file reaches outside itself and the floor."""
    return [(target, what) for target, what in reached_roles(doc if isinstance(doc, list) else [])
            if target not in (role, FLOOR)]


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_a_role_runs_only_its_own_task_files_and_the_floor_s(role):
    found = {str(p.relative_to(REPO)): sideways(role, yaml.safe_load(p.read_text(encoding="utf-8")))
             for p in role_files(role, ("tasks", "handlers")) if p.suffix == ".yml"}
    assert {k: v for k, v in found.items() if v} == {}, (
        "a task file two roles run goes to roles/sparkfleet/tasks (include_role: {name: sparkfleet.vllm.sparkfleet, "
        "tasks_from: ...})")


def play_roles(play):
    """The roles whose task files a play runs (its roles: and its include_role/import_role tasks), the floor left out;
    None for a task file reached by a path."""
    roles = {_role_name(r["role"] if isinstance(r, dict) else r) for r in play.get("roles") or []}
    for key in PLAY_TASKS:
        roles |= {target for target, _what in reached_roles(play.get(key))}
    return roles - {FLOOR}


PLAYBOOKS = sorted((REPO / "playbooks").glob("*.yml"))


@pytest.mark.parametrize("path", PLAYBOOKS, ids=lambda p: p.name)
def test_each_play_runs_one_role(path):
    """A play is one role's (and the floor's): a behaviour a play needs from another role is that role's play, or a
    task file of the floor."""
    plays = [p for p in yaml.safe_load(path.read_text(encoding="utf-8")) or [] if isinstance(p, dict)
             and "hosts" in p]
    many = [(p.get("name"), sorted(map(str, play_roles(p)))) for p in plays if len(play_roles(p)) > 1]
    assert many == []


@pytest.mark.parametrize("snippet, role, expected", [
    ("- name: x\n  ansible.builtin.include_role: {name: sparkfleet.vllm.ray_cluster, tasks_from: fabric_reach.yml}\n",
     "runtime_image", [("ray_cluster", "fabric_reach.yml")]),
    ("- name: x\n  ansible.builtin.import_tasks: ../../vllm_serve/tasks/image_check.yml\n", "runtime_image",
     [(None, "../../vllm_serve/tasks/image_check.yml")]),
    ("- block:\n    - name: x\n      ansible.builtin.include_tasks:\n        file: \"{{ role_path }}/../x/tasks/y.yml\"\n",
     "runtime_image", [(None, "{{ role_path }}/../x/tasks/y.yml")]),
    # the role's own files and the floor's are fine
    ("- name: x\n  ansible.builtin.include_tasks: wait.yml\n"
     "- name: y\n  ansible.builtin.include_role: {name: sparkfleet.vllm.sparkfleet, tasks_from: image_check.yml}\n"
     "- name: z\n  ansible.builtin.import_role: {name: sparkfleet.vllm.vllm_serve, tasks_from: stop.yml}\n",
     "vllm_serve", []),
])
def test_the_include_check_sees_each_way_out(snippet, role, expected):
    assert sideways(role, yaml.safe_load(snippet)) == expected


def test_the_play_check_sees_a_play_of_two_roles():
    play = yaml.safe_load(
        "hosts: spark_head\ntasks:\n  - name: a\n    ansible.builtin.import_role: {name: sparkfleet.vllm.runtime_image}\n"
        "  - name: b\n    ansible.builtin.import_role: {name: sparkfleet.vllm.vllm_serve, tasks_from: image_check.yml}\n"
        "  - name: c\n    ansible.builtin.include_role: {name: sparkfleet.vllm.sparkfleet, tasks_from: image_wait.yml}\n")
    assert play_roles(play) == {"runtime_image", "vllm_serve"}
