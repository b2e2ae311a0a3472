"""Parsing and selection helpers behind rdma_facts."""

from __future__ import annotations

import copy
import os
import stat

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric import _rdma

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "modules", "fixtures", "rdma_facts")


def _case(name):
    with open(os.path.join(FIXTURES, name, "ip-addr.json")) as f:
        links = _rdma.parse_ip_addr_json(f.read())
    records = _rdma.read_rdma_sysfs(os.path.join(FIXTURES, name, "sys"))
    return _rdma.merge_devices(records, links)


@pytest.mark.parametrize("text,expected", [
    ("4: ACTIVE", (4, "ACTIVE")),
    ("1: DOWN\n", (1, "DOWN")),
    ("5: LinkUp", (5, "LinkUp")),
    ("3: Disabled", (3, "Disabled")),
    ("", (None, None)),
    (None, (None, None)),
])
def test_parse_state(text, expected):
    assert _rdma.parse_state(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("200 Gb/sec (4X HDR)", 200),
    ("100 Gb/sec (2X HDR)", 100),
    ("40 Gb/sec (4X QDR)", 40),
    ("2.5 Gb/sec (1X SDR)", 2.5),
    ("garbage", None),
    (None, None),
])
def test_parse_rate_gbps(text, expected):
    assert _rdma.parse_rate_gbps(text) == expected


@pytest.mark.parametrize("gid,expected", [
    ("0000:0000:0000:0000:0000:ffff:c0a8:c80c", "192.168.200.12"),
    ("0000:0000:0000:0000:0000:ffff:0a63:010b", "10.99.1.11"),
    ("fe80:0000:0000:0000:4ebb:47ff:fe2c:0111", None),
    ("not a gid", None),
])
def test_ipv4_from_gid(gid, expected):
    assert _rdma.ipv4_from_gid(gid) == expected


@pytest.mark.parametrize("netdev,key", [
    ("enp1s0f1np1", "enp1s0f1np1"),
    ("enP2p1s0f1np1", "enp1s0f1np1"),
    ("enP2p1s0f0np0", "enp1s0f0np0"),
    ("enP7s7", "enP7s7"),
    ("eth0", "eth0"),
])
def test_twin_key_pairs_gb10_twins_only(netdev, key):
    assert _rdma.twin_key(netdev) == key


def test_parse_ip_addr_json_captured_output():
    with open(os.path.join(FIXTURES, "lab_spark1", "ip-addr.json")) as f:
        links = _rdma.parse_ip_addr_json(f.read())
    assert links["enp1s0f1np1"]["mtu"] == 9000
    assert links["enp1s0f1np1"]["operstate"] == "UP"
    # IPv6 link-local addresses are not reported as IPv4.
    assert links["enp1s0f1np1"]["ipv4"] == [{"address": "10.99.1.11", "prefix": 24}]
    assert links["enp1s0f0np0"]["ipv4"] == []
    assert links["enP7s7"]["ipv4"] == [{"address": "10.99.0.11", "prefix": 24}]


@pytest.mark.parametrize("text", ["", "not json", '{"ifname": "x"}'])
def test_parse_ip_addr_json_rejects_non_list(text):
    with pytest.raises(ValueError):
        _rdma.parse_ip_addr_json(text)


def test_read_rdma_sysfs_reads_gid_table_and_netdev():
    records = dict((r["name"], r) for r in _rdma.read_rdma_sysfs(os.path.join(FIXTURES, "lab_spark1", "sys")))
    assert sorted(records) == ["roceP2p1s0f0", "roceP2p1s0f1", "rocep1s0f0", "rocep1s0f1"]
    a = records["rocep1s0f1"]
    assert (a["netdev"], a["port"], a["state"], a["state_num"]) == ("enp1s0f1np1", 1, "ACTIVE", 4)
    # Zero GIDs (unused slots) are skipped: 2 default link-local + 2 for the IPv4 address.
    assert [(g["index"], g["type"]) for g in a["gids"]] == [
        (0, "IB/RoCE v1"), (1, "RoCE v2"), (2, "IB/RoCE v1"), (3, "RoCE v2")]
    assert _rdma.roce_v2_gid_index(a["gids"], "10.99.1.11") == 3
    assert _rdma.roce_v2_gid_index(a["gids"], "10.99.2.11") is None


def test_read_rdma_sysfs_netdev_from_device_net_when_gid_table_empty(tmp_path):
    dev = tmp_path / "class" / "infiniband" / "mlx5_0"
    (dev / "device" / "net" / "ens1f0np0").mkdir(parents=True)
    (dev / "ports" / "1").mkdir(parents=True)
    (dev / "ports" / "1" / "state").write_text("1: DOWN\n")
    records = _rdma.read_rdma_sysfs(str(tmp_path))
    assert records[0]["netdev"] == "ens1f0np0"
    assert records[0]["state"] == "DOWN"
    assert records[0]["gids"] == []


def test_read_rdma_sysfs_missing_root_is_empty(tmp_path):
    assert _rdma.read_rdma_sysfs(str(tmp_path / "nope")) == []


def test_select_empty_devices_fails():
    with pytest.raises(_rdma.FabricError) as exc:
        _rdma.select_fabric([])
    assert "mlx5_ib" in exc.value.hint


