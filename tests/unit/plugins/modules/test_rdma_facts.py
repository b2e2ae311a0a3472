"""rdma_facts against fixture trees shaped like real DGX Spark sysfs plus captured `ip -j addr show`."""

from __future__ import annotations

import os

import pytest

from ansible.module_utils import basic

from ansible_collections.sparkfleet.vllm.plugins.modules import rdma_facts

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "rdma_facts")


@pytest.fixture
def node(monkeypatch, run_module, node_commands):
    """Return run(case, **args): the module run on fixture case <case> (sysfs tree + ip -j JSON)."""
    calls = []

    def _run(case, check_mode=False, ip_rc=0, **args):
        with open(os.path.join(FIXTURES, case, "ip-addr.json")) as f:
            ip_json = f.read()

        fake = node_commands((ip_rc, ip_json if ip_rc == 0 else "", "" if ip_rc == 0 else "Object \"addr\" is unknown"),
                             bin_dir="/usr/sbin", unwrap=False)
        fake.ran = calls
        # exit_json is patched by run_module, so collect module.warn() calls here.
        warned = []
        monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, w: warned.append(w))
        args.setdefault("sysfs_root", os.path.join(FIXTURES, case, "sys"))
        result = run_module(rdma_facts, args, check_mode=check_mode)
        result["warned"] = warned
        return result

    _run.calls = calls
    return _run


LAB_ENV = {
    "VLLM_HOST_IP": "10.99.1.11",
    "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
    "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
    "TP_SOCKET_IFNAME": "enp1s0f1np1",
    "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
    "NCCL_IB_GID_INDEX": "3",
    "UCX_NET_DEVICES": "rocep1s0f1:1,roceP2p1s0f1:1",
    "OMPI_MCA_btl_tcp_if_include": "enp1s0f1np1",
}


def test_lab_host_picks_twin_a_and_lists_both_twins(node):
    result = node("lab_spark1", subnet="10.99.1.0/24")
    assert not result.get("failed"), result
    assert result["changed"] is False
    assert result["interface"] == "enp1s0f1np1"
    assert (result["ip"], result["prefix"], result["subnet"], result["mtu"]) == ("10.99.1.11", 24, "10.99.1.0/24", 9000)
    assert result["hca"] == ["rocep1s0f1", "roceP2p1s0f1"]
    assert result["gid_index"] == 3
    assert result["env"] == LAB_ENV
    assert all(isinstance(v, str) for v in result["env"].values())
    # The management NIC is not an RDMA device and never shows up.
    assert [d["netdev"] for d in result["devices"]] == ["enp1s0f0np0", "enP2p1s0f0np0", "enp1s0f1np1", "enP2p1s0f1np1"]
    assert result["warned"] == []


def test_facts_mirror_top_level_keys(node):
    result = node("lab_spark1", subnet="10.99.1.0/24")
    fabric = result["ansible_facts"]["sparkfleet_fabric"]
    for key in ("interface", "ip", "prefix", "subnet", "mtu", "hca", "gid_index", "devices", "env"):
        assert fabric[key] == result[key]


def test_check_mode_is_identical(node):
    normal = node("lab_spark1", subnet="10.99.1.0/24")
    checked = node("lab_spark1", subnet="10.99.1.0/24", check_mode=True)
    assert checked == normal


def test_runs_ip_json_addr(node):
    node("lab_spark1")
    assert node.calls[-1] == ["/usr/sbin/ip", "-j", "addr", "show"]


def test_devices_report_sysfs_state_and_addresses(node):
    result = node("lab_spark1", subnet="10.99.1.0/24")
    devs = dict((d["name"], d) for d in result["devices"])
    a = devs["rocep1s0f1"]
    assert (a["state"], a["phys_state"], a["link_layer"]) == ("ACTIVE", "LinkUp", "Ethernet")
    assert (a["rate"], a["rate_gbps"]) == ("200 Gb/sec (4X HDR)", 200)
    assert a["ipv4"] == ["10.99.1.11/24"]
    assert devs["roceP2p1s0f1"]["ipv4"] == ["10.99.2.11/24"]
    down = devs["rocep1s0f0"]
    assert (down["state"], down["phys_state"], down["ipv4"], down["gid_index"]) == ("DOWN", "Disabled", [], None)


