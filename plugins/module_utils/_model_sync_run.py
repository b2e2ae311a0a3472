# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""model_sync's run: what the module does on the source node, phase by phase (checks, plan, hash, transfer, verify).

The module (plugins/modules/model_sync.py) is its argument spec and a call to run(); the pure pieces (checks,
packing, parsing, command lines) are in _model_sync.py, the TCP transport's programs in _fast_copy.py.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils._content_hash import (
    HASH_SCRIPT,
    cache_file,
    content_mismatches,
    fingerprint,
    parse_hashes,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils._paths import model_path_problem
from ansible_collections.sparkfleet.vllm.plugins.module_utils._fast_copy import FAST_SCRIPT, LineProc
from ansible_collections.sparkfleet.vllm.plugins.module_utils._model_sync import (
    TEMP_DIR_NAME,
    FanoutScheduler,
    check_model_dir,
    compare_sizes,
    dest_problem,
    destination_commands,
    fast_bins,
    fast_request_files,
    host_spec,
    pack_bins,
    parse_dest_probe,
    parse_df_avail,
    parse_itemize,
    parse_size_list,
    rsync_argv,
    rsync_target,
    ssh_argv,
    summarize,
    tree_rounds,
)

SOURCE = "source"


def _mb_per_s(nbytes, seconds):
    return round(nbytes / seconds / 1e6, 1) if seconds > 0 and nbytes else 0.0


