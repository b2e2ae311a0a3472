# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Pure helpers for rdma_facts: read RDMA sysfs, parse `ip -j addr show`, pick the fabric.

Private to the collection. Everything here is free of AnsibleModule so it can be unit tested
against fixture trees and captured command output.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
from dataclasses import dataclass
from typing import Optional, Tuple

from ansible_collections.sparkfleet.vllm.plugins.module_utils._files import read_file
from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json

ACTIVE = "ACTIVE"
ROCE_V2 = "RoCE v2"
LINK_LOCAL_V4 = ipaddress.ip_network("169.254.0.0/16")
# Ethernet + IPv4 + UDP + BTH + ICRC headers a RoCE v2 packet carries besides its IB payload.
ROCE_V2_OVERHEAD = 58


@dataclass(frozen=True)
class NicType:
    """What differs per NIC type. Selection (select_fabric), the env builder (fabric_env) and the checks read it from
    NIC_TYPES; adding a NIC type is one entry there plus its fixtures."""

    # Key in NIC_TYPES; what the fact's nic_type says.
    name: str
    # For people: the card and its link.
    label: str
    # The kernel RDMA driver (the hint for a node where class/infiniband is empty).
    driver: str
    # How a port is detected: its sysfs link_layer and the start of its RDMA device name.
    link_layer: str
    ib_prefixes: Tuple[str, ...]
    # RoCE v2: a GID maps the IPv4 address, and its index is NCCL_IB_GID_INDEX.
    roce_v2: bool
    # A regex on the netdev whose groups, joined, name the port both of its PCIe functions share (None: one function
    # per port, no twin).
    twin_pattern: Optional[str]
    # Link rates (Gb/s) a cabled port negotiates.
    speeds_gbps: Tuple[float, ...]
    # The FABRIC_ENV keys this NIC type sets (the one list of keys is FABRIC_ENV).
    env: Tuple[str, ...]
    # Hints: load the driver; bring a port up; give an interface its fabric address (%(ifname)s, %(cidr)s).
    load_hint: str
    cable_hint: str
    address_hint: str
    # Captured cases under tests/unit/plugins/modules/fixtures/rdma_facts/ that show this NIC type.
    fixtures: Tuple[str, ...]

    def matches(self, dev):
        """True when a port record (sysfs: name, link_layer) is of this type."""
        return dev.get("link_layer") == self.link_layer and (dev.get("name") or "").startswith(self.ib_prefixes)


# The GB10's ConnectX-7: each QSFP port is two PCIe functions in different PCI domains; the domain is the only
# difference in their names (enp1s0f1np1 <-> enP2p1s0f1np1), so dropping it pairs the twins.
CX7_GB10 = NicType(
    name="cx7_gb10",
    label="ConnectX-7 on a DGX Spark (GB10), RoCE v2 over a QSFP112 cable",
    driver="mlx5_ib",
    link_layer="Ethernet",
    ib_prefixes=("rocep", "roceP"),
    roce_v2=True,
    twin_pattern=r"^(en)P\d+(p\d+s\d+f\d+.*)$",
    speeds_gbps=(200.0,),
    env=("VLLM_HOST_IP", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NCCL_IB_HCA",
         "UCX_NET_DEVICES", "OMPI_MCA_btl_tcp_if_include", "NCCL_IB_GID_INDEX"),
    load_hint="load the mlx5_ib driver (`modprobe mlx5_ib`) and check `ibdev2netdev`",
    cable_hint="plug the QSFP cable (an approved QSFP112 cable brings up both twins) and check "
               "`ibdev2netdev` shows (Up); `ip link set dev <if> up` if the netdev is admin-down",
    address_hint="configure a static address on %(ifname)s in the fabric subnet, e.g. "
                 "`nmcli con add type ethernet ifname %(ifname)s con-name fabric-%(ifname)s ipv4.method manual "
                 "ipv4.addresses %(cidr)s 802-3-ethernet.mtu 9000 && nmcli con up fabric-%(ifname)s` "
                 "(give its twin an address in a different subnet)",
    fixtures=("lab_spark1", "port1", "port2_twin_only", "both_ports", "link_local_only", "names_differ_node_a",
              "names_differ_node_b", "mtu_1500", "twins_one_subnet", "no_active"),
)

