# sparkfleet-memory: a node's unified memory, read on the host (installed by the sparkfleet.vllm roles as
# /usr/local/lib/sparkfleet_memory.py beside sparkfleet-watchdog.py, which loads it).
# On a DGX Spark (GB10) the GPU's memory IS the host's memory: the engine's weights and KV cache, the page cache of the
# synced model, Ray, and whatever a crashed engine left mapped all come out of one pool of ~119.7 GiB. Over-allocating
# it does not raise an error: the host wedges. So every engine start is gated on each node's memory (gate_verdict),
# every node publishes what it has (measure), and the page cache of the model is dropped while no engine runs.
# Pure functions and bounded reads only; no third-party module.
import json
import os
import stat

GiB = float(1 << 30)
NO_LIMIT = 1 << 60                # a cgroup "limit" at or above this is none (v1 prints 9223372036854771712)
READ_MAX = 1 << 20                # bytes read from any one kernel file
MAX_FILES = 8192                  # files of a model directory whose page cache is dropped (39-53 shards; HF extras)
JSON_MAX = 16 << 20               # bytes of one of our state files (reports, baselines)
HOLDERS = 5                       # biggest processes named per node


def gib(n):
    return "%.1f GiB" % (float(n or 0) / GiB)


def read_text(path, limit=READ_MAX):
    """A kernel file's text, at most limit bytes; None when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("ascii", "replace")
    except (OSError, ValueError):
        return None


def parse_meminfo(text):
    """/proc/meminfo -> {field: bytes}; lines that do not parse are skipped."""
    out = {}
    for line in str(text or "").splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not key.strip() or not parts or not parts[0].isdigit() or len(parts[0]) > 18:
            continue
        out[key.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return out


def parse_flat(text):
    """A cgroup's memory.stat ('name value' lines) -> {name: int}."""
    out = {}
    for line in str(text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and len(parts[1]) <= 20:
            out[parts[0]] = int(parts[1])
    return out


def _number(text):
    text = str(text or "").strip()
    return int(text) if text.isdigit() and len(text) <= 20 else None


def read_cgroup(root="/sys/fs/cgroup"):
    """The memory limit of the node's root cgroup, when it has one (a node that is itself a container or a VM slice; the
    lab's Spark-like hosts): {"limit", "usage", "cache", "reclaimable", "shmem", "version"}; None otherwise (a real
    Spark's root cgroup has no limit: /proc/meminfo is the truth there)."""
    v2 = _number(read_text(os.path.join(root, "memory.max")))
    if v2 is not None:
        usage = _number(read_text(os.path.join(root, "memory.current")))
        st = parse_flat(read_text(os.path.join(root, "memory.stat")))
        if usage is None or v2 >= NO_LIMIT:
            return None
        return {"limit": v2, "usage": usage, "cache": st.get("file", 0), "shmem": st.get("shmem", 0),
                "reclaimable": st.get("active_file", 0) + st.get("inactive_file", 0),
                "version": 2}
    base = os.path.join(root, "memory")
    limit = _number(read_text(os.path.join(base, "memory.limit_in_bytes")))
    usage = _number(read_text(os.path.join(base, "memory.usage_in_bytes")))
    if limit is None or usage is None or limit >= NO_LIMIT:
        return None
    st = parse_flat(read_text(os.path.join(base, "memory.stat")))
    total = {name: st.get("total_" + name, st.get(name, 0))       # hierarchical totals first
             for name in ("cache", "shmem", "active_file", "inactive_file")}
    return {"limit": limit, "usage": usage, "cache": total["cache"], "shmem": total["shmem"],
            "reclaimable": total["active_file"] + total["inactive_file"], "version": 1}


def read_holders(proc="/proc", top=HOLDERS, limit=4096):
    """(resident bytes of every process, the top biggest as [{"pid", "name", "rss"}]) from /proc/*/status."""
    total, rows = 0, []
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()][:limit]
    except OSError:
        return 0, []
    for pid in pids:
        fields = {}
        for line in (read_text(os.path.join(proc, pid, "status"), 8192) or "").splitlines():
            key, _sep, value = line.partition(":")
            if key in ("Name", "VmRSS"):
                fields[key] = value.strip()
        parts = fields.get("VmRSS", "").split()
        if not parts or not parts[0].isdigit():
            continue            # kernel threads
        rss = int(parts[0]) * 1024
        total += rss
        rows.append({"pid": int(pid), "name": fields.get("Name", "?")[:40], "rss": rss})
    rows.sort(key=lambda r: -r["rss"])
    return total, rows[:top]


