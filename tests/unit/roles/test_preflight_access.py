"""roles/preflight/tasks/access.yml checks the keys model_sync and runtime_image will authorize, for the users and the
load command those roles will use: its fallbacks must give what the roles' own defaults give (issue 16.4)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import shlex
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible_collections.sparkfleet.vllm.tests.unit.support.playbook import run_playbook

REPO = Path(__file__).resolve().parents[3]


def _tasks(path):
    return yaml.safe_load((REPO / path).read_text())


def _render(expr, **variables):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.globals["lookup"] = lambda kind, name: "controller-user"   # ansible.builtin.env, only when ansible_user is unset
    env.filters["quote"] = shlex.quote
    return env.from_string(expr).render(**variables).strip()


def _access_vars():
    task = next(t for t in _tasks("roles/preflight/tasks/access.yml") if "sparkfleet.vllm.access_check" in t)
    return task["vars"], task["sparkfleet.vllm.access_check"]


def test_the_users_and_the_load_command_are_the_roles_own():
    """Preflight tries each key as the roles will use it: who it logs in as and the image key's command are read
    through the floor's views of model_sync and runtime_image (inventory over those roles' defaults), never a copy
    of their defaults (a copy went stale once; tests/unit/roles/test_role_reads.py holds the rule for every role)."""
    variables, _args = _access_vars()
    assert variables["_preflight_access_sync_user"] == "{{ _sparkfleet_model_sync.model_sync_user }}"
    assert variables["_preflight_access_image_user"] == "{{ _sparkfleet_runtime_image.runtime_image_sync_user }}"
    image_key = next(k for k in variables["_preflight_access_keys"] if k["name"] == "runtime_image's image key")
    assert image_key["command"] == "{{ _sparkfleet_runtime_image.runtime_image_load_command }}"
    floor = (REPO / "roles/sparkfleet/vars/main.yml").read_text()
    for name in ("model_sync_user", "runtime_image_sync_user", "runtime_image_load_command", "runtime_image_name"):
        assert "'%s'" % name in floor, name
    sync_key = next(k for k in variables["_preflight_access_keys"] if k["name"] == "model_sync's sync key")
    # model_sync's forced command runs this interpreter (roles/model_sync/tasks/main.yml).
    assert 'command="%s' % sync_key["interpreter"] in (REPO / "roles/model_sync/tasks/main.yml").read_text()


def test_preflight_checks_access_before_it_touches_a_node_otherwise():
    tasks = _tasks("roles/preflight/tasks/main.yml")
    names = [t.get("ansible.builtin.include_tasks") for t in tasks]
    first_contact = next(i for i, t in enumerate(tasks) if set(t) & {
        "sparkfleet.vllm.fabric_reach", "ansible.builtin.ping", "ansible.builtin.include_role",
        "sparkfleet.vllm.port_holders"} and "validate.yml" not in str(t))
    assert names.index("access.yml") < first_contact


def _loader():
    path = str(REPO / "roles/runtime_image/files/sparkfleet-image-load")
    loader = importlib.machinery.SourceFileLoader("sparkfleet_image_load_access", path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def test_the_image_key_is_tried_as_the_role_authorizes_it_with_arguments_its_command_refuses():
    """The key's forced command is `runtime_image_load_command --name IMAGE --content ID` (distribute.yml): preflight
    tries it with such arguments (sudoers matches them too), but with a content the load command refuses before it
    runs docker, so trying it loads nothing."""
    variables, _args = _access_vars()
    image_key = next(k for k in variables["_preflight_access_keys"] if k["name"] == "runtime_image's image key")
    image = "hellohal2064/vllm-qwen3.5-gb10@sha256:" + "ab" * 32
    arguments = _render(image_key["arguments"], _sparkfleet_runtime_image={"runtime_image_name": image})
    argv = shlex.split(arguments)
    assert argv[:2] == ["--name", image] and argv[2] == "--content"
    distribute = (REPO / "roles/runtime_image/tasks/distribute.yml").read_text()
    assert 'command="{{ runtime_image_load_command }} --name {{ runtime_image_name }} --content ' in distribute
    assert _loader().parse_args(argv) == (None, None)   # refused: usage, exit 2, before any docker command
    assert _loader().parse_args(argv[:3] + ["sha256:" + "cd" * 32]) == (image, "sha256:" + "cd" * 32)
    assert image_key["interpreter"] == "/usr/bin/python3"


@pytest.mark.parametrize("user", ["aurora", "root"])
def test_the_load_commands_default_passes_preflights_check(user):
    """Preflight checks runtime_image_load_command (it goes into the key's command="..."): the role's own default,
    for root (the interpreter's path first) and for any other user (through sudo), passes."""
    from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate
    runtime = yaml.safe_load((REPO / "roles/runtime_image/defaults/main.yml").read_text())
    command = _render(runtime["runtime_image_load_command"], runtime_image_sync_user=user,
                      runtime_image_loader=runtime["runtime_image_loader"])
    assert _validate.check_load_command(command) == (command, None)
    assert _validate.check_load_command("-o ProxyCommand=sh")[1]


def test_check_mode_keeps_the_named_cannot_be_reached_message(tmp_path):
    """Issue 41.2: --check (the README's safe first step) skipped wait_for_connection, so an unreachable node met
    Ansible's bare UNREACHABLE instead of the message naming the node and the fix. 127.0.0.1 port 1 refuses at once."""
    inv = tmp_path / "hosts.yml"
    inv.write_text("spark:\n  children:\n    spark_head:\n      hosts:\n        n1: {ansible_host: 127.0.0.1, "
                   "ansible_port: 1, ansible_user: nobody}\n    spark_workers: {}\n")
    play = tmp_path / "access.yml"
    play.write_text(
        "- name: Access\n  hosts: spark\n  gather_facts: false\n  vars:\n    sparkfleet_head_host: n1\n"
        "    sparkfleet_head_fabric_ip: 127.0.0.1\n    sparkfleet_image: x\n    preflight_ping_timeout: 3\n"
        "  tasks:\n    - name: Access\n      ansible.builtin.include_tasks: %s\n"
        % (REPO / "roles" / "preflight" / "tasks" / "access.yml"))
    p = run_playbook(play, "--check", inventory=inv, cwd=tmp_path)
    out = " ".join(p.stdout.split())
    assert p.returncode == 2, out[-2000:]
    assert "n1 (127.0.0.1) cannot be reached as nobody" in out and "Check the node is up" in out, out[-2000:]
    assert "UNREACHABLE!" not in out, out[-2000:]
