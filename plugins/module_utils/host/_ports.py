# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who listens on a TCP port: /proc/net/tcp{,6} LISTEN sockets -> inode -> process -> unit / container.

Pure parsing plus /proc reads (no command); docker names come from the caller (``docker inspect``).
"""

from __future__ import annotations

import os
import socket
import struct

from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu._gpu import list_pids, proc_info

TCP_LISTEN = "0A"


def _hex_ip(text):
    """The address of /proc/net/tcp(6): little-endian 32-bit words in hex."""
    raw = bytes.fromhex(text)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, struct.pack("<I", struct.unpack(">I", raw)[0]))
    if len(raw) == 16:
        words = struct.unpack(">4I", raw)
        return socket.inet_ntop(socket.AF_INET6, struct.pack("<4I", *words))
    raise ValueError("address of %d bytes" % len(raw))


def parse_proc_net_tcp(text):
    """[{address, port, inode}] of the LISTEN sockets in a /proc/net/tcp or tcp6 table."""
    out = []
    for line in (text or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != TCP_LISTEN:
            continue
        addr, _sep, port = fields[1].partition(":")
        try:
            out.append({"address": _hex_ip(addr), "port": int(port, 16), "inode": int(fields[9])})
        except ValueError:
            continue
    return out


def socket_owners(inodes, proc_root="/proc"):
    """{inode: [pid, ...]} for the processes holding those sockets open."""
    wanted = dict(("socket:[%d]" % i, i) for i in inodes)
    owners = {}
    if not wanted:
        return owners
    for pid in list_pids(proc_root):
        fd_dir = os.path.join(proc_root, str(pid), "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target in wanted:
                owners.setdefault(wanted[target], []).append(pid)
    return owners


def listeners(ports, proc_root="/proc"):
    """[{port, address, pid, name, cmdline, unit, user_unit, container_id}] for every LISTEN socket on ``ports``."""
    ports = set(int(p) for p in ports)
    socks = []
    for table in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc_root, "net", table)) as handle:
                socks.extend(s for s in parse_proc_net_tcp(handle.read()) if s["port"] in ports)
        except (IOError, OSError):
            continue
    owners = socket_owners([s["inode"] for s in socks], proc_root)
    found = []
    for sock in socks:
        pids = sorted(owners.get(sock["inode"], []))
        if not pids:
            found.append({"port": sock["port"], "address": sock["address"], "pid": None, "name": None,
                          "cmdline": None, "unit": None, "user_unit": None, "container_id": None})
        for pid in pids:
            info = proc_info(pid, proc_root) or {}
            found.append({"port": sock["port"], "address": sock["address"], "pid": pid,
                          "name": info.get("name"), "cmdline": info.get("cmdline"), "unit": info.get("unit"),
                          "user_unit": info.get("user_unit"), "container_id": info.get("container_id")})
    # One line per (port, pid): a process listening on v4 and v6 is one holder.
    seen, unique = set(), []
    for item in sorted(found, key=lambda x: (x["port"], x["pid"] or 0, x["address"])):
        key = (item["port"], item["pid"]) if item["pid"] else (item["port"], item["address"])
        if key not in seen:
            seen.add(key)
            unique.append(item)
    return unique


def ephemeral_range(proc_root="/proc"):
    """The kernel's ephemeral port range as "LOW-HIGH" (net.ipv4.ip_local_port_range), or None when unreadable."""
    try:
        with open(os.path.join(proc_root, "sys", "net", "ipv4", "ip_local_port_range")) as handle:
            low, high = (int(x) for x in handle.read().split())
    except (IOError, OSError, ValueError):
        return None
    return "%d-%d" % (low, high) if 0 < low <= high <= 65535 else None


def is_ours(holder, ours):
    """A holder is ours when its container or systemd unit carries one of our names (a unit's with or without
    its .service suffix)."""
    wanted = set(n[:-len(".service")] if n.endswith(".service") else n for n in ours)
    names = [holder.get("container_name") or "", (holder.get("unit") or "").replace(".service", "")]
    return any(n and n in wanted for n in names)


def describe(holder):
    text = "port %d (%s): " % (holder["port"], holder["address"])
    if holder.get("pid") is None:
        return text + "a socket whose process this user cannot see"
    text += "pid %s %s" % (holder["pid"], holder.get("name") or "?")
    if holder.get("container_name") or holder.get("container_id"):
        text += " in container %s" % (holder.get("container_name") or holder["container_id"][:12])
    if holder.get("unit"):
        text += " of unit %s" % holder["unit"]
    if holder.get("cmdline"):
        cmd = holder["cmdline"]
        text += " [%s]" % (cmd if len(cmd) <= 120 else cmd[:117] + "...")
    return text
