# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why a node cannot reach a peer over the fabric: route, link state and a TCP answer, in one sentence."""

from __future__ import annotations

import re

_ROUTE_RE = re.compile(r"^(?P<kind>local |unreachable |prohibit |blackhole )?(?P<dst>\S+)(?: via (?P<via>\S+))?"
                       r"(?: dev (?P<dev>\S+))?(?:.* src (?P<src>\S+))?")


def parse_route_get(text):
    """{dev, via, src, kind} of `ip -o route get ADDR` (kind: None, local, unreachable, prohibit, blackhole)."""
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    m = _ROUTE_RE.match(line)
    if not m:
        return {"dev": None, "via": None, "src": None, "kind": None}
    return {"dev": m.group("dev"), "via": m.group("via"), "src": m.group("src"),
            "kind": (m.group("kind") or "").strip() or None}


def verdict(me, peer, ip, port, route, link, answer, timeout, expected_devs=()):
    """None when the peer answers, else one sentence naming this node, the peer, the interface and the cause.

    route: parse_route_get() of the peer's address; link: {operstate, carrier} of route['dev'] or None;
    answer: 'ok', 'refused', 'timeout' or an error text from the TCP connect.
    """
    where = "%s cannot reach %s (%s) over the fabric" % (me, peer, ip)
    if route.get("kind") in ("unreachable", "prohibit", "blackhole") or route.get("dev") is None:
        return "%s: no route to it (%s); the fabric interface has no address in its subnet" % (
            where, route.get("kind") or "no route")
    dev = route["dev"]
    if route.get("via"):
        return ("%s: the route leaves through %s via the gateway %s, not the fabric; give the fabric interface an "
                "address in the fabric subnet" % (where, dev, route["via"]))
    if expected_devs and dev not in expected_devs:
        return "%s: the route uses %s, not the fabric interface (%s)" % (where, dev, ", ".join(expected_devs))
    if link is not None and (link.get("operstate") == "down" or link.get("carrier") == "0"):
        return ("%s: interface %s is down (operstate %s, carrier %s); check the QSFP cable and `ip link set %s up`"
                % (where, dev, link.get("operstate"), link.get("carrier"), dev))
    if answer == "ok":
        return None
    if answer == "refused":
        return ("%s: the link %s is up and the node answers, but nothing listens on port %d (sshd)"
                % (where, dev, port))
    if answer == "timeout":
        return ("%s: interface %s is up but %s does not answer on port %d within %s s; check the peer's fabric "
                "interface (link, address, MTU) and any firewall between" % (where, dev, ip, port, timeout))
    return "%s through %s: %s" % (where, dev, answer)
