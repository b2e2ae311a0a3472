"""Issue 43 item 3: lists and defaults that must agree come from one source, or a test ties them here.

- The fabric environment (the names a node's fabric selection sets): plugins/module_utils/fabric/_rdma.py FABRIC_ENV is the
  one list; the validator's refusal of an env dict that sets one reads it; vllm_serve's list of what vLLM must never
  carry from the driver to the workers is YAML (it cannot import Python) and is tied to it here.
- How a node's fabric is read (sysfs root, minimum MTU, RDMA device directory): the floor's defaults
  (roles/sparkfleet/defaults/main.yml) are what the roles pass; the modules' own defaults (_rdma.fabric_options, for
  a caller outside the roles) are tied to them here, and the floor's task files restate none of them.
- The node scripts a unit runs (issue 43 item 1): each lives once, in the files/ of the role that owns the unit, or in
  the floor's when units of two roles run it; no role reads another role's files.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric import _rdma
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate
from ansible_collections.sparkfleet.vllm.tests.unit.support.playbook import run_playbook

REPO = Path(__file__).resolve().parents[2]
SELECTION = {"ip": "10.99.1.11", "interface": "enp1s0f1np1", "hca": ["rocep1s0f1"], "hca_ports": ["rocep1s0f1:1"],
             "nccl_gid_index": 3}


def _yaml(path):
    return yaml.safe_load((REPO / path).read_text(encoding="utf-8"))


def test_the_fabric_environment_is_one_list():
    assert tuple(_rdma.fabric_env(SELECTION)) == _rdma.FABRIC_ENV_KEYS
    assert set(_validate.FABRIC_ENV) | {"VLLM_HOST_IP"} == set(_rdma.FABRIC_ENV_KEYS)
    assert set(_rdma.FABRIC_ENV_KEYS) <= set(_validate.OWNED_ENV)
    non_carry = _yaml("roles/vllm_serve/vars/main.yml")["_vllm_serve_non_carry_over"]
    assert set(non_carry) == set(_rdma.FABRIC_ENV_KEYS) | {"VLLM_API_KEY"}, (
        "roles/vllm_serve/vars/main.yml _vllm_serve_non_carry_over must name every fabric variable (and the key)")


def test_a_selection_without_a_gid_index_leaves_its_variable_out():
    env = _rdma.fabric_env(dict(SELECTION, nccl_gid_index=None))
    assert "NCCL_IB_GID_INDEX" not in env and len(env) == len(_rdma.FABRIC_ENV_KEYS) - 1


FLOOR_FOR_OPTION = {"sysfs_root": "sparkfleet_rdma_sysfs_root", "min_mtu": "sparkfleet_fabric_min_mtu",
                    "dev_dir": "sparkfleet_rdma_dev_dir"}


def test_the_fabric_read_defaults_are_the_floor_s():
    floor = _yaml("roles/sparkfleet/defaults/main.yml")
    options = _rdma.fabric_options()
    for option, setting in FLOOR_FOR_OPTION.items():
        assert options[option]["default"] == floor[setting], (option, setting)


def test_the_floor_s_fabric_reads_restate_no_default():
    for name in ("fabric_facts.yml", "fabric_check.yml"):
        text = (REPO / "roles" / "sparkfleet" / "tasks" / name).read_text(encoding="utf-8")
        literal = re.findall(r"(?m)^\s*(?:%s): .*default\((?:\d+|'[^']*'|\"[^\"]*\")\)" % "|".join(FLOOR_FOR_OPTION), text)
        assert not literal, "%s restates a default the floor's defaults hold: %s" % (name, literal)


# ---- the scripts a unit runs (issue 43 item 1)
# A unit's command lines name the node scripts it runs (/usr/local/sbin/..., /usr/local/lib/...). Each is written by
# the role that owns the unit (its templates/) or, when units of two roles run it, by the floor's one list
# (roles/sparkfleet/vars/main.yml _sparkfleet_unit_scripts, from roles/sparkfleet/files/), which each such role splices
# into its own config_files run. Once vllm_serve's unit ran three scripts ray_cluster installed, read from
# ray_cluster's files/ through role_path/../ray_cluster/.
NODE_SCRIPT = re.compile(r"/usr/local/(?:s?bin|lib)/[\w.-]+")
ROLES = REPO / "roles"


def _floor_scripts():
    return {entry["path"]: entry for entry in _yaml("roles/sparkfleet/vars/main.yml")["_sparkfleet_unit_scripts"]}


def _unit_scripts():
    """role -> the node scripts its unit templates run."""
    found = {}
    for template in sorted(ROLES.glob("*/templates/*.service.j2")):
        found.setdefault(template.parts[-3], set()).update(NODE_SCRIPT.findall(template.read_text(encoding="utf-8")))
    return found


def _role_text(role, parts=("tasks", "vars")):
    return "\n".join(p.read_text(encoding="utf-8") for part in parts for p in sorted((ROLES / role / part).glob("*.yml")))


def test_a_unit_s_scripts_are_written_by_its_role_or_the_floor_s_list():
    floor = _floor_scripts()
    runs = _unit_scripts()
    assert runs["vllm_serve"] and runs["ray_cluster"]
    wrong = []
    for role, scripts in sorted(runs.items()):
        text = _role_text(role)
        for script in sorted(scripts):
            own = re.search(r"""path['"]?:\s*['"]?%s['"]?(?:\s*$|,)""" % re.escape(script), text, re.M) is not None
            shared = script in floor and "_sparkfleet_unit_scripts" in text
            if own == shared:   # neither, or both (two copies of one script)
                wrong.append((role, script, "both" if own else "neither"))
    assert not wrong, "write a unit's script in its role, or in _sparkfleet_unit_scripts when two roles' units run it: %s" % wrong


def test_the_floor_s_scripts_are_those_two_roles_units_run():
    runners = {}
    for role, scripts in _unit_scripts().items():
        for script in scripts:
            runners.setdefault(script, set()).add(role)
    for path in _floor_scripts():
        # sparkfleet_memory.py is imported by the watchdog from beside it, never named on a command line
        users = runners.get(path, set()) or runners.get("/usr/local/lib/sparkfleet-watchdog.py", set())
        assert len(users) >= 2, "%s is run by one role's unit only (%s): that role writes it" % (path, sorted(users))


def test_each_node_script_has_one_source_file():
    """No script is kept twice: a file name lives in one role's files/, and what the floor lists is its own."""
    seen = {}
    for path in sorted(ROLES.glob("*/files/*")):
        if path.is_file():
            seen.setdefault(path.name, []).append(path.parts[-3])
    assert {name: roles for name, roles in seen.items() if len(roles) > 1} == {}
    for entry in _floor_scripts().values():
        source = re.search(r"/\.\./sparkfleet/files/([\w.-]+)'", entry["content"])
        assert source and (ROLES / "sparkfleet" / "files" / source.group(1)).is_file(), entry


