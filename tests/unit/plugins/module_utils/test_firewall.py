"""_firewall on outputs captured in the lab (Debian 12's ufw 0.36.2 and nftables 1.0.6 in a lab host: labctl break
ufw-deny, plus an nft table and iptables rules with a drop policy made there by hand)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.host import _firewall

FIX = os.path.join(os.path.dirname(__file__), "..", "modules", "fixtures", "host_firewall")
FABRIC = "10.99.1.0/24"
IFACE = "enp1s0f1np1"


def read(name):
    with open(os.path.join(FIX, name)) as handle:
        return handle.read()


def test_ufw_deny_incoming_drops_the_fabric():
    status = _firewall.parse_ufw_status(read("ufw-deny.verbose.txt"))
    assert status["active"] and status["default_incoming"] == "deny"
    assert [(r["to"], r["action"], r["src"], r["v6"]) for r in status["rules"]] == [
        ("22/tcp", "ALLOW IN", "Anywhere", False), ("22/tcp", "ALLOW IN", "Anywhere", True)]
    admits, why = _firewall.ufw_admits(status, FABRIC, IFACE)
    assert not admits and why == ("ufw is active with default deny (incoming) and no rule lets 10.99.1.0/24 in on "
                                  "every port")


def test_ufw_with_our_fabric_allow_admits_it():
    status = _firewall.parse_ufw_status(read("ufw-deny-with-fabric-allow.verbose.txt"))
    admits, why = _firewall.ufw_admits(status, FABRIC, IFACE)
    assert admits and why == "ufw rule Anywhere on enp1s0f1np1 ALLOW IN 10.99.1.0/24 (sparkfleet fabric)"
    # on another interface the rule does not apply
    assert not _firewall.ufw_admits(status, FABRIC, "enP2p1s0f1np1")[0]
    numbered = _firewall.parse_ufw_status(read("ufw-deny-with-fabric-allow.numbered.txt"))
    assert numbered["default_incoming"] is None and _firewall.ufw_our_rules(numbered) == [2]


def test_ufw_port_rules_and_other_networks_do_not_admit_the_fabric_but_a_wider_network_does():
    status = _firewall.parse_ufw_status(read("ufw-deny-partial-allows.verbose.txt"))
    srcs = [(r["to"], r["src"]) for r in status["rules"] if not r["v6"]]
    assert ("10002:19999/tcp", "10.99.2.0/24") in srcs and ("Anywhere", "10.0.0.0/8") in srcs
    assert _firewall.ufw_admits(status, FABRIC, IFACE) == (True, "ufw rule Anywhere ALLOW IN 10.0.0.0/8")
    assert not _firewall.ufw_admits(status, "192.168.200.0/24", IFACE)[0]
    assert _firewall.ufw_our_rules(_firewall.parse_ufw_status(read("ufw-deny-partial-allows.numbered.txt"))) == []


def test_inactive_ufw_admits_everything():
    status = _firewall.parse_ufw_status(read("ufw-inactive.verbose.txt"))
    assert not status["active"] and _firewall.ufw_admits(status, FABRIC)[0]


def test_nft_input_policy_drop_is_found_and_a_saddr_accept_admits():
    drops = _firewall.nft_input_drops(read("plain-nft-drop.json"), FABRIC, IFACE, ignore_tables=("sparkfleet",))
    assert [(c, a) for c, a, _why in drops] == [("inet opsfw input", False)]
    allowed = _firewall.nft_input_drops(read("plain-nft-drop-allow.json"), FABRIC, IFACE)
    assert [(c, a) for c, a, _why in allowed] == [("inet opsfw input", True)]
    assert not _firewall.nft_input_drops(read("plain-nft-drop-allow.json"), "192.168.200.0/24")[0][1]
    assert _firewall.nft_input_drops(read("plain.nft-ruleset.json"), FABRIC) == []


def test_ufw_chains_in_nftables_are_iptables_nft_drop_policies():
    # ufw's own chains show up in nftables as `ip filter INPUT` with policy drop (read ufw first)
    drops = _firewall.nft_input_drops(read("ufw-deny.nft-ruleset.json"), FABRIC)
    assert ("ip filter INPUT", False) in [(c, a) for c, a, _why in drops]


def test_iptables_input_policy():
    assert _firewall.iptables_input_drops(read("plain.iptables-S-INPUT.txt"), FABRIC)[:2] == (False, True)
    drops, admits, why = _firewall.iptables_input_drops(read("plain-ipt-drop-allow.txt"), FABRIC)
    assert drops and admits and why == "iptables INPUT rule -A INPUT -s 10.99.1.0/24 -j ACCEPT"
    drops, admits, _why = _firewall.iptables_input_drops(read("ufw-deny.iptables-S-INPUT.txt"), FABRIC)
    assert drops and not admits


# firewalld's `--list-all-zones` layout (firewalld 2.x): no firewalld in the lab, so written in its format, not captured
FIREWALLD = """block
  target: %%REJECT%%
  interfaces:
  sources:

public (default, active)
  target: default
  icmp-block-inversion: no
  interfaces: enP7s7 enp1s0f1np1
  sources:
  services: dhcpv6-client ssh
  ports:

trusted%s
  target: ACCEPT
  icmp-block-inversion: no
  interfaces:
  sources: %s
  services:
"""


def test_firewalld_puts_the_fabric_in_the_interface_zone_unless_a_source_binds_it():
    zones = _firewall.parse_firewalld_zones(FIREWALLD % ("", ""))
    assert zones["public"]["default"] and zones["public"]["interfaces"] == ["enP7s7", "enp1s0f1np1"]
    admits, why = _firewall.firewalld_admits(zones, FABRIC, IFACE)
    assert not admits and "zone public (target default)" in why
    zones = _firewall.parse_firewalld_zones(FIREWALLD % (" (active)", FABRIC))
    assert _firewall.firewalld_admits(zones, FABRIC, IFACE) == (True, "firewalld zone trusted (target ACCEPT) holds "
                                                                      "10.99.1.0/24")


@pytest.mark.parametrize("tool, commands", [
    ("ufw", ["sudo ufw allow in on enp1s0f1np1 from 10.99.1.0/24 comment 'sparkfleet fabric'"]),
    ("firewalld", ["sudo firewall-cmd --permanent --zone=trusted --add-source=10.99.1.0/24",
                   "sudo firewall-cmd --reload"]),
    ("iptables", ["sudo iptables -I INPUT -s 10.99.1.0/24 -j ACCEPT"]),
])
def test_fix_commands(tool, commands):
    assert _firewall.fix_commands(tool, FABRIC, IFACE)[:len(commands)] == commands


def test_nft_fix_names_the_chain():
    assert _firewall.fix_commands("nftables", FABRIC, IFACE, "inet opsfw input")[0] == (
        "sudo nft insert rule inet opsfw input ip saddr 10.99.1.0/24 accept")


def test_port_ranges_and_outside_listeners():
    assert _firewall.expand_ports(["6379", "10002-10004", 8265]) == {6379, 10002, 10003, 10004, 8265}
    holders = [{"address": "0.0.0.0"}, {"address": "127.0.0.1"}, {"address": "::1"}, {"address": "10.99.0.11"}]
    assert _firewall.outside_listeners(holders) == [{"address": "0.0.0.0"}, {"address": "10.99.0.11"}]