def test_select_rejects_bad_subnet_and_ip():
    devices = _case("lab_spark1")
    with pytest.raises(_rdma.FabricError) as exc:
        _rdma.select_fabric(devices, subnet="10.99.1.0/33")
    assert "CIDR" in exc.value.msg
    with pytest.raises(_rdma.FabricError) as exc:
        _rdma.select_fabric(devices, subnet="10.99.1.0/24", ip="10.99.2.11")
    assert "not in subnet" in exc.value.msg


def test_select_subnet_without_match_names_active_ports():
    with pytest.raises(_rdma.FabricError) as exc:
        _rdma.select_fabric(_case("lab_spark1"), subnet="192.168.200.0/24")
    assert "192.168.200.0/24" in exc.value.msg
    assert "enp1s0f1np1 10.99.1.11/24" in exc.value.msg


def test_select_pinned_ip_on_down_interface_says_where_it_is():
    with pytest.raises(_rdma.FabricError) as exc:
        _rdma.select_fabric(_case("no_active"), ip="10.99.1.11")
    # no ACTIVE port is the first thing to fix
    assert "no ACTIVE" in exc.value.msg


def test_select_gid_index_disagreement_leaves_nccl_index_unset():
    devices = copy.deepcopy(_case("lab_spark1"))
    twin_b = [d for d in devices if d["name"] == "roceP2p1s0f1"][0]
    twin_b["gid_index"] = 5
    sel = _rdma.select_fabric(devices, subnet="10.99.1.0/24")
    assert sel["gid_index"] == 3
    assert sel["nccl_gid_index"] is None
    env = _rdma.fabric_env(sel)
    assert "NCCL_IB_GID_INDEX" not in env
    assert any("differs" in w for w in sel["warnings"])


def test_select_twin_without_address_warns_and_keeps_it_in_hca():
    devices = copy.deepcopy(_case("lab_spark1"))
    twin_b = [d for d in devices if d["name"] == "roceP2p1s0f1"][0]
    twin_b["ipv4"], twin_b["gid_index"] = [], None
    sel = _rdma.select_fabric(devices, subnet="10.99.1.0/24")
    assert sel["hca"] == ["rocep1s0f1", "roceP2p1s0f1"]
    assert any("roceP2p1s0f1" in w and "no routable IPv4" in w for w in sel["warnings"])


def test_fabric_env_all_strings():
    sel = _rdma.select_fabric(_case("lab_spark1"), subnet="10.99.1.0/24")
    env = _rdma.fabric_env(sel)
    assert env["NCCL_IB_GID_INDEX"] == "3"
    assert env["UCX_NET_DEVICES"] == "rocep1s0f1:1,roceP2p1s0f1:1"
    assert all(isinstance(v, str) for v in env.values())


@pytest.mark.parametrize("mtu, path_mtu", [(9000, 4096), (4200, 4096), (4000, 2048), (1500, 1024), (1100, 1024),
                                           (1000, 512), (200, None)])
def test_roce_path_mtu(mtu, path_mtu):
    assert _rdma.roce_path_mtu(mtu) == path_mtu


def _end(name, mtu, interface="enp1s0f1np1", subnet="10.99.1.0/24"):
    return {"name": name, "interface": interface, "mtu": mtu, "subnet": subnet}


def test_mtu_mismatch_names_both_ends_and_interfaces():
    problems = _rdma.mtu_mismatches([_end("spark-1", 9000), _end("spark-2", 1500, "enP2p1s0f1np1")])
    assert len(problems) == 1
    assert "spark-1 enp1s0f1np1 MTU 9000" in problems[0] and "spark-2 enP2p1s0f1np1 MTU 1500" in problems[0]
    assert "10.99.1.0/24" in problems[0]


@pytest.mark.parametrize("nodes", [
    [_end("spark-1", 1500), _end("spark-2", 1500)],             # stock Sparks: slow, consistent
    [_end("spark-1", 9000), _end("spark-2", 9000)],
    [_end("spark-1", 9000), _end("spark-2", 1500, subnet="10.99.2.0/24")],  # different links
    [_end("spark-1", 9000)],
    [],
])
def test_mtu_consistent_links_pass(nodes):
    assert _rdma.mtu_mismatches(nodes) == []


def test_read_char_devices_lists_uverbs_and_rdma_cm_only(tmp_path, monkeypatch):
    for name in ("uverbs0", "uverbs1", "rdma_cm", "issm0", "umad0", "notes.txt"):
        (tmp_path / name).write_text("")
    real_stat = os.stat

    class _St:
        st_mode = stat.S_IFCHR | 0o666

    def fake_stat(path, *a, **k):
        if os.path.basename(str(path)) != "notes.txt" and str(path).startswith(str(tmp_path) + "/"):
            return _St()
        return real_stat(path, *a, **k)

    monkeypatch.setattr(_rdma.os, "stat", fake_stat)
    assert _rdma.read_char_devices(str(tmp_path)) == [
        str(tmp_path / "rdma_cm"), str(tmp_path / "uverbs0"), str(tmp_path / "uverbs1")]
    assert _rdma.read_char_devices(str(tmp_path / "absent")) == []


def test_read_char_devices_skips_non_devices(tmp_path):
    (tmp_path / "uverbs0").write_text("")
    assert _rdma.read_char_devices(str(tmp_path)) == []
