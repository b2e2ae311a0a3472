# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""model_sync's fast transport: plain TCP streams over the fabric, opened for one run and verified per file.

FAST_SCRIPT is a self-contained Python 3 program (standard library only). model_sync runs it
  - ``receive DEST`` on a destination through ssh (a fixed command the sync key's forced command allows byte for
    byte). It reads one JSON request line on stdin: the files to expect ([name, size, mtime_ns, mode, sha256 hex
    or null]), whether content hashes are asked (``hash``), the number of streams and a timeout. It keeps partial
    files of exactly those versions in DEST/.sparkfleet-sync (the next run continues them) and deletes everything
    else there, then listens on the address the ssh connection came in on (the fabric IP; SSH_CONNECTION), port 0,
    and prints one JSON line {port, key, offsets} on stdout, which only the ssh channel carries: the key is a fresh
    random secret. Each TCP connection must answer a random challenge with HMAC-SHA256(key, challenge), and the
    receiver answers with an HMAC of its own before the sender sends a byte (both ends prove they hold the
    secret); once the expected number of streams is in, the listening socket is closed.
    A stream then carries, per file, a header {name, offset, length}, the raw bytes, and a trailer {digest, mac}:
    the source's SHA-256 of the whole file (when hashes are asked) and HMAC-SHA256(key, name, size, digest), so
    the connection is authenticated once and each file's size and content end to end, with no per-chunk MAC.
    Every file is written to the staging directory as it arrives (hashed on the way), its size checked and, when
    hashes are asked, its hash against the trailer's (and the manifest's, when it carries one); only then does it
    get its final name with the source's mtime and mode. A file whose bytes or trailer do not check out is deleted,
    never renamed; a stream cut mid-file leaves the staged part for the next run to continue. When every stream has
    ended it prints one JSON result line and exits. It exits at once when its stdin closes (the run ended or was
    killed: ssh drops the channel), when no stream connects within the timeout, or when no byte arrives for the
    timeout.
  - ``send ROOT`` on the source (locally) or on a destination that already holds the model (through ssh, a fixed
    command with ROOT = DEST). It reads one JSON request line on stdin: host, port, key, ``hash`` and the streams
    (lists of [name, offset, size]); each stream is one TCP connection. A file whose hash is asked and not in the cache
    under ~/.cache/sparkfleet (size, mtime, inode and ctime unchanged) is read once, from the disk into the stream's
    buffer (O_DIRECT where the filesystem allows: no second copy in the page cache), hashed and sent from that buffer;
    any other file goes with sendfile(2) (no copy through the process).
    Prints one JSON result line with the digests it sent; the new ones go into that cache.
