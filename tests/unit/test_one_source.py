"""Issue 43 item 3: lists and defaults that must agree come from one source, or a test ties them here.

- The fabric environment (the names a node's fabric selection sets): plugins/module_utils/fabric/_rdma.py FABRIC_ENV is the
  one list; the validator's refusal of an env dict that sets one reads it; vllm_serve's list of what vLLM must never
  carry from the driver to the workers is YAML (it cannot import Python) and is tied to it here.
- How a node's fabric is read (sysfs root, minimum MTU, RDMA device directory): the floor's defaults
  (roles/sparkfleet/defaults/main.yml) are what the roles pass; the modules' own defaults (_rdma.fabric_options, for
  a caller outside the roles) are tied to them here, and the floor's task files restate none of them.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric import _rdma
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate

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


def test_every_nic_type_sets_only_fabric_environment_keys():
    """A NIC type's env names a subset of the one list (FABRIC_ENV); the default NIC type sets all of it."""
    for nic in _rdma.NIC_TYPES.values():
        assert set(nic.env) <= set(_rdma.FABRIC_ENV_KEYS), (nic.name, sorted(set(nic.env) - set(_rdma.FABRIC_ENV_KEYS)))
    assert set(_rdma.NIC_TYPES[_rdma.DEFAULT_NIC].env) == set(_rdma.FABRIC_ENV_KEYS)
