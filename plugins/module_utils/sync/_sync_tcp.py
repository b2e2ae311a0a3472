# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""model_sync's tcp transport: the fixed receiver and sender of _fast_copy.py, over plain TCP streams.

The receiver starts on the target (through the sync key's forced command), answers its port, one-time key and the
offsets of files it can resume; the sender (this node, or a destination that already holds the model) connects its
streams and sends; the receiver checks each file's hash (when the run hashes), renames it into place and lists the
directory. Nothing is encrypted on the wire: the fabric is a private link.
"""

from __future__ import annotations

import shlex

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._fast_copy import FAST_SCRIPT, LineProc
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import (
    copy_state,
    is_no_space,
    no_space_message,
    pack_bins,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_transport import OK, Outcome, Transport


def fast_commands(dest):
    """The TCP transport's two fixed commands for dest (module_utils/sync/_fast_copy.py): the receiver, which writes only
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


class TcpTransport(Transport):
    """The fast copy: plain TCP streams between the fixed sender and receiver, hashing while sending."""

    name = "tcp"
    CAUSES = ("unavailable", "partial", "nospace")

    def __init__(self, run):
        super(TcpTransport, self).__init__(run)
        # The source's hashes the sender computed (or read from its cache) while sending, and per destination the
        # files its receiver checked against them before giving them their names, and what it listed after.
        self.sent_digests = {}
        self.hash_verified = {}
        self.listed = {}
        # CPU-seconds the transport's processes spent on each destination (receiver, and sender when it feeds).
        self.remote_cpu = {}

    commands = staticmethod(fast_commands)

    def source_hashes(self):
        return dict(self.sent_digests), None

    def checked(self, host):
        return self.listed.get(host), set(self.hash_verified.get(host, set()))

    def forget(self, host):
        """Another transport wrote into host's dest after the receiver listed it: the listing is stale."""
        self.listed.pop(host, None)

    def cpu_seconds(self):
        return dict(self.remote_cpu)

    def send(self, feeder, target, moved, info):
        """Move the files over TCP. unavailable: nothing was sent; partial: some files not delivered; nospace: the
        target's disk filled."""
        run = self.run
        if not moved:
            return Outcome(OK)
        p = run.p
        nstreams = max(1, min(p["streams"], len(moved)))
        timeout = max(5, p["timeout"])
        hashed = run.source_hashes is not None
        request = {"files": fast_request_files(moved, run.stats, run.source_hashes),
                   "streams": nstreams, "timeout": timeout, "hash": hashed,
                   "state": copy_state(False, reason="a transfer started and has not finished")}
        # The sender's interpreter starts while the receiver starts on the target; it gets its request later.
        if feeder == run.SOURCE:
            # HOME: the sender keeps the hashes it computes in this user's cache, where local_hashes looks.
            sender = LineProc([run.python, "-c", FAST_SCRIPT, "send", run.src], None, env={"HOME": run.home})
        else:
            sender = LineProc(run.to(feeder, run.cmds["send"]), None)
        recv = LineProc(run.to(target, run.cmds["receive"]), request)
        sres = rres = None
        try:
            first = recv.line(timeout + 30)
            if not first or "port" not in first:
                recv.close(2)
                err = recv.err_tail() or "no answer"
                status = "nospace" if is_no_space(err) else "unavailable"
                return Outcome(status, "the receiver did not start on %s (rc %s): %s"
                               % (target, recv.proc.returncode, err))
            bins = fast_bins(moved, first.get("offsets") or {}, nstreams)
            bins += [[] for _i in range(nstreams - len(bins))]
            info["streams"] = nstreams
            per_stream = p["bwlimit"] * 1024 // nstreams if p["bwlimit"] else 0
            sender.send({"host": first["bind"], "port": first["port"], "key": first["key"], "bins": bins,
                         "timeout": timeout, "bwlimit": per_stream, "hash": hashed})
            sres = sender.line()
            sender.close()
            sres = sres or {"bytes": 0, "errors": ["the sender on %s failed: %s"
                                                   % (feeder, sender.err_tail() or "no answer")]}
            if sres.get("connect_failed") and not sres.get("bytes"):
                recv.close(2)
                return Outcome("unavailable", "no stream could connect to %s:%s: %s"
                               % (first["bind"], first["port"], "; ".join(sres["errors"][:2])))
            rres = recv.line(timeout + 30) or {}
        finally:
            sender.close(2)
            recv.close()
        delivered = set(rres.get("ok") or [])
        with run.lock:
            if feeder == run.SOURCE:
                self.sent_digests.update(sres.get("digests") or {})
            if rres.get("hashed"):
                self.hash_verified.setdefault(target, set()).update(delivered)
            if isinstance(rres.get("listing"), dict):
                self.listed[target] = rres["listing"]
            for host, got in ((target, rres.get("cpu")), (feeder, sres.get("cpu") if feeder != run.SOURCE else None)):
                if isinstance(got, (int, float)):
                    self.remote_cpu[host] = round(self.remote_cpu.get(host, 0.0) + got, 3)
        sent, resumed = int(rres.get("bytes", sres.get("bytes", 0))), int(rres.get("resumed", 0))
        missing = [n for n, _s in moved if n not in delivered]
        if missing:
            full = rres.get("nospace")
            if isinstance(full, dict):
                with run.lock:
                    run.no_space[target] = (int(full.get("needed", 0)), int(full.get("free", 0)))
                return Outcome("nospace", no_space_message(target, run.dest, *run.no_space[target]), delivered, sent,
                               resumed)
            why = ["%s: %s" % (n, w) for n, w in sorted((rres.get("failed") or {}).items())]
            why += sres.get("errors") or []
            if not rres:
                why.append("the receiver on %s gave no result: %s" % (target, recv.err_tail()))
            return Outcome("partial", "%d of %d file(s) not delivered over tcp to %s: %s"
                           % (len(missing), len(moved), target, "; ".join(why[:5]) or "unknown"), delivered, sent,
                           resumed)
        return Outcome(OK, None, delivered, sent, resumed)