Nothing here is a shell: names are checked to be plain relative paths inside the directory.
"""

from __future__ import annotations

import hashlib
import json
import queue
import subprocess
import threading
import time

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json
from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import environ, tail

# One line of the fast-copy script's answers (port, key, offsets of the files it continues; a report): far below.
LINE_MAX_BYTES = 16 * 1024 * 1024

FAST_SCRIPT = r'''
import errno, fcntl, hashlib, hmac, json, mmap, os, resource, secrets, select, socket, stat, struct, sys, threading, time
STAGE, MARK, BUF, ALGO = ".sparkfleet-sync", ".sparkfleet-model", 4 << 20, "sha256"
ALIGN = 4096  # O_DIRECT: buffer, offset and length in whole blocks
try:  # fallocate(2) with FALLOC_FL_KEEP_SIZE: a file's blocks reserved up front (fewer allocations, a full disk at once)
    import ctypes
    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
except (ImportError, OSError, AttributeError):
    _libc = None


def reserve(fd, off, length):
    # The size stays what was written (a resumed part's offset is its size); ENOSPC comes now, not mid-file.
    if _libc is None or length <= 0:
        return
    if _libc.fallocate(fd, 1, off, length) != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSPC, errno.EDQUOT):
            raise OSError(err, os.strerror(err))


def cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return round(ru.ru_utime + ru.ru_stime, 3)


def die(msg, rc=2):
    try:
        sys.stderr.write("sparkfleet fast copy: %s\n" % msg)
        sys.stderr.flush()
    finally:
        os._exit(rc)


def quiet_thread_errors(args):
    # A thread never prints a traceback: whatever a peer sends, one line says what went wrong.
    sys.stderr.write("sparkfleet fast copy: %s: %s\n" % (args.exc_type.__name__, args.exc_value))


threading.excepthook = quiet_thread_errors


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def good_name(n):
    if not isinstance(n, str) or not n or n.startswith("/") or "\0" in n or "\n" in n:
        return False
    parts = n.split("/")
    return not any(p in ("", ".", "..") for p in parts) and parts[0] not in (STAGE, MARK)


def whole(v, low=0):
    # An integer from JSON (not a bool, not a float), at least low.
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError("%r is not a whole number >= %d" % (v, low))
    return v


def link_roots(root):
    # Where a symlink under root may lead: root, and a Hugging Face snapshot's blobs (<repo>/snapshots/<rev>).
    real = os.path.realpath(root)
    parent = os.path.dirname(real)
    roots = [real]
    if os.path.basename(parent) == "snapshots":
        roots.append(os.path.join(os.path.dirname(parent), "blobs"))
    return roots


def inside(path, roots):
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def pwrite_all(fd, view, pos):
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], pos + done)


def stage_name(name, size, mtime):
    return "%s.%d.%d.part" % (hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:32], size, mtime)


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        got = sock.recv(n - len(buf))
        if not got:
            raise EOFError("connection closed")
        buf += got
    return bytes(buf)


def read_msg(sock):
    (n,) = struct.unpack(">I", recv_exact(sock, 4))
    if n > 65536:
        raise ValueError("message too long")
    try:
        obj = json.loads(recv_exact(sock, n).decode("ascii"))
    except RecursionError:
        raise ValueError("message nested too deep")
    if not isinstance(obj, dict):
        raise ValueError("message is not a JSON object")
    return obj


def send_msg(sock, obj):
    data = json.dumps(obj).encode("ascii")
    sock.sendall(struct.pack(">I", len(data)) + data)


def answer(key, nonce):
    return hmac.new(key, nonce, hashlib.sha256).digest()


def file_mac(key, name, size, digest):
    msg = ("%s\0%d\0%s" % (name, size, digest or "")).encode("utf-8", "surrogateescape")
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def read_request():
    line = sys.stdin.buffer.readline(16 << 20)
    try:
        req = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError):
        die("no request on stdin")
    if not isinstance(req, dict):
        die("the request on stdin is not a JSON object")
    return req


def cache_path(root):
    tag = hashlib.sha256(root.rstrip("/").encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(os.path.expanduser("~"), ".cache", "sparkfleet", "hashes-%s.json" % tag)


def stat_key(st):
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


def load_cache(root, real):
    # The hash cache HASH_SCRIPT keeps (module_utils/sync/_content_hash.py): {relpath: [stat key, digest]}.
    try:
        fd = os.open(cache_path(root), os.O_RDONLY | os.O_NONBLOCK)  # a FIFO never blocks the receiver
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return {}
            raw = os.read(fd, (64 << 20) + 1)
        finally:
            os.close(fd)
        if len(raw) > 64 << 20:
            return {}
        cache = json.loads(raw.decode("utf-8", "replace"))
        if cache.get("root") == real and cache.get("algorithm") == ALGO and isinstance(cache.get("files"), dict):
            return cache["files"]
    except (OSError, ValueError, AttributeError, RecursionError):
        pass
    return {}


def write_cache(root, real, fresh):
    # Add {relpath: [stat key, digest]} to the cache HASH_SCRIPT reads, so nothing is read twice.
    if not fresh:
        return 0
    path = cache_path(root)
    entries = load_cache(root, real)
    entries.update(fresh)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w") as fh:
            json.dump({"root": real, "algorithm": ALGO, "files": entries}, fh)
        os.replace(tmp, path)
        return len(fresh)
    except OSError:
        return None


def write_marker(real, text):
    # The state of this node's copy (model_sync's copy_state), never written through a symlink in its place.
    tmp = os.path.join(real, MARK + ".new")
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, text.encode("utf-8", "replace")[:4096])
    finally:
        os.close(fd)
    os.replace(tmp, os.path.join(real, MARK))


def listing(real):
    # {relpath: size} of the regular files under real (no symlink followed, staging and marker aside).
    out = {}
    for dp, dn, fn in os.walk(real):
        if dp == real:
            dn[:] = [d for d in dn if d != STAGE]
        for n in fn:
            full = os.path.join(dp, n)
            rel = os.path.relpath(full, real)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if rel != MARK and (st.st_mode & 0o170000) == 0o100000:
                out[rel] = st.st_size
    return out


def receive(dest):
    req = read_request()
    files = {}
    try:
        for entry in req["files"]:
            name, size, mtime, mode, digest = entry
            if not good_name(name):
                die("refused file name %r" % (name,))
            if digest is not None and not isinstance(digest, str):
                raise ValueError("digest of %r" % name)
            files[name] = (whole(size), whole(mtime, -(1 << 62)), whole(mode) & 0o777, digest)
        want_hash = bool(req.get("hash")) or any(f[3] for f in files.values())
        streams = max(1, min(64, whole(req.get("streams", 1))))
        timeout = max(5, whole(req.get("timeout", 60)))
        state_text = req.get("state")
        if state_text is not None and not isinstance(state_text, str):
            raise ValueError("state")
    except (KeyError, TypeError, ValueError) as exc:
        die("bad request on stdin: %s" % exc)
    try:
        os.makedirs(dest, exist_ok=True)  # model_sync's guard has checked dest (like rsync --mkpath)
    except OSError as exc:
        die("cannot create %s: %s" % (dest, exc))
    real = os.path.realpath(dest)
    if not os.path.isdir(real):
        die("%s is not a directory" % dest)
    stage = os.path.join(real, STAGE)
    if os.path.islink(stage) or (os.path.exists(stage) and not os.path.isdir(stage)):
        os.unlink(stage)
    os.makedirs(stage, mode=0o700, exist_ok=True)
    # One transfer into dest at a time: a receiver left over from a killed run holds the lock until its ssh drops.
    sfd = os.open(stage, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    waited = time.time() + min(30, timeout)
    while True:
        try:
            fcntl.flock(sfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if time.time() > waited:
                die("another transfer into %s is running on this node (its staging directory is locked)" % dest, 6)
            time.sleep(0.2)
    if state_text:
        write_marker(real, state_text)  # the copy is incomplete from here until model_sync has verified it
    keep = dict((stage_name(n, f[0], f[1]), n) for n, f in files.items())
    offsets = {}
    for entry in os.listdir(stage):
        path = os.path.join(stage, entry)
        if entry in keep and os.path.isfile(path) and not os.path.islink(path):
            have = os.path.getsize(path)
            if have <= files[keep[entry]][0]:
                offsets[keep[entry]] = have
                continue
        if os.path.isdir(path) and not os.path.islink(path):
            for dp, dn, fn in os.walk(path, topdown=False):
                for x in fn:
                    os.unlink(os.path.join(dp, x))
                for x in dn:
                    os.rmdir(os.path.join(dp, x))
            os.rmdir(path)
        else:
            os.unlink(path)
    conn_env = os.environ.get("SSH_CONNECTION", "").split()
    bind = conn_env[2] if len(conn_env) == 4 else req.get("bind")
    if not bind or not isinstance(bind, str):
        die("no address to listen on (not run through ssh)")
    lsock = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind((bind, 0))
    lsock.listen(64)
    key = secrets.token_bytes(32)
    state = {"done": False, "bytes": 0, "last": time.time(), "ok": {}, "failed": {}, "ended": 0, "claimed": set(),
             "streams": 0, "nospace": False, "refused": 0}
    lock = threading.Lock()
    all_ended = threading.Condition(lock)
    pending = {}  # source address -> handshakes under way
    waiting = {}  # connection -> source address, oldest first: the handshakes under way, the first to make room
    per_source, total_pending = max(8, streams), 64 + streams
    handshake_s = min(10, timeout)

    def watch_stdin():
        sys.stdin.buffer.read()
        if not state["done"]:
            die("the run ended (stdin closed)", 3)

    def watchdog():
        while True:
            time.sleep(1)
            if time.time() - state["last"] > timeout:
                if not state["streams"]:
                    die("no stream connected within %d s" % timeout, 4)
                die("no data for %d s" % timeout, 4)

    def one_file(conn, msg, buf):
        name, off, length = msg.get("name"), whole(msg.get("offset")), whole(msg.get("length"))
        if not isinstance(name, str) or name not in files:
            raise ValueError("file %r was not announced" % (name,))
        size, mtime, mode, digest = files[name]
        if off + length != size:
            raise ValueError("bad range for %s" % name)
        with lock:
            if name in state["claimed"]:
                raise ValueError("%s sent twice" % name)
            state["claimed"].add(name)
        path = os.path.join(stage, stage_name(name, size, mtime))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        dfd = None
        keep_part = True  # a stream cut mid-file leaves the part for the next run; bad bytes are deleted
        try:
            if os.fstat(fd).st_size < off:
                raise ValueError("%s: resume offset %d beyond the staged %d bytes" % (name, off, os.fstat(fd).st_size))
            os.ftruncate(fd, off)
            reserve(fd, off, length)
            h = hashlib.new(ALGO) if want_hash else None
            if h is not None and off:
                pos = 0
                while pos < off:
                    chunk = os.pread(fd, min(BUF * 8, off - pos), pos)
                    if not chunk:
                        break
                    h.update(chunk)
                    pos += len(chunk)
            # The bytes go to disk with O_DIRECT where the filesystem takes it: no copy into the page cache (half the
            # receiver's kernel time) and no model left in the memory the GPU shares; block tails go through the cache.
            if hasattr(os, "O_DIRECT"):
                try:
                    dfd = os.open(path, os.O_WRONLY | os.O_DIRECT | os.O_NOFOLLOW)
                except OSError:
                    dfd = None
            pos, left, fill, eof = off, length, 0, False
            view = memoryview(buf)
            ready = select.poll()
            ready.register(conn.fileno(), select.POLLIN)
            while left or fill:
                if left:
                    # One wait for data, then whatever more is already there: big writes while the bytes flow, small
                    # ones while they trickle (a cut stream loses at most what was not written yet).
                    got = conn.recv_into(view[fill:], min(len(buf) - fill, left))
                    while got:
                        if h is not None:
                            h.update(view[fill:fill + got])
                        fill += got
                        left -= got
                        with lock:
                            state["bytes"] += got
                            state["last"] = time.time()
                        if not left or fill == len(buf) or not ready.poll(0):
                            break
                        got = conn.recv_into(view[fill:], min(len(buf) - fill, left))
                    eof = not got and bool(left)
                final = eof or not left
                if dfd is not None and pos % ALIGN and fill:
                    k = min(fill, ALIGN - pos % ALIGN)  # a resumed part ends mid-block: up to the next block
                    pwrite_all(fd, view[:k], pos)
                    pos += k
                    fill -= k
                    view[:fill] = bytes(view[k:k + fill])
                n = fill - fill % ALIGN if dfd is not None else fill
                if n:
                    pwrite_all(dfd if dfd is not None else fd, view[:n], pos)
                    pos += n
                rest = fill - n
                if rest and final:
                    pwrite_all(fd, view[n:fill], pos)
                    pos += rest
                    rest = 0
                if rest:
                    view[:rest] = bytes(view[n:fill])  # less than a block, kept for the next write
                fill = rest
                if eof:
                    raise EOFError("%s: connection closed with %d bytes to go" % (name, left))
            have = os.fstat(fd).st_size
            if have != size:
                raise ValueError("%s: %d bytes staged, expected %d" % (name, have, size))
            trailer = read_msg(conn)
            sent_digest = trailer.get("digest")
            mac = trailer.get("mac")
            keep_part = False
            if sent_digest is not None and not isinstance(sent_digest, str):
                raise ValueError("%s: the trailer's digest is not a string" % name)
            if not isinstance(mac, str) or not hmac.compare_digest(mac, file_mac(key, name, size, sent_digest)):
                raise ValueError("%s: the trailer's MAC does not check out (not from the sender of this run)" % name)
            why = None
            if h is not None:
                got = h.hexdigest()
                if not sent_digest and not digest:
                    why = "no source hash came with it"
                elif (sent_digest and got != sent_digest) or (digest and got != digest):
                    why = "content hash differs from the source's"
            if why:
                os.unlink(path)
                with lock:
                    state["failed"][name] = why
                return
            os.fchmod(fd, mode)
            os.utime(fd, ns=(mtime, mtime))
            final_digest = h.hexdigest() if h is not None else None
        except BaseException:
            if not keep_part:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            raise
        finally:
            os.close(fd)
            if dfd is not None:
                os.close(dfd)
        final = os.path.join(real, name)
        parent = os.path.dirname(final)
        os.makedirs(parent, exist_ok=True)
        rp = os.path.realpath(parent)
        if rp != real and not rp.startswith(real + "/"):
            raise ValueError("%s would land outside %s" % (name, dest))
        os.replace(path, final)
        with lock:
            state["ok"][name] = final_digest

    def serve(conn):
        buf = mmap.mmap(-1, BUF)  # page-aligned, as O_DIRECT wants
        name = "(stream)"
        try:
            while True:
                msg = read_msg(conn)
                if msg.get("end") is True:
                    break
                name = str(msg.get("name"))[:200]
                one_file(conn, msg, buf)
                name = "(stream)"
        except Exception as exc:
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                state["nospace"] = True
            with lock:
                state["failed"].setdefault(name, "%s" % (exc,) or type(exc).__name__)
        finally:
            try:
                conn.close()
            except OSError:
                pass
            with lock:
                state["ended"] += 1
                all_ended.notify_all()

    def handshake(conn, peer):
        ok = False
        try:
            with lock:
                if conn not in waiting:
                    raise ValueError("made room for a newer peer before its handshake began")
            conn.settimeout(handshake_s)
            nonce = secrets.token_bytes(32)
            conn.sendall(nonce)
            if not hmac.compare_digest(recv_exact(conn, 32), answer(key, nonce)):
                raise ValueError("bad answer")
            with lock:
                if state["streams"] >= streams:
                    raise ValueError("every stream is in")
                state["streams"] += 1
                ok = True
                if state["streams"] == streams:
                    try:
                        lsock.shutdown(socket.SHUT_RDWR)  # nobody else connects from here (and accept() wakes up)
                    except OSError:
                        pass
            conn.sendall(answer(key, b"receiver" + nonce))  # and this end proves it holds the secret too
        except Exception:
            pass
        finally:
            with lock:
                pending[peer] -= 1
                waiting.pop(conn, None)
                if not ok:
                    state["refused"] += 1
        if not ok:
            try:
                conn.close()
            except OSError:
                pass
            return
        state["last"] = time.time()
        conn.settimeout(timeout)
        serve(conn)

    threading.Thread(target=watch_stdin, daemon=True).start()
    threading.Thread(target=watchdog, daemon=True).start()
    emit({"port": lsock.getsockname()[1], "key": key.hex(), "offsets": offsets, "bind": bind})
    lsock.settimeout(0.5)
    # Handshakes run in threads of their own, bounded per source address and in all, each with its own deadline: a
    # peer that connects and says nothing, or a flood of wrong answers, never holds up the real sender's streams,
    # and never ends the receiver (its watchdog does, when no stream of this run comes in time). When every slot is
    # held (idle peers from many addresses), the oldest peer still in its handshake makes room for the newest.
    while True:
        with lock:
            if state["streams"] >= streams:
                break
        try:
            conn, addr = lsock.accept()
        except socket.timeout:
            continue
        except OSError:
            time.sleep(0.1)
            continue
        peer = addr[0]
        evict = None
        with lock:
            busy = pending.get(peer, 0) >= per_source
            if not busy and len(waiting) >= total_pending:
                # Every slot is held by peers that have not answered (idle connections from many addresses): the
                # oldest makes room, so the real sender, which answers within a round trip, always gets in.
                evict = next(iter(waiting))
                del waiting[evict]
            if not busy:
                pending[peer] = pending.get(peer, 0) + 1
                waiting[conn] = peer
            else:
                state["refused"] += 1
        if evict is not None:
            try:
                evict.shutdown(socket.SHUT_RDWR)   # its handshake thread ends on it and counts it refused
            except OSError:
                pass
        if busy:
            conn.close()
            continue
        threading.Thread(target=handshake, args=(conn, peer), daemon=True).start()
    lsock.close()
    with lock:
        while state["ended"] < streams:
            all_ended.wait(1)
    state["done"] = True
    fresh = {}
    for name, d in state["ok"].items():
        if d:
            try:
                fresh[name] = [stat_key(os.stat(os.path.join(real, name))), d]
            except OSError:
                pass
    cache = write_cache(dest, real, fresh) if fresh else None
    out = {"ok": sorted(state["ok"]), "failed": state["failed"], "bytes": state["bytes"],
           "resumed": sum(offsets.values()), "cache": cache, "hashed": want_hash, "refused": state["refused"],
           "listing": listing(real), "cpu": cpu_seconds()}
    if state["nospace"]:
        st = os.statvfs(real)
        staged = {}
        for entry in os.listdir(stage):
            if entry in keep:
                try:
                    staged[keep[entry]] = os.path.getsize(os.path.join(stage, entry))
                except OSError:
                    pass
        out["nospace"] = {"free": st.f_bavail * st.f_frsize,
                          "needed": sum(f[0] - staged.get(n, 0) for n, f in files.items() if n not in state["ok"])}
    emit(out)


def send(root):
    req = read_request()
    real = os.path.realpath(root)
    roots = link_roots(root)
    try:
        host, port, key = str(req["host"]), whole(req["port"]), bytes.fromhex(req["key"])
        timeout = max(5, whole(req.get("timeout", 60)))
        rate = whole(req.get("bwlimit", 0))  # bytes per second per stream, 0 = no limit
        want_hash = bool(req.get("hash"))
        bins = req["bins"]
        for b in bins:
            for name, off, size in b:
                if not good_name(name) or whole(off) > whole(size):
                    die("refused file entry %r" % (name,))
    except (KeyError, TypeError, ValueError) as exc:
        die("bad request on stdin: %s" % exc)
    out = {"bytes": 0, "files": 0, "errors": [], "digests": {}}
    cached = load_cache(root, real) if want_hash else {}
    fresh = {}
    lock = threading.Lock()
    watching = {"done": False}

    def watch_stdin():
        sys.stdin.buffer.read()
        if not watching["done"]:
            die("the run ended (stdin closed)", 3)

    def path_of(name):
        # A symlink out of the model directory is never followed: a link planted in a copy sends nothing.
        path = os.path.realpath(os.path.join(real, name))
        if not inside(path, roots):
            raise ValueError("%s is a symlink out of %s: not sent" % (name, root))
        return path

    def stream(items):
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            with lock:
                out["errors"].append("connect %s:%d: %s" % (host, port, exc))
                out["connect_failed"] = True
            return
        try:
            nonce = recv_exact(sock, 32)
            sock.sendall(answer(key, nonce))
            try:
                proof = recv_exact(sock, 32)
            except (OSError, EOFError):
                raise ValueError("the receiver at %s:%d refused this run's secret" % (host, port))
            if not hmac.compare_digest(proof, answer(key, b"receiver" + nonce)):
                raise ValueError("%s:%d did not prove it holds this run's secret: nothing sent" % (host, port))
            # Blocking from here: sendfile(2) moves a whole file in one call; a peer that stops reading for the
            # timeout makes it fail (SO_SNDTIMEO), like the receiver's watchdog on its side.
            sock.settimeout(None)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", timeout, 0))
            view = memoryview(mmap.mmap(-1, BUF))  # page-aligned, as O_DIRECT wants
            start = time.time()
            sent = 0

            def pace(n):
                with lock:
                    out["bytes"] += n
                if rate:
                    ahead = sent / float(rate) - (time.time() - start)
                    if ahead > 0:
                        time.sleep(ahead)

            for name, off, size in items:
                off, size = int(off), int(size)
                path = path_of(name)
                with open(path, "rb", buffering=0) as fh:
                    before = os.fstat(fh.fileno())
                    if before.st_size != size:
                        raise ValueError("%s is %d bytes, the manifest says %d (changed during the sync?)"
                                         % (name, before.st_size, size))
                    value = None
                    hit = cached.get(name) if want_hash else None
                    if isinstance(hit, list) and len(hit) == 2 and hit[0] == stat_key(before):
                        value = hit[1]
                    send_msg(sock, {"name": name, "offset": off, "length": size - off})
                    if want_hash and value is None:
                        # Each byte read once, from the disk into this buffer (O_DIRECT where the filesystem allows:
                        # no page cache on the head either), hashed, then sent from the same buffer.
                        h = hashlib.new(ALGO)
                        rfd = None
                        if hasattr(os, "O_DIRECT"):
                            try:
                                rfd = os.open(path, os.O_RDONLY | os.O_DIRECT)
                            except OSError:
                                rfd = None
                        try:
                            pos = 0
                            while pos < size:
                                fd = rfd if rfd is not None and pos % ALIGN == 0 else fh.fileno()
                                n = min(os.preadv(fd, [view], pos), size - pos)
                                if n <= 0:
                                    raise EOFError("%s: short read at %d of %d bytes" % (name, pos, size))
                                h.update(view[:n])
                                lo = max(0, off - pos)
                                if lo < n:
                                    sock.sendall(view[lo:n])
                                    sent += n - lo
                                    pace(n - lo)
                                pos += n
                        finally:
                            if rfd is not None:
                                os.close(rfd)
                        value = h.hexdigest()
                        after = os.fstat(fh.fileno())
                        if stat_key(after) == stat_key(before):
                            with lock:
                                fresh[name] = [stat_key(after), value]
                    else:
                        # Nothing to hash (cached, or not asked): sendfile(2), no copy through this process.
                        pos = off
                        while pos < size:
                            step = size - pos if not rate else min(size - pos, max(1 << 16, rate // 10))
                            n = os.sendfile(sock.fileno(), fh.fileno(), pos, step)
                            if not n:
                                raise EOFError("%s: short send" % name)
                            pos += n
                            sent += n
                            pace(n)
                if want_hash:
                    with lock:
                        out["digests"][name] = value
                send_msg(sock, {"digest": value, "mac": file_mac(key, name, size, value)})
                with lock:
                    out["files"] += 1
            send_msg(sock, {"end": True})
            sock.shutdown(socket.SHUT_WR)
            sock.recv(1)  # the receiver closes once the last file is renamed
        except Exception as exc:
            with lock:
                out["errors"].append(str(exc))
        finally:
            sock.close()

    threading.Thread(target=watch_stdin, daemon=True).start()
    threads = [threading.Thread(target=stream, args=(b,)) for b in bins]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    watching["done"] = True
    if fresh:
        write_cache(root, real, fresh)
    out["cpu"] = cpu_seconds()
    emit(out)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("receive", "send"):
        die("usage: receive DEST | send ROOT")
    try:
        if sys.argv[1] == "receive":
            receive(sys.argv[2])
        else:
            send(sys.argv[2])
    except Exception as exc:  # never a traceback, whatever the input: one line on stderr
        die("%s: %s" % (type(exc).__name__, exc))
    sys.stdout.flush()
    os._exit(0)
'''

SCRIPT_ID = hashlib.sha256(FAST_SCRIPT.encode("utf-8")).hexdigest()[:12]


class LineProc(object):
    """A helper process that gets one JSON request line on stdin and answers JSON lines on stdout.

    AnsibleModule.run_command cannot do this: it writes all of stdin, closes it and waits for the end, while the
    transport needs the receiver's first line (port, key) before the sender starts, and keeps the receiver's stdin
    open for the whole transfer.

    Its stdin stays open while it runs: the fast-copy script exits as soon as it closes, so a killed module
    (whose pipes the kernel closes) never leaves a receiver listening or a sender sending.
    """

    def __init__(self, argv, request, env=None):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=environ(env), close_fds=True)
        self.lines = queue.Queue()
        self.err = []
        threading.Thread(target=self._pump_out, daemon=True).start()
        self._err_pump = threading.Thread(target=self._pump_err, daemon=True)
        self._err_pump.start()
        if request is not None:
            self.send(request)

    def send(self, request):
        """Write the request line (a process started early gets it once it is known)."""
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode("utf-8", "surrogateescape"))
            self.proc.stdin.flush()
        except (IOError, OSError, ValueError):
            pass

    def _pump_out(self):
        for raw in iter(self.proc.stdout.readline, b""):
            self.lines.put(raw)
        self.lines.put(None)

    def _pump_err(self):
        for raw in iter(self.proc.stderr.readline, b""):
            self.err.append(raw.decode("utf-8", "replace"))

    def line(self, timeout=None):
        """The next JSON object it printed, or None when it exited (or the timeout passed) without one."""
        try:
            raw = self.lines.get(timeout=timeout)
        except queue.Empty:
            return None
        if raw is None:
            self.lines.put(None)
            return None
        try:
            obj = _json.loads(raw.decode("utf-8", "surrogateescape"), "the helper's line", LINE_MAX_BYTES)
        except ValueError:
            return self.line(timeout)
        return obj if isinstance(obj, dict) else None

    def close(self, wait_s=10):
        try:
            self.proc.stdin.close()
        except (IOError, OSError, ValueError):
            pass
        deadline = time.time() + wait_s
        while self.proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode

    def err_tail(self):
        if self.proc.poll() is not None:
            # It exited: its last words (why it stopped) may still be in the pipe, not yet read by the pump thread.
            self._err_pump.join(5)
        return tail("".join(self.err), 6)