# Every NIC type the fabric selection knows, by name. A port that matches none is read as DEFAULT_NIC's.
NIC_TYPES = {CX7_GB10.name: CX7_GB10}
DEFAULT_NIC = CX7_GB10.name


def nic_type_of(dev):
    """The NicType of a port record (sysfs or merged device); DEFAULT_NIC's when none matches."""
    for nic in NIC_TYPES.values():
        if nic.matches(dev):
            return nic
    return NIC_TYPES[DEFAULT_NIC]


_STATE_RE = re.compile(r"^\s*(\d+)\s*:\s*(\S+)")
_RATE_RE = re.compile(r"^\s*([\d.]+)\s*Gb/sec")


class FabricError(Exception):
    """Selection failed; msg says what is wrong (naming interfaces), hint says how to fix it."""

    def __init__(self, msg, hint):
        super(FabricError, self).__init__(msg)
        self.msg = msg
        self.hint = hint


def parse_state(text):
    """'4: ACTIVE' -> (4, 'ACTIVE'); also used for phys_state ('5: LinkUp')."""
    if not text:
        return None, None
    m = _STATE_RE.match(text)
    if not m:
        return None, text.strip()
    return int(m.group(1)), m.group(2)


def parse_rate_gbps(text):
    """'200 Gb/sec (4X HDR)' -> 200; '2.5 Gb/sec (1X SDR)' -> 2.5; unknown -> None."""
    if not text:
        return None
    m = _RATE_RE.match(text)
    if not m:
        return None
    value = float(m.group(1))
    return int(value) if value.is_integer() else value


def ipv4_from_gid(gid):
    """Return the IPv4 address an IPv4-mapped GID carries, else None."""
    try:
        addr = ipaddress.IPv6Address(gid.strip())
    except (ValueError, AttributeError):
        return None
    mapped = addr.ipv4_mapped
    return str(mapped) if mapped is not None else None


def twin_key(netdev, nic=None):
    """Name shared by both netdevs of one physical port (on a GB10, the PCI domain dropped); the netdev itself for a
    NIC type without twins. nic: the port's NicType (DEFAULT_NIC's when not given)."""
    if not netdev:
        return None
    pattern = (nic or NIC_TYPES[DEFAULT_NIC]).twin_pattern
    m = re.match(pattern, netdev) if pattern else None
    if m:
        return "".join(m.groups())
    return netdev


def is_link_local(address):
    return ipaddress.ip_address(address) in LINK_LOCAL_V4


def parse_ip_addr_json(text):
    """Parse `ip -j addr show` into {ifname: {mtu, operstate, flags, ipv4: [{address, prefix}]}}."""
    try:
        data = _json.loads(text)
    except ValueError as exc:
        raise ValueError("cannot parse `ip -j addr show` output as JSON: %s" % exc)
    if not isinstance(data, list):
        raise ValueError("`ip -j addr show` output is not a JSON list")
    links = {}
    for entry in data:
        if not isinstance(entry, dict) or "ifname" not in entry:
            continue
        ipv4 = []
        for info in entry.get("addr_info") or []:
            if info.get("family") == "inet" and "local" in info:
                ipv4.append({"address": info["local"], "prefix": int(info.get("prefixlen", 32))})
        links[entry["ifname"]] = {
            "mtu": entry.get("mtu"),
            "operstate": entry.get("operstate"),
            "flags": list(entry.get("flags") or []),
            "ipv4": ipv4,
        }
    return links


def _sorted_numeric(names):
    return sorted((n for n in names if n.isdigit()), key=int)


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []


def read_gids(port_dir):
    """Return the used GID table entries: [{index, gid, type, ndev}] (all-zero slots skipped)."""
    gids = []
    for name in _sorted_numeric(_listdir(os.path.join(port_dir, "gids"))):
        gid = read_file(os.path.join(port_dir, "gids", name), strip=True)
        if not gid or set(gid.replace(":", "")) <= {"0"}:
            continue
        gids.append({
            "index": int(name),
            "gid": gid,
            "type": read_file(os.path.join(port_dir, "gid_attrs", "types", name), strip=True),
            "ndev": read_file(os.path.join(port_dir, "gid_attrs", "ndevs", name), strip=True),
        })
    return gids


