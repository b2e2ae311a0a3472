"""The lab's guard (lab/labctl GUARD_NETS: unreachable routes in the root namespace) covers every address that an
inventory of this repository other than the lab's names: the real Sparks' and the sample's. A command run here by
mistake against either (a `--check` of the sample, a status of the Sparks) must end at a route, never on a network.
No guarded range may hold a package mirror: the whole of a documentation range (RFC 5737) once cut this machine off
its PyPI and Debian mirrors, so the sample's host addresses are guarded one by one."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ADDRESS = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?:/(\d{1,2}))?(?![\d.])")


def guard_nets():
    line = next(ln for ln in (REPO / "lab" / "labctl").read_text().splitlines() if ln.startswith("GUARD_NETS=("))
    return [ipaddress.ip_network(n) for n in line[len("GUARD_NETS=("):-1].split()]


def addresses(inventory):
    """Every IPv4 address or network written anywhere in an inventory's files (hosts, group and host vars)."""
    found = set()
    for path in sorted((REPO / "inventories" / inventory).rglob("*.yml")):
        yaml.safe_load(path.read_text())        # a file that does not parse would hide its addresses from this test
        for addr, prefix in ADDRESS.findall(path.read_text()):
            try:
                found.add(ipaddress.ip_network("%s/%s" % (addr, prefix or 32), strict=False))
            except ValueError:
                continue
    return found


@pytest.mark.parametrize("inventory, hosts_only", [("sparks", False), ("sample", True)])
def test_every_address_of_an_inventory_that_is_not_the_lab_is_guarded(inventory, hosts_only):
    # the sample's: its host addresses only (its documentation ranges may hold this machine's package mirrors)
    nets = guard_nets()
    found = {n for n in addresses(inventory) if n.prefixlen == 32 or not hosts_only}
    assert found, "no address found in inventories/%s: the test reads nothing" % inventory
    loose = sorted(str(n) for n in found if not n.is_loopback and not n.is_unspecified
                   and not any(n.subnet_of(g) for g in nets if g.version == n.version))
    assert not loose, "inventories/%s names addresses lab/labctl's GUARD_NETS does not make unreachable: %s" % (
        inventory, loose)