class ModelSync(object):

    def __init__(self, module):
        self.module = module
        p = module.params
        self.p = p
        self.src = os.path.normpath(p["src"])
        self.dest = os.path.normpath(p["dest"])
        self.user = p["ssh_user"]
        self.runner = Runner(module)
        self.ssh_bin = self.runner.bin("ssh")
        self.rsync_bin = self.runner.bin("rsync")
        self.python = sys.executable or self.runner.bin("python3")
        # Every fixed command for a destination; the sync key's forced command allows exactly these.
        self.cmds = destination_commands(self.dest)
        self.agent_env = {}
        self.agent_bin = None
        self.agent_pid = None
        self.lock = threading.Lock()
        self.warnings = []
        self.stats = {}
        self.source_hashes = None
        self.home = pwd.getpwuid(os.getuid()).pw_dir
        # The source's hashes the tcp sender computed (or read from its cache) while sending, and per destination
        # the files its receiver checked against them before giving them their names.
        self.sent_digests = {}
        self.hash_verified = {}

    # ------------------------------------------------------------------ commands
    def _ssh(self, forward_agent=False):
        return ssh_argv(self.ssh_bin, self.p["ssh_cipher"], self.p["ssh_key"], self.p["ssh_opts"],
                        forward_agent=forward_agent, timeout=self.p["timeout"])

    def _remote(self, host, script, data=None):
        argv = self._ssh() + [host_spec(host, self.user), script]
        # The runner expands no $VARS or ~: remote commands carry them for the destination's shell ($HOME).
        return self.runner.run(argv, data=data)

    def _push_argv(self, feeder, target, dry_run=False, checksum=None, delete=False,
                   files_from=False, bwlimit=0, existing_only=False):
        checksum = self.p["checksum"] if checksum is None else checksum
        tgt = rsync_target(target, self.dest, self.user)
        # A file list holds exactly what must move, content mismatches of the same size and mtime included.
        ignore_times = files_from
        if feeder == SOURCE:
            argv = rsync_argv(self.rsync_bin, self._ssh(), self.src, tgt, checksum=checksum,
                              bwlimit=bwlimit, dry_run=dry_run, delete=delete,
                              files_from=files_from, timeout=self.p["timeout"], ignore_times=ignore_times)
            if existing_only:
                argv[1:1] = ["--existing", "--ignore-existing"]
            return argv, None
        # Feeder is a destination: it runs rsync itself and reaches the target with the forwarded agent.
        hop = ssh_argv("ssh", self.p["ssh_cipher"], None, self.p["ssh_opts"], timeout=self.p["timeout"])
        inner = rsync_argv("rsync", hop, self.dest, tgt, checksum=checksum, bwlimit=bwlimit,
                           dry_run=dry_run, delete=delete, files_from=files_from,
                           timeout=self.p["timeout"], ignore_times=ignore_times)
        remote = " ".join(shlex.quote(a) for a in inner)
        argv = self._ssh(forward_agent=True) + [host_spec(feeder, self.user), remote]
        return argv, dict(self.agent_env)

    def _names_data(self, names):
        return b"".join(n.encode("utf-8", "surrogateescape") + b"\0" for n in names)

    def local_hashes(self, names, fail=True):
        """Content hashes of the source's files (cached under this user's home). With fail=False, (hashes, error)
        for a caller in another thread (fail_json must come from the main one)."""
        argv = [self.python, "-c", HASH_SCRIPT, self.src, cache_file(self.src, self.home)]
        res = self.runner.run(argv, data=self._names_data(names))
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
        res = self._remote(host, self.cmds["hash"], data=self._names_data(names))
        if not res.ok:
            return None, res.why("hashing %s on %s failed" % (self.dest, host))
        try:
            return parse_hashes(res.stdout), None
        except ValueError as exc:
            return None, "hashing %s on %s: %s" % (self.dest, host, exc)

    def content_check(self, host, info, moved, expected, source_hashes):
        """Files that rsync would skip (same size and mtime) but whose content differs join the transfer."""
        skipped = [n for n in sorted(expected) if n not in set(name for name, _s in moved)]
        if not skipped:
            return moved
        hashes, err = self.remote_hashes(host, skipped)
        if err:
            info.update(status="failed", msg=err)
            return moved
        bad = content_mismatches(source_hashes, hashes, skipped)
        info["content_mismatch"] = bad
        if bad:
            moved = list(moved) + [(n, expected[n]) for n in bad]
            info["would_transfer"] = sorted(set(info["would_transfer"]) | set(bad))
            info["bytes_needed"] += sum(expected[n] for n in bad)
            info["status"] = "pending"
        return moved

    # ------------------------------------------------------------------ agent
    def start_agent(self):
        """Per-run agent holding only the sync key, for destination-to-destination hops."""
        agent = self.runner.bin("ssh-agent", required=False)
        add = self.runner.bin("ssh-add", required=False)
        if not agent or not add:
            return "ssh-agent/ssh-add not found"
        sock_dir = tempfile.mkdtemp(prefix="sparkfleet-agent-")
        sock = os.path.join(sock_dir, "agent.sock")
        res = self.runner.run([agent, "-s", "-a", sock])
        m = re.search(r"SSH_AGENT_PID=(\d+)", res.stdout or "")
        if not res.ok or not m:
            return res.why("ssh-agent failed")
        self.agent_bin = agent
        self.agent_pid = m.group(1)
        self.agent_env = {"SSH_AUTH_SOCK": sock, "SSH_AGENT_PID": self.agent_pid}
        lifetime = str(max(600, 4 * 3600))
        argv = [add, "-t", lifetime] + ([self.p["ssh_key"]] if self.p["ssh_key"] else [])
        res = self.runner.run(argv, env=self.agent_env)
        if not res.ok:
            self.stop_agent()
            return res.why("ssh-add failed")
        return None

    def stop_agent(self):
        if self.agent_pid:
            self.runner.run([self.agent_bin, "-k"], env=self.agent_env)
            sock = self.agent_env.get("SSH_AUTH_SOCK")
            if sock and os.path.isdir(os.path.dirname(sock)):
                try:
                    os.rmdir(os.path.dirname(sock))
                except OSError:
                    pass
        self.agent_pid = None
        self.agent_env = {}

    # ------------------------------------------------------------------ phases
    def preflight(self, host):
        """What dest is on the target, free space there, then a dry run from the source. Read-only."""
        info = {"status": "pending", "fed_from": None, "files_transferred": 0, "bytes_transferred": 0,
                "files_deleted": 0, "bytes_needed": 0, "bytes_available": None, "seconds": 0.0,
                "mb_per_s": 0.0, "streams": 0, "verified": None, "would_transfer": [], "would_delete": [],
                "content_mismatch": [], "transport": None, "bytes_resumed": 0}
        # The guard comes first: nothing, not even a dry run, touches a dest that is not a model directory.
        res = self._remote(host, self.cmds["probe"])
        probe = parse_dest_probe(res.stdout if res.ok else "")
        why = dest_problem(self.dest, probe) if res.ok else None
        if why:
            info.update(status="failed", msg="%s: refusing to sync into it: %s" % (host, why))
            return info, []
        try:
            if not res.ok:
                raise ValueError(res.why("the destination probe failed"))
            avail = parse_df_avail(probe["df"])
        except ValueError as exc:
            info.update(status="failed", msg="cannot read free space under %s on %s: %s" % (self.dest, host, exc))
            return info, []
        info["bytes_available"] = avail
        argv, _env = self._push_argv(SOURCE, host, dry_run=True, delete=self.p["delete"])
        res = self.runner.run(argv)
        if not res.ok:
            info.update(status="failed", msg=res.why("rsync dry run to %s failed" % host))
            return info, []
        entries = parse_itemize(res.stdout)
        nfiles, nbytes, names, deleted = summarize(entries)
        moved = [(e["name"], e["size"]) for e in entries if e["transferred"]]
        info.update(would_transfer=names, would_delete=deleted, bytes_needed=nbytes)
        # Old versions stay until each new file is renamed into place, so the new bytes must all fit.
        if nbytes > avail:
            info.update(status="failed",
                        msg="%s has %d bytes (%.1f GB) free under %s, the sync needs %d bytes (%.1f GB)"
                            % (host, avail, avail / 1e9, self.dest, nbytes, nbytes / 1e9))
            return info, moved
        info["status"] = "in_sync" if not names and not deleted else "pending"
        return info, moved

    def _run_stream(self, feeder, target, names, bwlimit):
        argv, env = self._push_argv(feeder, target, files_from=True, bwlimit=bwlimit)
        return self.runner.run(argv, data=self._names_data(names), env=env)

    def fast_transfer(self, feeder, target, moved, info):
        """Move the files over the TCP transport. (status, message, names delivered, bytes sent, bytes resumed);
        status: ok | unavailable (nothing was sent: fall back) | partial (some files not delivered)."""
        if not moved:
            return "ok", None, set(), 0, 0
        nstreams = max(1, min(self.p["streams"], len(moved)))
        timeout = max(5, self.p["timeout"])
        hashed = self.source_hashes is not None
        request = {"files": fast_request_files(moved, self.stats, self.source_hashes),
                   "streams": nstreams, "timeout": timeout, "hash": hashed}
        recv = LineProc(self._ssh() + [host_spec(target, self.user), self.cmds["receive"]], request)
        try:
            first = recv.line(timeout + 30)
            if not first or "port" not in first:
                recv.close(2)
                return ("unavailable", "the receiver did not start on %s (rc %s): %s"
                        % (target, recv.proc.returncode, recv.err_tail() or "no answer"), set(), 0, 0)
            bins = fast_bins(moved, first.get("offsets") or {}, nstreams)
            bins += [[] for _i in range(nstreams - len(bins))]
            info["streams"] = nstreams
            per_stream = self.p["bwlimit"] * 1024 // nstreams if self.p["bwlimit"] else 0
            sreq = {"host": first["bind"], "port": first["port"], "key": first["key"], "bins": bins,
                    "timeout": timeout, "bwlimit": per_stream, "hash": hashed}
            if feeder == SOURCE:
                # HOME: the sender keeps the hashes it computes in this user's cache, where local_hashes looks.
                sender = LineProc([self.python, "-c", FAST_SCRIPT, "send", self.src], sreq, env={"HOME": self.home})
            else:
                sender = LineProc(self._ssh() + [host_spec(feeder, self.user), self.cmds["send"]], sreq)
            sres = sender.line()
            sender.close()
            sres = sres or {"bytes": 0, "errors": ["the sender on %s failed: %s"
                                                   % (feeder, sender.err_tail() or "no answer")]}
            if sres.get("connect_failed") and not sres.get("bytes"):
                recv.close(2)
                return ("unavailable", "no stream could connect to %s:%s: %s"
                        % (first["bind"], first["port"], "; ".join(sres["errors"][:2])), set(), 0, 0)
            rres = recv.line(timeout + 30) or {}
        finally:
            recv.close()
        delivered = set(rres.get("ok") or [])
        with self.lock:
            if feeder == SOURCE:
                self.sent_digests.update(sres.get("digests") or {})
            if rres.get("hashed"):
                self.hash_verified.setdefault(target, set()).update(delivered)
        sent, resumed = int(rres.get("bytes", sres.get("bytes", 0))), int(rres.get("resumed", 0))
        missing = [n for n, _s in moved if n not in delivered]
        if missing:
            why = ["%s: %s" % (n, w) for n, w in sorted((rres.get("failed") or {}).items())]
            why += sres.get("errors") or []
            if not rres:
                why.append("the receiver on %s gave no result: %s" % (target, recv.err_tail()))
            return ("partial", "%d of %d file(s) not delivered over tcp to %s: %s"
                    % (len(missing), len(moved), target, "; ".join(why[:5]) or "unknown"), delivered, sent, resumed)
        return "ok", None, delivered, sent, resumed

    def transfer(self, feeder, target, moved, info):
        """Push the files over tcp (falling back to rsync over ssh), delete extras, tidy up."""
        start = time.time()
        errors = []
        nfiles = nbytes = 0
        transport = self.p["transport"]
        info["transport"] = "ssh"
        if transport != "ssh" and moved:
            status, msg, delivered, sent, resumed = self.fast_transfer(feeder, target, moved, info)
            info["transport"] = "tcp"
            nfiles, nbytes = len(delivered), sent
            info["bytes_resumed"] = resumed
            if status != "ok":
                if transport == "tcp":
                    errors.append(msg)
                    moved = []
                else:
                    with self.lock:
                        self.warnings.append("%s; sending %s over ssh" % (msg, "them" if status == "partial" else
                                                                          "everything"))
                    info["transport"] = "tcp+ssh" if delivered else "ssh"
                    moved = [m for m in moved if m[0] not in delivered]
            else:
                moved = []
        staging = os.path.join(self.dest, TEMP_DIR_NAME)
        if not errors and (moved or transport == "ssh" or self.p["delete"]):
            res = self._remote(target, self.cmds["prepare"])
            if not res.ok:
                return False, res.why("cannot prepare %s on %s" % (staging, target))
        bins = pack_bins(moved, self.p["streams"])
        if bins:
            info["streams"] = len(bins)
        per_stream = (max(1, self.p["bwlimit"] // len(bins)) if self.p["bwlimit"] and bins else 0)
        # A relay over ssh needs the per-run agent, which only transport=ssh starts: a fallback comes from here.
        rsync_feeder = feeder if self.agent_pid else SOURCE
        if bins and not errors:
            with ThreadPoolExecutor(max_workers=len(bins)) as pool:
                futures = [pool.submit(self._run_stream, rsync_feeder, target, b, per_stream) for b in bins]
                for fut in futures:
                    res = fut.result()
                    f, b, _n, _d = summarize(parse_itemize(res.stdout))
                    nfiles += f
                    nbytes += b
                    if not res.ok:
                        errors.append(res.why("rsync", lines=8))
        if not errors and self.p["delete"]:
            argv, _env = self._push_argv(SOURCE, target, delete=True, existing_only=True)
            res = self.runner.run(argv)
            if not res.ok:
                errors.append(res.why("delete pass"))
            else:
                info["files_deleted"] = len(summarize(parse_itemize(res.stdout))[3])
        if not errors:
            # Mark the directory as a model directory we fill (the destination guard accepts it from now on).
            self._remote(target, self.cmds["finish"])
        seconds = time.time() - start
        info.update(files_transferred=nfiles, bytes_transferred=nbytes, seconds=round(seconds, 2),
                    mb_per_s=_mb_per_s(nbytes, seconds))
        if errors:
            where = "from this node" if feeder == SOURCE else "from %s" % feeder
            return False, "push to %s %s failed: %s" % (target, where, "; ".join(errors))
        return True, None

    def verify(self, host, expected, source_hashes=None, names=()):
        res = self._remote(host, self.cmds["list"])
        if not res.ok:
            return [res.why("cannot list %s" % self.dest)]
        problems = compare_sizes(expected, parse_size_list(res.stdout))
        if not problems and source_hashes is not None and names:
            hashes, err = self.remote_hashes(host, names)
            if err:
                return [err]
            problems = ["%s differs in content from the source" % n
                        for n in content_mismatches(source_hashes, hashes, names)]
        if not problems and self.p["checksum"]:
            argv, _env = self._push_argv(SOURCE, host, dry_run=True, checksum=True)
            res = self.runner.run(argv)
            if not res.ok:
                return [res.why("checksum re-check failed")]
            problems = ["%s differs by checksum" % n for n in summarize(parse_itemize(res.stdout))[2]]
        return problems

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
        res = self._remote(host, self.cmds["drop_cache"], data=self._names_data(names))
        return None if res.ok else res.why("page-cache drop on %s failed" % host)

    # ------------------------------------------------------------------ main
    def run(self):
        m = self.module
        started = time.time()
        hosts = []
        for h in m.params["destinations"]:
            if h not in hosts:
                hosts.append(h)
        if not hosts or not all(h.strip() for h in hosts):
            m.fail_json(msg="destinations is empty or holds an empty name: name at least one host to push to")
        for name, low in (("streams", 1), ("bwlimit", 0), ("timeout", 0)):
            if m.params[name] < low:
                m.fail_json(msg="%s must be %d or more, got %s" % (name, low, m.params[name]))

        for name in ("src", "dest"):
            why = model_path_problem(m.params[name], name)
            if why:
                m.fail_json(msg="%s; nothing was copied" % why,
                            hint="Set %s to the model's own directory, e.g. /models/<model-name>." % name)

        mark = time.time()
        phases = {}
        report, problems = check_model_dir(self.src)
        if problems:
            m.fail_json(msg="source model %s is incomplete or corrupt, nothing was copied: %s"
                            % (self.src, "; ".join(problems[:10])),
                        problems=problems, hint="Re-download the named files on this node, then run again.")
        expected = dict(report["files"])
        result = {"changed": False, "files_total": len(expected), "files_transferred": 0,
                  "bytes_transferred": 0, "seconds": 0.0, "transfer_seconds": 0.0, "mb_per_s": 0.0,
                  "rounds": [], "destinations": {}, "fingerprint": None, "phase_seconds": {}}

        phases["checks"] = round(time.time() - mark, 2)
        mark = time.time()
        moved = {}
        with ThreadPoolExecutor(max_workers=min(8, len(hosts))) as pool:
            for host, (info, mv) in zip(hosts, pool.map(self.preflight, hosts)):
                result["destinations"][host] = info
                moved[host] = mv
        bad = [h for h in hosts if result["destinations"][h]["status"] == "failed"]
        if bad:
            result["seconds"] = round(time.time() - started, 2)
            m.fail_json(msg="nothing was copied: " + "; ".join(result["destinations"][h]["msg"] for h in bad),
                        hint="Free space on the destination or fix ssh access (user, key, fabric IP), then run again.",
                        **result)

        phases["plan"] = round(time.time() - mark, 2)
        mark = time.time()
        source_hashes = None
        if m.params["verify_content"]:
            # Up front, only the files the dry run would skip need the source's hash (a same-size corruption on a
            # destination); the tcp sender hashes the files it sends while it sends them.
            skipped = set(expected) if m.check_mode else set()
            for h in hosts:
                skipped |= set(expected) - set(n for n, _s in moved[h])
            skipped = sorted(skipped)
            source_hashes = self.local_hashes(skipped) if skipped else {}
            self.source_hashes = source_hashes
            with ThreadPoolExecutor(max_workers=min(8, len(hosts))) as pool:
                futures = dict((h, pool.submit(self.content_check, h, result["destinations"][h], moved[h], expected,
                                               source_hashes)) for h in hosts)
                for h, fut in futures.items():
                    moved[h] = fut.result()
            bad = [h for h in hosts if result["destinations"][h]["status"] == "failed"]
            if bad:
                result["seconds"] = round(time.time() - started, 2)
                m.fail_json(msg="nothing was copied: " + "; ".join(result["destinations"][h]["msg"] for h in bad),
                            hint="Check that python3 runs on the destination for the sync user, then run again.",
                            **result)

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
            m.exit_json(**result)

        warnings = self.warnings
        for rel in expected:
            self.stats[rel] = os.stat(os.path.join(self.src, rel))
        # Only the ssh transport relays through a forwarded agent; tcp hops run the fixed sender on the feeder.
        if pending and len(holders) + len(pending) > 2 and m.params["transport"] == "ssh":
            why = self.start_agent()
            if why:
                warnings.append("every destination is fed from this node (no tree fan-out): %s" % why)
                holders = [SOURCE]
        background = background_hashes = None
        if source_hashes is not None and m.params["transport"] == "ssh":
            # rsync does not hash: the source's hashes of the files it sends are read while it sends them.
            names = sorted(set(n for h in pending for n, _s in moved[h]) - set(source_hashes))
            if names:
                background = ThreadPoolExecutor(max_workers=1)
                background_hashes = background.submit(self.local_hashes, names, False)
        try:
            t0 = time.time()
            self._fan_out(holders, pending, moved, result)
            result["transfer_seconds"] = round(time.time() - t0, 2)
        finally:
            self.stop_agent()
            if background:
                background.shutdown(wait=True)
        phases["transfer"] = result["transfer_seconds"]
        mark = time.time()
        if source_hashes is not None:
            if background:
                got, err = background_hashes.result()
                if err:
                    m.fail_json(msg=err, **result)
                source_hashes.update(got)
            source_hashes.update(self.sent_digests)
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
            for h in synced:
                sent = result["destinations"][h]["would_transfer"] if h in pending else []
                checked = self.hash_verified.get(h, set())
                problems = self.verify(h, expected, source_hashes,
                                       [n for n in sent if n in expected and n not in checked])
                result["destinations"][h]["verified"] = not problems
                if problems:
                    result["destinations"][h].update(status="failed",
                                                     msg="verify on %s: %s" % (h, "; ".join(problems[:10])))
                    failed.append(h)
        phases["verify"] = round(time.time() - mark, 2)
        mark = time.time()
        if m.params["drop_cache"]:
            result["cache_dropped_source_files"] = self.drop_local_cache(expected)
            for h in hosts:
                if h not in failed:
                    err = self.drop_remote_cache(h, sorted(expected))
                    if err:
                        warnings.append(err)
        if m.params["drop_cache"]:
            phases["drop_cache"] = round(time.time() - mark, 2)
        result["phase_seconds"] = phases
        result["seconds"] = round(time.time() - started, 2)
        for w in warnings:
            m.warn(w)
        if failed:
            m.fail_json(msg="; ".join(result["destinations"][h]["msg"] for h in failed),
                        hint="Run again: finished files are kept and only the rest is sent.", **result)
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