def read_rdma_sysfs(sysfs_root):
    """Read <sysfs_root>/class/infiniband into a list of port records (one per device port)."""
    base = os.path.join(sysfs_root, "class", "infiniband")
    records = []
    for dev in sorted(_listdir(base)):
        dev_dir = os.path.join(base, dev)
        netdevs = sorted(_listdir(os.path.join(dev_dir, "device", "net")))
        for port in _sorted_numeric(_listdir(os.path.join(dev_dir, "ports"))):
            port_dir = os.path.join(dev_dir, "ports", port)
            state_num, state = parse_state(read_file(os.path.join(port_dir, "state"), strip=True))
            phys_num, phys_state = parse_state(read_file(os.path.join(port_dir, "phys_state"), strip=True))
            gids = read_gids(port_dir)
            netdev = None
            # The GID table names the port's netdev; device/net is the fallback for an empty table.
            for entry in gids:
                if entry["ndev"]:
                    netdev = entry["ndev"]
                    break
            if netdev is None and netdevs:
                idx = int(port) - 1
                netdev = netdevs[idx] if idx < len(netdevs) else netdevs[0]
            rate = read_file(os.path.join(port_dir, "rate"), strip=True)
            records.append({
                "name": dev,
                "port": int(port),
                "netdev": netdev,
                "state": state,
                "state_num": state_num,
                "phys_state": phys_state,
                "link_layer": read_file(os.path.join(port_dir, "link_layer"), strip=True),
                "rate": rate,
                "rate_gbps": parse_rate_gbps(rate),
                "gids": gids,
            })
    return records


def roce_v2_gid_index(gids, address):
    """Index of the RoCE v2 GID that maps IPv4 `address`, or None."""
    for entry in gids:
        if entry.get("type") == ROCE_V2 and ipv4_from_gid(entry["gid"]) == address:
            return entry["index"]
    return None


def merge_devices(records, links):
    """Join sysfs port records with the interface table; the result is what `devices` returns."""
    devices = []
    for rec in records:
        link = links.get(rec["netdev"]) or {}
        ipv4 = link.get("ipv4") or []
        routable = [a for a in ipv4 if not is_link_local(a["address"])]
        gid_index = None
        if routable:
            gid_index = roce_v2_gid_index(rec["gids"], routable[0]["address"])
        devices.append({
            "name": rec["name"],
            "port": rec["port"],
            "netdev": rec["netdev"],
            "state": rec["state"],
            "phys_state": rec["phys_state"],
            "link_layer": rec["link_layer"],
            "rate": rec["rate"],
            "rate_gbps": rec["rate_gbps"],
            "mtu": link.get("mtu"),
            "operstate": link.get("operstate"),
            "ipv4": ["%s/%d" % (a["address"], a["prefix"]) for a in ipv4],
            "gid_index": gid_index,
            "twin_key": twin_key(rec["netdev"], nic_type_of(rec)),
            "gids": rec["gids"],
        })
    # Twins side by side, the domain-0 function first: rocep1s0f0, roceP2p1s0f0, rocep1s0f1, ...
    devices.sort(key=lambda d: (d["twin_key"] or d["name"], d["netdev"] != d["twin_key"], d["name"], d["port"]))
    return devices


def _ifaces(devs):
    return ", ".join(d["netdev"] or d["name"] for d in devs)


def _routable(dev):
    out = []
    for cidr in dev["ipv4"]:
        iface = ipaddress.ip_interface(cidr)
        if iface.ip not in LINK_LOCAL_V4:
            out.append(iface)
    return out


def _nmcli_hint(dev, example_cidr="192.168.200.12/24"):
    return nic_type_of(dev).address_hint % {"ifname": dev["netdev"], "cidr": example_cidr}


def _hints(what, devs=None):
    """One NicType hint (load_hint, cable_hint) per NIC type among devs (every known type when devs is None)."""
    nics = list(NIC_TYPES.values()) if devs is None else [nic_type_of(d) for d in devs]
    out = []
    for nic in nics:
        text = getattr(nic, what)
        if text not in out:
            out.append(text)
    return "; ".join(out)


