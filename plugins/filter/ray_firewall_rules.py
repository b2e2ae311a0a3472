# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.ray_firewall_rules (documented in ray_firewall_rules.yml)."""

from __future__ import annotations

import hashlib
import ipaddress
import re

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._checks import fail, port_number

_WHERE = "ray_firewall_rules"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")


def _span(item):
    """A port (6379, "6379") or a range ("10002-19999", [10002, 19999]) as (low, high)."""
    if isinstance(item, (list, tuple)):
        if len(item) != 2:
            fail(_WHERE, "a port range needs two ends, got %r" % (item,))
        low, high = item
    elif isinstance(item, str) and "-" in item.strip().lstrip("-"):
        low, high = item.split("-", 1)
    else:
        low = high = item
    low, high = port_number(_WHERE, "port", low), port_number(_WHERE, "port", high)
    if low > high:
        fail(_WHERE, "port range %d-%d runs backwards" % (low, high))
    return low, high


def _merge(spans):
    merged = []
    for low, high in sorted(spans):
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return merged


_SERVICES = {"ray": ("ray_cluster", "Ray's ports"), "monitoring": ("monitoring", "the monitoring ports")}


def ray_firewall_rules(ports, allow, table="sparkfleet", service="ray"):
    """An nft script that replaces our own table: the service's ports (Ray's by default, or the monitoring role's)
    answer loopback and the allowed networks only."""
    if not isinstance(service, str) or service not in _SERVICES:
        fail(_WHERE, "service must be one of %s, got %r" % (", ".join(sorted(_SERVICES)), service))
    role, what = _SERVICES[service]
    if not isinstance(ports, (list, tuple)) or not ports:
        fail(_WHERE, "ports must be a non-empty list of ports or ranges, got %r" % (ports,))
    if not isinstance(table, str) or not _NAME.match(table):
        fail(_WHERE, "table %r is not a valid nftables name" % (table,))
    if isinstance(allow, str):
        allow = [allow]
    if not isinstance(allow, (list, tuple)) or not allow:
        fail(_WHERE, "allow must list the networks that may reach Ray (the fabric subnet, sparkfleet_fabric_subnet),"
             " got %r" % (allow,))
    nets = {4: [], 6: []}
    for net in allow:
        try:
            parsed = ipaddress.ip_network(str(net).strip(), strict=False)
        except ValueError:
            fail(_WHERE, "%r in allow is not a network (CIDR)" % (net,))
        if parsed.prefixlen == 0:
            fail(_WHERE, "allow %s would open %s to every address; name the fabric subnet instead" % (parsed, what))
        if str(parsed) not in nets[parsed.version]:
            nets[parsed.version].append(str(parsed))
    elements = ", ".join(str(lo) if lo == hi else "%d-%d" % (lo, hi) for lo, hi in _merge(_span(p) for p in ports))
    allowed = ["    ip saddr { %s } accept" % ", ".join(nets[4])] if nets[4] else []
    allowed += ["    ip6 saddr { %s } accept" % ", ".join(nets[6])] if nets[6] else []
    body = "\n".join([
        "  set %s_ports {" % service,
        "    type inet_service; flags interval;",
        "    elements = { %s }" % elements,
        "  }",
        "  chain input {",
        "    type filter hook input priority filter; policy accept;",
        "    meta l4proto { tcp, udp } th dport @%s_ports jump %s" % (service, service),
        "  }",
        "  chain %s {" % service,
        '    iif "lo" accept',
        "    ct state established,related accept",
    ] + allowed + [
        "    counter reject with icmpx type admin-prohibited",
        "  }",
    ])
    digest = hashlib.sha256(body.encode()).hexdigest()[:16]
    return "\n".join([
        "#!/usr/sbin/nft -f",
        "# sparkfleet.vllm %s: %s answer only loopback and %s. This file replaces the table"
        % (role, what[0].upper() + what[1:], ", ".join(nets[4] + nets[6])),
        "# inet %s (ours alone) atomically; no other table is read or changed." % table,
        "table inet %s" % table,
        "delete table inet %s" % table,
        "table inet %s {" % table,
        '  comment "sparkfleet %s firewall %s"' % (service, digest),
        body,
        "}",
        "",
    ])


class FilterModule:
    """Node firewall rules for Ray."""

    def filters(self):
        return {"ray_firewall_rules": ray_firewall_rules}
