# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Pure helpers for host_firewall: read a node's own firewall (ufw, firewalld, an nftables or iptables input policy
that drops) and decide whether it lets the fabric subnet in, which Ray and NCCL need on every port.

Every firewall's chains are separate netfilter base chains from ours (`inet sparkfleet`): a packet dropped by any
of them is dropped, so an accept in our table does not open what ufw denies. Private to the collection.
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json

UFW_COMMENT = "sparkfleet fabric"

# `ufw status verbose` / `ufw status numbered` rule lines: [ N] TO  ACTION  FROM  # comment
_UFW_RULE = re.compile(r"^\s*(?:\[\s*(?P<num>\d+)\]\s+)?(?P<to>\S.*?)\s{2,}(?P<action>(?:ALLOW|DENY|REJECT|LIMIT)"
                       r"(?: (?:IN|OUT|FWD))?)\s{2,}(?P<src>\S.*?)(?:\s+#\s?(?P<comment>.*?))?\s*$")
_UFW_DEFAULT = re.compile(r"^Default:\s*(?P<incoming>\w+) \(incoming\)", re.M)


def _net(text):
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        return None


def _covers(outer, subnet):
    """Whether the network `outer` (text, 'Anywhere') holds every address of `subnet`."""
    text = (outer or "").strip()
    if text.startswith("Anywhere"):
        return True
    net = _net(text)
    sub = _net(subnet)
    return bool(net and sub and net.version == sub.version and sub.subnet_of(net))


def parse_ufw_status(text):
    """`ufw status verbose` (or `numbered`) -> {active, default_incoming, rules: [{num, to, action, src, v6,
    comment}]}; default_incoming is None when the text does not say (numbered output)."""
    text = text or ""
    active = bool(re.search(r"^Status:\s*active\s*$", text, re.M))
    m = _UFW_DEFAULT.search(text)
    rules = []
    started = False
    for line in text.splitlines():
        if line.strip().startswith("--"):
            started = True
            continue
        if not started or not line.strip():
            continue
        r = _UFW_RULE.match(line)
        if not r:
            continue
        to, src = r.group("to"), r.group("src")
        v6 = "(v6)" in to or "(v6)" in src
        rules.append({"num": int(r.group("num")) if r.group("num") else None, "to": to.replace(" (v6)", ""),
                      "action": r.group("action"), "src": src.replace(" (v6)", ""), "v6": v6,
                      "comment": (r.group("comment") or "").strip()})
    return {"active": active, "default_incoming": m.group("incoming") if m else None, "rules": rules}


def ufw_admits(status, subnet, interface=None):
    """(admits, why): whether ufw lets every port in from `subnet` (on `interface`, when given)."""
    if not status["active"]:
        return True, "ufw is inactive"
    if status["default_incoming"] == "allow":
        return True, "ufw allows incoming by default"
    want_v6 = (_net(subnet) or ipaddress.ip_network("0.0.0.0/0")).version == 6
    for rule in status["rules"]:
        if rule["v6"] != want_v6 or not rule["action"].startswith("ALLOW") or rule["action"].endswith(("OUT", "FWD")):
            continue
        to = rule["to"]
        on = re.match(r"^Anywhere(?: on (\S+))?$", to)
        if not on or (on.group(1) and on.group(1) != interface):
            continue  # a port, a protocol or another interface: not every port of the fabric
        if " " in rule["src"].strip() or not _covers(rule["src"], subnet):
            continue  # a source port, or another network
        return True, "ufw rule %s %s %s%s" % (to, rule["action"], rule["src"],
                                              " (%s)" % rule["comment"] if rule["comment"] else "")
    return False, ("ufw is active with default %s (incoming) and no rule lets %s in on every port"
                   % (status["default_incoming"] or "deny", subnet))


