# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Read which transport NCCL chose from its NCCL_DEBUG=INFO lines, and judge it against the node's RDMA devices.

Private to the collection. NCCL prints `host:pid:tid [dev] NCCL INFO <msg>`; Ray forwards a remote worker's lines to
the driver prefixed `(RayWorkerWrapper pid=N, ip=A.B.C.D)` (no ip for the driver's own node). The lines that tell
the transport (as NCCL 2.28 prints them):
  NET/IB : Using [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE [RO]; OOB enp1s0f1np1:192.168.200.12<0>
  NET/IB : No device found.
  NET/Socket : Using [0]enp1s0f1np1:192.168.200.12<0>
  Using network IB | Using network IBext_v11 | Using network Socket
  Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0     (or NET/Socket/0, NET/IBext_v11/0, P2P/CUMEM, SHM/direct)
"""

from __future__ import annotations

import re

from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import render_text

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_REPEATED_RE = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_RAY_RE = re.compile(r"^\((?P<actor>[^()]*?)pid=(?P<pid>\d+)(?:, ip=(?P<ip>[0-9.]+))?\)\s*")
_NCCL_RE = re.compile(r"(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL (?P<level>INFO|WARN) (?P<msg>.*)$")
_ADDR_RE = re.compile(r"(?P<ifname>[\w.-]+):(?P<ip>\d+\.\d+\.\d+\.\d+)<\d+>")
_NETWORK_RE = re.compile(r"^Using network (?P<net>\S+)")
_VIA_RE = re.compile(r"\bvia (?P<via>\S+)")
_IB_USING_RE = re.compile(r"^NET/IB : Using (?P<devs>.*?)(?: \[RO\])?; OOB ")
_IB_DEV_RE = re.compile(r"\[\d+\](?P<dev>[\w-]+):\d+")

IB = "IB"
SOCKET = "Socket"
LOCAL = "local"


def transport_of(name):
    """Network or channel name -> IB (any IB plugin: IB, IBext_v11, NET/IB/0), Socket, or local (P2P, SHM)."""
    if not name:
        return None
    base = name[4:] if name.startswith("NET/") else name
    if base.startswith("IB"):
        return IB
    if base.startswith("Socket"):
        return SOCKET
    if name.startswith(("P2P", "SHM", "NVLS", "CollNet")):
        return LOCAL
    return base.split("/")[0]


def parse(text):
    """Every NCCL process found in a log: [{host, pid, ip, interface, network, channels, ib_devices, transport,
    warnings}], in the order they first appear."""
    procs = {}
    order = []
    for raw in text.splitlines():
        line = _REPEATED_RE.sub("", _ANSI_RE.sub("", raw)).strip()
        ray_ip = None
        m = _RAY_RE.match(line)
        while m:  # vLLM V1 nests them: (EngineCore_DP0 pid=423) (RayWorkerWrapper pid=178, ip=10.99.1.12) ...
            ray_ip = m.group("ip") or ray_ip
            line = line[m.end():]
            m = _RAY_RE.match(line)
        m = _NCCL_RE.search(line)
        if not m:
            continue
        key = (m.group("host"), m.group("pid"))
        proc = procs.get(key)
        if proc is None:
            proc = procs[key] = {"host": m.group("host"), "pid": int(m.group("pid")), "ip": None, "interface": None,
                                 "network": None, "channels": [], "ib_devices": [], "warnings": []}
            order.append(key)
        if ray_ip and not proc["ip"]:
            proc["ip"] = ray_ip
        msg = m.group("msg").strip()
        if m.group("level") == "WARN":
            proc["warnings"].append(msg)
            continue
        addr = _ADDR_RE.search(msg)
        if addr and (msg.startswith(("Bootstrap", "NET/Socket : Using")) or "; OOB " in msg):
            proc["interface"] = proc["interface"] or addr.group("ifname")
            proc["ip"] = proc["ip"] or addr.group("ip")
        net = _NETWORK_RE.match(msg)
        if net:
            proc["network"] = net.group("net")
        ib = _IB_USING_RE.match(msg)
        if ib:
            proc["ib_devices"] = _IB_DEV_RE.findall(ib.group("devs"))
        via = _VIA_RE.search(msg)
        if via and msg.startswith("Channel") and via.group("via") not in proc["channels"]:
            proc["channels"].append(via.group("via"))
    result = []
    for key in order:
        proc = procs[key]
        kinds = [transport_of(c) for c in proc["channels"]]
        net_kinds = [k for k in kinds if k not in (LOCAL, None)]
        if net_kinds:
            # what the channels really use wins over the announced network
            proc["transport"] = SOCKET if SOCKET in net_kinds else net_kinds[0]
        elif kinds:
            proc["transport"] = LOCAL
        else:
            proc["transport"] = transport_of(proc["network"])
        result.append(proc)
    return result


# What judge() tells the operator; {setting}s are named as the caller's setting_names say (module_utils/_settings).
NO_INFO_LINES = ("no NCCL INFO lines in the log: cannot tell which transport NCCL chose (set {nccl_debug} for the "
                 "engine; single-GPU serving uses no NCCL)")
SOCKET_ON_RDMA = ("%s (%s): NCCL uses NET/Socket (TCP over %s) although the node has RDMA devices (%s): about a tenth "
                  "of RoCE bandwidth.")
SOCKET_FIX = (" Fix: give the Ray container the devices and an unlimited locked-memory limit ({container_rdma}), and "
              "check NCCL_IB_DISABLE is unset and NCCL_IB_HCA names this node's devices")
ALLOWED = " (allowed: {allow_tcp_fallback} is true)"


def judge(procs, nodes, allow_tcp_fallback=False, names=None):
    """Compare each NCCL process's transport with its node's RDMA devices.

    nodes: {ip: {"name": inventory name, "rdma_devices": [paths]}}. Returns (problems, warnings): a problem for every
    node whose ranks use NET/Socket while it has RDMA devices (a warning instead with allow_tcp_fallback).
    names: how the messages name the settings to change ({setting: name}; generic names otherwise).
    """
    problems, warnings = [], []
    if not procs:
        warnings.append(render_text(NO_INFO_LINES, names))
        return problems, warnings
    seen = set()
    for proc in procs:
        node = nodes.get(proc["ip"] or "", {})
        name = node.get("name") or proc["host"]
        devices = node.get("rdma_devices") or []
        if proc["transport"] != SOCKET or not devices or name in seen:
            continue
        seen.add(name)
        msg = SOCKET_ON_RDMA % (name, proc["ip"] or proc["host"], proc["interface"] or "?", ", ".join(devices))
        msg += render_text(SOCKET_FIX, names)
        if allow_tcp_fallback:
            warnings.append(msg + render_text(ALLOWED, names))
        else:
            problems.append(msg)
    return problems, warnings


def summary(procs, nodes):
    """{node name: transport} (one entry per node; Socket wins when ranks of one node disagree)."""
    out = {}
    for proc in procs:
        name = nodes.get(proc["ip"] or "", {}).get("name") or proc["host"]
        if out.get(name) != SOCKET:
            out[name] = proc["transport"]
    return out
