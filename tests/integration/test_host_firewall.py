"""The node's own firewall and the services our Ray table closes, on the lab (Debian 12's ufw in a lab host:
labctl break ufw-deny; a service of the operators' in Ray's worker range: labctl break foreign-listener).

Run as root: lab/labctl ctl -- .venv/bin/pytest tests/integration/test_host_firewall.py -m lab
"""

from __future__ import annotations

import time

import pytest

# The ufw test ends with stop.yml.
pytestmark = [pytest.mark.lab, pytest.mark.leaves("anything")]

HEAD = "spark-1"


@pytest.fixture
def ufw_worker(lab):
    worker = lab.hosts[1]
    lab.labctl("break", "ufw-deny", worker)
    yield worker
    lab.labctl("fix", "ufw-deny", worker)


def ufw_rules(lab, host):
    return lab.sh(host, "ufw status verbose").stdout


@pytest.mark.fault(name="ufw active with default deny incoming on a worker",
                   expected="preflight stops naming the node, ufw and the exact command; nothing changed")
def test_a_worker_whose_ufw_denies_incoming_is_refused_in_preflight_with_the_command(lab, ufw_worker, tmp_path):
    before = {h: lab.services(h) for h in lab.hosts}
    r, failures = lab.play(tmp_path, "playbooks/preflight.yml")
    assert r["status"] == "failed" and failures, r["stats"]
    msg = lab.messages(failures)
    assert "%s: ufw is active with default deny (incoming)" % ufw_worker in msg
    assert "sudo ufw allow in on enp1s0f1np1 from 10.99.1.0/24 comment 'sparkfleet fabric'" in msg
    assert "sparkfleet_manage_host_firewall: true" in msg
    assert lab.changed_total(r) == 0 and {h: lab.services(h) for h in lab.hosts} == before
    assert "sparkfleet fabric" not in ufw_rules(lab, ufw_worker)


@pytest.mark.long
@pytest.mark.fault(name="ufw deny incoming on a worker, sparkfleet_manage_host_firewall: true",
                   expected="the fabric-only allow is added through ufw, the cluster serves, a re-run changes nothing, "
                            "stop.yml removes the allow")
def test_the_fabric_allow_goes_through_ufw_and_stop_removes_it(lab, ufw_worker, tmp_path):
    extra = {"sparkfleet_manage_host_firewall": True}
    r, failures = lab.play(tmp_path / "first", "site.yml", extravars=extra)
    assert r["status"] == "successful" and not failures, lab.messages(failures)[-3000:]
    rules = ufw_rules(lab, ufw_worker)
    assert "Anywhere on enp1s0f1np1    ALLOW IN    10.99.1.0/24               # sparkfleet fabric" in rules
    assert "Default: deny (incoming)" in rules and lab.completion()
    again, failures = lab.play(tmp_path / "again", "site.yml", extravars=extra)
    assert again["status"] == "successful" and lab.changed_total(again) == 0, again["stats"]
    stop, failures = lab.play(tmp_path / "stop", "playbooks/stop.yml")
    assert stop["status"] == "successful" and not failures, lab.messages(failures)
    rules = ufw_rules(lab, ufw_worker)
    assert "sparkfleet fabric" not in rules and "22/tcp" in rules and "Status: active" in rules


@pytest.mark.fault(name="a service listening in Ray's worker range (12345)",
                   expected="preflight names it (port, process, unit) before our table applies; fail stops the run")
def test_a_listener_in_rays_range_is_named_before_our_table_applies(lab, tmp_path):
    lab.labctl("break", "foreign-listener", HEAD, "12345")
    try:
        r, failures = lab.play(tmp_path / "warn", "playbooks/preflight.yml")
        assert r["status"] == "successful" and not failures, lab.messages(failures)
        named = [e["res"]["msg"] for e in r["events"] if e["host"] == HEAD
                 and "will accept new connections" in str((e["res"] or {}).get("msg"))]
        assert len(named) == 1 and named[0].startswith("WARNING: spark-1: our Ray table (sparkfleet)")
        assert "port 12345 (0.0.0.0): pid" in named[0] and "sparklab-foreign.service" in named[0]
        assert "10002-19999" in named[0] and "ray_cluster_min_worker_port" in named[0]
        r, failures = lab.play(tmp_path / "fail", "playbooks/preflight.yml",
                               extravars={"ray_cluster_firewall_foreign_listeners": "fail"})
        assert r["status"] == "failed" and "sparklab-foreign.service" in lab.messages(failures)
        assert lab.changed_total(r) == 0
    finally:
        lab.labctl("fix", "foreign-listener", HEAD)


@pytest.mark.fault(name="a service listening in the kernel's ephemeral range on a worker (our table closes it too)",
                   expected="preflight names it with the range it read from that node, before our table applies")
def test_a_listener_in_the_ephemeral_range_is_named_before_our_table_applies(lab, tmp_path, observe):
    # ray_cluster_firewall_ephemeral (default true) closes the node's ephemeral range to non-fabric sources; preflight
    # used to check Ray's fixed ports only, so a service there lost its clients unnamed.
    worker = lab.hosts[-1]
    low, high = (int(x) for x in lab.sh(worker, "cat /proc/sys/net/ipv4/ip_local_port_range").stdout.split())
    port = high - 7
    lab.labctl("break", "foreign-listener", worker, str(port))
    try:
        for _ in range(30):
            if ":%d " % port in lab.sh(worker, "ss -Hltn 'sport = :%d'" % port).stdout:
                break
            time.sleep(1)
        r, failures = lab.play(tmp_path / "warn", "playbooks/preflight.yml")
        assert r["status"] == "successful" and not failures, lab.messages(failures)
        named = [e["res"]["msg"] for e in r["events"] if e["host"] == worker
                 and "will accept new connections" in str((e["res"] or {}).get("msg"))]
        assert len(named) == 1, named
        assert "port %d (0.0.0.0): pid" % port in named[0] and "sparklab-foreign.service" in named[0], named[0]
        assert "%d-%d" % (low, high) in named[0] and "ray_cluster_firewall_ephemeral" in named[0], named[0]
        observe(named[0][named[0].index("port %d" % port):][:160])
    finally:
        lab.labctl("fix", "foreign-listener", worker)
