"""Issue 20: roles meet through the sparkfleet role (the shared floor), never sideways.

Read from the YAML of every role and playbook: which role includes which role's task file, and where modules that read
node facts are called.
"""

from __future__ import annotations

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
# Left (may only shrink): site.yml's image-wait play runs no role, so the floor's values are not loaded there.
REBUILT_LEFT = {("sparkfleet_head_host", "playbooks/site.yml")}


@pytest.mark.parametrize("value", sorted(REBUILT))
def test_cluster_wide_values_are_computed_once_on_the_floor(value):
    """A role or playbook that needs the head, the nodes or their fabric IPs reads the floor's value (the workers'
    addresses: sparkfleet_cluster_nodes | rejectattr('head')), never rebuilds it from the groups or hostvars."""
    home = ROLES / "sparkfleet" / "vars" / "main.yml"
    assert "%s:" % value in home.read_text()
    rebuilt = {str(p.relative_to(REPO)) for p in production_yaml() if p != home
               for way in REBUILT[value] if way in p.read_text()}
    left = {path for v, path in REBUILT_LEFT if v == value}
    assert rebuilt <= left, "read %s instead: %s" % (value, sorted(rebuilt - left))
    assert left <= rebuilt, "gone (remove from REBUILT_LEFT): %s" % sorted(left - rebuilt)


# The sideways includes left (a role running another role's task file, not the floor's). The list may only shrink:
# a new one belongs in roles/sparkfleet/tasks (issue 20).
SIDEWAYS_LEFT = {
    ("preflight", "vllm_serve", "validate.yml"),
    ("preflight", "ray_cluster", "fabric.yml"),
    ("preflight", "ray_cluster", "firewall_check.yml"),
    ("preflight", "ray_cluster", "firewall_host.yml"),
    ("preflight", "ray_cluster", "ports.yml"),
    ("preflight", "gpu_cleanup", "plan.yml"),
    ("ray_cluster", "runtime_image", "distribute_wait.yml"),
}


def test_no_new_sideways_include():
    sideways = {(role, target, tf) for role, target, tf in includes() if target not in (role, "sparkfleet")}
    assert sideways <= SIDEWAYS_LEFT, sorted(sideways - SIDEWAYS_LEFT)
    assert SIDEWAYS_LEFT <= sideways, "gone (remove from SIDEWAYS_LEFT): %s" % sorted(SIDEWAYS_LEFT - sideways)