def ufw_our_rules(status):
    """Numbers of the rules this collection added (comment UFW_COMMENT), highest first (delete in that order)."""
    return sorted((r["num"] for r in status["rules"] if r["num"] and r["comment"] == UFW_COMMENT), reverse=True)


def ufw_allow_argv(subnet, interface=None):
    """`ufw` arguments of the narrow allow: the fabric subnet (on the fabric interface), every port."""
    argv = ["allow"]
    if interface:
        argv += ["in", "on", interface]
    return argv + ["from", subnet, "comment", UFW_COMMENT]


# ---------------------------------------------------------------------------------------------------- firewalld
_ZONE_HEAD = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)(?: \((?P<flags>[^)]*)\))?\s*$")


def parse_firewalld_zones(text):
    """`firewall-cmd --list-all-zones` -> {zone: {target, interfaces, sources, default, active}}."""
    zones, current = {}, None
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            m = _ZONE_HEAD.match(line)
            if m:
                flags = [f.strip() for f in (m.group("flags") or "").split(",")]
                current = zones.setdefault(m.group("name"), {"target": "default", "interfaces": [], "sources": [],
                                                             "default": "default" in flags,
                                                             "active": "active" in flags})
            continue
        if current is None or ":" not in line:
            continue
        key, _sep, value = line.strip().partition(":")
        if key == "target":
            current["target"] = value.strip()
        elif key in ("interfaces", "sources"):
            current[key] = value.split()
    return zones


def firewalld_zone_for(zones, subnet, interface=None):
    """The zone firewalld puts fabric traffic in: a zone binding a source that holds the subnet, else the fabric
    interface's zone, else the default zone (firewalld's own order)."""
    for name, zone in sorted(zones.items()):
        if any(_covers(src, subnet) for src in zone["sources"] if "/" in src or _net(src)):
            return name
    if interface:
        for name, zone in sorted(zones.items()):
            if interface in zone["interfaces"]:
                return name
    for name, zone in sorted(zones.items()):
        if zone["default"]:
            return name
    return None


def firewalld_admits(zones, subnet, interface=None):
    zone = firewalld_zone_for(zones, subnet, interface)
    if zone is None:
        return False, "firewalld runs but names no zone for %s" % subnet
    target = zones[zone]["target"]
    if target.upper() == "ACCEPT":
        return True, "firewalld zone %s (target ACCEPT) holds %s" % (zone, subnet)
    return False, ("firewalld puts %s in zone %s (target %s), which admits only the services and ports it lists"
                   % (subnet, zone, target))


# ---------------------------------------------------------------------------------------------- nftables, iptables
def nft_input_drops(ruleset_json, subnet, interface=None, ignore_tables=()):
    """[(chain name, admits, why)] for every input-hook base chain whose policy drops, from `nft -j list ruleset`.

    A chain admits the fabric when it holds a rule that only matches the source subnet (or the fabric interface)
    and accepts. Our own table and ignore_tables are skipped.
    """
    try:
        items = _json.loads(ruleset_json or "{}", "nft's ruleset").get("nftables", [])
    except (ValueError, AttributeError):
        return []
    if not isinstance(items, list):
        return []
    chains, rules = [], {}
    for item in items:
        if "chain" in item:
            c = item["chain"]
            if c.get("hook") == "input" and c.get("policy") == "drop" and c.get("table") not in ignore_tables:
                chains.append(c)
        elif "rule" in item:
            r = item["rule"]
            rules.setdefault((r.get("family"), r.get("table"), r.get("chain")), []).append(r.get("expr") or [])
    out = []
    for c in chains:
        name = "%s %s %s" % (c.get("family"), c.get("table"), c.get("name"))
        admits = any(_nft_rule_admits(expr, subnet, interface)
                     for expr in rules.get((c.get("family"), c.get("table"), c.get("name")), []))
        out.append((name, admits, "nftables chain %s (policy drop) %s %s" % (
            name, "accepts" if admits else "has no rule accepting", subnet)))
    return out


