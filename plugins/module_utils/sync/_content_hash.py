# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Content hashes of a model's files, the same on every node, cached so an unchanged file is never re-read.

A same-size corruption with its mtime restored passes rsync's size+mtime test; it cannot restore the
inode's ctime, which every write moves. So a file is re-hashed when its size, mtime, inode or ctime moved,
and the hash of every file is compared between the source and each destination.

HASH_SCRIPT is a self-contained Python 3 program (standard library only): model_sync runs it on the source
and, through ssh, on every destination, so both ends hash the same way. It reads the directory as argv[1],
the cache file as argv[2] ('' for none), relative paths NUL-separated on stdin, and prints one JSON object
{relpath: hex digest, or null when the file is missing, unreadable or a symlink out of the directory}. Files are hashed in parallel threads (hashlib
releases the GIL on large buffers). The cache is written atomically and only for files under that root.
"""

from __future__ import annotations

import hashlib

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json

HASH_ALGORITHM = "sha256"

HASH_SCRIPT = r'''
import hashlib, json, os, stat, sys, tempfile
from concurrent.futures import ThreadPoolExecutor

root, cache_path = sys.argv[1], sys.argv[2]
names = [n for n in sys.stdin.buffer.read().decode("utf-8", "surrogateescape").split("\0") if n]
try:  # a regular file, bounded, without blocking on a FIFO; nesting too deep is no cache
    fd = os.open(cache_path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        raw = os.read(fd, (64 << 20) + 1)
    finally:
        os.close(fd)
    if len(raw) > 64 << 20:
        raise ValueError("too large")
    cache = json.loads(raw.decode("utf-8", "replace"))
    if cache.get("root") != os.path.realpath(root) or cache.get("algorithm") != "sha256":
        cache = {}
except (OSError, ValueError, AttributeError, RecursionError):
    cache = {}
entries = cache.get("files", {}) if isinstance(cache.get("files"), dict) else {}
real_root = os.path.realpath(root)
# A symlink is followed only within root (or into a Hugging Face snapshot's blobs): a link planted in a copy and
# leading out of it hashes as missing, never as the file it points to.
roots = [real_root]
if os.path.basename(os.path.dirname(real_root)) == "snapshots":
    roots.append(os.path.join(os.path.dirname(os.path.dirname(real_root)), "blobs"))

def one(rel):
    path = os.path.realpath(os.path.join(root, rel))
    if not any(path == r or path.startswith(r + "/") for r in roots):
        return rel, None, None
    try:
        st = os.stat(path)
    except OSError:
        return rel, None, None
    key = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]
    hit = entries.get(rel)
    if isinstance(hit, list) and len(hit) == 2 and hit[0] == key:
        return rel, hit[1], key
    h = hashlib.sha256()
    try:
        with open(path, "rb", buffering=0) as fh:
            while True:
                chunk = fh.read(8 << 20)
                if not chunk:
                    break
                h.update(chunk)
    except OSError:
        return rel, None, None
    return rel, h.hexdigest(), key

out, fresh = {}, {}
with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
    for rel, digest, key in pool.map(one, names):
        out[rel] = digest
        if digest is not None:
            fresh[rel] = [key, digest]
if cache_path:
    entries.update(fresh)
    try:
        os.makedirs(os.path.dirname(cache_path), mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(cache_path), prefix=".hashes-")
        with os.fdopen(fd, "w") as fh:
            json.dump({"root": os.path.realpath(root), "algorithm": "sha256", "files": entries}, fh)
        os.replace(tmp, cache_path)
    except OSError:
        pass
sys.stdout.write(json.dumps(out))
'''


def cache_file(root, home="~"):
    """Per-directory cache path under the running user's home (never inside the model directory)."""
    tag = hashlib.sha256(root.rstrip("/").encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return "%s/.cache/sparkfleet/hashes-%s.json" % (home.rstrip("/"), tag)


def parse_hashes(text):
    """{relpath: digest or None} from HASH_SCRIPT's output; ValueError when it is not that."""
    data = _json.loads(text or "", "the hash output")
    if not isinstance(data, dict):
        raise ValueError("hash output is not an object")
    return dict((str(k), (str(v) if v is not None else None)) for k, v in data.items())


def content_mismatches(source, dest, names=None):
    """Names whose destination hash differs from the source's (missing on the destination counts)."""
    return sorted(n for n in (names if names is not None else source) if dest.get(n) != source.get(n))


def fingerprint(files, hashes):
    """One digest for a model's content: (relpath, size, content hash) of every file, sorted."""
    h = hashlib.sha256()
    for rel, size in sorted(files):
        h.update(("%s\0%d\0%s\n" % (rel, size, hashes.get(rel))).encode("utf-8", "surrogateescape"))
    return h.hexdigest()[:32]
