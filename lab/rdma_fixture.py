#!/usr/bin/python3
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write an RDMA sysfs fixture tree shaped like a DGX Spark's ConnectX-7 (GB10) inside a lab host.

The lab kernel has no InfiniBand, so /sys/class/infiniband does not exist. This script writes
<root>/class/infiniband/<dev>/... from the host's real netdevs (the veths/dummies labctl made), so
port state follows the link and the GIDs carry the addresses the interfaces really have.
Run at every host boot (hostinit.sh) and by `labctl break|fix fabric-down`.

Usage: sparklab-rdma-fixture [--root /opt/sparklab/sysfs] [--sys /sys]
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import json
import shutil
import subprocess

# The GB10's CX7: each QSFP port shows up as two PCIe functions on two x4 links ("twins").
DEVICES = (
    ("rocep1s0f0", "enp1s0f0np0"),
    ("rocep1s0f1", "enp1s0f1np1"),
    ("roceP2p1s0f0", "enP2p1s0f0np0"),
    ("roceP2p1s0f1", "enP2p1s0f1np1"),
)
GID_TABLE_LEN = 255           # mlx5 RoCE ports expose 255 GID entries
ZERO_GID = ":".join(["0000"] * 8)
RATE = "200 Gb/sec (2X NDR)"
FW_VER = "28.45.1020"
HCA_TYPE = "MT4129"           # ConnectX-7


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text + "\n" if text else "")


def gid_text(addr):
    """An IPv6 address in sysfs GID form: eight groups of four lowercase hex digits."""
    h = ipaddress.IPv6Address(addr).exploded
    return h.lower()


def mac_eui64_gid(mac):
    """Default RoCE GID: fe80::/64 plus the EUI-64 made from the netdev's MAC."""
    b = [int(x, 16) for x in mac.split(":")]
    b[0] ^= 0x02
    eui = b[:3] + [0xFF, 0xFE] + b[3:]
    tail = ":".join("%02x%02x" % (eui[i], eui[i + 1]) for i in range(0, 8, 2))
    return "fe80:0000:0000:0000:" + tail


def node_guid(mac):
    b = mac.split(":")
    return "%s%s:%sff:fe%s:%s%s" % (b[0], b[1], b[2], b[3], b[4], b[5])


def ipv4_addrs(netdev):
    try:
        out = subprocess.run(["ip", "-j", "-4", "addr", "show", "dev", netdev],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    addrs = []
    for link in json.loads(out or "[]"):
        for a in link.get("addr_info", []):
            if a.get("family") == "inet":
                addrs.append(a["local"])
    return addrs


def port_active(sysfs, netdev):
    """ACTIVE when the netdev is administratively up and has carrier (operstate up)."""
    return read(os.path.join(sysfs, "class/net", netdev, "operstate")) == "up"


def build_device(base, sysfs, dev, netdev):
    ndir = os.path.join(sysfs, "class/net", netdev)
    mac = read(os.path.join(ndir, "address"), "00:00:00:00:00:00")
    active = port_active(sysfs, netdev)
    d = os.path.join(base, dev)
    os.makedirs(os.path.join(d, "device/net", netdev), exist_ok=True)
    write(os.path.join(d, "node_guid"), node_guid(mac))
    write(os.path.join(d, "sys_image_guid"), node_guid(mac))
    write(os.path.join(d, "fw_ver"), FW_VER)
    write(os.path.join(d, "hca_type"), HCA_TYPE)
    write(os.path.join(d, "node_type"), "1: CA")
    p = os.path.join(d, "ports/1")
    write(os.path.join(p, "state"), "4: ACTIVE" if active else "1: DOWN")
    write(os.path.join(p, "phys_state"), "5: LinkUp" if active else "3: Disabled")
    write(os.path.join(p, "rate"), RATE)
    write(os.path.join(p, "link_layer"), "Ethernet")
    # GIDs: 0/1 the MAC-derived link-local (RoCE v1/v2), then v1/v2 per IPv4 address of the netdev,
    # as the kernel's RoCE GID cache does. Empty entries read as zeros.
    entries = []
    if mac != "00:00:00:00:00:00":
        ll = mac_eui64_gid(mac)
        entries += [(ll, "IB/RoCE v1"), (ll, "RoCE v2")]
    for a in ipv4_addrs(netdev):
        g = gid_text("::ffff:" + a)
        entries += [(g, "IB/RoCE v1"), (g, "RoCE v2")]
    for i in range(GID_TABLE_LEN):
        gid, typ = entries[i] if i < len(entries) else (ZERO_GID, "")
        write(os.path.join(p, "gids", str(i)), gid)
        write(os.path.join(p, "gid_attrs/types", str(i)), typ)
        write(os.path.join(p, "gid_attrs/ndevs", str(i)), netdev if typ else "")
    return active


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="/opt/sparklab/sysfs")
    ap.add_argument("--sys", default="/sys", help="where the real netdevs are read from")
    args = ap.parse_args()
    base = os.path.join(args.root, "class/infiniband")
    tmp = base + ".new"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    states = []
    for dev, netdev in DEVICES:
        if not os.path.isdir(os.path.join(args.sys, "class/net", netdev)):
            continue                      # no such port on this host: no RDMA device either
        states.append("%s->%s %s" % (dev, netdev, "ACTIVE" if build_device(tmp, args.sys, dev, netdev) else "DOWN"))
    old = base + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.isdir(base):
        os.rename(base, old)
    os.rename(tmp, base)
    shutil.rmtree(old, ignore_errors=True)
    print("rdma fixture %s: %s" % (base, ", ".join(states)))


if __name__ == "__main__":
    main()
