"""rdma_facts on every lab host: the fabric twins, the IP and the environment block, and a downed link."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.lab


def rdma_facts(lab, tmp_path, args):
    r = lab.ansible_run(private_data_dir=str(tmp_path), inventory=str(lab.inventory), host_pattern="spark",
                        module="sparkfleet.vllm.rdma_facts", module_args=args,
                        envvars={"ANSIBLE_CONFIG": str(lab.repo / "ansible.cfg")})
    return {e["host"]: e for e in r["events"] if e["event"] in ("runner_on_ok", "runner_on_failed")}


def test_every_host_finds_its_fabric_and_both_twins(lab, tmp_path):
    results = rdma_facts(lab, tmp_path, "sysfs_root=/opt/sparklab/sysfs subnet=10.99.1.0/24")
    assert sorted(results) == sorted(lab.hosts)
    for host, ev in results.items():
        res = ev["res"]
        assert ev["event"] == "runner_on_ok", res.get("msg")
        assert res["changed"] is False
        assert (res["interface"], res["ip"], res["mtu"]) == ("enp1s0f1np1", lab.fabric_ip(host), 9000)
        assert res["hca"] == ["rocep1s0f1", "roceP2p1s0f1"]
        env = res["env"]
        assert env["VLLM_HOST_IP"] == lab.fabric_ip(host) and "RAY_NODE_IP_ADDRESS" not in env
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1"
        assert env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
        down = {d["name"]: d for d in res["devices"]}
        assert down["rocep1s0f0"]["state"].endswith("DOWN")


def test_a_pinned_ip_that_is_on_no_interface_fails_naming_it(lab, tmp_path):
    results = rdma_facts(lab, tmp_path, "sysfs_root=/opt/sparklab/sysfs subnet=10.99.1.0/24 ip=10.99.1.99")
    for host, ev in results.items():
        assert ev["event"] == "runner_on_failed"
        assert "10.99.1.99" in ev["res"]["msg"]


def test_fabric_link_down_on_the_head_fails_naming_the_interface(lab, tmp_path):
    # spark-1 keeps its management link, so it stays reachable with its fabric down.
    lab.labctl("break", "fabric-down", "spark-1")
    try:
        results = rdma_facts(lab, tmp_path, "sysfs_root=/opt/sparklab/sysfs subnet=10.99.1.0/24 ip=10.99.1.11")
        ev = results["spark-1"]
        assert ev["event"] == "runner_on_failed"
        assert "enp1s0f1np1" in ev["res"]["msg"] or "enp1s0f1np1" in str(ev["res"].get("hint"))
    finally:
        lab.labctl("fix", "fabric-down", "spark-1")
