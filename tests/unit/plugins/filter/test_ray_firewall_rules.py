"""ray_firewall_rules: Ray's ports answer the fabric only, in a table of our own that nft accepts."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.vllm.plugins.filter.ray_firewall_rules import ray_firewall_rules

# What the ray_cluster role passes with its defaults (GCS, pinned ports, client, dashboard, workers, ephemeral).
ROLE_PORTS = [6379, 6380, 6381, 6382, 6383, 6384, 6385, 10001, 8265, "10002-19999", "32768-60999"]


def _digest(text):
    return re.search(r'comment "sparkfleet ray firewall ([0-9a-f]{16})"', text).group(1)


def test_only_our_table_is_replaced_and_the_fabric_alone_reaches_ray():
    text = ray_firewall_rules(ROLE_PORTS, ["10.99.1.0/24"])
    tables = set(re.findall(r"^(?:delete )?table (\S+ \S+)", text, re.M))
    assert tables == {"inet sparkfleet"}
    assert "flush ruleset" not in text
    assert "elements = { 6379-6385, 8265, 10001-19999, 32768-60999 }" in text
    chain = text[text.index("chain ray {"):]
    # loopback and established first, then the fabric, then everything else to those ports is refused
    assert [ln.strip() for ln in chain.splitlines()[1:5]] == [
        'iif "lo" accept', "ct state established,related accept", "ip saddr { 10.99.1.0/24 } accept",
        "counter reject with icmpx type admin-prohibited"]
    assert "policy accept;" in text  # other ports (ssh, the API) are not this table's business


def test_the_digest_changes_with_the_rules_and_only_then():
    a = ray_firewall_rules(ROLE_PORTS, ["10.99.1.0/24"])
    assert a == ray_firewall_rules(list(reversed(ROLE_PORTS)), "10.99.1.0/24")
    b = ray_firewall_rules(ROLE_PORTS, ["10.99.2.0/24"])
    assert _digest(a) != _digest(b)


def test_ipv6_networks_and_table_name():
    text = ray_firewall_rules([6379], ["fd00::/64", "192.168.200.0/24"], table="fleet2")
    assert "ip6 saddr { fd00::/64 } accept" in text and "ip saddr { 192.168.200.0/24 } accept" in text
    assert "table inet fleet2 {" in text


@pytest.mark.parametrize("ports, allow, kwargs, message", [
    ([], ["10.0.0.0/8"], {}, "non-empty list"),
    ([0], ["10.0.0.0/8"], {}, "port 0 is out of range"),
    (["70000"], ["10.0.0.0/8"], {}, "out of range"),
    (["200-100"], ["10.0.0.0/8"], {}, "runs backwards"),
    (["x"], ["10.0.0.0/8"], {}, "'x' is not a port number"),
    ([True], ["10.0.0.0/8"], {}, "not a port number"),
    ([6379], [], {}, "allow must list the networks"),
    ([6379], ["fabric"], {}, "'fabric' in allow is not a network"),
    ([6379], ["0.0.0.0/0"], {}, "every address"),
    ([6379], ["10.0.0.0/8"], {"table": "bad name"}, "not a valid nftables name"),
])
def test_bad_input_is_refused_with_the_reason(ports, allow, kwargs, message):
    with pytest.raises(AnsibleFilterError, match=re.escape(message)):
        ray_firewall_rules(ports, allow, **kwargs)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nft"), reason="nft -c needs nft and root")
def test_nft_accepts_the_script(tmp_path):
    script = tmp_path / "fw.nft"
    script.write_text(ray_firewall_rules(ROLE_PORTS, ["10.99.1.0/24", "fd00::/64"]))
    p = subprocess.run(["nft", "-c", "-f", str(script)], capture_output=True, text=True, check=False)  # -c: checks only
    assert p.returncode == 0, p.stderr


def test_the_monitoring_table_is_its_own_beside_rays():
    script = ray_firewall_rules([9100, 9090, 9093], ["10.99.1.0/24", "10.99.0.11/24"], table="sparkfleet_monitoring",
                                service="monitoring")
    assert "# sparkfleet.vllm monitoring: The monitoring ports answer only loopback and 10.99.1.0/24, 10.99.0.0/24." \
        in script
    assert "table inet sparkfleet_monitoring {" in script and "th dport @monitoring_ports jump monitoring" in script
    assert "elements = { 9090, 9093, 9100 }" in script and "ray" not in script.replace("sparkfleet", "")
    assert re.search(r'comment "sparkfleet monitoring firewall [0-9a-f]{16}"', script)
    with pytest.raises(AnsibleFilterError, match="service must be one of monitoring, ray"):
        ray_firewall_rules([9100], ["10.0.0.0/8"], service="grafana")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nft"), reason="nft -c needs nft and root")
def test_nft_accepts_the_monitoring_script(tmp_path):
    script = tmp_path / "fw.nft"
    script.write_text(ray_firewall_rules([9090, 9093, 9100], ["10.99.1.0/24"], table="sparkfleet_monitoring",
                                         service="monitoring"))
    p = subprocess.run(["nft", "-c", "-f", str(script)], capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr
