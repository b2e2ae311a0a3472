"""fabric_mtu_mismatches: the two ends of a fabric link must agree on the MTU."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.vllm.plugins.filter.fabric_mtu_mismatches import fabric_mtu_mismatches


def _hv(**mtus):
    fabric = {"interface": "enp1s0f1np1", "subnet": "10.99.1.0/24"}
    return {name.replace("_", "-"): {"sparkfleet_fabric": dict(fabric, mtu=mtu)} for name, mtu in mtus.items()}


def test_mismatch_names_both_nodes():
    out = fabric_mtu_mismatches(_hv(spark_1=9000, spark_2=1500), ["spark-1", "spark-2"])
    assert len(out) == 1 and "spark-1 enp1s0f1np1 MTU 9000" in out[0] and "spark-2 enp1s0f1np1 MTU 1500" in out[0]


def test_equal_low_mtu_is_no_mismatch():
    assert fabric_mtu_mismatches(_hv(spark_1=1500, spark_2=1500), ["spark-1", "spark-2"]) == []


def test_hosts_without_the_fact_are_skipped():
    hv = _hv(spark_1=9000)
    hv["spark-2"] = {}
    assert fabric_mtu_mismatches(hv, ["spark-1", "spark-2"]) == []


def test_only_the_given_hosts_count():
    assert fabric_mtu_mismatches(_hv(spark_1=9000, spark_2=1500), ["spark-1"]) == []


@pytest.mark.parametrize("hosts, msg", [("spark-1", "must be a list"), (["spark-9"], "not in hostvars")])
def test_bad_input_names_the_problem(hosts, msg):
    with pytest.raises(AnsibleFilterError, match=msg):
        fabric_mtu_mismatches(_hv(spark_1=9000), hosts)
