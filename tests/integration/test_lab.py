"""The local Spark lab behaves like the real cluster where the collection relies on it, and is safe.

Run as root: lab/labctl ctl -- .venv/bin/pytest tests/integration/test_lab.py -m lab
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid

import pytest

# test_guard_survives_down takes the lab down and up: every host starts again from its bare root.
pytestmark = [pytest.mark.lab, pytest.mark.leaves("fresh")]

REAL_SPARKS = ("10.1.230.180", "192.168.200.13")


def sysfs_gid(ipv4):
    """::ffff:a.b.c.d as the kernel writes it in ports/1/gids/N."""
    a, b, c, d = (int(x) for x in ipv4.split("."))
    return "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" % (a, b, c, d)


def host_pid1(lab, host):
    """The host's systemd as the machine sees it (changes when the host reboots)."""
    m = re.search(r"^%s: running pid1=(\d+)" % host, lab.labctl("status").stdout, re.M)
    assert m, "%s is not running" % host
    return int(m.group(1))


def assert_unreachable(lab, address):
    p = lab.root_ns("ip", "route", "get", address)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and ("No route to host" in out or "unreachable" in out), (
        "root netns could route to %s: %s" % (address, out))


# --- reachability and safety ------------------------------------------------------------------

def test_worker_answers_only_through_proxyjump(lab):
    p = lab.ssh("spark-2", "hostname")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "spark-2"
    # Without the jump there is no route from the control namespace: it must fail at once (no route), not time out.
    p = lab.ctl("ssh", "-F", "/dev/null", "-i", lab.ssh_key, "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "spark@" + lab.fabric_ip("spark-2"), "true")
    assert p.returncode == 255
    assert "unreachable" in p.stderr.lower() and "timed out" not in p.stderr.lower(), p.stderr


def test_root_netns_cannot_route_to_lab_or_real_sparks(lab):
    for address in (lab.fabric_ip("spark-2"), "10.99.0.11") + REAL_SPARKS:
        assert_unreachable(lab, address)
    # and holds no lab address or interface of its own
    p = lab.root_ns("ip", "-o", "addr", "show")
    assert "10.99." not in p.stdout
    for name in ("enP7s7", "enp1s0f1np1", "fab-a", "mgmt0"):
        assert not re.search(r"\b%s\b" % name, p.stdout), name


def test_control_namespace_has_only_the_management_link(lab):
    p = lab.ctl("ip", "-o", "link", "show")
    names = sorted(line.split(":")[1].strip().split("@")[0] for line in p.stdout.splitlines())
    assert names == ["lo", "mgmt0"]
    p = lab.ctl("ip", "route", "show", "default")
    assert p.stdout.strip() == "", "the control namespace must have no default route"
    p = lab.ctl("ip", "-o", "-4", "addr", "show", "dev", "mgmt0")
    assert "10.99.0.1/24" in p.stdout


def test_ctl_keeps_cwd_and_environment(lab, tmp_path):
    p = lab.run([lab.repo / "lab" / "labctl", "ctl", "--", "sh", "-c", 'pwd; echo "$SPARKLAB_PROBE"; ip -o link show mgmt0'],
                env_extra={"SPARKLAB_PROBE": "kept"}, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    cwd, probe = p.stdout.splitlines()[:2]
    assert (cwd, probe) == (str(tmp_path), "kept")


def test_egress_guard_rejects_metadata_probe_inside_host(lab):
    # Ray's head probes 169.254.169.254:80 at start; inside a host it must be refused on the spot.
    probe = ("python3 -c \"import socket,sys\n"
             "s=socket.socket(); s.settimeout(5)\n"
             "try:\n s.connect(('169.254.169.254', 80)); print('CONNECTED')\n"
             "except OSError as e: print('REFUSED', e.errno, e)\"")
    p = lab.ssh("spark-1", probe)
    assert p.returncode == 0, p.stderr
    # refused on the spot by the guard (an errno), not a connect that timed out (socket.timeout: errno None)
    assert p.stdout.startswith("REFUSED") and p.stdout.split()[1] != "None", p.stdout
    # the guard recorded it in the host's own netns
    p = lab.run(["ip", "netns", "exec", lab.netns("spark-1"), "nft", "list", "set", "inet", "sfl_egress", "seen"])
    assert "169.254.169.254 . tcp . 80" in p.stdout, p.stdout


# --- the hosts ---------------------------------------------------------------------------------

def test_hosts_boot_systemd_with_ssh_and_docker(lab):
    for host in lab.hosts:
        p = lab.ssh(host, "systemctl is-system-running; systemctl is-active ssh docker; ps -p 1 -o comm=")
        lines = p.stdout.split()
        assert lines[0] in ("running", "degraded"), (host, p.stdout, p.stderr)
        assert lines[1:3] == ["active", "active"], (host, p.stdout)
        assert lines[3] == "systemd", (host, p.stdout)


def test_models_is_private_per_host(lab):
    name = "/models/probe-%s" % uuid.uuid4().hex[:8]
    assert lab.ssh("spark-1", "echo spark-1 > %s && cat %s" % (name, name)).stdout.strip() == "spark-1"
    try:
        p = lab.ssh("spark-2", "test -e %s && echo PRESENT || echo ABSENT" % name)
        assert p.stdout.strip() == "ABSENT"
    finally:
        lab.ssh("spark-1", "rm -f %s" % name)


def test_share_is_mounted_read_only_at_the_same_path(lab):
    for host in lab.hosts:
        p = lab.ssh(host, "findmnt -no OPTIONS /var/tmp/sparklab/share; touch /var/tmp/sparklab/share/.probe 2>&1")
        opts, err = p.stdout.split("\n", 1)
        assert "ro" in opts.split(","), (host, opts)
        assert "Read-only file system" in err, (host, err)


def test_docker_runs_inside_host_on_overlay2_without_nat(lab):
    p = lab.ssh("spark-2", "sudo docker info --format '{{.Driver}} {{.CgroupDriver}}'")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["overlay2", "systemd"]
    p = lab.ssh("spark-2", "ip -o link show; cat /proc/sys/net/ipv4/ip_forward")
    assert "docker0" not in p.stdout
    assert p.stdout.strip().splitlines()[-1] == "0"


def test_interfaces_follow_the_address_plan(lab):
    for host in lab.hosts:
        p = lab.host_exec(host, "ip", "-j", "addr", "show")
        assert p.returncode == 0, p.stderr
        links = {l["ifname"]: l for l in json.loads(p.stdout)}
        for ifn, twin in (("enp1s0f1np1", "a"), ("enP2p1s0f1np1", "b")):
            assert links[ifn]["mtu"] == 9000, (host, ifn)
            addrs = [a["local"] for a in links[ifn]["addr_info"] if a["family"] == "inet"]
            assert addrs == [lab.fabric_ip(host, twin)], (host, ifn, addrs)
        for ifn in ("enp1s0f0np0", "enP2p1s0f0np0"):
            assert "UP" not in links[ifn]["flags"], (host, ifn)
            assert [a for a in links[ifn]["addr_info"] if a["family"] == "inet"] == [], (host, ifn)
        default = lab.host_exec(host, "ip", "route", "show", "default").stdout.strip()
        if host == "spark-1":
            assert links["enP7s7"]["addr_info"][0]["local"] == "10.99.0.11"
            assert default.startswith("default via 10.99.0.1 dev enP7s7")
        else:
            assert "enP7s7" not in links
            assert default == "", (host, default)


def test_fabric_twins_reach_each_other(lab):
    for twin in ("a", "b"):
        p = lab.ssh("spark-1", "ping -c1 -W2 -M do -s 8972 %s" % lab.fabric_ip("spark-2", twin))
        assert p.returncode == 0, (twin, p.stdout, p.stderr)


# --- hardware stand-ins ------------------------------------------------------------------------

def test_nvidia_smi_reads_like_a_gb10(lab):
    p = lab.ssh("spark-1", "nvidia-smi")
    assert p.returncode == 0
    gpu_rows = [l for l in p.stdout.splitlines() if "NVIDIA GB10" in l]
    assert len(gpu_rows) == 1
    assert re.search(r"\|\s*Not Supported\s*\|", p.stdout), "Memory-Usage must read Not Supported"
    assert re.search(r"Driver Version: 580\.\S+\s+CUDA Version: 13\.0", p.stdout)
    p = lab.ssh("spark-1", "nvidia-smi -L")
    assert re.fullmatch(r"GPU 0: NVIDIA GB10 \(UUID: GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\)", p.stdout.strip())
    p = lab.ssh("spark-1", "nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits")
    assert p.stdout.strip() == "[N/A], [N/A]"
    p = lab.ssh("spark-1", "nvidia-smi --query-gpu=name,driver_version --format=csv,noheader")
    name, driver = p.stdout.strip().split(", ")
    assert name == "NVIDIA GB10" and driver.startswith("580.")
    p = lab.ssh("spark-1", "nvidia-smi --no-such-flag")
    assert p.returncode != 0


def test_nvidia_smi_lists_the_process_holding_the_gpu(lab):
    # a process opens /dev/nvidia0 and holds it; nvidia-smi must name its real pid
    p = lab.ssh("spark-1", "setsid bash -c 'exec 3</dev/nvidia0; exec sleep 60' >/dev/null 2>&1 </dev/null & echo $!")
    pid = int(p.stdout.strip())
    try:
        p = lab.ssh("spark-1", "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits")
        rows = [r.split(", ") for r in p.stdout.strip().splitlines()]
        assert [str(pid), "sleep"] in [r[:2] for r in rows], p.stdout
        assert all(r[2].isdigit() for r in rows)
        table = lab.ssh("spark-1", "nvidia-smi").stdout
        assert re.search(r"\|\s+0\s+N/A\s+N/A\s+%d\s+C\s+sleep\s+\d+MiB \|" % pid, table), table
        # on the other host nothing holds its GPU
        other = lab.ssh("spark-2", "nvidia-smi --query-compute-apps=pid --format=csv,noheader").stdout
        assert str(pid) not in other.split()
    finally:
        lab.ssh("spark-1", "kill %d" % pid)


@pytest.mark.long  # a host reboot (~50 s) to test the lab's own knob: scripts/faults.sh runs it
def test_stale_unit_knob_holds_the_gpu_and_comes_back_after_reboot(lab):
    lab.labctl("break", "stale-unit", "spark-2")
    try:
        # like the old deployment on the real Sparks: enabled, so a reboot brings it back
        before = host_pid1(lab, "spark-2")
        lab.labctl("reboot", "spark-2", timeout=300)
        assert host_pid1(lab, "spark-2") != before, "spark-2 did not reboot"
        p = lab.ssh("spark-2", "systemctl is-active vllm-legacy")
        assert p.stdout.strip() == "active", p.stdout
        p = lab.ssh("spark-2", "systemctl is-enabled vllm-legacy; systemctl show -p MainPID --value vllm-legacy")
        enabled, main_pid = p.stdout.split()
        assert enabled == "enabled"
        apps = lab.ssh("spark-2", "nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader").stdout
        assert main_pid in [r.split(", ")[0] for r in apps.strip().splitlines()], apps
    finally:
        lab.labctl("fix", "stale-unit", "spark-2")
    assert lab.ssh("spark-2", "systemctl cat vllm-legacy.service").returncode != 0
    p = lab.ssh("spark-2", "nvidia-smi --query-compute-apps=pid --format=csv,noheader")
    assert p.returncode == 0 and p.stdout.strip() == "", p.stdout


def read_fixture(lab, host, rel):
    # through labctl exec, not ssh: with twin A down a worker is unreachable, as on the real cluster
    p = lab.host_exec(host, "cat", "/opt/sparklab/sysfs/class/infiniband/" + rel)
    assert p.returncode == 0, (host, rel, p.stderr)
    return p.stdout.strip()


def test_rdma_fixture_maps_the_twins(lab):
    expect = {
        "rocep1s0f0": ("enp1s0f0np0", None),
        "rocep1s0f1": ("enp1s0f1np1", "a"),
        "roceP2p1s0f0": ("enP2p1s0f0np0", None),
        "roceP2p1s0f1": ("enP2p1s0f1np1", "b"),
    }
    for host in lab.hosts:
        devs = lab.ssh(host, "ls /opt/sparklab/sysfs/class/infiniband").stdout.split()
        assert sorted(devs) == sorted(expect)
        for dev, (netdev, twin) in expect.items():
            assert lab.ssh(host, "ls /opt/sparklab/sysfs/class/infiniband/%s/device/net" % dev).stdout.split() == [netdev]
            assert read_fixture(lab, host, dev + "/ports/1/link_layer") == "Ethernet"
            assert read_fixture(lab, host, dev + "/hca_type") == "MT4129"
            state = read_fixture(lab, host, dev + "/ports/1/state")
            gid0 = read_fixture(lab, host, dev + "/ports/1/gids/0")
            assert gid0.startswith("fe80:0000:0000:0000:")
            assert read_fixture(lab, host, dev + "/ports/1/gid_attrs/types/1") == "RoCE v2"
            if twin is None:
                assert state == "1: DOWN"
                assert read_fixture(lab, host, dev + "/ports/1/phys_state") == "3: Disabled"
                assert read_fixture(lab, host, dev + "/ports/1/gids/2") == "0000:" * 7 + "0000"
            else:
                assert state == "4: ACTIVE"
                assert read_fixture(lab, host, dev + "/ports/1/phys_state") == "5: LinkUp"
                assert read_fixture(lab, host, dev + "/ports/1/gids/3") == sysfs_gid(lab.fabric_ip(host, twin))
                assert read_fixture(lab, host, dev + "/ports/1/gid_attrs/types/3") == "RoCE v2"
                assert read_fixture(lab, host, dev + "/ports/1/gid_attrs/ndevs/3") == netdev


def test_fabric_down_knob_takes_twin_a_down_and_back(lab):
    lab.labctl("break", "fabric-down", "spark-2")
    try:
        assert read_fixture(lab, "spark-2", "rocep1s0f1/ports/1/state") == "1: DOWN"
        p = lab.ssh("spark-1", "ping -c1 -W1 %s" % lab.fabric_ip("spark-2", "a"))
        assert p.returncode != 0
        # twin B still carries traffic, as on a Spark with one bad lane
        assert lab.ssh("spark-1", "ping -c1 -W2 %s" % lab.fabric_ip("spark-2", "b")).returncode == 0
        # the worker's ssh path (ProxyJump from the head to its twin A address) is gone with it: the head cannot open
        # a TCP connection to its port 22 (asked on the head itself: an ssh through the jump would wait out the
        # kernel's SYN retries, over two minutes, while the head still holds a neighbour entry for it)
        probe = "timeout 5 bash -c '</dev/tcp/%s/22'" % lab.fabric_ip("spark-2", "a")
        assert lab.host_exec("spark-1", "bash", "-c", probe).returncode != 0
    finally:
        lab.labctl("fix", "fabric-down", "spark-2")
    assert read_fixture(lab, "spark-2", "rocep1s0f1/ports/1/state") == "4: ACTIVE"
    # back within seconds: the head's neighbour entry for the worker may still be FAILED for the first ping
    again = "for i in 1 2 3 4 5 6 7 8 9 10; do ping -c1 -W1 %s && exit 0; sleep 1; done; exit 1"
    assert lab.ssh("spark-1", again % lab.fabric_ip("spark-2", "a"), timeout=60).returncode == 0


# --- the controller side -----------------------------------------------------------------------

def test_ansible_ping_reaches_every_host_through_the_lab_inventory(lab, tmp_path):
    r = lab.ansible_run(private_data_dir=str(tmp_path), inventory=str(lab.inventory), host_pattern="spark",
                        module="ansible.builtin.ping", envvars={"ANSIBLE_CONFIG": str(lab.repo / "ansible.cfg")})
    assert r["status"] == "successful", r
    pongs = sorted(e["host"] for e in r["events"] if e["event"] == "runner_on_ok" and e["res"].get("ping") == "pong")
    assert pongs == sorted(lab.hosts)


SINK = ("import socket; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        "s.bind(('%s', 5099)); s.listen(1); s.settimeout(30); c=s.accept()[0]\n"
        "while c.recv(1 << 20): pass")
SEND = ("import socket, time; s=socket.create_connection(('%s', 5099), 10); b=bytes(1 << 20); t=time.monotonic()\n"
        "for _ in range(8): s.sendall(b)\n"
        "s.shutdown(socket.SHUT_WR); s.recv(1); print(time.monotonic() - t)")


def fabric_seconds_for_8mib(lab):
    """Seconds to push 8 MiB from spark-1 to spark-2 over twin A (plain TCP, no ssh in the way)."""
    target = lab.fabric_ip("spark-2")
    sink = subprocess.Popen([str(lab.repo / "lab" / "labctl"), "exec", "spark-2", "python3", "-c", SINK % target],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for _ in range(50):
            p = lab.host_exec("spark-1", "python3", "-c", SEND % target)
            if p.returncode == 0:
                return float(p.stdout.strip())
            time.sleep(0.2)
        raise AssertionError("no transfer: %s" % p.stderr)
    finally:
        sink.wait(timeout=30)


def test_shape_caps_and_uncaps_the_fabric(lab):
    lab.labctl("shape", "20mbit")
    try:
        p = lab.host_exec("spark-1", "tc", "qdisc", "show", "dev", "enp1s0f1np1")
        assert "tbf" in p.stdout and "20Mbit" in p.stdout, p.stdout
        capped = fabric_seconds_for_8mib(lab)
    finally:
        lab.labctl("shape", "off")
    assert "tbf" not in lab.host_exec("spark-1", "tc", "qdisc", "show", "dev", "enp1s0f1np1").stdout
    free = fabric_seconds_for_8mib(lab)
    # 8 MiB at 20 Mbit/s is about 3.4 s (less the 1 MB burst); the veth alone does it in milliseconds
    assert capped > 2.0, capped
    assert free < capped / 4, (free, capped)


# Last: it takes the lab down and brings it back (skipped while others share the lab).
def test_guard_survives_down(lab):
    if os.environ.get("SPARKLAB_KEEP_LAB"):
        pytest.skip("SPARKLAB_KEEP_LAB is set: not taking a shared lab down")
    lab.labctl("down", timeout=300)
    try:
        for address in (lab.fabric_ip("spark-2"),) + REAL_SPARKS:
            assert_unreachable(lab, address)
        assert "sfl_guard" in lab.root_ns("nft", "list", "tables").stdout
    finally:
        lab.labctl("up", "--hosts", str(len(lab.hosts)), timeout=900)