def measure(proc="/proc", cgroup_root="/sys/fs/cgroup"):
    """This node's unified memory: total, free (what vLLM 0.17's startup check on GB10 counts: the page cache is not
    free), available (free plus what the kernel can reclaim), cache, shmem (tmpfs, /dev/shm), used (total - available),
    unaccounted (used that no process holds: a driver's leaked mappings, tmpfs files), the biggest holders."""
    mi = parse_meminfo(read_text(os.path.join(proc, "meminfo")))
    total = mi.get("MemTotal", 0)
    free, available = mi.get("MemFree", 0), mi.get("MemAvailable", mi.get("MemFree", 0))
    cache, shmem, source = mi.get("Cached", 0) + mi.get("Buffers", 0), mi.get("Shmem", 0), "meminfo"
    cg = read_cgroup(cgroup_root)
    if cg and (not total or cg["limit"] < total):
        total, source = cg["limit"], "cgroup v%d" % cg["version"]
        free = max(cg["limit"] - cg["usage"], 0)
        available = min(free + max(cg["reclaimable"], 0), total)
        cache, shmem = cg["cache"], cg["shmem"]
    rss, holders = read_holders(proc)
    used = max(total - available, 0)
    return {"total": total, "free": free, "available": available, "cache": cache, "shmem": shmem, "used": used,
            "unaccounted": max(used - rss - shmem, 0), "holders": holders, "source": source}


def drop_file_cache(path, max_files=MAX_FILES):
    """Drop the page cache of every regular file under path (two levels, links not followed out of it), as the files'
    reader would (posix_fadvise DONTNEED): the model's pages compete with the engine for the same memory on GB10.
    Returns how many files were dropped. Special files (FIFOs, devices) are never opened."""
    done, todo = 0, [(path, 0)]
    while todo and done < max_files:
        top, depth = todo.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=True)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and not entry.is_symlink() and depth < 2:
                todo.append((entry.path, depth + 1))
            elif stat.S_ISREG(st.st_mode) and done < max_files:
                try:
                    fd = os.open(entry.path, os.O_RDONLY | os.O_NONBLOCK)
                except OSError:
                    continue
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    done += 1
                except OSError:
                    pass
                finally:
                    os.close(fd)
    return done


def drop_caches(path="/proc/sys/vm/drop_caches"):
    """The kernel's clean page cache, all of it (what NVIDIA's Spark playbooks advise before a start). True when done."""
    try:
        with open(path, "w") as fh:
            fh.write("1\n")
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------- the gate's decision
def need_bytes(report, fraction, margin):
    """What an engine start takes on this node: vLLM asks gpu_memory_utilization x total at its startup check (free
    must hold it), plus the margin for the API server, the engine core and graph capture."""
    return int((float(fraction) + float(margin)) * float(report.get("total") or 0))


def _holders_text(report):
    rows = [h for h in report.get("holders") or [] if isinstance(h, dict)]
    named = ["%s %s (pid %s)" % (gib(h.get("rss")), h.get("name", "?"), h.get("pid", "?")) for h in rows[:3]]
    if report.get("unaccounted", 0) + report.get("shmem", 0) >= 0.25 * GiB:
        named.append("%s held by no process (tmpfs %s; the rest: the driver's mappings a crashed engine left)"
                     % (gib(report["unaccounted"] + report.get("shmem", 0)), gib(report.get("shmem", 0))))
    return ", ".join(named) or "none named"


