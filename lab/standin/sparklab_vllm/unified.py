"""Unified memory, as a GB10 has it: the GPU's memory is the host's, one pool.

On a lab host the docker wrapper binds the host's memory cgroup read-only at /run/sparklab/hostmem (its limit is the
host's whole memory, the "GPU" total; what the played vLLM sees as free on a GB10 follows its release's rule,
free_rule(): MemAvailable in 0.17.1, MemFree later, vllm#48140) and the host's tmpfs /run/sparklab/uvm read-write (where the ranks keep what a
GB10 driver leaks on an unclean exit, `labctl break leak`). Without those files (unit tests, no lab) every function
here answers None and the stand-in keeps its constant GB10 figures.

Figures in logs are scaled to a GB10 (x 119.70 GiB / the host's total) so that logs read like a real Spark's.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import socket

GiB = 1 << 30
MiB = 1 << 20
GB10_TOTAL_GIB = 119.70
NO_LIMIT = 1 << 60  # v1 reports "no limit" as a page-rounded LONG_MAX

# vLLM 0.17.1 vllm/v1/worker/utils.py request_memory(), lines 403-423 (the text and the rule, unchanged)
STARTUP_MESSAGE = ("Free memory on device {device} ({free}/{total} GiB) on startup is less than desired GPU memory "
                   "utilization ({util}, {requested} GiB). Decrease GPU memory utilization or reduce GPU memory used "
                   "by other processes.")


def hostmem_dir():
    return os.environ.get("SPARKLAB_HOSTMEM_DIR", "/run/sparklab/hostmem")


def uvm_dir():
    return os.environ.get("SPARKLAB_UVM_DIR", "/run/sparklab/uvm")


def _read_int(path):
    with open(path) as f:
        text = f.read().strip()
    return None if text == "max" else int(text)


def _stat(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[1].isdigit():
                    out[parts[0]] = int(parts[1])
    except OSError:
        pass
    return out


def free_rule():
    """Which free memory the played vLLM's startup check reads on a GB10. 0.17.1 (vllm/utils/mem_utils.py, lines
    105-122): psutil's MemAvailable for compute capability 12.1, so clean page cache counts as free; later releases
    read MemFree (vllm#48140, reported on 0.24), so it does not. SPARKLAB_UMA_FREE=free plays the later rule."""
    return "free" if os.environ.get("SPARKLAB_UMA_FREE", "").strip().lower() == "free" else "available"


def host_memory(d=None, rule=None):
    """(free, total) bytes of the host's pool from its memory cgroup (v1 or v2), or None without one/a limit. free is
    limit - usage (usage counts the page cache, as MemFree) or, by the "available" rule, that plus the reclaimable file
    pages (as MemAvailable)."""
    d = d or hostmem_dir()
    try:
        if os.path.exists(os.path.join(d, "memory.limit_in_bytes")):
            total = _read_int(os.path.join(d, "memory.limit_in_bytes"))
            used = _read_int(os.path.join(d, "memory.usage_in_bytes"))  # v1: page cache included
            st = _stat(os.path.join(d, "memory.stat"))
            reclaimable = st.get("total_active_file", 0) + st.get("total_inactive_file", 0)
        elif os.path.exists(os.path.join(d, "memory.max")):
            total = _read_int(os.path.join(d, "memory.max"))
            used = _read_int(os.path.join(d, "memory.current"))        # v2: page cache included
            st = _stat(os.path.join(d, "memory.stat"))
            reclaimable = st.get("active_file", 0) + st.get("inactive_file", 0)
        else:
            return None
    except (OSError, ValueError):
        return None
    if total is None or used is None or total <= 0 or total >= NO_LIMIT:
        return None
    free = max(total - used, 0)
    if (rule or free_rule()) == "available":
        free = min(free + reclaimable, total)
    return free, total


def to_gb10(nbytes, total):
    """nbytes of a host with `total` bytes, as the same share of a GB10's 119.70 GiB."""
    return nbytes * GB10_TOTAL_GIB * GiB / total


def format_gib(b):
    """vllm/utils/mem_utils.py format_gib (0.17.1)."""
    return f"{round(b / GiB, 2)}"


def request_memory(free, total, gpu_memory_utilization, device="cuda:0"):
    """vLLM 0.17.1's startup check (vllm/v1/worker/utils.py request_memory, called from gpu_worker.py init_device
    after the distributed init): requested = ceil(total x utilization); free < requested raises ValueError.
    The rule runs on the host's bytes; the message shows them as a GB10 would. Returns the requested bytes."""
    requested = math.ceil(total * gpu_memory_utilization)
    if free < requested:
        raise ValueError(STARTUP_MESSAGE.format(
            device=device, free=format_gib(to_gb10(free, total)), total=format_gib(to_gb10(total, total)),
            util=gpu_memory_utilization, requested=format_gib(to_gb10(requested, total))))
    return requested


def kv_cache_bytes(requested, weights, total):
    """vLLM's KV sizing: what the rank requested, less the weights and the profile run's peak (2.35 GiB of a GB10,
    scaled to this host). Host bytes."""
    overhead = int(2.35 * GiB * total / (GB10_TOTAL_GIB * GiB))
    return max(requested - weights - overhead, 0)


class Allocation:
    """Anonymous memory, every page touched (so it is charged to the host's memory now), held until close()."""

    def __init__(self, nbytes):
        self.nbytes = int(nbytes)
        self.mm = None
        if self.nbytes <= 0:
            return
        self.mm = mmap.mmap(-1, self.nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        page = mmap.PAGESIZE
        for off in range(0, self.nbytes, page):
            self.mm[off] = 1

    def close(self):
        if self.mm is not None:
            self.mm.close()
            self.mm = None


def leak_mib(d=None):
    """N from <uvm>/leak-mib (`labctl break leak HOST N`), or None."""
    try:
        with open(os.path.join(d or uvm_dir(), "leak-mib")) as f:
            n = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return n if n > 0 else None


def instance_id():
    """The container's short ID (from its /etc/hostname bind), else the host name."""
    try:
        with open("/proc/self/mountinfo") as f:
            m = re.search(r"/containers/([0-9a-f]{64})/", f.read())
        if m:
            return m.group(1)[:12]
    except OSError:
        pass
    return socket.gethostname() or "host"


def create_leak(mib, pid=None, ident=None, d=None):
    """<uvm>/rank-<pid>-<id>: mib MiB really written into the host's tmpfs (charged to the host). Returns its path."""
    d = d or uvm_dir()
    path = os.path.join(d, "rank-%d-%s" % (pid or os.getpid(), ident or instance_id()))
    chunk = b"\x5a" * MiB
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(mib):
            os.write(fd, chunk)
    finally:
        os.close(fd)
    return path


def release_leak(path):
    """The clean exit's release: the file goes (a SIGKILL or a crash never gets here, so it stays)."""
    if path:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
