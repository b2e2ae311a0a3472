# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure helpers for sparkfleet.vllm.model_sync: model checks, stream packing, fan-out, output parsing.

Nothing here runs a command; the module feeds command output in and argv lists out.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import time

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._paths import (
    MARKER_NAME,
    MODEL_FILES,
    looks_like_model_dir,
    model_path_problem,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._safetensors import (
    SafetensorsError,
    read_header,
)
# TEMP_DIR_NAME: the staging directory inside dest. rsync writes every file there and renames it into place when
# it is complete, so a killed run never leaves a partial file under its final name.
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_shell import (
    TEMP_DIR_NAME,
    ssh_host_problem,
)

# Prefix marking the lines our --out-format prints, so warnings on the same stream are not parsed.
OUT_PREFIX = "SFL|"
OUT_FORMAT = OUT_PREFIX + "%i|%l|%n"

SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_INDEX = "pytorch_model.bin.index.json"


# --------------------------------------------------------------------------- source checks

def link_roots(root):
    """Real directories a symlink under root may lead into: root itself and, when root is a Hugging Face cache snapshot
    (``<repo>/snapshots/<revision>``), that repository's ``blobs`` directory (where the snapshot's files live)."""
    real = os.path.realpath(root)
    roots = [real]
    parent = os.path.dirname(real)
    if os.path.basename(parent) == "snapshots":
        roots.append(os.path.join(os.path.dirname(parent), "blobs"))
    return roots


def inside(path, roots):
    """True when the real path ``path`` is one of ``roots`` or lies under one."""
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def list_files(root, links_out=None):
    """Return [(relpath, size)] of every regular file under root (symlinks followed within it), sorted.

    The staging directory is skipped. A dangling symlink is listed with size -1 so that the
    completeness check can name it. A symlinked directory already walked (a loop such as
    ``snapshot/x -> ..``) is not walked again. A symlink whose target lies outside root (and outside a Hugging Face
    snapshot's blobs) is never followed: it is left out and, given a list ``links_out``, added to it as
    (relpath, real target), so that a file such as a key linked from the model directory is never sent.
    """
    out = []
    seen = set()
    roots = link_roots(root)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        try:
            st_dir = os.stat(dirpath)
        except OSError:
            dirnames[:] = []
            continue
        if (st_dir.st_dev, st_dir.st_ino) in seen:
            dirnames[:] = []
            continue
        seen.add((st_dir.st_dev, st_dir.st_ino))
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            rel_dir = ""
            dirnames[:] = [d for d in dirnames if d != TEMP_DIR_NAME]
        kept = []
        for d in sorted(dirnames):
            full = os.path.join(dirpath, d)
            target = os.path.realpath(full)
            if os.path.islink(full) and not inside(target, roots):
                if links_out is not None:
                    links_out.append((os.path.join(rel_dir, d) if rel_dir else d, target))
                continue
            kept.append(d)
        dirnames[:] = kept
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.join(rel_dir, name) if rel_dir else name
            try:
                st = os.stat(full)
            except OSError:
                out.append((rel, -1))
                continue
            if os.path.islink(full) or rel_dir:
                target = os.path.realpath(full)
                if not inside(target, roots):
                    if links_out is not None:
                        links_out.append((rel, target))
                    continue
            if os.path.isfile(full) and not (rel_dir == "" and name == MARKER_NAME):
                out.append((rel, st.st_size))
    return out


def _load_json(path):
    return _json.load_file(path)


def check_model_dir(root):
    """Check that root holds a complete model. Returns (report, problems).

    report: {files: [(relpath, size)], weight_files: [relpath], tensors: int, index: name or None}
    problems: list of human-readable strings; empty means complete.
    """
    problems = []
    report = {"files": [], "weight_files": [], "tensors": 0, "index": None}
    if not os.path.isdir(root):
        return report, ["%s is not a directory" % root]
    try:
        top = os.listdir(root)
    except OSError as exc:
        return report, ["cannot list %s: %s" % (root, exc)]
    if not looks_like_model_dir(top) and not any(n.endswith(".safetensors") for n in top):
        # Walking an arbitrary tree (say a home directory) following symlinks is slow and pointless.
        return report, ["%s is not a model directory: it has none of %s and no *.safetensors file"
                        % (root, ", ".join(MODEL_FILES[:3]))]
    links_out = []
    files = list_files(root, links_out)
    report["files"] = [f for f in files if f[1] >= 0]
    sizes = dict(files)
    for rel, target in links_out:
        problems.append("%s is a symlink out of the model directory (to %s): it is never sent; copy the file into %s "
                        "or remove the link" % (rel, target, root))
    for rel, size in files:
        if size < 0:
            problems.append("%s is a dangling symlink" % rel)

    if sizes.get("config.json", -1) <= 0:
        problems.append("config.json is missing or empty")
    else:
        try:
            _load_json(os.path.join(root, "config.json"))
        except (IOError, OSError, ValueError) as exc:
            problems.append("config.json does not parse: %s" % exc)

    weight_map = None
    if SAFETENSORS_INDEX in sizes:
        report["index"] = SAFETENSORS_INDEX
        try:
            weight_map = _load_json(os.path.join(root, SAFETENSORS_INDEX)).get("weight_map")
        except (IOError, OSError, ValueError, AttributeError) as exc:
            return report, problems + ["%s does not parse: %s" % (SAFETENSORS_INDEX, exc)]
        if not isinstance(weight_map, dict) or not weight_map:
            return report, problems + ["%s has no weight_map" % SAFETENSORS_INDEX]
        shards = sorted(set(str(v) for v in weight_map.values()))
    else:
        shards = sorted(rel for rel, _s in files if rel.endswith(".safetensors"))
        if not shards:
            if PYTORCH_INDEX in sizes:
                report["index"] = PYTORCH_INDEX
                try:
                    pt_map = _load_json(os.path.join(root, PYTORCH_INDEX)).get("weight_map") or {}
                except (IOError, OSError, ValueError, AttributeError) as exc:
                    return report, problems + ["%s does not parse: %s" % (PYTORCH_INDEX, exc)]
                for rel in sorted(set(str(v) for v in pt_map.values())):
                    report["weight_files"].append(rel)
                    if sizes.get(rel, -1) <= 0:
                        problems.append("%s (named in %s) is missing or empty" % (rel, PYTORCH_INDEX))
                return report, problems
            return report, problems + ["no weights: neither %s nor any *.safetensors file" % SAFETENSORS_INDEX]

    expected = {}
    if weight_map:
        for tensor, shard in weight_map.items():
            expected.setdefault(str(shard), set()).add(tensor)
    for rel in shards:
        report["weight_files"].append(rel)
        size = sizes.get(rel, -1)
        if size < 0:
            problems.append("%s is missing" % rel + (" (named in %s)" % SAFETENSORS_INDEX if weight_map else ""))
            continue
        if size == 0:
            problems.append("%s is empty" % rel)
            continue
        try:
            header = read_header(os.path.join(root, rel))
        except SafetensorsError as exc:
            problems.append("%s: %s" % (rel, exc))
            continue
        report["tensors"] += header["tensors"]
        missing = sorted(expected.get(rel, set()) - set(header["tensor_names"]))
        if missing:
            problems.append("%s lacks %d tensor(s) the index puts there, e.g. %s"
                            % (rel, len(missing), ", ".join(missing[:3])))
    return report, problems


def model_completeness(path):
    """model_check's answer for a directory: {complete, problems, files, bytes, weight_files, msg}."""
    if not path or not str(path).strip():
        problems, report = ["the model directory is empty"], {"files": [], "weight_files": []}
    else:
        report, problems = check_model_dir(os.path.normpath(str(path)))
    nbytes = sum(s for _n, s in report["files"])
    if problems:
        msg = "%s is incomplete: %s%s" % (path, "; ".join(problems[:5]),
                                          " (and %d more)" % (len(problems) - 5) if len(problems) > 5 else "")
    else:
        msg = "%s is complete: %d files, %.1f GB, %d weight files" % (path, len(report["files"]), nbytes / 1e9,
                                                                      len(report["weight_files"]))
    return {"complete": not problems, "problems": problems, "files": len(report["files"]), "bytes": nbytes,
            "weight_files": len(report["weight_files"]), "msg": msg}


# --------------------------------------------------------------------------- stream packing

def pack_bins(items, streams):
    """Split [(name, size)] into at most ``streams`` lists of similar total size.

    Largest first, each into the currently lightest bin (LPT). Empty bins are dropped, so the
    number of rsync processes never exceeds the number of files.
    """
    streams = max(1, int(streams))
    bins = [[] for _i in range(streams)]
    totals = [0] * streams
    for name, size in sorted(items, key=lambda it: (-it[1], it[0])):
        idx = totals.index(min(totals))
        bins[idx].append(name)
        totals[idx] += size
    return [b for b in bins if b]


# --------------------------------------------------------------------------- fan-out

class FanoutScheduler(object):
    """Dynamic tree fan-out: every node that holds the model feeds one target at a time.

    Start with the holders (the source, plus destinations already in sync). ``next()`` hands out
    (feeder, target) pairs for every idle holder while targets wait; ``done(feeder, target, ok)``
    returns the feeder to the pool and, on success, adds the target as a new holder. The number
    of holders doubles every round, so N targets finish in about log2(N + 1) rounds.
    A failed target never feeds anyone.
    """

    def __init__(self, holders, targets):
        self.idle = list(holders)
        self.pending = list(targets)
        self.busy = []
        self.failed = []
        self.fed_from = {}

    def next(self):
        pairs = []
        while self.idle and self.pending:
            feeder = self.idle.pop(0)
            target = self.pending.pop(0)
            self.busy.append((feeder, target))
            self.fed_from[target] = feeder
            pairs.append((feeder, target))
        return pairs

    def done(self, feeder, target, ok):
        self.busy.remove((feeder, target))
        self.idle.append(feeder)
        if ok:
            # A fresh holder feeds first: it offloads the source (often the busy Ray head).
            self.idle.insert(0, target)
        else:
            self.failed.append(target)

    def finished(self):
        return not self.pending and not self.busy


def tree_rounds(holders, targets):
    """Static plan of the fan-out when every transfer takes the same time: a list of rounds,
    each a list of (feeder, target). Used for check mode and for the docs."""
    sched = FanoutScheduler(holders, targets)
    rounds = []
    while not sched.finished():
        pairs = sched.next()
        rounds.append(pairs)
        for feeder, target in pairs:
            sched.done(feeder, target, True)
    return rounds


# --------------------------------------------------------------------------- output parsing

def parse_itemize(text):
    """Parse rsync output printed with ``--out-format=OUT_FORMAT``.

    Returns a list of {name, itemize, size, transferred, deleted}. ``transferred`` is true for a
    regular file whose data was (or, in a dry run, would be) sent; attribute-only updates
    (``.f...p.....``) and directories are listed with transferred false.
    """
    entries = []
    for line in text.splitlines():
        if not line.startswith(OUT_PREFIX):
            continue
        parts = line[len(OUT_PREFIX):].split("|", 2)
        if len(parts) != 3:
            continue
        item, size, name = parts
        item = item.strip()
        try:
            size = int(size.replace(",", ""))
        except ValueError:
            size = 0
        deleted = item.startswith("*deleting")
        transferred = (not deleted and len(item) >= 2 and item[0] in "<>" and item[1] == "f")
        entries.append({"name": name, "itemize": item, "size": size,
                        "transferred": transferred, "deleted": deleted})
    return entries


def summarize(entries):
    """(files_transferred, bytes_transferred, names_transferred, names_deleted)."""
    moved = [e for e in entries if e["transferred"]]
    return (len(moved), sum(e["size"] for e in moved), [e["name"] for e in moved],
            [e["name"] for e in entries if e["deleted"]])


def parse_df_avail(text):
    """Available bytes from ``df -P -B1 PATH`` output (POSIX format: 4th column of line 2)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if len(lines) < 2:
        raise ValueError("unexpected df output: %r" % text)
    # A long device name may wrap onto its own line in some df builds: use the last line.
    fields = lines[-1].split()
    if len(fields) < 4:
        raise ValueError("unexpected df output: %r" % text)
    return int(fields[-3])


def parse_size_list(text):
    """{relpath: size} from ``find DIR -type f -printf '%s %P\\0'`` output."""
    sizes = {}
    for rec in text.split("\0"):
        rec = rec.strip("\n")
        if not rec:
            continue
        size, _sep, rel = rec.partition(" ")
        try:
            sizes[rel] = int(size)
        except ValueError:
            continue
    return sizes


def compare_sizes(expected, actual):
    """Problems where a destination's {relpath: size} differs from the source's."""
    problems = []
    for rel in sorted(expected):
        if rel not in actual:
            problems.append("%s is missing" % rel)
        elif actual[rel] != expected[rel]:
            problems.append("%s is %d bytes, the source has %d" % (rel, actual[rel], expected[rel]))
    return problems


# --------------------------------------------------------------------------- destination guard

# What makes a non-empty directory a model directory on a destination: a weight index, safetensors files, our marker,
# or a config.json that is a model's (it names model_type or architectures): a config.json alone is not enough
# (~/.docker holds one).
DEST_MODEL_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json", MARKER_NAME)
LIST_SEP = "---list---"


def dest_probe_script(dest):
    """Shell run on a destination before anything is copied: what DEST is (after symlinks), whether it is a model
    directory, a few entries for the message, df of the nearest existing directory, the state of our last copy (the
    marker) and, only for a model directory, the listing of its files (size, mtime, path) from which the run decides
    what to send."""
    q = shlex.quote(dest)
    checks = " ".join(shlex.quote(n) for n in DEST_MODEL_FILES)
    return (
        "d=%s; m=\n"
        "if [ -e \"$d\" ] || [ -L \"$d\" ]; then\n"
        "  r=$(readlink -f -- \"$d\"); echo \"real=$r\"\n"
        "  if [ -d \"$r\" ]; then\n"
        "    echo type=dir; echo \"count=$(ls -A -- \"$r\" | wc -l)\"\n"
        "    for f in %s; do [ -e \"$r/$f\" ] && echo \"has=$f\" && m=1; done\n"
        "    [ -f \"$r/config.json\" ] && grep -Eq '\"(model_type|architectures)\"[[:space:]]*:' \"$r/config.json\" "
        "&& echo has=config.json && m=1\n"
        "    ls -A -- \"$r\" | grep -q '[.]safetensors$' && echo 'has=*.safetensors' && m=1\n"
        "    ls -A -- \"$r\" | head -n 5 | sed 's/^/entry=/'\n"
        "    [ -f \"$r/%s\" ] && [ ! -L \"$r/%s\" ] && head -c 4096 -- \"$r/%s\" | sed 's/^/state./'\n"
        "  else echo type=other; fi\n"
        "else echo \"real=$(readlink -m -- \"$d\")\"; echo type=absent; fi\n"
        "p=\"$d\"; while [ ! -d \"$p\" ]; do p=$(dirname \"$p\"); done\n"
        "echo ---df---; df -P -B1 \"$p\"\n"
        "if [ -n \"$m\" ]; then echo %s; cd \"$r\" && find . -path ./%s -prune -o -type f -printf '%%s %%T@ %%P\\0'; fi\n"
        % (q, checks, MARKER_NAME, MARKER_NAME, MARKER_NAME, LIST_SEP, TEMP_DIR_NAME))


def parse_dest_probe(text):
    """{real, type, count, has: [names], entries: [names], state: {key: value}, df: text, listing: {relpath:
    (size, mtime_ns)} or None} from dest_probe_script's output."""
    head, _sep, rest = (text or "").partition("---df---")
    df, sep, listing = rest.partition(LIST_SEP)
    info = {"real": None, "type": None, "count": 0, "has": [], "entries": [], "df": df.strip(), "state": {},
            "listing": parse_listing(listing) if sep else None}
    for line in head.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key in ("real", "type"):
            info[key] = value
        elif key == "count":
            try:
                info["count"] = int(value.strip())
            except ValueError:
                pass
        elif key == "has":
            info["has"].append(value)
        elif key == "entry":
            info["entries"].append(value)
        elif key.startswith("state."):
            info["state"][key[len("state."):]] = value
    return info


def _mtime_ns(text):
    """Nanoseconds from find's %T@ (seconds with a fraction of up to 10 digits)."""
    sec, _dot, frac = text.partition(".")
    return int(sec) * 10 ** 9 + int((frac + "000000000")[:9])


def parse_listing(text):
    """{relpath: (size, mtime_ns)} from ``find -printf '%s %T@ %P\\0'`` output; malformed records are skipped."""
    out = {}
    for rec in text.split("\0"):
        rec = rec.lstrip("\n")
        if not rec:
            continue
        parts = rec.split(" ", 2)
        if len(parts) != 3:
            continue
        try:
            out[parts[2]] = (int(parts[0]), _mtime_ns(parts[1]))
        except ValueError:
            continue
    return out


def same_version(src, dst):
    """True when a destination file (size, mtime_ns) is the source's version by size and modification time, as rsync
    decides (nanoseconds where the destination's filesystem keeps them, whole seconds where it does not)."""
    if src[0] != dst[0]:
        return False
    if src[1] == dst[1]:
        return True
    return dst[1] % 10 ** 9 == 0 and src[1] // 10 ** 9 == dst[1] // 10 ** 9


def plan_moves(stats, listing, delete=False):
    """What a destination needs: ([(name, size)] to send, largest first by name order, [names] to delete).

    stats: {relpath: (size, mtime_ns)} of the source's files; listing: the destination's, from the probe. Files of
    the destination that the source lacks are deleted only with ``delete`` (our marker never)."""
    moved = [(n, stats[n][0]) for n in sorted(stats) if n not in listing or not same_version(stats[n], listing[n])]
    extra = sorted(n for n in listing if n not in stats and n != MARKER_NAME and n != MARKER_NAME + ".new")
    return moved, extra if delete else []


def dest_problem(dest, probe):
    """Why the sync must not write into dest on this destination, or None.

    Refused: a destructive path as written or after symlinks (`/`, a system or home directory), something
    that is not a directory, and a non-empty directory that is neither a model directory (a model's config, a
    weight index or safetensors files at its top) nor ours (marker). With ``--delete`` such a directory would be
    emptied of everything the model does not have.
    """
    why = model_path_problem(dest, "dest")
    if why:
        return why
    real = probe.get("real")
    if probe.get("type") is None or not real:
        return "could not inspect dest %s" % dest
    if real != dest.rstrip("/"):
        why = model_path_problem(real, "dest (%s after symlinks)" % dest)
        if why:
            return why
    if probe["type"] == "other":
        return "dest %s exists and is not a directory" % dest
    if probe["type"] == "dir" and probe["count"] > 0 and not probe["has"]:
        shown = ", ".join(probe["entries"][:5]) + (", ..." if probe["count"] > 5 else "")
        return ("dest %s holds %d entries (%s) but is not a model directory (no model config.json naming a "
                "model_type, no %s, no *.safetensors, no %s marker)"
                % (dest, probe["count"], shown, DEST_MODEL_FILES[0], MARKER_NAME))
    return None


# --------------------------------------------------------------------------- the state of a worker's copy

def copy_state(complete, fingerprint=None, verified=False, reason=None, when=None):
    """The text model_sync writes into DEST/.sparkfleet-model on a destination: what the node's copy is.

    key=value lines: ``copy`` complete | incomplete; ``verified`` yes | no (this run checked every file's size, and
    hash with verify_content, on that node); ``fingerprint`` the source's content fingerprint or none; ``updated`` the
    UTC time; ``reason`` one line, for an incomplete copy. A copy is marked incomplete before its first byte moves,
    so a killed run leaves it incomplete."""
    lines = ["copy=%s" % ("complete" if complete else "incomplete"),
             "verified=%s" % ("yes" if verified else "no"),
             "fingerprint=%s" % (fingerprint or "none"),
             "updated=%s" % (when or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))]
    if reason:
        lines.append("reason=%s" % " ".join(str(reason).split())[:500])
    return "\n".join(lines) + "\n"


