"""The NIC description table (issue 43 item 4): what differs per NIC type is one entry of _rdma.NIC_TYPES, which the
fabric selection, the env builder and the hints read."""

from __future__ import annotations

import dataclasses
import os

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric import _rdma

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "modules", "fixtures", "rdma_facts")


def _case(name):
    with open(os.path.join(FIXTURES, name, "ip-addr.json")) as f:
        links = _rdma.parse_ip_addr_json(f.read())
    return _rdma.read_rdma_sysfs(os.path.join(FIXTURES, name, "sys")), links


@pytest.mark.parametrize("nic", sorted(_rdma.NIC_TYPES), ids=str)
def test_each_nic_types_fixtures_are_detected_as_that_type_at_a_speed_it_names(nic):
    entry = _rdma.NIC_TYPES[nic]
    assert entry.fixtures, "a NIC type comes with its fixtures"
    for case in entry.fixtures:
        records, _links = _case(case)
        assert records, case
        for rec in records:
            # Only one type may claim a port: detection is the table's, in one place.
            claims = [n.name for n in _rdma.NIC_TYPES.values() if n.matches(rec)]
            assert claims == [nic], (case, rec["name"], claims)
            if rec["state"] == _rdma.ACTIVE:
                assert rec["rate_gbps"] in entry.speeds_gbps, (case, rec["name"], rec["rate"])


def test_every_fixture_case_belongs_to_a_nic_type():
    cases = set(n for n in os.listdir(FIXTURES) if os.path.isdir(os.path.join(FIXTURES, n, "sys")))
    named = set(c for nic in _rdma.NIC_TYPES.values() for c in nic.fixtures)
    assert cases == named, (sorted(cases - named), sorted(named - cases))


# A made-up InfiniBand card: one PCIe function per port (no twin), no RoCE (no GID index), its own hints.
FAKE_IB = _rdma.NicType(
    name="fake_ib", label="a made-up InfiniBand HCA", driver="fake_ib", link_layer="InfiniBand",
    ib_prefixes=("fibp",), roce_v2=False, twin_pattern=None, speeds_gbps=(400.0,),
    env=tuple(k for k in _rdma.FABRIC_ENV_KEYS if k != "NCCL_IB_GID_INDEX"),
    load_hint="load fake_ib (`modprobe fake_ib`)", cable_hint="plug the fake IB cable into the fake switch",
    address_hint="give %(ifname)s an IPoIB address such as %(cidr)s", fixtures=())


def _ib_ports(state="ACTIVE", address="10.50.0.11"):
    """Two ports of the fake card as read from sysfs and `ip -j addr show`: fibp1s0 and fibp2s0."""
    records, links = [], {}
    for i, netdev in enumerate(("ibp1s0", "ibp2s0"), 1):
        records.append({"name": "fibp%ds0" % i, "port": 1, "netdev": netdev, "state": state if i == 1 else "DOWN",
                        "state_num": 4, "phys_state": "LinkUp", "link_layer": "InfiniBand",
                        "rate": "400 Gb/sec (4X NDR)", "rate_gbps": 400.0,
                        # An IB port's GIDs are its subnet prefix and GUID: none maps an IPv4 address.
                        "gids": [{"index": 0, "gid": "fe80:0000:0000:0000:0000:0000:0000:0001", "type": None,
                                  "ndev": None}]})
        links[netdev] = {"mtu": 4092, "operstate": "UP", "flags": [],
                         "ipv4": [{"address": address, "prefix": 24}] if i == 1 and address else []}
    return records, links


@pytest.fixture
def fake_ib(monkeypatch):
    monkeypatch.setitem(_rdma.NIC_TYPES, FAKE_IB.name, FAKE_IB)


def test_without_its_entry_a_fake_ib_port_is_read_as_the_default_nic():
    records, links = _ib_ports()
    sel = _rdma.select_fabric(_rdma.merge_devices(records, links), min_mtu=4092)
    assert sel["nic_type"] == _rdma.DEFAULT_NIC
    assert any("twin is down" in w for w in sel["warnings"]), sel["warnings"]
    assert any("no RoCE v2 GID maps" in w for w in sel["warnings"]), sel["warnings"]


def test_a_nic_type_added_as_one_entry_is_what_selection_and_the_env_use(fake_ib):
    records, links = _ib_ports()
    devices = _rdma.merge_devices(records, links)
    assert [d["twin_key"] for d in devices] == ["ibp1s0", "ibp2s0"]
    sel = _rdma.select_fabric(devices, min_mtu=4092)
    assert sel["nic_type"] == "fake_ib"
    assert (sel["interface"], sel["ip"], sel["hca"]) == ("ibp1s0", "10.50.0.11", ["fibp1s0"])
    # No twin and no RoCE: neither the half-bandwidth warning nor a GID index.
    assert sel["warnings"] == []
    assert sel["gid_index"] is None and sel["nccl_gid_index"] is None
    env = _rdma.fabric_env(sel)
    assert set(env) == set(FAKE_IB.env)
    assert env["NCCL_IB_HCA"] == "fibp1s0" and env["UCX_NET_DEVICES"] == "fibp1s0:1"


def test_a_nic_types_hints_are_the_ones_selection_gives(fake_ib):
    records, links = _ib_ports(state="DOWN")
    with pytest.raises(_rdma.FabricError) as exc:
        _rdma.select_fabric(_rdma.merge_devices(records, links))
    assert exc.value.hint == FAKE_IB.cable_hint
    records, links = _ib_ports(address=None)
    with pytest.raises(_rdma.FabricError) as exc:
        _rdma.select_fabric(_rdma.merge_devices(records, links))
    assert exc.value.hint == "give ibp1s0 an IPoIB address such as 192.168.200.12/24"
    with pytest.raises(_rdma.FabricError) as exc:
        _rdma.select_fabric([])
    assert FAKE_IB.load_hint in exc.value.hint and _rdma.CX7_GB10.load_hint in exc.value.hint


def test_the_table_entries_are_frozen_descriptions():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _rdma.CX7_GB10.roce_v2 = False
