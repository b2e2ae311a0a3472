"""Inventory validation used by the preflight play."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._inventory import inventory_errors

GROUPS = {"spark_head": ["spark-1"], "spark_workers": ["spark-2"], "spark": ["spark-1", "spark-2"]}


def sparks(**overrides):
    """hostvars shaped like inventories/sparks; overrides as {host: {var: value}}."""
    common = {"sparkfleet_fabric_subnet": "192.168.200.0/24", "sparkfleet_gpus_per_node": 1,
              "vllm_serve_tensor_parallel_size": 2, "vllm_serve_pipeline_parallel_size": 1}
    hv = {
        "spark-1": dict(common, ansible_host="10.1.230.180", sparkfleet_fabric_ip="192.168.200.12"),
        "spark-2": dict(common, ansible_host="192.168.200.13", sparkfleet_fabric_ip="192.168.200.13"),
    }
    for host, values in overrides.items():
        hv.setdefault(host, dict(common)).update(values)
    return hv


def test_real_two_spark_inventory_is_valid():
    assert inventory_errors(sparks(), GROUPS) == []


@pytest.mark.parametrize("overrides, expected", [
    ({"spark-2": {"sparkfleet_fabric_ip": "10.1.230.181"}},
     "spark-2: sparkfleet_fabric_ip 10.1.230.181 is not inside sparkfleet_fabric_subnet 192.168.200.0/24"),
    ({"spark-2": {"sparkfleet_fabric_ip": None}}, "spark-2: sparkfleet_fabric_ip is not set"),
    ({"spark-2": {"sparkfleet_fabric_ip": "192.168.200.12"}},
     "spark-2: sparkfleet_fabric_ip 192.168.200.12 is also used by spark-1"),
    ({"spark-1": {"sparkfleet_fabric_ip": "169.254.3.4", "sparkfleet_fabric_subnet": "169.254.0.0/16"},
      "spark-2": {"sparkfleet_fabric_subnet": "169.254.0.0/16", "sparkfleet_fabric_ip": "169.254.3.5"}},
     "spark-1: sparkfleet_fabric_ip 169.254.3.4 is link-local"),
    ({"spark-1": {"sparkfleet_fabric_subnet": "192.168.300.0/24"}}, "spark-1: sparkfleet_fabric_subnet '192.168.300.0/24' is not a CIDR"),
    ({"spark-2": {"sparkfleet_fabric_subnet": "192.168.201.0/24", "sparkfleet_fabric_ip": "192.168.201.13"}},
     "spark-2: sparkfleet_fabric_subnet 192.168.201.0/24 differs from 192.168.200.0/24 on spark-1"),
    ({"spark-1": {"ansible_host": None}}, "spark-1: the head has no reachable address"),
    ({"spark-2": {"sparkfleet_gpus_per_node": 0}}, "spark-2: sparkfleet_gpus_per_node '0' must be a whole number >= 1"),
    ({"spark-1": {"sparkfleet_fabric_ip": "192.168.200.0"}}, "spark-1: sparkfleet_fabric_ip 192.168.200.0 is the network"),
])
def test_each_problem_names_host_and_variable(overrides, expected):
    errors = inventory_errors(sparks(**overrides), GROUPS)
    assert any(e.startswith(expected) for e in errors), errors


def test_parallel_sizes_are_left_to_the_serving_check():
    # tensor x pipeline parallel needs the vllm_serve role's defaults, which hostvars lack: _validate checks it.
    assert inventory_errors(sparks(**{"spark-1": {"vllm_serve_tensor_parallel_size": 4}}), GROUPS) == []


@pytest.mark.parametrize("groups, expected", [
    ({"spark_workers": ["spark-2"]}, "inventory: group 'spark_head' is missing"),
    ({"spark_head": ["spark-1", "spark-2"], "spark_workers": []}, "inventory: group 'spark_head' must hold exactly one host, it holds 2"),
    ({"spark_head": ["spark-1"]}, "inventory: group 'spark_workers' is missing"),
    ({"spark_head": ["spark-1"], "spark_workers": ["spark-1", "spark-2"]}, "spark-1: is in both"),
    ({"spark_head": ["spark-1"], "spark_workers": [], "spark": ["spark-1", "spark-2"]},
     "spark-2: is in 'spark' but in neither 'spark_head' nor 'spark_workers'"),
    ({"spark_head": ["spark-1"], "spark_workers": ["spark-2"], "spark": ["spark-1"]},
     "spark-2: is in 'spark_workers' but not in 'spark'"),
    ({"spark_head": ["spark-1"], "spark_workers": ["spark-2"]}, "inventory: group 'spark' is missing"),
])
def test_group_layout(groups, expected):
    groups = dict(groups)
    groups.setdefault("spark", sorted(set(groups.get("spark_head", []) + groups.get("spark_workers", []))))
    if expected.startswith("inventory: group 'spark' is"):
        del groups["spark"]
    assert any(e.startswith(expected) for e in inventory_errors(sparks(), groups)), inventory_errors(sparks(), groups)


def test_plays_and_roles_use_only_the_fixed_group_names():
    """Issue 11.5: one place decides the group names; every play and role must use exactly those."""
    import re
    from pathlib import Path

    from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._inventory import ALL_GROUP, HEAD_GROUP, WORKER_GROUP

    repo = Path(__file__).resolve().parents[4]
    names = {ALL_GROUP, HEAD_GROUP, WORKER_GROUP}
    seen = set()
    for path in sorted(repo.glob("playbooks/*.yml")) + sorted(repo.glob("roles/*/*/*.yml")):
        text = path.read_text()
        for pattern in re.findall(r"^\s*-?\s*hosts:\s*(\S+)", text, re.M):
            if path.name == "inventory_check.yml" and pattern in ("localhost", ">-"):
                continue  # the controller's check that these groups exist (issue 19; under --limit, issue 41.1)
            for group in pattern.strip("'\"").split(":"):
                assert group in names, "%s: hosts %s is not one of %s" % (path, group, sorted(names))
                seen.add(group)
        for group in re.findall(r"groups\[['\"]([^'\"]+)['\"]\]", text):
            if path.name == "inventory_check.yml" and group == "all":
                continue  # the controller's check counts every host the inventory holds
            assert group in names, "%s: groups['%s'] is not one of %s" % (path, group, sorted(names))
            seen.add(group)
        assert "groups[preflight_" not in text, path
    assert seen == names


# Issue 40.1: a node's name reaches the Ray guard's identity and the scrub unit's --node (ExecStart lines run as root),
# the controller's report and failure-log paths, and ssh. One rule, checked before every other.
@pytest.mark.bad_input(name="a node name a unit, a script or a path would read otherwise (inventory_errors)",
                       expected="refused first and alone, naming the host and why, before any other check")
@pytest.mark.parametrize("host, why", [
    pytest.param("spark-1\nExecStartPre=/bin/sh", "holds a newline", id="newline"),
    pytest.param("spark%H", "holds '%'", id="percent"),
    pytest.param("spark 1", "holds a blank", id="blank"),
    pytest.param("spark\t1", "holds a blank", id="tab"),
    pytest.param("spark\x001", "holds a NUL byte", id="NUL"),
    pytest.param("spark'1", "holds a character other than ASCII letters", id="quote"),
    pytest.param("-oProxyCommand=x", "starts with '-'", id="option"),
    pytest.param("../../etc", "holds '/'", id="path"),
    pytest.param("spark$HOME", "holds '$'", id="dollar"),
    pytest.param("s" * 64, "is 64 characters long, more than 63", id="64 characters"),
    pytest.param("spärk", "holds a character other than ASCII letters", id="non-ASCII"),
    pytest.param("spark..1", "holds a character other than ASCII letters", id="double dot"),
    pytest.param("", "is empty", id="empty"),
])
def test_a_node_name_that_changes_meaning_is_refused_first(host, why, observe):
    hv = sparks()
    hv[host] = hv.pop("spark-2")
    hv[host]["sparkfleet_fabric_ip"] = "10.9.9.9"   # also outside the subnet: only the name is reported
    groups = {"spark_head": ["spark-1"], "spark_workers": [host], "spark": ["spark-1", host]}
    errors = inventory_errors(hv, groups)
    assert errors == ["inventory: the host name %r %s" % (host, errors[0].split(" %r " % host, 1)[1])], errors
    assert errors[0].startswith("inventory: the host name %r %s" % (host, why)), errors
    assert "rename the host in the inventory" in errors[0]
    observe(errors[0])


@pytest.mark.parametrize("host", ["spark-1", "spark_2", "10.1.230.180", "spark-1.lab.example.com", "s" * 63, "GB10-A"])
def test_plain_node_names_pass(host):
    hv = sparks()
    hv[host] = hv.pop("spark-1")
    assert inventory_errors(hv, {"spark_head": [host], "spark_workers": ["spark-2"], "spark": [host, "spark-2"]}) == []


@pytest.mark.bad_input(name="a group holding a node, named so Ansible changes it (inventory_errors)",
                       expected="refused, naming the group")
def test_a_group_of_a_node_with_a_name_ansible_would_change_is_refused(observe):
    groups = dict(GROUPS, **{"dgx-sparks": ["spark-1"], "other-things": ["printer"]})
    errors = inventory_errors(sparks(), groups)
    assert errors == ["inventory: the group name 'dgx-sparks', which holds a node, is not a group name Ansible keeps"
                      " as written (a letter or '_', then letters, digits and '_'); rename the group"], errors
    observe(errors[0])