def parse_copy_state(text):
    """{key: value} of a marker's state lines ({} for an old, empty marker)."""
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


# --------------------------------------------------------------------------- a full disk, named

NO_SPACE = ("No space left on device", "Disk quota exceeded", "ENOSPC", "EDQUOT")


def is_no_space(text):
    return any(k in (text or "") for k in NO_SPACE)


def no_space_message(host, dest, needed, free):
    """A destination's disk that filled during the sync, with the numbers a person needs to act."""
    return ("%s ran out of space under %s during the sync: %d bytes (%.1f GB) of the model still to write there, "
            "%d bytes (%.1f GB) free" % (host, dest, needed, needed / 1e9, free, free / 1e9))


def no_space_hint(host, dest, needed, free):
    short = max(0, needed - free)
    return ("Free at least %d bytes (%.1f GB) on the filesystem of %s on %s (or set the model directory on a larger "
            "disk), then run again: the files already in place are kept and only the rest is sent."
            % (short, short / 1e9, dest, host))


# --------------------------------------------------------------------------- destinations and ssh users

def canonical_host(host):
    """One spelling per host: IP literals in their standard form (brackets and leading zeros of IPv6 dropped), names
    lower-cased without a trailing dot."""
    h = host.strip()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    try:
        return str(ipaddress.ip_address(h))
    except ValueError:
        return h.lower().rstrip(".")