def _primary_first(devs):
    # The domain-0 function (enp1s0f1np1) sorts before its enP2 twin and is the documented primary.
    return sorted(devs, key=lambda d: (d["netdev"] != d["twin_key"], d["netdev"] or ""))


def select_fabric(devices, interface=None, subnet=None, ip=None, min_mtu=9000):
    """Pick this node's fabric interface from merged devices.

    Returns a dict (interface, ip, prefix, subnet, mtu, hca, gid_index, device, hca_devices,
    warnings) or raises FabricError naming the interfaces and the fix.
    """
    warnings = []
    if not devices:
        raise FabricError(
            "no RDMA device found (class/infiniband is empty)",
            _hints("load_hint") + "; in the lab pass sysfs_root: /opt/sparklab/sysfs")
    net = None
    if subnet:
        try:
            net = ipaddress.ip_network(subnet, strict=False)
        except ValueError:
            raise FabricError("subnet %r is not a CIDR network" % subnet,
                              "write it like 192.168.200.0/24")
    pinned_ip = None
    if ip:
        try:
            pinned_ip = ipaddress.ip_address(ip)
        except ValueError:
            raise FabricError("ip %r is not an IPv4 address" % ip, "write it like 192.168.200.12")
        if net is not None and pinned_ip not in net:
            raise FabricError("ip %s is not in subnet %s" % (ip, net),
                              "fix the inventory: the node's fabric ip must lie in the fabric subnet")

    active = [d for d in devices if d["state"] == ACTIVE]
    if not active:
        states = ", ".join("%s->%s %s" % (d["name"], d["netdev"], d["state"]) for d in devices)
        raise FabricError("no ACTIVE RDMA port (%s)" % states, _hints("cable_hint", devices))

    by_netdev = dict((d["netdev"], d) for d in devices if d["netdev"])

    if interface:
        dev = by_netdev.get(interface)
        if dev is None:
            raise FabricError(
                "interface %s is not an RDMA netdev (RDMA netdevs: %s)" % (interface, _ifaces(devices)),
                "pin one of the RDMA netdevs listed, or leave interface unset to detect it per node")
        if dev["state"] != ACTIVE:
            raise FabricError(
                "interface %s (%s) is not ACTIVE (state %s, phys_state %s); ACTIVE: %s"
                % (interface, dev["name"], dev["state"], dev["phys_state"], _ifaces(active)),
                "cable that port or pin an ACTIVE interface; names differ per node, so leave "
                "interface unset and set subnet to detect it")
        pool = [dev]
    else:
        pool = active

    # Candidates: (device, address) pairs that could carry this node's fabric traffic.
    candidates = []
    link_local_only = []
    for dev in pool:
        addrs = _routable(dev)
        if not addrs and dev["ipv4"]:
            link_local_only.append(dev)
        for a in addrs:
            if net is not None and a.ip not in net:
                continue
            if pinned_ip is not None and a.ip != pinned_ip:
                continue
            candidates.append((dev, a))

    if not candidates:
        if pinned_ip is not None:
            holder = [d for d in devices if any(ipaddress.ip_interface(c).ip == pinned_ip for c in d["ipv4"])]
            where = ("it is on %s, which is not ACTIVE or not the pinned interface" % _ifaces(holder)
                     if holder else "it is on no RDMA interface")
            raise FabricError(
                "ip %s: %s (RDMA addresses: %s)" % (ip, where, _addr_summary(devices)),
                "configure %s on this node's ACTIVE fabric interface, or fix the inventory's ip "
                "for this host" % ip)
        if link_local_only:
            ifs = [d["netdev"] for d in link_local_only]
            raise FabricError(
                "ACTIVE fabric interface %s has only a link-local 169.254 address; NCCL and Ray "
                "need a routable address" % ", ".join(ifs),
                _nmcli_hint(link_local_only[0], _example_cidr(net)))
        if net is not None:
            raise FabricError(
                "no ACTIVE RDMA interface has an address in %s (ACTIVE: %s)"
                % (net, _addr_summary(pool)),
                "put an address in %s on the cabled interface (%s) or fix `subnet`; "
                % (net, _ifaces(pool)) + _nmcli_hint(_primary_first(pool)[0], _example_cidr(net)))
        raise FabricError(
            "ACTIVE RDMA interface(s) %s have no IPv4 address" % _ifaces(pool),
            _nmcli_hint(_primary_first(pool)[0]))

    # Two addresses of one subnet on different netdevs confuse ARP and NCCL's socket choice.
    if len(candidates) > 1:
        clash = _same_subnet(candidates)
        if clash and not interface:
            raise FabricError(
                "two candidates in one subnet: %s" % ", ".join(
                    "%s %s" % (d["netdev"], a.with_prefixlen) for d, a in clash),
                "put twins in different subnets (e.g. %s on %s and the next subnet on %s) or pin "
                "`interface`" % (clash[0][1].network, clash[0][0]["netdev"], clash[1][0]["netdev"]))
        keys = set(c[0]["twin_key"] for c in candidates)
        if len(keys) > 1 and not interface:
            raise FabricError(
                "several cabled fabric ports carry addresses: %s" % ", ".join(
                    "%s %s" % (d["netdev"], a.with_prefixlen) for d, a in candidates),
                "set `subnet` to the fabric subnet both nodes share, or pin `interface`")
        primary = _primary_first([c[0] for c in candidates])[0]
        candidates = [(d, a) for d, a in candidates if d is primary][:1]

    dev, addr = candidates[0]
    hca_devices = [dev] + _primary_first(
        [d for d in active if d["twin_key"] == dev["twin_key"] and d is not dev])

    if interface:
        # A pinned interface skips the ambiguity check; still say when a twin shares its subnet.
        sharing = [d for d in active if d is not dev
                   and any(a.network == addr.network for a in _routable(d))]
        if sharing:
            warnings.append("%s share subnet %s; put twins in different subnets"
                            % (_ifaces([dev] + sharing), addr.network))

    low = [d for d in hca_devices if (d["mtu"] or 0) < min_mtu]
    if low:
        # Stock Spark links run MTU 1500 (NVIDIA's netplan sets none): slower, not broken.
        warnings.append(mtu_warning(low, min_mtu))

    nic = nic_type_of(dev)
    if len(hca_devices) == 1 and nic.twin_pattern:
        warnings.append(
            "only %s is ACTIVE on this QSFP port; its twin is down, so RDMA runs at about half "
            "bandwidth (an approved QSFP112 cable brings up both functions)" % dev["name"])

    gid_index = shared_gid = None
    if nic.roce_v2:
        gid_index = roce_v2_gid_index(dev["gids"], str(addr.ip))
        if gid_index is None:
            warnings.append("no RoCE v2 GID maps %s on %s; NCCL_IB_GID_INDEX left unset"
                            % (addr.ip, dev["name"]))
        shared_gid = gid_index
        for twin in hca_devices[1:]:
            if twin["gid_index"] is None:
                warnings.append("twin %s (%s) has no routable IPv4, so no RoCE v2 GID; give it an "
                                "address in its own subnet" % (twin["name"], twin["netdev"]))
            if twin["gid_index"] != gid_index:
                shared_gid = None
        if gid_index is not None and shared_gid is None:
            warnings.append("RoCE v2 GID index differs between %s; NCCL_IB_GID_INDEX left unset so "
                            "NCCL picks per device" % ", ".join(d["name"] for d in hca_devices))

    return {
        "interface": dev["netdev"],
        "ip": str(addr.ip),
        "prefix": addr.network.prefixlen,
        "subnet": str(addr.network),
        "mtu": dev["mtu"],
        "hca": [d["name"] for d in hca_devices],
        "hca_ports": ["%s:%d" % (d["name"], d["port"]) for d in hca_devices],
        "gid_index": gid_index,
        "nccl_gid_index": shared_gid,
        "nic_type": nic.name,
        "warnings": warnings,
    }