def node_verdict(name, ip, report, now, fraction, margin, baseline=None, tolerance=0.05, max_age=60):
    """One node before an engine start: {"name", "ip", "state", "why", ...} where state is
    ok: free memory holds the engine and the node is back at its baseline;
    drop: enough after dropping the page cache (the caller drops it and measures again);
    short: not enough even then, or held above its baseline (a leak), "short" and "above" in bytes;
    busy: an engine rank still runs there (the old engine is going); silent: no fresh report (never started into)."""
    out = {"name": name, "ip": ip}
    if not isinstance(report, dict) or not isinstance(report.get("time"), (int, float)):
        return dict(out, state="silent", why="%s (%s): no memory report (its Ray watchdog, which publishes it, does not"
                    " run or cannot reach the head)" % (name, ip))
    age = now - report["time"]
    if age > max_age:
        return dict(out, state="silent", why="%s (%s): its last memory report is %d s old (its Ray watchdog stopped "
                    "or lost the head)" % (name, ip, age))
    if report.get("engine"):
        return dict(out, state="busy", why="%s: a rank of the last engine still runs there" % name)
    total = int(report.get("total") or 0)
    need = need_bytes(report, fraction, margin)
    free, available, used = int(report.get("free") or 0), int(report.get("available") or 0), int(report.get("used") or 0)
    out.update(need=need, free=free, available=available, total=total, used=used)
    above = 0
    if isinstance(baseline, (int, float)) and baseline >= 0 and total:
        above = max(int(used - baseline - tolerance * total), 0)
        out["baseline"] = int(baseline)
    if free >= need and not above:
        return dict(out, state="ok", why="%s: %s free of %s, the engine takes %s" % (name, gib(free), gib(total),
                                                                                     gib(need)))
    if available >= need and not above:
        return dict(out, state="drop", why="%s: %s free, %s once the page cache (%s) is dropped; the engine takes %s"
                    % (name, gib(free), gib(available), gib(report.get("cache")), gib(need)))
    short = max(need - available, 0)
    why = "%s: %s short for the engine (%s available of %s, it takes %s)" % (
        name, gib(short), gib(available), gib(total), gib(need)) if short else "%s: %s available" % (name, gib(available))
    if above:
        why += "; holds %s more than at its last healthy start" % gib(used - baseline)
    why += "; biggest holders: %s" % _holders_text(report)
    return dict(out, state="short", short=short, above=above, why=why)


def human_step(verdicts):
    """The one human step for the nodes whose memory did not come back (or that sent none)."""
    bad = [v for v in verdicts if v.get("state") == "short"]
    if bad:
        return "reboot %s (unified memory held that no restart frees), then run site.yml" % " and ".join(
            v["name"] for v in bad)
    silent = [v for v in verdicts if v.get("state") in ("silent", "busy")]
    if silent:
        return ("bring %s back (its Ray and sparkfleet-ray-watchdog.timer there publish its memory; the engine starts"
                " once it reports), or run site.yml" % " and ".join(v["name"] for v in silent))
    return "read journalctl -u the vLLM unit on the head for why the engine did not serve, fix it, then run site.yml"


def read_json_file(path, limit=JSON_MAX):
    """The JSON document in path when it is a regular file of at most limit bytes; OSError or ValueError otherwise.

    Standard library only, so a local copy of module_utils/_json.py's read: opened without blocking (a FIFO's open
    waits for a writer), checked by fstat on the open file, bounded in bytes, and nesting deeper than the parser
    follows is a ValueError, never a RecursionError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("%s is not a regular file" % path)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise ValueError("%s is more than %d bytes" % (path, limit))
    try:
        return json.loads(b"".join(chunks).decode("utf-8", "replace"))
    except RecursionError:
        raise ValueError("%s nests JSON deeper than the parser follows" % path)


def load_json(path, default=None):
    try:
        value = read_json_file(path)
        return value if isinstance(value, dict) else default
    except (OSError, ValueError, RecursionError):
        return default


def save_json(path, value):
    """Best effort (a full disk must not stop supervision): True when written."""
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(path + ".tmp", "w") as fh:
            json.dump(value, fh, sort_keys=True)
        os.replace(path + ".tmp", path)
        return True
    except OSError:
        return False
