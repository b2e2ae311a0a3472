# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What model_sync left on a node (its manifest), and whether the files served are still those.

A manifest lists every file of a node's model directory as the sync left it: relative path, size, mtime_ns,
ctime_ns and inode, plus the head's content hash (SHA-256) of each file. A write to a file moves its ctime even
when its size and mtime are put back (``touch -d`` sets the mtime, and moves the ctime doing so); a file replaced
gets a new inode. So comparing a stat of every file with the manifest catches any write since the sync without
reading a byte (``compare``); it cannot catch what no write made (a disk returning other bytes than it was given):
the scrub (``scrub``) reads every file and compares its hash with the head's.

Standard library only: model_manifest (the module) imports it to record a manifest, and the model_sync role installs
this same file on every node as /usr/local/lib/sparkfleet_model.py, where the Ray watchdog (each node's check, which
vLLM's memory gate reads), status.yml and the scrub timer run it:
  python3 sparkfleet_model.py check --model-dir D [--manifest M]                 stat only; JSON on stdout
  python3 sparkfleet_model.py status --model-dir D [--manifest M] [--scrub S]    check plus the last scrub's report
  python3 sparkfleet_model.py scrub --model-dir D [--manifest M] [--out S]       hashes every file (slow, low priority)
"""

from __future__ import annotations

import calendar
import hashlib
import json
import os
import stat
import sys
import tempfile
import time


MANIFEST_PATH = "/var/lib/sparkfleet/model-manifest.json"
SCRUB_PATH = "/var/lib/sparkfleet/model-scrub.json"
VERSION = 1
# bytes of the manifest, the scrub report or the hash cache read (a model of 10^5 files is far below)
JSON_MAX = 64 << 20
# Kept in step with _sync_shell.py (a unit test holds them together): the sync's staging directory and copy marker
# are the sync's own, never the model's.
TEMP_DIR_NAME = ".sparkfleet-sync"
MARKER_NAME = ".sparkfleet-model"
STAT_KEYS = ("size", "mtime_ns", "ctime_ns", "inode")
# Changes named in a sentence at most (the rest counted).
SHOWN = 3


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


def _roots(root):
    """Real directories a symlink under root may lead into: root, and a Hugging Face snapshot's blobs."""
    real = os.path.realpath(root)
    parent = os.path.dirname(real)
    roots = [real]
    if os.path.basename(parent) == "snapshots":
        roots.append(os.path.join(os.path.dirname(parent), "blobs"))
    return roots


def _inside(path, roots):
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def model_files(root):
    """{relpath: os.stat_result} of every file of the model under root, as model_sync sees the model: symlinks followed
    only inside it (or into a snapshot's blobs), the sync's staging directory and marker left out. Missing root: {}."""
    out, seen, roots = {}, set(), _roots(root)
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
        rel_dir = "" if rel_dir == "." else rel_dir
        dirnames[:] = sorted(d for d in dirnames if not (rel_dir == "" and d == TEMP_DIR_NAME)
                             and _inside(os.path.realpath(os.path.join(dirpath, d)), roots))
        for name in filenames:
            if rel_dir == "" and name in (MARKER_NAME, MARKER_NAME + ".new"):
                continue
            full = os.path.join(dirpath, name)
            if not _inside(os.path.realpath(full), roots):
                continue
            try:
                st = os.stat(full)
            except OSError:
                continue
            if os.path.isfile(full):
                out[os.path.join(rel_dir, name) if rel_dir else name] = st
    return out


def stat_entry(st):
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "inode": st.st_ino}


def cached_hashes(cache_path, root, stats):
    """{relpath: sha256} from model_sync's hash cache (module_utils/sync/_content_hash.py's format) for the files whose
    size, mtime, inode and ctime are still those the hash was taken with: never a hash of another version."""
    try:
        cache = read_json_file(cache_path)
    except (OSError, ValueError):
        return {}
    if not isinstance(cache, dict) or cache.get("root") != os.path.realpath(root) or cache.get("algorithm") != "sha256":
        return {}
    entries = cache.get("files") if isinstance(cache.get("files"), dict) else {}
    out = {}
    for rel, st in stats.items():
        hit = entries.get(rel)
        key = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]
        if isinstance(hit, list) and len(hit) == 2 and hit[0] == key:
            out[rel] = str(hit[1])
    return out