def roce_path_mtu(mtu):
    """The RoCE path MTU an Ethernet MTU allows: the largest IB MTU that fits with RoCE v2 headers."""
    for ib_mtu in (4096, 2048, 1024, 512, 256):
        if (mtu or 0) >= ib_mtu + ROCE_V2_OVERHEAD:
            return ib_mtu
    return None


def mtu_warning(low, min_mtu):
    """Warning text for fabric netdevs below min_mtu, with what it costs."""
    mtus = sorted(set(d["mtu"] or 0 for d in low))
    return (
        "MTU below %d on %s: RoCE runs with a %s-byte path MTU instead of 4096 (about 4x the packets "
        "and completions per byte, lower all-reduce bandwidth; NET/Socket fallback pays per 1500-byte "
        "frame too). Stock Spark links run MTU 1500; for full bandwidth set MTU %d on every fabric twin "
        "on both ends, e.g. `nmcli con mod <con> 802-3-ethernet.mtu %d && nmcli con up <con>`"
        % (min_mtu, ", ".join("%s (%s)" % (d["netdev"], d["mtu"]) for d in low),
           "/".join(str(roce_path_mtu(m)) for m in mtus), min_mtu, min_mtu))


def mtu_mismatches(nodes):
    """Fabric links whose ends disagree on MTU.

    nodes: [{name, interface, mtu, subnet}] (one per node, from rdma_facts). Nodes sharing a subnet
    are the two ends of a link (or ports of one switch); every MTU among them must be equal, or large
    frames from one end are dropped by the other. Returns one message per subnet that disagrees.
    """
    by_subnet = {}
    for node in nodes:
        if not node.get("subnet"):
            continue
        by_subnet.setdefault(node["subnet"], []).append(node)
    problems = []
    for subnet in sorted(by_subnet):
        ends = sorted(by_subnet[subnet], key=lambda n: n["name"])
        if len(set(n.get("mtu") for n in ends)) > 1:
            problems.append(
                "MTU mismatch on fabric %s: %s; frames larger than the smaller MTU are dropped, so NCCL "
                "and Ray hang or fail. Set the same MTU (9000 recommended) on both ends"
                % (subnet, ", ".join("%s %s MTU %s" % (n["name"], n.get("interface"), n.get("mtu"))
                                     for n in ends)))
    return problems


