"""host_firewall with a fake ufw that answers with outputs captured in the lab (ufw 0.36.2 active, default deny
incoming) and keeps its rules in a file, a fake nft with the lab's plain ruleset, and a real listening socket."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from ansible_collections.sparkfleet.vllm.plugins.modules import host_firewall

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "host_firewall")
UFW = """#!/bin/sh
echo "ufw $*" >> "$FAKE_LOG"
state=$(cat "$FAKE_STATE")
case "$*" in
  "status verbose") [ "$state" = allowed ] && cat "$FIX/ufw-deny-with-fabric-allow.verbose.txt" || cat "$FIX/$state.verbose.txt" ;;
  "status numbered") [ "$state" = allowed ] && cat "$FIX/ufw-deny-with-fabric-allow.numbered.txt" || cat "$FIX/ufw-deny-partial-allows.numbered.txt" ;;
  "allow in on enp1s0f1np1 from 10.99.1.0/24 comment sparkfleet fabric") echo allowed > "$FAKE_STATE"; echo "Rule added" ;;
  "--force delete 2") echo ufw-deny > "$FAKE_STATE"; echo "Rule deleted" ;;
  *) exit 9 ;;
esac
"""
NFT = """#!/bin/sh
cat "$FIX/plain.nft-ruleset.json"
"""
ARGS = {"allow": "10.99.1.0/24", "interface": "enp1s0f1np1"}


@pytest.fixture
def ufw(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("ufw", UFW), ("nft", NFT)):
        f = bindir / name
        f.write_text(text)
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % bindir)
    monkeypatch.setenv("FIX", FIX)
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    monkeypatch.setenv("FAKE_STATE", str(tmp_path / "state"))

    class U:
        state_file = str(tmp_path / "etc" / "host-firewall.json")
        bin = str(bindir)

        @staticmethod
        def set(state):
            (tmp_path / "state").write_text(state + "\n")

        @staticmethod
        def calls():
            return (tmp_path / "log").read_text().splitlines() if (tmp_path / "log").exists() else []
    U.set("ufw-deny")
    return U


def test_ufw_deny_incoming_is_named_with_the_exact_command(run_module, ufw):
    r = run_module(host_firewall, ARGS)
    assert not r.get("failed") and r["changed"] is False
    assert r["firewall"] == "ufw" and r["admits_fabric"] is False and r["manageable"] is True
    assert r["fix"] == ["sudo ufw allow in on enp1s0f1np1 from 10.99.1.0/24 comment 'sparkfleet fabric'"]
    assert r["why"].startswith("ufw is active with default deny (incoming)")


def test_present_adds_the_narrow_allow_once_and_absent_removes_it(run_module, ufw):
    r = run_module(host_firewall, dict(ARGS, state="present", state_file=ufw.state_file))
    assert r["changed"] is True and r["admits_fabric"] is True and r["fix"] == []
    assert r["added"] == {"tool": "ufw", "rule": ["in", "on", "enp1s0f1np1", "from", "10.99.1.0/24", "comment",
                                                  "sparkfleet fabric"]}
    again = run_module(host_firewall, dict(ARGS, state="present", state_file=ufw.state_file))
    assert again["changed"] is False and again["admits_fabric"] is True
    gone = run_module(host_firewall, dict(ARGS, state="absent", state_file=ufw.state_file))
    assert gone["changed"] is True and gone["removed"] == ["ufw rule 2 (sparkfleet fabric)"]
    assert "ufw --force delete 2" in ufw.calls() and not os.path.exists(ufw.state_file)
    assert run_module(host_firewall, dict(ARGS, state="absent", state_file=ufw.state_file))["changed"] is False


def test_check_mode_adds_nothing(run_module, ufw):
    r = run_module(host_firewall, dict(ARGS, state="present", state_file=ufw.state_file), check_mode=True)
    assert r["changed"] is True and not [c for c in ufw.calls() if c.startswith("ufw allow")]


def test_inactive_ufw_and_an_accepting_nft_ruleset_admit_the_fabric(run_module, ufw):
    ufw.set("ufw-inactive")
    r = run_module(host_firewall, ARGS)
    assert r["firewall"] == "none" and r["admits_fabric"] is True and r["fix"] == []


def test_a_listener_in_our_ranges_is_named(run_module, ufw):
    ufw.set("ufw-inactive")
    sock = socket.socket()
    sock.bind(("0.0.0.0", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    try:
        r = run_module(host_firewall, dict(ARGS, ports=["%d-%d" % (port - 1, port + 1)], ours=["sparkfleet-ray"]))
        assert [line for line in r["listeners"] if line.startswith("port %d (0.0.0.0): pid %d " % (port, os.getpid()))]
    finally:
        sock.close()


def _listening_socket():
    sock = socket.socket()
    sock.bind(("0.0.0.0", 0))  # the kernel picks the port from its ephemeral range
    sock.listen(1)
    return sock, sock.getsockname()[1]


def test_ephemeral_adds_the_node_s_own_range_and_names_its_listeners(run_module, ufw):
    # Our table closes the kernel's ephemeral range too (ray_cluster_firewall_ephemeral): a service there is named
    # before the table applies. Before, preflight checked only Ray's fixed ports and missed it.
    ufw.set("ufw-inactive")
    with open("/proc/sys/net/ipv4/ip_local_port_range") as handle:
        low, high = handle.read().split()
    sock, port = _listening_socket()
    try:
        mine = "port %d (0.0.0.0): pid %d " % (port, os.getpid())
        without = run_module(host_firewall, dict(ARGS, ports=["6379"]))
        assert not [line for line in without["listeners"] if line.startswith(mine)] and without["ports"] == ["6379"]
        r = run_module(host_firewall, dict(ARGS, ports=["6379"], ephemeral=True))
        assert r["ports"] == ["6379", "%s-%s" % (low, high)]
        assert [line for line in r["listeners"] if line.startswith(mine)], r["listeners"]
    finally:
        sock.close()


def test_listeners_of_what_the_run_stops_are_listed_apart(run_module, ufw, monkeypatch):
    # The old stack's containers as the lab's docker inspect gives them; a holder per kind as listeners() reads it.
    ufw.set("ufw-inactive")
    fake = os.path.join(ufw.bin, "docker")
    with open(fake, "w") as handle:
        handle.write("#!/bin/sh\ncat %s\n" % os.path.join(FIX, "..", "oldstack", "docker_inspect.json"))
    os.chmod(fake, 0o755)
    old = "9cb0d96a64759f6ab6a4ca71074fe582ec264e1122bfa59c7a41f072e07ccb07"

    def holder(port, pid, name, unit=None, container_id=None):
        return {"port": port, "address": "::", "pid": pid, "name": name, "cmdline": name, "unit": unit,
                "user_unit": None, "container_id": container_id}
    monkeypatch.setattr(host_firewall, "listeners", lambda ports: [
        holder(6379, 593, "gcs_server", container_id=old),
        holder(12345, 812, "python3", unit="sparklab-foreign.service"),
        holder(40000, 901, "proxy", unit="vllm-proxy.service")])
    r = run_module(host_firewall, dict(ARGS, ports=["6379", "10002-60999"], ours=["sparkfleet-ray"],
                                       stale=["vllm-cluster.service", "vllm_node", "vllm-proxy.service"]))
    assert r["stale_listeners"] == [
        "port 6379 (::): pid 593 gcs_server in container vllm_node [gcs_server]",
        "port 40000 (::): pid 901 proxy of unit vllm-proxy.service [proxy]"]
    assert r["listeners"] == ["port 12345 (::): pid 812 python3 of unit sparklab-foreign.service [python3]"]
    plain = run_module(host_firewall, dict(ARGS, ports=["6379", "10002-60999"]))
    assert len(plain["listeners"]) == 3 and plain["stale_listeners"] == []


@pytest.mark.parametrize("args, msg", [
    ({"allow": "everywhere"}, "allow must be the fabric subnet as a CIDR"),
    ({"allow": "0.0.0.0/0"}, "would open every port to every address"),
    ({"allow": "10.99.1.0/24", "ports": ["a-b"]}, "ports must be port numbers or LOW-HIGH ranges"),
])
def test_bad_arguments(run_module, ufw, args, msg):
    r = run_module(host_firewall, args)
    assert r["failed"] is True and msg in r["msg"]
