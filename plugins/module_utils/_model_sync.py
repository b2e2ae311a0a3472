# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure helpers for sparkfleet.vllm.model_sync: model checks, stream packing, fan-out, output parsing.

Nothing here runs a command; the module feeds command output in and argv lists out.
"""

from __future__ import annotations

import json
import os
import shlex

from ansible_collections.sparkfleet.vllm.plugins.module_utils._paths import (
    MARKER_NAME,
    MODEL_FILES,
    looks_like_model_dir,
    model_path_problem,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils._content_hash import HASH_SCRIPT, cache_file
from ansible_collections.sparkfleet.vllm.plugins.module_utils._fast_copy import FAST_SCRIPT
from ansible_collections.sparkfleet.vllm.plugins.module_utils._safetensors import (
    SafetensorsError,
    read_header,
)
# TEMP_DIR_NAME: the staging directory inside dest. rsync writes every file there and renames it into place when
# it is complete, so a killed run never leaves a partial file under its final name.
from ansible_collections.sparkfleet.vllm.plugins.module_utils._sync_shell import TEMP_DIR_NAME, remote_commands

# Prefix marking the lines our --out-format prints, so warnings on the same stream are not parsed.
OUT_PREFIX = "SFL|"
OUT_FORMAT = OUT_PREFIX + "%i|%l|%n"

SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_INDEX = "pytorch_model.bin.index.json"


# --------------------------------------------------------------------------- source checks

def list_files(root):
    """Return [(relpath, size)] of every regular file under root (symlinks followed), sorted.

    The staging directory is skipped. A dangling symlink is listed with size -1 so that the
    completeness check can name it. A symlinked directory already walked (a loop such as
    ``snapshot/x -> ..``) is not walked again.
    """
    out = []
    seen = set()
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
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.join(rel_dir, name) if rel_dir else name
            try:
                st = os.stat(full)
            except OSError:
                out.append((rel, -1))
                continue
            if os.path.isfile(full) and not (rel_dir == "" and name == MARKER_NAME):
                out.append((rel, st.st_size))
    return out


def _load_json(path):
    with open(path, "rb") as handle:
        return json.loads(handle.read().decode("utf-8"))


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
    files = list_files(root)
    report["files"] = [f for f in files if f[1] >= 0]
    sizes = dict(files)
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

def dest_probe_script(dest):
    """Shell run on a destination before anything is copied: what DEST is (after symlinks), whether it is
    a model directory, a few entries for the message, and df of the nearest existing directory."""
    q = shlex.quote(dest)
    checks = " ".join(shlex.quote(n) for n in MODEL_FILES)
    return (
        "d=%s\n"
        "if [ -e \"$d\" ] || [ -L \"$d\" ]; then\n"
        "  r=$(readlink -f -- \"$d\"); echo \"real=$r\"\n"
        "  if [ -d \"$r\" ]; then\n"
        "    echo type=dir; echo \"count=$(ls -A -- \"$r\" | wc -l)\"\n"
        "    for f in %s; do [ -e \"$r/$f\" ] && echo \"has=$f\"; done\n"
        "    ls -A -- \"$r\" | grep -q '[.]safetensors$' && echo 'has=*.safetensors'\n"
        "    ls -A -- \"$r\" | head -n 5 | sed 's/^/entry=/'\n"
        "  else echo type=other; fi\n"
        "else echo \"real=$(readlink -m -- \"$d\")\"; echo type=absent; fi\n"
        "p=\"$d\"; while [ ! -d \"$p\" ]; do p=$(dirname \"$p\"); done\n"
        "echo ---df---; df -P -B1 \"$p\"\n" % (q, checks))


def parse_dest_probe(text):
    """{real, type, count, has: [names], entries: [names], df: text} from dest_probe_script's output."""
    head, _sep, df = (text or "").partition("---df---")
    info = {"real": None, "type": None, "count": 0, "has": [], "entries": [], "df": df.strip()}
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
    return info


def dest_problem(dest, probe):
    """Why the sync must not write into dest on this destination, or None.

    Refused: a destructive path as written or after symlinks (`/`, a system or home directory), something
    that is not a directory, and a non-empty directory that is neither a model directory (config, weight
    index or safetensors files at its top) nor ours (marker). With
    ``--delete`` such a directory would be emptied of everything the model does not have.
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
        return ("dest %s holds %d entries (%s) but is not a model directory (no %s, no *.safetensors, no %s "
                "marker)" % (dest, probe["count"], shown, ", ".join(MODEL_FILES[:2]), MARKER_NAME))
    return None


def destination_commands(dest):
    """{name: command} of every fixed command model_sync runs on a destination for dest: the sync key's
    forced command (module_utils/_sync_shell.py) allows exactly these, plus rsync into dest."""
    cmds = remote_commands(dest, HASH_SCRIPT, cache_file(dest, "$HOME"))
    cmds["probe"] = dest_probe_script(dest)
    cmds.update(fast_commands(dest))
    return cmds


def fast_commands(dest):
    """The TCP transport's two fixed commands for dest (module_utils/_fast_copy.py): the receiver, which writes only
    into dest, and the sender a destination runs when it feeds the next node, which reads only dest."""
    q = shlex.quote(dest)
    return {"receive": "python3 -c %s receive %s" % (shlex.quote(FAST_SCRIPT), q),
            "send": "python3 -c %s send %s" % (shlex.quote(FAST_SCRIPT), q)}


def fast_request_files(moved, stats, hashes=None):
    """The receiver's manifest: [[name, size, mtime_ns, mode, sha256 or None]] of the files to move.

    moved: [(name, size)]; stats: {name: os.stat_result of the source file}; hashes: {name: digest} or None.
    """
    out = []
    for name, size in moved:
        st = stats[name]
        out.append([name, int(size), int(st.st_mtime_ns), int(st.st_mode) & 0o777,
                    (hashes or {}).get(name)])
    return out


def fast_bins(moved, offsets, streams):
    """Streams for the sender: [[[name, offset, size]]], packed by the bytes still missing (resumed files
    count only their tail). A file already complete in staging still goes (length 0) to be checked and renamed."""
    sizes = dict(moved)
    left = [(name, size - min(int(offsets.get(name, 0)), size)) for name, size in moved]
    return [[[n, min(int(offsets.get(n, 0)), sizes[n]), sizes[n]] for n in b] for b in pack_bins(left, streams)]


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
               delete=False, files_from=False, timeout=None, compress=False, ignore_times=False):
    """The rsync command that pushes src_dir/ to target/.

    --whole-file (no delta on a fast link), no compression unless asked (bench only),
    --copy-links (a Hugging Face snapshot is symlinks into blobs), staging in TEMP_DIR_NAME.
    ignore_times sends every listed file even when size and mtime match (a content mismatch found by hash).
    """
    argv = [rsync_bin, "--recursive", "--copy-links", "--perms", "--times", "--whole-file",
            "--mkpath", "--out-format=" + OUT_FORMAT, "--exclude=/%s/" % TEMP_DIR_NAME,
            "--exclude=/%s" % MARKER_NAME,
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