def read_char_devices(dev_dir):
    """RDMA character devices a container needs (uverbs*, rdma_cm) under dev_dir, sorted; [] if none."""
    found = []
    for name in sorted(_listdir(dev_dir)):
        if name.startswith("uverbs") or name == "rdma_cm":
            path = os.path.join(dev_dir, name)
            try:
                if stat.S_ISCHR(os.stat(path).st_mode):
                    found.append(path)
            except OSError:
                continue
    return found


def _example_cidr(net):
    if net is None:
        return "192.168.200.12/24"
    hosts = net.hosts()
    try:
        first = next(hosts)
    except StopIteration:
        first = net.network_address
    return "%s/%d" % (first, net.prefixlen)


def _addr_summary(devs):
    parts = []
    for d in devs:
        parts.append("%s %s" % (d["netdev"], ",".join(d["ipv4"]) or "no IPv4"))
    return "; ".join(parts) or "none"


def _same_subnet(candidates):
    seen = {}
    for dev, addr in candidates:
        key = addr.network
        if key in seen and seen[key][0] is not dev:
            return [seen[key], (dev, addr)]
        seen.setdefault(key, (dev, addr))
    return None


# The environment a node's fabric selection gives its units and containers: the one list of these names. The
# validator refuses an env dict that sets one (plugin_utils/_validate.py OWNED_ENV reads this) and vllm_serve tells
# vLLM never to carry one from the driver to the workers (roles/vllm_serve/vars/main.yml, tied by a unit test).
FABRIC_ENV = (
    ("VLLM_HOST_IP", lambda s: s["ip"]),
    ("NCCL_SOCKET_IFNAME", lambda s: s["interface"]),
    ("GLOO_SOCKET_IFNAME", lambda s: s["interface"]),
    ("TP_SOCKET_IFNAME", lambda s: s["interface"]),
    ("NCCL_IB_HCA", lambda s: ",".join(s["hca"])),
    ("UCX_NET_DEVICES", lambda s: ",".join(s["hca_ports"])),
    ("OMPI_MCA_btl_tcp_if_include", lambda s: s["interface"]),
    ("NCCL_IB_GID_INDEX", lambda s: None if s.get("nccl_gid_index") is None else str(s["nccl_gid_index"])),
)
FABRIC_ENV_KEYS = tuple(name for name, _value in FABRIC_ENV)


