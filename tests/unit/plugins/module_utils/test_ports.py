"""Who holds a port: /proc/net/tcp parsing, socket -> process, and a real listener on this machine."""

from __future__ import annotations

import os
import socket

from ansible_collections.sparkfleet.vllm.plugins.module_utils.host._ports import (
    describe,
    ephemeral_range,
    is_ours,
    listeners,
    parse_proc_net_tcp,
)

# Captured from a Debian 12 host: sshd on :22 (0.0.0.0), vLLM's API on :30000, a client connection, Ray on :6379.
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 21544 1 0000000000000000 100 0 0 10 0
   1: 0B00630A:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 88123 1 0000000000000000 100 0 0 10 0
   2: 0B00630A:7530 0100630A:D2F0 01 00000000:00000000 02:000A4A0B 00000000     0        0 88200 2 0000000000000000 20 4 30 10 -1
   3: 0B01630A:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77001 1 0000000000000000 100 0 0 10 0
"""
# (tcp6 rows cut after the inode column to fit the line length.)
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 21546 1
   1: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 99 1
"""


def test_parse_listen_sockets_only():
    assert parse_proc_net_tcp(TCP) == [
        {"address": "0.0.0.0", "port": 22, "inode": 21544},
        {"address": "10.99.0.11", "port": 30000, "inode": 88123},
        {"address": "10.99.1.11", "port": 6379, "inode": 77001},
    ]
    assert parse_proc_net_tcp(TCP6) == [
        {"address": "::", "port": 22, "inode": 21546},
        {"address": "::1", "port": 8080, "inode": 99},
    ]
    assert parse_proc_net_tcp("garbage\n1: zz:zz") == []


def _fake_proc(root, pid, name, inode, cgroup="0::/system.slice/legacy-api.service\n", cmd=b"python3\0-m\0api"):
    d = root / str(pid)
    (d / "fd").mkdir(parents=True)
    os.symlink("socket:[%d]" % inode, str(d / "fd" / "3"))
    (d / "stat").write_text("%d (%s) S 1 %d %d 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n" % (pid, name, pid, pid))
    (d / "cmdline").write_bytes(cmd)
    (d / "cgroup").write_text(cgroup)
    (d / "status").write_text("Name:\t%s\nUid:\t0\t0\t0\t0\n" % name)


def test_listeners_name_process_unit_and_container(tmp_path):
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(TCP)
    (tmp_path / "net" / "tcp6").write_text(TCP6)
    _fake_proc(tmp_path, 4242, "python3", 88123)
    cid = "a" * 64
    _fake_proc(tmp_path, 5151, "gcs_server", 77001, cgroup="0::/system.slice/docker-%s.scope\n" % cid,
               cmd=b"gcs_server\0--gcs_server_port=6379")
    found = listeners([30000, 6379, 9999], proc_root=str(tmp_path))
    assert [(h["port"], h["pid"], h["unit"], h["container_id"]) for h in found] == [
        (6379, 5151, None, cid), (30000, 4242, "legacy-api.service", None)]
    line = describe(dict(found[1], container_name=None))
    assert line == "port 30000 (10.99.0.11): pid 4242 python3 of unit legacy-api.service [python3 -m api]"
    assert describe(dict(found[0], container_name="sparkfleet-ray")).startswith(
        "port 6379 (10.99.1.11): pid 5151 gcs_server in container sparkfleet-ray")


def test_ours_by_container_or_unit_name():
    ours = ["sparkfleet-vllm", "sparkfleet-ray"]
    assert is_ours({"container_name": "sparkfleet-ray", "unit": None}, ours)
    assert is_ours({"container_name": None, "unit": "sparkfleet-vllm.service"}, ours)
    assert not is_ours({"container_name": "vllm-legacy", "unit": "docker.service"}, ours)
    assert not is_ours({"container_name": None, "unit": None}, ours)
    # gpu_holders names stale units with their suffix (vllm-cluster.service): the same unit either way.
    assert is_ours({"container_name": None, "unit": "vllm-cluster.service"}, ["vllm-cluster.service"])
    assert is_ours({"container_name": None, "unit": "vllm-cluster.service"}, ["vllm-cluster"])
    assert not is_ours({"container_name": None, "unit": "vllm-cluster-x.service"}, ["vllm-cluster.service"])


def test_ephemeral_range_as_the_kernel_gives_it(tmp_path):
    ipv4 = tmp_path / "sys" / "net" / "ipv4"
    assert ephemeral_range(str(tmp_path)) is None  # not readable: the caller says so
    ipv4.mkdir(parents=True)
    (ipv4 / "ip_local_port_range").write_text("32768\t60999\n")  # the lab's Debian 12 hosts, as read there
    assert ephemeral_range(str(tmp_path)) == "32768-60999"
    for bad in ("60999\t32768\n", "0\t100\n", "32768\n", "a b\n"):
        (ipv4 / "ip_local_port_range").write_text(bad)
        assert ephemeral_range(str(tmp_path)) is None, bad


def test_a_real_listener_on_this_machine_is_found_with_its_pid():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        found = listeners([port])
        assert [(h["port"], h["address"], h["pid"]) for h in found] == [(port, "127.0.0.1", os.getpid())]
    finally:
        sock.close()
    assert listeners([port]) == []