def build(root, node, hashes=None, head_hashes=None, when=None):
    """The manifest of root on this node: every file's stat, its own hash where known (hashes), and the head's hashes
    of the model (head_hashes; the head passes its own), which the scrub compares against."""
    stats = model_files(root)
    files = {}
    for rel in sorted(stats):
        entry = stat_entry(stats[rel])
        if hashes and hashes.get(rel):
            entry["sha256"] = hashes[rel]
        files[rel] = entry
    return {"version": VERSION, "node": node, "model_dir": os.path.normpath(root),
            "recorded": when or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "files": files, "head": dict(sorted((head_hashes or {}).items()))}


def same_record(old, new):
    """Whether two manifests record the same files (the time they were written aside)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return False
    return all(old.get(k) == new.get(k) for k in ("version", "node", "model_dir", "files", "head"))


def load(path):
    """The manifest at path, or None (absent, unreadable, not ours)."""
    try:
        data = read_json_file(path)
    except (OSError, ValueError):   # standard library only (it runs on the nodes): nested JSON too
        return None
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("files"), dict):
        return None
    return data


def write_atomic(path, data, mode=0o644):
    """Write JSON to path through a temporary file in its directory and a rename: never half a manifest."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, sort_keys=True, indent=1)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def compare(manifest, root):
    """What changed in root since the manifest, by stat alone: [{file, change, detail}] (change: missing, extra,
    changed), sorted by file. A file is changed when its size, mtime, ctime or inode moved."""
    now = model_files(root)
    files = manifest.get("files") or {}
    out = []
    for rel in sorted(set(files) | set(now)):
        was, st = files.get(rel), now.get(rel)
        if st is None:
            out.append({"file": rel, "change": "missing", "detail": "missing (it was %s bytes)" % was.get("size")})
        elif was is None:
            out.append({"file": rel, "change": "extra", "detail": "not there at the sync (%d bytes)" % st.st_size})
        else:
            cur = stat_entry(st)
            moved = [k for k in STAT_KEYS if was.get(k) != cur[k]]
            if moved:
                out.append({"file": rel, "change": "changed", "detail": _moved(moved, was, cur)})
    return out


def _moved(keys, was, cur):
    words = {"size": "size %s -> %s bytes" % (was.get("size"), cur["size"]), "mtime_ns": "mtime moved",
             "ctime_ns": "ctime moved (written, or its metadata set)", "inode": "replaced (new inode)"}
    kept = [k for k in ("size", "mtime_ns") if k not in keys]
    text = ", ".join(words[k] for k in keys)
    if kept and "ctime_ns" in keys:
        text += "; %s kept" % " and ".join("size" if k == "size" else "mtime" for k in kept)
    return text


def describe(changes, node):
    """One sentence for the operator: what changed on node since the sync, and the one next step."""
    if not changes:
        return ""
    shown = "; ".join("%s %s" % (c["file"], c["detail"]) for c in changes[:SHOWN])
    more = " (and %d more)" % (len(changes) - SHOWN) if len(changes) > SHOWN else ""
    return "model changed since the sync on %s: %s%s: run site.yml" % (node, shown, more)


def check(root, manifest_path=MANIFEST_PATH, node=None):
    """The stat check of this node's model: {state: ok | changed | unrecorded, node, changes, msg, recorded}."""
    manifest = load(manifest_path)
    node = node or (manifest or {}).get("node") or os.uname()[1]
    if manifest is None:
        return {"state": "unrecorded", "node": node, "changes": [], "recorded": None,
                "msg": "no model manifest at %s on %s (site.yml writes it with the sync)" % (manifest_path, node)}
    if os.path.normpath(root) != manifest.get("model_dir"):
        return {"state": "unrecorded", "node": node, "changes": [], "recorded": manifest.get("recorded"),
                "msg": "the manifest on %s records %s, not %s: run site.yml" % (node, manifest.get("model_dir"), root)}
    changes = compare(manifest, root)
    same = "model on %s as the sync of %s left it (%d files)" % (node, manifest.get("recorded"), len(manifest["files"]))
    return {"state": "changed" if changes else "ok", "node": node, "changes": changes,
            "recorded": manifest.get("recorded"), "msg": describe(changes, node) or same}