def fabric_env(selection):
    """Environment block for systemd units / containers, every value a string: the keys the selection's NIC type sets
    (NicType.env), a key without a value left out."""
    wanted = NIC_TYPES.get(selection.get("nic_type") or DEFAULT_NIC, NIC_TYPES[DEFAULT_NIC]).env
    env = {}
    for name, value in FABRIC_ENV:
        if name not in wanted:
            continue
        value = value(selection)
        if value is not None:
            env[name] = value
    return env


# An interface MTU: IPv4's minimum to the largest a netdev takes.
MIN_MTU_RANGE = (68, 65535)


def read_links(module, runner):
    """`ip -j addr show`, parsed; fails the module naming iproute2 when it cannot."""
    res = runner.run([runner.bin("ip"), "-j", "addr", "show"])
    if not res.ok:
        runner.fail(res, "`ip -j addr show` failed", hint="install iproute2 >= 4.14 (JSON output) on the node")
    try:
        return parse_ip_addr_json(res.stdout)
    except ValueError as exc:
        module.fail_json(msg=str(exc), cmd=res.argv, stdout=res.stdout,
                         hint="the node's iproute2 is too old for -j; install iproute2 >= 4.14")


def fabric_options():
    """The options that say how to read a node's fabric, as an argument spec: rdma_facts takes them at its top level,
    node_facts under its fabric option (each module documents them); read them with gather_fabric(**options)."""
    return dict(sysfs_root=dict(type="path", default="/sys"), interface=dict(type="str"), subnet=dict(type="str"),
                ip=dict(type="str"), min_mtu=dict(type="int", default=9000),
                dev_dir=dict(type="path", default="/dev/infiniband"))


def fabric_params(params):
    """The fabric options out of a module's params (or node_facts' fabric dict), for gather_fabric(**...)."""
    return {name: params[name] for name in fabric_options()}


def link_speed_mbps(netdev, net_root="/sys/class/net"):
    """The netdev's link speed in Mb/s as the kernel negotiated it (``/sys/class/net/X/speed``), or None when it has
    none to report (no carrier: EINVAL or -1; a missing interface)."""
    text = read_file(os.path.join(net_root, str(netdev), "speed"), strip=True) if netdev else None
    try:
        value = int(text)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def gather_fabric(module, runner, sysfs_root="/sys", interface=None, subnet=None, ip=None, min_mtu=9000,
                  dev_dir="/dev/infiniband"):
    """This node's fabric as rdma_facts reports it (its sparkfleet_fabric fact), warning below min_mtu.

    Fails the module, naming the interfaces and the fix, as rdma_facts does (rdma_facts and node_facts share it).
    """
    if not MIN_MTU_RANGE[0] <= min_mtu <= MIN_MTU_RANGE[1]:
        module.fail_json(msg="min_mtu must be between %d and %d, got %d" % (MIN_MTU_RANGE + (min_mtu,)),
                         hint="set min_mtu to the MTU the fabric should run, e.g. 9000")
    ib_dir = os.path.join(sysfs_root, "class", "infiniband")
    if not os.path.isdir(ib_dir):
        module.fail_json(
            msg="%s does not exist: no RDMA driver loaded or wrong sysfs_root" % ib_dir,
            hint="on a Spark %s; in the lab pass sysfs_root: /opt/sparklab/sysfs" % _hints("load_hint"))
    devices = merge_devices(read_rdma_sysfs(sysfs_root), read_links(module, runner))
    try:
        sel = select_fabric(devices, interface=interface, subnet=subnet, ip=ip, min_mtu=min_mtu)
    except FabricError as exc:
        module.fail_json(msg=exc.msg, hint=exc.hint, devices=devices)
    for w in sel["warnings"]:
        module.warn(w)
    return dict(
        interface=sel["interface"],
        ip=sel["ip"],
        prefix=sel["prefix"],
        subnet=sel["subnet"],
        mtu=sel["mtu"],
        speed_mbps=link_speed_mbps(sel["interface"]),
        hca=sel["hca"],
        gid_index=sel["gid_index"],
        rdma_char_devices=read_char_devices(dev_dir),
        devices=devices,
        env=fabric_env(sel),
    )