def test_automatic_without_subnet_prefers_domain0_twin(node):
    result = node("lab_spark1")
    assert result["interface"] == "enp1s0f1np1"
    assert result["env"]["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"


def test_cable_on_port1_uses_f0_twins(node):
    result = node("port1", subnet="10.99.1.0/24")
    assert result["interface"] == "enp1s0f0np0"
    assert result["env"]["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0"
    assert result["env"]["UCX_NET_DEVICES"] == "rocep1s0f0:1,roceP2p1s0f0:1"


def test_one_twin_up_works_and_warns_half_bandwidth(node):
    result = node("port2_twin_only", subnet="10.99.1.0/24")
    assert result["interface"] == "enp1s0f1np1"
    assert result["hca"] == ["rocep1s0f1"]
    assert any("half" in w for w in result["warned"])


def test_both_ports_cabled_subnet_decides(node):
    result = node("both_ports", subnet="10.99.1.0/24")
    assert result["interface"] == "enp1s0f1np1"
    assert result["hca"] == ["rocep1s0f1", "roceP2p1s0f1"]
    other = node("both_ports", subnet="10.99.3.0/24")
    assert other["interface"] == "enp1s0f0np0"
    assert other["hca"] == ["rocep1s0f0", "roceP2p1s0f0"]


def test_both_ports_cabled_without_subnet_is_ambiguous(node):
    result = node("both_ports")
    assert result["failed"]
    assert "enp1s0f0np0" in result["msg"] and "enp1s0f1np1" in result["msg"]
    assert "subnet" in result["hint"]


def test_interface_names_differ_between_nodes(node):
    a = node("names_differ_node_a", subnet="10.99.1.0/24")
    b = node("names_differ_node_b", subnet="10.99.1.0/24")
    assert (a["interface"], a["ip"]) == ("enp1s0f1np1", "10.99.1.11")
    assert (b["interface"], b["ip"]) == ("enp1s0f0np0", "10.99.1.12")
    assert b["env"]["NCCL_SOCKET_IFNAME"] == "enp1s0f0np0"
    assert b["env"]["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0"


def test_link_local_only_fails_with_nmcli_fix(node):
    result = node("link_local_only", subnet="10.99.1.0/24")
    assert result["failed"]
    assert "enp1s0f1np1" in result["msg"] and "169.254" in result["msg"]
    assert "nmcli" in result["hint"] and "enp1s0f1np1" in result["hint"]
    assert "10.99.1." in result["hint"]


def test_mtu_1500_warns_with_the_cost_naming_both_twins(node):
    # Stock Sparks run MTU 1500: slower RoCE (1024-byte path MTU), not a failure.
    result = node("mtu_1500", subnet="10.99.1.0/24")
    assert not result.get("failed"), result
    assert result["mtu"] == 1500
    low = [w for w in result["warned"] if "MTU below 9000" in w]
    assert len(low) == 1, result["warned"]
    assert "enp1s0f1np1 (1500)" in low[0] and "enP2p1s0f1np1 (1500)" in low[0]
    assert "1024-byte path MTU" in low[0] and "nmcli" in low[0]


def test_min_mtu_can_be_lowered(node):
    result = node("mtu_1500", subnet="10.99.1.0/24", min_mtu=1500)
    assert not result.get("failed"), result
    assert result["mtu"] == 1500
    assert not [w for w in result["warned"] if "MTU below" in w]


@pytest.mark.parametrize("min_mtu", [-5, 0, 67, 65536])
def test_min_mtu_out_of_range_is_refused_before_reading_anything(node, min_mtu):
    # Issue 11.6: min_mtu=-5 was accepted (and silenced every MTU warning).
    result = node("mtu_1500", subnet="10.99.1.0/24", min_mtu=min_mtu)
    assert result["failed"] and result["msg"] == "min_mtu must be between 68 and 65535, got %d" % min_mtu
    assert result["hint"].startswith("set min_mtu to")
    assert node.calls == []


def test_rdma_char_devices_listed_for_the_container(node, tmp_path):
    import stat as _stat
    devdir = tmp_path / "infiniband"
    devdir.mkdir()
    (devdir / "uverbs0").write_text("")  # a regular file is no device: skipped
    result = node("lab_spark1", subnet="10.99.1.0/24", dev_dir=str(devdir))
    assert result["rdma_char_devices"] == []
    assert result["ansible_facts"]["sparkfleet_fabric"]["rdma_char_devices"] == []
    result = node("lab_spark1", subnet="10.99.1.0/24", dev_dir="/dev")
    # /dev/null is a char device but not an RDMA one
    assert result["rdma_char_devices"] == []
    assert _stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_twins_in_one_subnet_fail(node):
    result = node("twins_one_subnet", subnet="10.99.1.0/24")
    assert result["failed"]
    assert "enp1s0f1np1" in result["msg"] and "enP2p1s0f1np1" in result["msg"]
    assert "different subnets" in result["hint"] and "interface" in result["hint"]


def test_twins_in_one_subnet_with_pinned_interface_warns(node):
    result = node("twins_one_subnet", subnet="10.99.1.0/24", interface="enp1s0f1np1")
    assert not result.get("failed"), result
    assert result["ip"] == "10.99.1.11"
    assert any("share subnet" in w for w in result["warned"])


def test_pinned_ip_present(node):
    result = node("lab_spark1", subnet="10.99.1.0/24", ip="10.99.1.11")
    assert result["env"]["VLLM_HOST_IP"] == "10.99.1.11"


def test_pinned_ip_missing_fails(node):
    result = node("lab_spark1", subnet="10.99.1.0/24", ip="10.99.1.12")
    assert result["failed"]
    assert "10.99.1.12" in result["msg"] and "no RDMA interface" in result["msg"]
    assert "enp1s0f1np1 10.99.1.11/24" in result["msg"]


def test_pinned_ip_on_twin_b_makes_it_the_socket_interface(node):
    result = node("lab_spark1", ip="10.99.2.11")
    assert result["interface"] == "enP2p1s0f1np1"
    assert result["hca"] == ["roceP2p1s0f1", "rocep1s0f1"]


def test_no_active_port_fails(node):
    result = node("no_active")
    assert result["failed"]
    assert "no ACTIVE" in result["msg"] and "rocep1s0f1->enp1s0f1np1 DOWN" in result["msg"]
    assert "cable" in result["hint"]


def test_interface_not_rdma_fails(node):
    result = node("lab_spark1", interface="enP7s7")
    assert result["failed"]
    assert "enP7s7 is not an RDMA netdev" in result["msg"]
    assert "enp1s0f1np1" in result["msg"]


def test_interface_not_active_fails(node):
    result = node("lab_spark1", interface="enp1s0f0np0")
    assert result["failed"]
    assert "enp1s0f0np0" in result["msg"] and "not ACTIVE" in result["msg"]


def test_wrong_sysfs_root_fails_with_hint(node, tmp_path):
    result = node("lab_spark1", sysfs_root=str(tmp_path))
    assert result["failed"]
    assert "class/infiniband" in result["msg"]
    assert "/opt/sparklab/sysfs" in result["hint"]


def test_ip_command_failure_reported(node):
    result = node("lab_spark1", ip_rc=1)
    assert result["failed"]
    assert result["rc"] == 1 and "iproute2" in result["hint"]
