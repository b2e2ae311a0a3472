"""Issue 40.8: every refusal names what the user set (the variable, the node), never a fact the roles derive.

A hostile-input sweep over every role variable preflight checks (each through settings_errors on the head and on a
worker, and through serving_errors), over templating errors of the roles' defaults (the settings_errors filter, as
the role_settings lookup reports them), and over the inventory check: every message names a variable a user sets
(an option of some role's argument specs), and none names a derived floor fact (roles/sparkfleet/vars/main.yml, the
facts roles/sparkfleet/README.md lists) or a role's internal (_name) as what to set.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.sparkfleet.vllm.plugins.filter import settings_errors as settings_filter
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _inventory
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate as v

REPO = Path(__file__).resolve().parents[4]
HOST, WORKER = "spark-1", "spark-2"
SUBNET = "192.168.200.0/24"


def _user_settings():
    names = set()
    for spec in (REPO / "roles").glob("*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(spec.read_text())["argument_specs"].values():
            names |= set(n for n in (entry.get("options") or {}) if not n.startswith("_"))
    return names


USER = _user_settings()
DERIVED = (set(yaml.safe_load((REPO / "roles" / "sparkfleet" / "vars" / "main.yml").read_text()))
           | {"sparkfleet_fabric", "sparkfleet_settings_validated", "sparkfleet_image_check", "sparkfleet_vllm_startup",
              "sparkfleet_runtime_image_ids", "sparkfleet_runtime_image_sync", "sparkfleet_runtime_image_ref"})
_NAME_RE = re.compile(r"(?<![A-Za-z0-9_./-])_?[a-z][a-z0-9]*_[a-z0-9_]+\b")
HOSTILE = (None, "", " ", "\n", "%n", "$HOME", "a\0b", "x" * 3000, True, False, 0, -1, 2 ** 70, float("nan"), "1e3",
           " 30", "30.5", "0x10", "5e-1", [], [None], ["--x"], [[1]], {}, {"A": None}, {"": 1}, {"RAY_ADDRESS": "x"},
           {"x": [1]}, "../../etc", "/etc/passwd", "~/.ssh/id_rsa", "auto", "0.0.0.0/0", ["0.0.0.0/0"], "{{ x }}")
CHECKED = sorted(set(v.SERVING_CHECKS) | set(v.ROLE_CHECKS))


def _problems(message):
    """What is wrong with one refusal: it names no user setting, or it names a derived fact or an internal."""
    names = set(_NAME_RE.findall(message))
    out = []
    if not names & USER:
        out.append("names no variable the user sets")
    bad = sorted(n for n in names if n in DERIVED or n.startswith("_"))
    if bad:
        out.append("names %s, which the user does not set" % ", ".join(bad))
    return out


def test_the_rule_sees_a_refusal_that_names_a_derived_fact():
    assert _problems("spark-1: sparkfleet_head_fabric_ip is not an address")
    assert _problems("spark-1: _ray_cluster_is_head must be true or false")
    assert _problems("spark-1: must be a whole number")
    assert not _problems("spark-1: ray_cluster_watchdog_interval ' 30' must be a whole number")


@pytest.mark.parametrize("name", CHECKED)
def test_every_refusal_of_a_hostile_value_names_the_user_s_variable(name):
    messages = set()
    for value in HOSTILE:
        settings = {name: value, "sparkfleet_fabric_subnet": SUBNET}
        messages.update(v.settings_errors(settings, HOST, head=True, gpus=2))
        messages.update(v.settings_errors(settings, WORKER, head=False, gpus=2))
        if name in v.SERVING_CHECKS:
            messages.update(v.serving_errors({name: value}, HOST, gpus=2))
    assert messages or name in ("sparkfleet_allow_unsafe_env",), name
    wrong = dict((m, _problems(m)) for m in messages if _problems(m))
    assert not wrong, wrong


@pytest.mark.parametrize("reason", [
    "'sparkfleet_head_fabric_ip' is undefined", "'_ray_cluster_is_head' is undefined", "'nope' is undefined",
    "'sparkfleet_model_dir' is undefined", "template error while templating string: unexpected '}'",
])
@pytest.mark.parametrize("name", ["healthcheck_url", "ray_cluster_image", "model_sync_dest"])
def test_a_default_that_cannot_be_templated_is_named_with_what_the_user_sets(name, reason):
    data = {"values": {}, "errors": {name: reason}, "defaulted": [name],
            "sources": {name: ["sparkfleet_head_fabric_ip", "sparkfleet_fabric_ip", "sparkfleet_api_host",
                               "sparkfleet_model_dir", "sparkfleet_image"]}}
    errors = settings_filter.settings_errors(data, HOST)
    assert len(errors) == 1 and errors[0].startswith("%s: %s cannot be templated" % (HOST, name)), errors
    missing = re.match(r"'(\w+)' is undefined", reason)
    if missing and missing.group(1) not in USER and missing.group(1) != "nope":
        # a derived fact or an internal is missing: the fix names what the user sets, never "set that variable"
        assert "set that variable" not in errors[0], errors[0]
        assert "which the roles derive from sparkfleet_api_host, sparkfleet_fabric_ip, sparkfleet_image," \
               " sparkfleet_model_dir" in errors[0], errors[0]
    assert "set %s itself" % name in errors[0], errors[0]


def _hostvars(values):
    base = {"sparkfleet_fabric_subnet": SUBNET, "sparkfleet_gpus_per_node": 1}
    head, worker = dict(base, sparkfleet_fabric_ip="192.168.200.11"), dict(base, sparkfleet_fabric_ip="192.168.200.12")
    worker.update(values)
    return {HOST: head, WORKER: worker}


@pytest.mark.parametrize("name", sorted(_inventory.NODE_VARS) + ["sparkfleet_gpus_per_node"])
def test_every_inventory_refusal_names_the_node_and_its_variable(name):
    groups = {"spark": [HOST, WORKER], "spark_head": [HOST], "spark_workers": [WORKER]}
    for value in HOSTILE:
        for message in _inventory.inventory_errors(_hostvars({name: value}), groups):
            assert message.startswith((HOST + ": ", WORKER + ": ", "inventory: ")), message
            assert not _problems(message), (value, message, _problems(message))