def unique_hosts(hosts, resolve=None):
    """(hosts, problems, merged): the destinations with each host once (its first spelling kept), the reasons any
    cannot be an ssh destination, and [(kept, dropped)] for the spellings merged.

    resolve: name -> set of IP literals (socket lookups, given by the caller); used only when the list mixes names and
    IP literals, so that a name and its address are one host."""
    out, problems, merged, seen = [], [], [], {}
    for h in hosts:
        why = ssh_host_problem(h)
        if why:
            problems.append(why)
            continue
        key = canonical_host(h)
        if key in seen:
            merged.append((seen[key], h))
            continue
        seen[key] = h
        out.append(h)
    literal = set(k for k in seen if _is_ip(k))
    if resolve and literal and not problems:
        for key in [k for k in seen if not _is_ip(k)]:
            same = sorted((resolve(key) or set()) & literal)
            if same and seen[key] in out:
                merged.append((seen[same[0]], seen[key]))
                out.remove(seen[key])
    return out, problems, merged


def _is_ip(text):
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


# --------------------------------------------------------------------------- command lines

def host_spec(host, user=None):
    """user@host for ssh; the rsync form adds brackets to an IPv6 literal."""
    return "%s@%s" % (user, host) if user else host


def rsync_target(host, path, user=None):
    if ":" in host and not host.startswith("["):
        host = "[%s]" % host
    return "%s:%s" % (host_spec(host, user), path)