def _nft_rule_admits(expr, subnet, interface):
    if not expr or "accept" not in expr[-1]:
        return False
    matches = expr[:-1]
    if not matches or any("match" not in m for m in matches) or len(matches) > 2:
        return False
    saw = False
    for m in matches:
        left, right, op = m["match"].get("left") or {}, m["match"].get("right"), m["match"].get("op")
        if op not in ("==", "in"):
            return False
        payload = left.get("payload") or {}
        meta = left.get("meta") or {}
        if payload.get("field") == "saddr" and payload.get("protocol") in ("ip", "ip6"):
            if isinstance(right, dict) and "prefix" in right:
                right = "%s/%s" % (right["prefix"].get("addr"), right["prefix"].get("len"))
            if not isinstance(right, str) or not _covers(right, subnet):
                return False
            saw = True
        elif meta.get("key") in ("iifname", "iif") and interface and right == interface:
            saw = True
        else:
            return False
    return saw


def iptables_input_drops(save_text, subnet, interface=None):
    """(drops, admits, why) from `iptables -S INPUT`: whether the policy drops and a rule accepts the subnet."""
    text = save_text or ""
    if not re.search(r"^-P INPUT DROP\s*$", text, re.M):
        return False, True, "iptables INPUT policy accepts"
    for line in text.splitlines():
        words = line.split()
        if words[:2] != ["-A", "INPUT"] or words[-2:] != ["-j", "ACCEPT"]:
            continue
        opts = dict(zip(words[2:-2:2], words[3:-2:2]))
        if len(words[2:-2]) % 2 or set(opts) - {"-s", "-i"}:
            continue
        if "-s" in opts and _covers(opts["-s"], subnet) and opts.get("-i", interface) == interface:
            return True, True, "iptables INPUT rule %s" % line
        if "-i" in opts and "-s" not in opts and opts["-i"] == interface:
            return True, True, "iptables INPUT rule %s" % line
    return True, False, "iptables INPUT policy DROP and no rule accepts %s" % subnet


# ----------------------------------------------------------------------------------------------- the commands
def fix_commands(tool, subnet, interface=None, chain=None):
    """The exact commands an operator runs on the node to let the fabric in through its own firewall."""
    if tool == "ufw":
        return ["sudo ufw " + " ".join(_quote(w) for w in ufw_allow_argv(subnet, interface))]
    if tool == "firewalld":
        return ["sudo firewall-cmd --permanent --zone=trusted --add-source=%s" % subnet,
                "sudo firewall-cmd --reload"]
    if tool == "nftables":
        family, table, name = (chain or "inet filter input").split(" ", 2)
        return ["sudo nft insert rule %s %s %s %s saddr %s accept" % (
            family, table, name, "ip6" if (_net(subnet) and _net(subnet).version == 6) else "ip", subnet),
            "(and the same rule in the file that loads this table at boot, e.g. /etc/nftables.conf)"]
    if tool == "iptables":
        return ["sudo iptables -I INPUT -s %s -j ACCEPT" % subnet,
                "(and save it where your distribution restores rules at boot, e.g. netfilter-persistent save)"]
    return []


def _quote(word):
    return "'%s'" % word if " " in word else word


# ------------------------------------------------------------------------------------------------- port ranges
def expand_ports(items):
    """{port} of a list of ports and 'low-high' ranges (what our table closes)."""
    ports = set()
    for item in items or []:
        text = str(item).strip()
        if "-" in text:
            low, high = text.split("-", 1)
            ports.update(range(int(low), int(high) + 1))
        elif text:
            ports.add(int(text))
    return ports


def outside_listeners(holders):
    """The listeners reachable from other hosts (not bound to a loopback address)."""
    out = []
    for h in holders:
        addr = _net(h.get("address") or "")
        if addr is not None and addr.network_address.is_loopback:
            continue
        out.append(h)
    return out
