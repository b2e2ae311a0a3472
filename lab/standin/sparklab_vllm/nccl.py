"""What NCCL would do when a rank joins the communicator: pick a socket interface and a network transport.

Like NCCL 2.2x: NCCL_SOCKET_IFNAME selects interfaces by prefix (`^` excludes, `=` exact); no interface with an
IPv4 address matching it is a fatal bootstrap error. NET/IB needs the RDMA devices inside the container
(/dev/infiniband/uverbs*), an unlimited locked-memory limit and NCCL_IB_DISABLE unset; otherwise NCCL silently
uses NET/Socket (TCP). With NCCL_DEBUG=INFO it prints the INFO lines real NCCL prints (formats captured from
NCCL 2.28.9: tests/unit/plugins/modules/fixtures/nccl_transport/).
"""

from __future__ import annotations

import glob
import json
import os
import random
import resource
import socket
import subprocess
import sys
import threading

NCCL_VERSION = "2.27.3+cuda13.0"
DEV_GLOB = "/dev/infiniband/uverbs*"
# The lab cannot grant unlimited locked memory (no CAP_SYS_RESOURCE here): its docker maps memlock=-1 to soft = hard
# = the inherited ceiling, at least 8 MiB (lab/host/docker-wrapper.sh). Docker's default (64 KiB soft) stays limited.
LAB_MEMLOCK_CEILING = 8 << 20


class NcclError(RuntimeError):
    pass


def interfaces():
    """[(name, ipv4)] of interfaces that are up and carry an IPv4 address, in kernel order."""
    out = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True, check=False).stdout
    found = []
    for link in json.loads(out or "[]"):
        for a in link.get("addr_info", []):
            if a.get("family") == "inet" and a.get("local"):
                found.append((link["ifname"], a["local"]))
    return found


def _matches(name, spec):
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    spec = spec.lstrip("=")
    hit = any((name == p) if exact else name.startswith(p) for p in spec.split(",") if p)
    return not hit if exclude else hit


def pick_socket_if(environ, found):
    spec = environ.get("NCCL_SOCKET_IFNAME")
    if spec:
        return [(n, ip) for n, ip in found if _matches(n, spec)]
    # NCCL's default: anything but docker* and lo (lo only when nothing else is there).
    pool = [(n, ip) for n, ip in found if not n.startswith(("docker", "lo"))]
    return pool or [(n, ip) for n, ip in found if n.startswith("lo")]


def ib_usable(environ):
    """(usable, reason): NET/IB needs the devices in the container and unlimited memlock."""
    if environ.get("NCCL_IB_DISABLE") == "1":
        return False, "NCCL_IB_DISABLE=1"
    if not glob.glob(DEV_GLOB):
        return False, "no /dev/infiniband/uverbs* in the container"
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft != resource.RLIM_INFINITY and not (soft == hard and soft >= LAB_MEMLOCK_CEILING):
        return False, "locked-memory limit %d bytes (RDMA needs --ulimit memlock=-1)" % soft
    return True, ""


def hcas(environ):
    spec = environ.get("NCCL_IB_HCA", "").lstrip("^=")
    names = [p.split(":")[0] for p in spec.split(",") if p] or ["rocep1s0f1"]
    return names


def init_comm(rank, world, environ=None, out=None):
    """Join the communicator like NCCL: return the transport ('IB' or 'Socket'), raise NcclError when it cannot."""
    environ = os.environ if environ is None else environ
    out = out or sys.stdout
    debug = environ.get("NCCL_DEBUG", "").upper() in ("INFO", "TRACE")
    prefix = "%s:%d:%d [0] NCCL " % (socket.gethostname(), os.getpid(), threading.get_native_id())

    def info(msg):
        if debug:
            out.write(prefix + "INFO " + msg + "\n")

    def warn(msg):
        if environ.get("NCCL_DEBUG", "").upper() in ("WARN", "INFO", "TRACE"):
            out.write(prefix + "WARN " + msg + "\n")

    picked = pick_socket_if(environ, interfaces())
    if not picked:
        warn("Bootstrap : no socket interface found")
        out.flush()
        raise NcclError("NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version %s\n"
                        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
                        "device error.\nLast error:\nBootstrap : no socket interface found (NCCL_SOCKET_IFNAME=%s)"
                        % (NCCL_VERSION.split("+")[0], environ.get("NCCL_SOCKET_IFNAME", "")))
    ifname, ip = picked[0]
    info("Bootstrap: Using %s:%s<0>" % (ifname, ip))
    if rank == 0:
        info("NCCL version %s" % NCCL_VERSION)
    info("NET/Plugin: Could not find: libnccl-net.so")
    usable, _why = ib_usable(environ)
    if usable:
        devs = " ".join("[%d]%s:1/RoCE" % (i, n) for i, n in enumerate(hcas(environ)))
        info("NET/IB : Using %s [RO]; OOB %s:%s<0>" % (devs, ifname, ip))
        transport = "IB"
    else:
        info("NET/IB : No device found.")
        info("NET/Socket : Using [0]%s:%s<0>" % (ifname, ip))
        transport = "Socket"
    info("Using network %s" % transport)
    comm = "0x%x" % random.getrandbits(40)
    info("ncclCommInitRankConfig comm %s rank %d nranks %d cudaDev 0 nvmlDev 0 busId f01000 commId 0x%x - Init START"
         % (comm, rank, world, random.getrandbits(64)))
    if world > 1:
        prev, nxt = (rank - 1) % world, (rank + 1) % world
        info("Channel 00/0 : %d[0] -> %d[0] [receive] via NET/%s/0" % (prev, rank, transport))
        info("Channel 00/0 : %d[0] -> %d[0] [send] via NET/%s/0" % (rank, nxt, transport))
    info("ncclCommInitRankConfig comm %s rank %d nranks %d cudaDev 0 nvmlDev 0 busId f01000 commId 0x0 - Init COMPLETE"
         % (comm, rank, world))
    out.flush()
    return transport