def ssh_argv(ssh_bin, cipher=None, key=None, opts=None, forward_agent=False, timeout=None):
    """The ssh command for rsync -e and for remote commands. Never compresses."""
    argv = [ssh_bin, "-o", "BatchMode=yes", "-o", "Compression=no",
            "-o", "StrictHostKeyChecking=accept-new"]
    if timeout:
        argv += ["-o", "ConnectTimeout=%d" % int(timeout)]
    if cipher:
        argv += ["-c", cipher]
    if key:
        argv += ["-i", key, "-o", "IdentitiesOnly=yes"]
    if forward_agent:
        argv += ["-A"]
    argv += list(opts or [])
    return argv


def rsync_argv(rsync_bin, rsh, src_dir, target, checksum=False, bwlimit=0, dry_run=False,
               delete=False, files_from=False, timeout=None, compress=False, ignore_times=False, copy_links=True):
    """The rsync command that pushes src_dir/ to target/.

    --whole-file (no delta on a fast link), no compression unless asked (bench only), staging in TEMP_DIR_NAME.
    copy_links: --copy-links from the source (a Hugging Face snapshot is symlinks into blobs; the source's checks have
    refused every link out of the model first); a relay from a worker passes False and follows no symlink at all.
    ignore_times sends every listed file even when size and mtime match (a content mismatch found by hash).
    """
    argv = [rsync_bin, "--recursive"] + (["--copy-links"] if copy_links else [])
    argv += ["--perms", "--times", "--whole-file", "--mkpath", "--out-format=" + OUT_FORMAT,
             "--exclude=/%s/" % TEMP_DIR_NAME, "--exclude=/%s" % MARKER_NAME,
             "--rsh=" + " ".join(shlex.quote(a) for a in rsh)]
    if not dry_run:
        argv.append("--temp-dir=" + TEMP_DIR_NAME)
    if compress:
        argv.append("--compress")
    if checksum:
        argv.append("--checksum")
    if ignore_times:
        argv.append("--ignore-times")
    if bwlimit:
        argv.append("--bwlimit=%d" % int(bwlimit))
    if dry_run:
        argv.append("--dry-run")
    if delete:
        argv.append("--delete")
    if files_from:
        argv += ["--from0", "--files-from=-"]
    if timeout:
        argv.append("--timeout=%d" % int(timeout))
    argv += [src_dir.rstrip("/") + "/", target.rstrip("/") + "/"]
    return argv