def _hash_file(path, chunk=8 << 20):
    """SHA-256 of a file, dropping what it read from the page cache behind it (GB10: that memory is the GPU's)."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        done = 0
        while True:
            data = os.read(fd, chunk)
            if not data:
                break
            h.update(data)
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, done, len(data), os.POSIX_FADV_DONTNEED)
            done += len(data)
    finally:
        os.close(fd)
    return h.hexdigest()


def scrub(root, manifest_path=MANIFEST_PATH, node=None, clock=time.time):
    """Hash every file of the head's manifest and compare it with the head's hash: {time, node, state: ok | bad |
    unrecorded, checked, bytes, bad: [{file, why}], seconds, msg}. Reads the whole model."""
    started = clock()
    manifest = load(manifest_path)
    node = node or (manifest or {}).get("node") or os.uname()[1]
    out = {"time": round(started, 1), "node": node, "checked": 0, "bytes": 0, "bad": [], "seconds": 0.0}
    head = (manifest or {}).get("head") or {}
    if manifest is None or not head:
        out.update(state="unrecorded", msg="nothing to scrub against on %s: %s" % (
            node, "no manifest at %s" % manifest_path if manifest is None else "the manifest holds no head hashes"))
        return out
    # The head's files only: a file a worker keeps beside the model (an older version's, model_sync_delete=false) is
    # not served, and one added since the sync is the stat check's.
    for rel in sorted(head):
        path = os.path.join(root, rel)
        want = head[rel]
        try:
            real = os.path.realpath(path)
            if not _inside(real, _roots(root)):
                raise OSError("a symlink out of the model directory")
            got = _hash_file(real)
            out["bytes"] += os.stat(real).st_size
        except OSError as exc:
            out["bad"].append({"file": rel, "why": "unreadable (%s)" % (exc.strerror or exc)})
            continue
        out["checked"] += 1
        if got != want:
            out["bad"].append({"file": rel, "why": "content differs from the head's (sha256 %s, head %s)"
                                                   % (got[:12], want[:12])})
    out["seconds"] = round(clock() - started, 1)
    out["state"] = "bad" if out["bad"] else "ok"
    out["msg"] = (("the scrub found %d file(s) on %s whose content is not the head's: %s%s: run site.yml" % (
        len(out["bad"]), node, "; ".join("%s %s" % (b["file"], b["why"]) for b in out["bad"][:SHOWN]),
        " (and %d more)" % (len(out["bad"]) - SHOWN) if len(out["bad"]) > SHOWN else ""))
        if out["bad"] else "the scrub read %d file(s) on %s in %.0f s: every one as the head's"
        % (out["checked"], node, out["seconds"]))
    return out


def status(root, manifest_path=MANIFEST_PATH, scrub_path=SCRUB_PATH, node=None):
    """check() plus the last scrub's report (None when none ran, or when a sync recorded the model since: that sync
    compared every file's hash with the head's and sent again what differed)."""
    out = check(root, manifest_path, node)
    try:
        last = read_json_file(scrub_path)
        out["scrub"] = last if isinstance(last, dict) else None
    except (OSError, ValueError):
        out["scrub"] = None
    try:
        recorded = calendar.timegm(time.strptime(str(out.get("recorded")), "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        recorded = None
    if out["scrub"] and recorded is not None and float(out["scrub"].get("time") or 0) < recorded:
        out["scrub"] = None
    return out


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="sparkfleet_model")
    ap.add_argument("command", choices=["check", "status", "scrub"])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--manifest", default=MANIFEST_PATH)
    ap.add_argument("--scrub", dest="scrub_path", default=SCRUB_PATH, help="status: the scrub's report")
    ap.add_argument("--out", default=SCRUB_PATH, help="scrub: where its report is written")
    ap.add_argument("--node", default=None, help="the node's name in sentences (default: the manifest's)")
    a = ap.parse_args(argv)
    if a.command == "check":
        result = check(a.model_dir, a.manifest, a.node)
    elif a.command == "status":
        result = status(a.model_dir, a.manifest, a.scrub_path, a.node)
    else:
        result = scrub(a.model_dir, a.manifest, a.node)
        write_atomic(a.out, result)
        # one line for the journal of the scrub's service
        sys.stdout.write("sparkfleet model scrub: %s\n" % result["msg"])
        return 1 if result["state"] == "bad" else 0
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
