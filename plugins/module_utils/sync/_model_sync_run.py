# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""model_sync's run on the source node, phase by phase: checks, plan, hash, transfer, verify, state, cache drop.

The module (plugins/modules/model_sync.py) is its argument spec and a call to run(); the pure pieces (checks,
planning, packing, parsing, command lines) are in _model_sync.py. What moves the bytes is a transport
(_sync_transport.py, the interface; _sync_tcp.py and _sync_rsync.py, one each), chosen in _sync_transports.py.
Commands run through _command.Runner.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import pwd
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._content_hash import (
    HASH_SCRIPT,
    cache_file,
    content_mismatches,
    fingerprint,
    parse_hashes,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._paths import model_path_problem
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import (
    FanoutScheduler,
    canonical_host,
    check_model_dir,
    compare_sizes,
    copy_state,
    dest_problem,
    host_spec,
    is_no_space,
    no_space_hint,
    no_space_message,
    parse_dest_probe,
    parse_df_avail,
    parse_itemize,
    parse_size_list,
    plan_moves,
    ssh_argv,
    summarize,
    tree_rounds,
    unique_hosts,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_shell import ssh_user_problem
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_transport import FALL_THROUGH
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_transports import (
    RSYNC,
    chain,
    destination_commands,
    transports,
)

SOURCE = "source"
# Seconds a run waits for the transfer of an earlier run (stopped first) to let go of the destination directory.
LOCK_WAIT = 30
# An ssh master connection per destination, shared by the run's control commands for this long after the last one.
CONTROL_PERSIST = 30


def _mb_per_s(nbytes, seconds):
    return round(nbytes / seconds / 1e6, 1) if seconds > 0 and nbytes else 0.0


# --------------------------------------------------------------------------- one transfer per directory

def _children(pid):
    """Every descendant of pid (read from /proc), deepest last."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(0), [])
        out.extend(kids)
        todo.extend(kids)
    return out


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError as exc:
        return exc.errno == errno.EPERM


def stop_tree(pid, grace=5.0):
    """SIGTERM pid and every process it started (rsync, ssh, the sender), then SIGKILL what is left after grace."""
    tree = [pid] + _children(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in tree:
            try:
                os.kill(p, sig)
            except OSError:
                pass
        deadline = time.time() + grace
        while time.time() < deadline and any(_alive(p) for p in tree):
            time.sleep(0.1)
        if not any(_alive(p) for p in tree):
            return


class TransferLock(object):
    """One model_sync into a destination directory at a time, from this node.

    A run whose controller was killed leaves its module running on the source; the next run (the operator's re-run)
    stops that module and everything it started, then waits for the lock: the two never share the staging
    directory. The lock file holds the holder's pid; the kernel drops the lock with its last process.
    """

    def __init__(self, path):
        self.path = path
        self.fd = None

    def acquire(self, wait_s=LOCK_WAIT):
        """Take the lock; returns a sentence for the user when an earlier run's transfer had to be stopped."""
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        note = None
        if not self._try():
            holder = self._holder()
            if holder and holder != os.getpid():
                stop_tree(holder)
                note = ("a transfer of an earlier run (pid %d) was still running into this directory: it was stopped "
                        "before this run started" % holder)
            deadline = time.time() + wait_s
            while not self._try():
                if time.time() > deadline:
                    os.close(self.fd)
                    self.fd = None
                    raise OSError("another model_sync (pid %s) holds %s and did not stop within %d s"
                                  % (holder or "?", self.path, wait_s))
                time.sleep(0.2)
        os.ftruncate(self.fd, 0)
        os.write(self.fd, ("%d\n" % os.getpid()).encode("ascii"))
        return note

    def _try(self):
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            return False

    def _holder(self):
        try:
            return int(os.pread(self.fd, 32, 0).split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def release(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _resolve(name):
    """IP literals a host name resolves to on this node (empty when it does not resolve)."""
    try:
        return set(canonical_host(ai[4][0]) for ai in socket.getaddrinfo(name, 22, 0, socket.SOCK_STREAM))
    except (OSError, UnicodeError, ValueError):
        return set()


def user_home():
    """This user's home from the password database, not $HOME (become can leave the caller's $HOME in place): the
    hash caches and transfer locks live under it."""
    return pwd.getpwuid(os.getuid()).pw_dir


class ModelSync(object):
    """One run of model_sync on the source node; its transports reach back for the params, the runner, the ssh
    command to a host, the lock, the warnings and the source's stats and hashes."""

    SOURCE = SOURCE

    def __init__(self, module):
        self.module = module
        p = module.params
        self.p = p
        self.src = os.path.normpath(p["src"])
        self.dest = os.path.normpath(p["dest"])
        self.user = p["ssh_user"] or None
        self.runner = Runner(module)
        self.ssh_bin = self.runner.bin("ssh")
        self.rsync_bin = self.runner.bin("rsync")
        self.python = sys.executable or self.runner.bin("python3")
        # Every fixed command for a destination; the sync key's forced command allows exactly these.
        self.cmds = destination_commands(self.dest)
        self.lock = threading.Lock()
        self.warnings = []
        self.stats = {}
        self.plan_stats = {}
        self.source_hashes = None
        self.home = user_home()
        self.no_space = {}
        # Every registered transport (the rsync one also does the checksum and delete passes), and those the
        # transport choice tries in order.
        self.transports = transports(self)
        self.rsync = self.transports[RSYNC]
        self.chain = chain(self.transports, p["transport"])
        # Per destination, one ssh master connection for the run's control commands (probe, receiver, list, state).
        self.control_dir = None
        self.contacted = set()
        self.transfer_lock = None

    # ------------------------------------------------------------------ commands
    def ssh(self, forward_agent=False, mux=True):
        argv = ssh_argv(self.ssh_bin, self.p["ssh_cipher"], self.p["ssh_key"], self.p["ssh_opts"],
                        forward_agent=forward_agent, timeout=self.p["timeout"])
        if mux and self.control_dir:
            argv += ["-o", "ControlMaster=auto", "-o", "ControlPath=%s/%%C" % self.control_dir,
                     "-o", "ControlPersist=%d" % CONTROL_PERSIST]
        return argv

    def to(self, host, command, forward_agent=False, mux=True):
        """ssh argv running command on host; `--` ends ssh's options whatever the host is."""
        with self.lock:
            self.contacted.add(host)
        return self.ssh(forward_agent, mux) + ["--", host_spec(host, self.user), command]

    def _remote(self, host, script, data=None):
        # The runner expands no $VARS or ~: remote commands carry them for the destination's shell ($HOME).
        return self.runner.run(self.to(host, script), data=data)

    def _push_argv(self, feeder, target, **kwargs):
        return self.rsync.push_argv(feeder, target, **kwargs)

    def names_data(self, names):
        return b"".join(n.encode("utf-8", "surrogateescape") + b"\0" for n in names)

    def local_hashes(self, names, fail=True):
        """Content hashes of the source's files (cached under this user's home). With fail=False, (hashes, error)
        for a caller in another thread (fail_json must come from the main one)."""
        argv = [self.python, "-c", HASH_SCRIPT, self.src, cache_file(self.src, self.home)]
        res = self.runner.run(argv, data=self.names_data(names))
        what = "hashing the source model %s failed" % self.src
        hashes = why = None
        if not res.ok:
            if fail:
                self.runner.fail(res, what)
            why = res.why(what)
        else:
            try:
                hashes = parse_hashes(res.stdout)
            except ValueError as exc:
                why = "hashing the source model %s: %s" % (self.src, exc)
        if fail and why:
            self.module.fail_json(msg=why)
        return hashes if fail else (hashes, why)

    def remote_hashes(self, host, names):
        """Content hashes of the files on a destination, or (None, error)."""
        res = self._remote(host, self.cmds["hash"], data=self.names_data(names))
        if not res.ok:
            return None, res.why("hashing %s on %s failed" % (self.dest, host))
        try:
            return parse_hashes(res.stdout), None
        except ValueError as exc:
            return None, "hashing %s on %s: %s" % (self.dest, host, exc)

    def content_check(self, host, info, moved, expected, source_hashes):
        """Files that would be skipped (same size and mtime) but whose content differs join the transfer."""
        skipped = [n for n in sorted(expected) if n not in set(name for name, _s in moved)]
        if not skipped:
            return moved
        hashes, err = self.remote_hashes(host, skipped)
        if err:
            info.update(status="failed", msg=err)
            return moved
        bad = content_mismatches(source_hashes, hashes, skipped)
        info["content_mismatch"] = bad
        info["hashes_checked"] = True
        if bad:
            moved = list(moved) + [(n, expected[n]) for n in bad]
            info["would_transfer"] = sorted(set(info["would_transfer"]) | set(bad))
            info["bytes_needed"] += sum(expected[n] for n in bad)
            info["status"] = "pending"
        return moved

    # ------------------------------------------------------------------ agent, master connections, lock
    def open_control(self):
        # A short path: a unix socket path holds at most 107 bytes, %C adds 40.
        self.control_dir = tempfile.mkdtemp(prefix="sfl-ms-", dir="/tmp")

    def close_control(self):
        if not self.control_dir:
            return
        for host in sorted(self.contacted):
            self.runner.run(self.ssh()[:1] + ["-o", "ControlPath=%s/%%C" % self.control_dir, "-O", "exit", "--",
                                              host_spec(host, self.user)])
        shutil.rmtree(self.control_dir, ignore_errors=True)
        self.control_dir = None

    def take_lock(self):
        tag = hashlib.sha256(self.dest.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        self.transfer_lock = TransferLock(os.path.join(self.home, ".cache", "sparkfleet", "sync-%s.lock" % tag))
        try:
            note = self.transfer_lock.acquire()
        except OSError as exc:
            self.transfer_lock = None
            self.module.fail_json(msg="nothing was copied: %s" % exc,
                                  hint="Stop the other model_sync into %s on this node, then run again." % self.dest)
        if note:
            self.warnings.append(note)

    def close(self):
        for t in self.transports.values():
            t.cleanup()
        self.close_control()
        if self.transfer_lock:
            self.transfer_lock.release()

    # ------------------------------------------------------------------ phases
    def preflight(self, host):
        """What dest is on the target, free space there, and what to send (from its listing). Read-only."""
        info = {"status": "pending", "fed_from": None, "files_transferred": 0, "bytes_transferred": 0,
                "files_deleted": 0, "bytes_needed": 0, "bytes_available": None, "seconds": 0.0,
                "mb_per_s": 0.0, "streams": 0, "verified": None, "would_transfer": [], "would_delete": [],
                "content_mismatch": [], "transport": None, "bytes_resumed": 0}
        # The guard comes first: nothing, not even a dry run, touches a dest that is not a model directory.
        res = self._remote(host, self.cmds["probe"])
        if not res.ok:
            info.update(status="failed", msg=res.why("cannot inspect %s on %s" % (self.dest, host)))
            return info, []
        probe = parse_dest_probe(res.stdout)
        why = dest_problem(self.dest, probe)
        if why:
            info.update(status="failed", msg="%s: refusing to sync into it: %s" % (host, why))
            return info, []
        try:
            avail = parse_df_avail(probe["df"])
        except ValueError as exc:
            info.update(status="failed", msg="cannot read free space under %s on %s: %s" % (self.dest, host, exc))
            return info, []
        info["bytes_available"] = avail
        info["_state"] = probe["state"]
        if self.p["checksum"]:
            # Content decides: rsync reads every file on both ends.
            argv, _env = self._push_argv(SOURCE, host, dry_run=True, delete=self.p["delete"])
            res = self.runner.run(argv)
            if not res.ok:
                info.update(status="failed", msg=res.why("rsync dry run to %s failed" % host))
                return info, []
            entries = parse_itemize(res.stdout)
            _nfiles, nbytes, names, deleted = summarize(entries)
            moved = [(e["name"], e["size"]) for e in entries if e["transferred"]]
        else:
            moved, deleted = plan_moves(self.plan_stats, probe["listing"] or {}, self.p["delete"])
            names, nbytes = [n for n, _s in moved], sum(s for _n, s in moved)
        info.update(would_transfer=names, would_delete=deleted, bytes_needed=nbytes)
        # Old versions stay until each new file is renamed into place, so the new bytes must all fit.
        if nbytes > avail:
            info.update(status="failed", no_space=True,
                        msg="%s has %d bytes (%.1f GB) free under %s, the sync needs %d bytes (%.1f GB)"
                            % (host, avail, avail / 1e9, self.dest, nbytes, nbytes / 1e9))
            return info, moved
        info["status"] = "in_sync" if not names and not deleted else "pending"
        return info, moved

    def _space_left(self, target, text):
        """After a full disk on target: the message with (bytes still needed, bytes free), from a fresh probe."""
        res = self._remote(target, self.cmds["probe"])
        probe = parse_dest_probe(res.stdout if res.ok else "")
        try:
            free = parse_df_avail(probe["df"])
        except ValueError:
            return text
        moved, _deleted = plan_moves(self.plan_stats, probe["listing"] or {})
        with self.lock:
            self.no_space[target] = (sum(s for _n, s in moved), free)
        return no_space_message(target, self.dest, *self.no_space[target])

    def prepare_dest(self, target):
        """Make dest's staging directory on target and mark the copy incomplete there; an error or None."""
        res = self._remote(target, self.cmds["prepare"],
                           data=copy_state(False, reason="a transfer started and has not finished").encode())
        return None if res.ok else res.why("cannot prepare %s on %s" % (self.dest, target))

    def transfer(self, feeder, target, moved, info):
        """Push the files with the chain's transports (each takes what the one before could not deliver), delete
        extras, tidy up."""
        start = time.time()
        errors = []
        nfiles = nbytes = 0
        used = []
        prepared = False
        rest = list(moved)
        for i, t in enumerate(self.chain):
            if not rest:
                break
            if t.needs_prepare and not prepared:
                why = self.prepare_dest(target)
                if why:
                    return False, why
                prepared = True
            out = t.send(feeder, target, rest, info)
            nfiles, nbytes = nfiles + out.files, nbytes + out.sent
            info["bytes_resumed"] += out.resumed
            last = i == len(self.chain) - 1
            # The transport shown: those that delivered something, and the last one tried.
            used += [t.name] if (out.files or last or out.status not in FALL_THROUGH) else []
            info["transport"] = "+".join(used)
            if out.ok:
                rest = []
            elif out.status == "nospace":
                # Sending the rest another way would fill the same disk: stop with the numbers.
                return False, out.msg if target in self.no_space else self._space_left(target, out.msg)
            elif out.status in FALL_THROUGH and not last:
                with self.lock:
                    self.warnings.append("%s; sending %s over %s" % (out.msg, "them" if out.status == "partial" else
                                                                     "everything", self.chain[i + 1].name))
                rest = [m for m in rest if m[0] not in out.delivered]
                t.forget(target)
            else:
                errors.append(out.msg)
                rest = []
        if not used:
            info["transport"] = RSYNC  # nothing to send: only the delete pass (rsync) runs, if any
        if not errors and self.p["delete"] and not prepared:
            why = self.prepare_dest(target)
            if why:
                return False, why
        if not errors and self.p["delete"] and info["would_delete"]:
            argv, _env = self._push_argv(SOURCE, target, delete=True, existing_only=True)
            res = self.runner.run(argv)
            if not res.ok:
                errors.append(res.why("delete pass"))
            else:
                info["files_deleted"] = len(summarize(parse_itemize(res.stdout))[3])
        seconds = time.time() - start
        info.update(files_transferred=nfiles, bytes_transferred=nbytes, seconds=round(seconds, 2),
                    mb_per_s=_mb_per_s(nbytes, seconds))
        if errors:
            text = "; ".join(errors)
            if is_no_space(text):
                return False, self._space_left(target, "push to %s: %s" % (target, text))
            where = "from this node" if feeder == SOURCE else "from %s" % feeder
            return False, "push to %s %s failed: %s" % (target, where, text)
        return True, None

    def verify(self, host, info, expected, source_hashes=None, names=()):
        """Problems with host's copy: every source file there with the source's size (and hash), read in this run."""
        if info["status"] == "in_sync":
            listing = None  # the plan's listing of this run found every file as the source has it
        elif self.listing_of(host) is not None:
            listing = self.listing_of(host)  # a transport listed the directory after its last rename
        else:
            res = self._remote(host, self.cmds["list"])
            if not res.ok:
                return [res.why("cannot list %s" % self.dest)]
            listing = parse_size_list(res.stdout)
        problems = compare_sizes(expected, listing) if listing is not None else []
        if not problems and source_hashes is not None and names:
            hashes, err = self.remote_hashes(host, names)
            if err:
                return [err]
            problems = ["%s differs in content from the source" % n
                        for n in content_mismatches(source_hashes, hashes, names)]
        if not problems and self.p["checksum"] and info["status"] != "in_sync":
            argv, _env = self._push_argv(SOURCE, host, dry_run=True, checksum=True)
            res = self.runner.run(argv)
            if not res.ok:
                return [res.why("checksum re-check failed")]
            problems = ["%s differs by checksum" % n for n in summarize(parse_itemize(res.stdout))[2]]
        return problems

    def listing_of(self, host):
        for t in self.chain:
            listing, _names = t.checked(host)
            if listing is not None:
                return listing
        return None

    def hash_checked(self, host):
        names = set()
        for t in self.chain:
            names |= t.checked(host)[1]
        return names

    def write_state(self, host, info, fingerprint_):
        """Record what host's copy is in DEST/.sparkfleet-model (complete only when this run verified it)."""
        complete = info["status"] in ("synced", "in_sync")
        verified = info["verified"] is True
        old = info.get("_state") or {}
        if (complete and info["status"] == "in_sync" and old.get("copy") == "complete"
                and old.get("verified") == ("yes" if verified else "no")
                and old.get("fingerprint") == (fingerprint_ or "none")):
            return None  # the record already says so: a re-run writes nothing
        text = copy_state(complete, fingerprint_ if complete else None, verified and complete,
                          None if complete else info.get("msg"))
        res = self._remote(host, self.cmds["state"], data=text.encode("utf-8"))
        return None if res.ok else res.why("recording the state of the copy on %s failed" % host)

    def drop_local_cache(self, names):
        dropped = 0
        for rel in names:
            try:
                fd = os.open(os.path.join(self.src, rel), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                dropped += 1
            finally:
                os.close(fd)
        return dropped

    def drop_remote_cache(self, host, names):
        # Only the model's own files (sent on stdin), never whatever else lives under dest.
        res = self._remote(host, self.cmds["drop_cache"], data=self.names_data(names))
        return None if res.ok else res.why("page-cache drop on %s failed" % host)

    def _each(self, hosts, call, *args):
        """call(host, *args) for every host at once; {host: result}."""
        if not hosts:
            return {}
        with ThreadPoolExecutor(max_workers=min(8, len(hosts))) as pool:
            futures = dict((h, pool.submit(call, h, *args)) for h in hosts)
            return dict((h, f.result()) for h, f in futures.items())

    # ------------------------------------------------------------------ main
    def check_params(self):
        """The destinations, each host once; fails before any connection on a bad option."""
        m, p = self.module, self.p
        for name, low in (("streams", 1), ("bwlimit", 0), ("timeout", 0)):
            if p[name] < low:
                m.fail_json(msg="%s must be %d or more, got %s" % (name, low, p[name]))
        why = ssh_user_problem(p["ssh_user"])
        if why:
            m.fail_json(msg="%s; nothing was copied" % why, hint="Set ssh_user to the login name on the destinations.")
        if not p["destinations"]:
            m.fail_json(msg="destinations is empty: name at least one host to push to")
        hosts, problems, merged = unique_hosts(p["destinations"], _resolve)
        if problems:
            m.fail_json(msg="destinations: %s; nothing was copied" % "; ".join(problems),
                        hint="List the destinations by fabric IP or host name, one per element.")
        for kept, dropped in merged:
            self.warnings.append("destinations %s and %s are the same host: it is synced once, as %s"
                                 % (kept, dropped, kept))
        for name in ("src", "dest"):
            why = model_path_problem(p[name], name)
            if why:
                m.fail_json(msg="%s; nothing was copied" % why,
                            hint="Set %s to the model's own directory, e.g. /models/<model-name>." % name)
        return hosts

    def run(self):
        m = self.module
        started = time.time()
        self.cpu_start = os.times()
        hosts = self.check_params()
        mark = time.time()
        phases = {}
        report, problems = check_model_dir(self.src)
        if problems:
            links = any("symlink out of" in why for why in problems)
            m.fail_json(msg="source model %s %s, nothing was copied: %s"
                            % (self.src, "links out of its directory" if links else "is incomplete or corrupt",
                               "; ".join(problems[:10])),
                        problems=problems, hint=("Copy the linked files into the model directory (a link out of it "
                                                 "is never followed)." if links else
                                                 "Re-download the named files on this node, then run again."))
        expected = dict(report["files"])
        for rel in expected:
            self.stats[rel] = os.stat(os.path.join(self.src, rel))
        self.plan_stats = dict((rel, (st.st_size, st.st_mtime_ns)) for rel, st in self.stats.items())
        result = {"changed": False, "files_total": len(expected), "files_transferred": 0,
                  "bytes_transferred": 0, "seconds": 0.0, "transfer_seconds": 0.0, "mb_per_s": 0.0,
                  "rounds": [], "destinations": {}, "fingerprint": None, "phase_seconds": {}, "verified": False,
                  "cpu_seconds": {}}
        phases["checks"] = round(time.time() - mark, 2)
        if not m.check_mode:
            self.take_lock()
        self.open_control()
        try:
            self._run(hosts, expected, result, phases, started)
        finally:
            self.close()

    def _fail_hosts(self, result, bad, hint, started):
        result["seconds"] = round(time.time() - started, 2)
        self._strip(result)
        self.module.fail_json(msg="nothing was copied: " + "; ".join(result["destinations"][h]["msg"] for h in bad),
                              hint=hint, **result)

    @staticmethod
    def _strip(result):
        for info in result["destinations"].values():
            for key in [k for k in info if k.startswith("_")] + ["hashes_checked", "no_space"]:
                info.pop(key, None)

    def _run(self, hosts, expected, result, phases, started):
        m = self.module
        mark = time.time()
        moved = {}
        for host, (info, mv) in self._each(hosts, self.preflight).items():
            result["destinations"][host] = info
            moved[host] = mv
        result["destinations"] = dict((h, result["destinations"][h]) for h in hosts)
        bad = [h for h in hosts if result["destinations"][h]["status"] == "failed"]
        if bad:
            full = [h for h in bad if result["destinations"][h].get("no_space")]
            hint = (no_space_hint(full[0], self.dest, result["destinations"][full[0]]["bytes_needed"],
                                  result["destinations"][full[0]]["bytes_available"]) if full else
                    "Fix ssh access to the destination (user, key, fabric IP) or its model directory, then run again.")
            self._fail_hosts(result, bad, hint, started)

        phases["plan"] = round(time.time() - mark, 2)
        mark = time.time()
        source_hashes = None
        if m.params["verify_content"]:
            # Up front, only the files the plan would skip need the source's hash (a same-size corruption on a
            # destination); the tcp sender hashes the files it sends while it sends them.
            skipped = set(expected) if m.check_mode else set()
            for h in hosts:
                skipped |= set(expected) - set(n for n, _s in moved[h])
            skipped = sorted(skipped)
            source_hashes = self.local_hashes(skipped) if skipped else {}
            self.source_hashes = source_hashes
            checked = self._each(hosts, lambda h: self.content_check(h, result["destinations"][h], moved[h],
                                                                     expected, source_hashes))
            moved.update(checked)
            bad = [h for h in hosts if result["destinations"][h]["status"] == "failed"]
            if bad:
                self._fail_hosts(result, bad, "Check that python3 runs on the destination for the sync user, then "
                                              "run again.", started)

        pending = [h for h in hosts if result["destinations"][h]["status"] == "pending"]
        holders = [SOURCE] + [h for h in hosts if result["destinations"][h]["status"] == "in_sync"]
        result["files_transferred"] = sum(len(moved[h]) for h in pending)
        result["bytes_transferred"] = sum(sum(s for _n, s in moved[h]) for h in pending)
        result["changed"] = bool(pending)

        phases["hash"] = round(time.time() - mark, 2)
        if m.check_mode:
            if source_hashes is not None:
                result["fingerprint"] = fingerprint(expected.items(), source_hashes)
            result["phase_seconds"] = phases
            result["rounds"] = [[list(p) for p in r] for r in tree_rounds(holders, pending)]
            for h in pending:
                result["destinations"][h].update(status="would_sync", transport=m.params["transport"])
            result["seconds"] = round(time.time() - started, 2)
            self._strip(result)
            m.exit_json(**result)

        warnings = self.warnings
        # The fan-out is the first transport's: it sets up its relays and side work (hashing what it does not).
        first = self.chain[0]
        try:
            holders = first.prepare(holders, pending, moved)
            t0 = time.time()
            self._fan_out(holders, pending, moved, result)
            result["transfer_seconds"] = round(time.time() - t0, 2)
        finally:
            first.cleanup()
        phases["transfer"] = result["transfer_seconds"]
        mark = time.time()
        if source_hashes is not None:
            for t in self.chain:
                got, err = t.source_hashes()
                if err:
                    self._strip(result)
                    m.fail_json(msg=err, **result)
                source_hashes.update(got)
            rest = [n for n in sorted(expected) if n not in source_hashes]
            if rest:
                source_hashes.update(self.local_hashes(rest))
            result["fingerprint"] = fingerprint(expected.items(), source_hashes)
        phases["hash"] = round(phases["hash"] + time.time() - mark, 2)
        mark = time.time()

        failed = [h for h in pending if result["destinations"][h]["status"] == "failed"]
        synced = [h for h in hosts if h not in failed]
        result["files_transferred"] = sum(result["destinations"][h]["files_transferred"] for h in hosts)
        result["bytes_transferred"] = sum(result["destinations"][h]["bytes_transferred"] for h in hosts)
        result["mb_per_s"] = _mb_per_s(result["bytes_transferred"], result["transfer_seconds"])
        result["changed"] = bool(result["files_transferred"] or
                                 any(result["destinations"][h]["files_deleted"] for h in hosts))

        if m.params["verify"]:
            def one(h):
                info = result["destinations"][h]
                sent = info["would_transfer"] if h in pending else []
                checked = self.hash_checked(h)
                return self.verify(h, info, expected, source_hashes,
                                   [n for n in sent if n in expected and n not in checked])
            for h, problems in self._each(synced, one).items():
                info = result["destinations"][h]
                info["verified"] = not problems
                if problems:
                    info.update(status="failed", msg="verify on %s: %s" % (h, "; ".join(problems[:10])))
                    failed.append(h)
        result["verified"] = bool(m.params["verify"] and hosts and not failed and
                                  all(result["destinations"][h]["verified"] is True for h in hosts))
        phases["verify"] = round(time.time() - mark, 2)
        # What each node's copy is now (pending ones were marked incomplete before their first byte).
        states = self._each([h for h in hosts if h in pending or h in synced],
                            lambda h: self.write_state(h, result["destinations"][h], result["fingerprint"]))
        for h, err in states.items():
            info = result["destinations"][h]
            if h in failed:
                info["copy"] = "incomplete"
            else:
                info["copy"] = "complete"
            if err:
                warnings.append(err)
        mark = time.time()
        if m.params["drop_cache"]:
            result["cache_dropped_source_files"] = self.drop_local_cache(expected)
            for h, err in self._each([h for h in hosts if h not in failed], self.drop_remote_cache,
                                     sorted(expected)).items():
                if err:
                    warnings.append(err)
            phases["drop_cache"] = round(time.time() - mark, 2)
        result["phase_seconds"] = phases
        result["seconds"] = round(time.time() - started, 2)
        now = os.times()
        remote_cpu = {}
        for t in self.chain:
            for host, secs in t.cpu_seconds().items():
                remote_cpu[host] = round(remote_cpu.get(host, 0.0) + secs, 3)
        result["cpu_seconds"] = dict(remote_cpu, source=round(sum(now[:4]) - sum(self.cpu_start[:4]), 3))
        for w in warnings:
            m.warn(w)
        self._strip(result)
        if failed:
            full = [h for h in failed if h in self.no_space]
            hint = (no_space_hint(full[0], self.dest, *self.no_space[full[0]]) if full else
                    "Run again: finished files are kept and only the rest is sent.")
            m.fail_json(msg="; ".join(result["destinations"][h]["msg"] for h in failed), hint=hint, **result)
        m.exit_json(**result)

    def _fan_out(self, holders, pending, moved, result):
        sched = FanoutScheduler(holders, pending)
        rounds = []
        with ThreadPoolExecutor(max_workers=max(1, len(pending))) as pool:
            running = {}
            while True:
                pairs = sched.next()
                if pairs:
                    rounds.append([list(p) for p in pairs])
                for feeder, target in pairs:
                    info = result["destinations"][target]
                    info["fed_from"] = feeder
                    running[pool.submit(self.transfer, feeder, target, moved[target], info)] = (feeder, target)
                if not running:
                    break
                done, _rest = wait(list(running), return_when=FIRST_COMPLETED)
                for fut in done:
                    feeder, target = running.pop(fut)
                    ok, msg = fut.result()
                    info = result["destinations"][target]
                    info["status"] = "synced" if ok else "failed"
                    if msg:
                        info["msg"] = msg
                    sched.done(feeder, target, ok)
            # Targets left when every holder failed were never started.
            for target in sched.pending:
                result["destinations"][target].update(status="failed", msg="%s was not fed: no holder left" % target)
        result["rounds"] = rounds


def run(module):
    """Run model_sync with an AnsibleModule whose params follow the module's argument spec; exits the module."""
    ModelSync(module).run()
