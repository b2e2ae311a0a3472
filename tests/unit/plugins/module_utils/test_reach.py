"""fabric_reach's sentences: the route, the link and the answer named."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric._reach import parse_route_get, verdict

# `ip -o route get` as captured (iproute2 6.1): a fabric peer, a route via the default gateway, a guard route.
FABRIC = "10.99.1.12 dev enp1s0f1np1 src 10.99.1.11 uid 0 \\    cache "
VIA = "10.99.1.12 via 192.0.2.1 dev eth0 src 192.0.2.2 uid 0 \\    cache "
UNREACHABLE = "unreachable 192.168.200.13 uid 0 \\    cache <! > error -113"
LOCAL = "local 127.0.0.1 dev lo src 127.0.0.1 uid 0 \\    cache <local> "


def test_parse_route_get():
    assert parse_route_get(FABRIC) == {"dev": "enp1s0f1np1", "via": None, "src": "10.99.1.11", "kind": None}
    assert parse_route_get(VIA) == {"dev": "eth0", "via": "192.0.2.1", "src": "192.0.2.2", "kind": None}
    assert parse_route_get(UNREACHABLE)["kind"] == "unreachable" and parse_route_get(UNREACHABLE)["dev"] is None
    assert parse_route_get(LOCAL)["dev"] == "lo"
    assert parse_route_get("")["dev"] is None


UP = {"operstate": "up", "carrier": "1"}


@pytest.mark.parametrize("route, link, answer, devs, expected", [
    (FABRIC, UP, "ok", (), None),
    (FABRIC, {"operstate": "down", "carrier": "0"}, None,
     (), "interface enp1s0f1np1 is down (operstate down, carrier 0); check the QSFP cable"),
    (FABRIC, {"operstate": "up", "carrier": "0"}, None, (), "carrier 0"),
    (FABRIC, UP, "timeout", (), "interface enp1s0f1np1 is up but 10.99.1.12 does not answer on port 22 within 3 s"),
    (FABRIC, UP, "refused", (), "nothing listens on port 22"),
    (FABRIC, UP, "No route to host", (), "through enp1s0f1np1: No route to host"),
    (VIA, UP, None, (), "leaves through eth0 via the gateway 192.0.2.1, not the fabric"),
    (UNREACHABLE, None, None, (), "no route to it (unreachable)"),
    (FABRIC, UP, "ok", ("enP2p1s0f1np1",), "the route uses enp1s0f1np1, not the fabric interface (enP2p1s0f1np1)"),
])
def test_verdict_names_node_peer_interface_and_cause(route, link, answer, devs, expected):
    got = verdict("spark-1", "spark-2", "10.99.1.12", 22, parse_route_get(route), link, answer, 3, devs)
    if expected is None:
        assert got is None
    else:
        assert got.startswith("spark-1 cannot reach spark-2 (10.99.1.12) over the fabric") and expected in got, got