def test_no_role_reads_another_role_s_files():
    """A role reads files/ and templates/ of its own or of the floor, never role_path/../<other role>/."""
    cross = re.compile(r"role_path\s*(?:\}\}|~\s*['\"])/\.\./(\w+)/")
    found = sorted((str(p.relative_to(REPO)), other) for p in ROLES.glob("*/*/*.yml")
                   for other in cross.findall(p.read_text(encoding="utf-8")) if other not in (p.parts[-3], "sparkfleet"))
    assert found == []
    assert cross.findall("{{ role_path }}/../ray_cluster/files/") == ["ray_cluster"]


def test_the_floor_s_scripts_render_from_a_role_beside_it(tmp_path):
    """_sparkfleet_unit_scripts as a role of the collection reads it (ansible-playbook, role_path that role's): each
    entry's content is its file in roles/sparkfleet/files, byte for byte."""
    roles = tmp_path / "roles"
    (roles / "reader" / "tasks").mkdir(parents=True)
    (roles / "sparkfleet").symlink_to(ROLES / "sparkfleet")
    out = tmp_path / "scripts.json"
    (roles / "reader" / "tasks" / "main.yml").write_text(yaml.safe_dump([
        {"name": "Write what the floor's list holds", "ansible.builtin.copy": {
            "content": "{{ _sparkfleet_unit_scripts | to_json }}", "dest": str(out), "mode": "0644"}}]))
    playbook = tmp_path / "p.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False,
                                         "roles": ["sparkfleet", "reader"]}]))
    proc = run_playbook(playbook, local=True, timeout=120, report_dir=tmp_path / "r",
                        env={"ANSIBLE_ROLES_PATH": roles})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(out.read_text())
    names = {"/usr/local/sbin/sparkfleet-wait": "sparkfleet-wait", "/usr/local/sbin/sparkfleet-must": "sparkfleet-must",
             "/usr/local/sbin/sparkfleet-run": "sparkfleet-run",
             "/usr/local/lib/sparkfleet-watchdog.py": "sparkfleet_watchdog.py",
             "/usr/local/lib/sparkfleet_memory.py": "sparkfleet_memory.py"}
    assert {e["path"] for e in got} == set(names)
    for entry in got:
        assert entry["content"] == (ROLES / "sparkfleet" / "files" / names[entry["path"]]).read_text(), entry["path"]
        assert entry["mode"] == ("0644" if entry["path"].startswith("/usr/local/lib/") else "0755")


def test_every_nic_type_sets_only_fabric_environment_keys():
    """A NIC type's env names a subset of the one list (FABRIC_ENV); the default NIC type sets all of it."""
    for nic in _rdma.NIC_TYPES.values():
        assert set(nic.env) <= set(_rdma.FABRIC_ENV_KEYS), (nic.name, sorted(set(nic.env) - set(_rdma.FABRIC_ENV_KEYS)))
    assert set(_rdma.NIC_TYPES[_rdma.DEFAULT_NIC].env) == set(_rdma.FABRIC_ENV_KEYS)
