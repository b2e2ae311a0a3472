# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a model_sync transport must provide: the interface the run (_model_sync_run.py) drives.

A transport moves a list of the source's files to one destination, fed by the source or by a destination that already
holds the model (the fan-out). The run owns everything that is the same whatever moves the bytes: the checks, the plan,
the destination guard, the hashes, the verification of sizes and content, the copy's state and the cache drop. A
transport provides:

- commands(dest): the fixed commands it runs on a destination (the sync key's forced command allows exactly the
  union of these, _sync_transports.destination_commands);
- prepare(holders, pending, moved): its set-up before the fan-out when it is the first of the chain (the nodes that
  may feed others);
- send(feeder, target, moved, info): move the files, returning an Outcome (status, message, files delivered, bytes
  sent and resumed), with info["streams"] set;
- source_hashes(): the source's content hashes it computed while sending (so the run need not read those files
  again), and checked(host): what it already verified on a destination (a listing, names whose hash it checked);
- forget(host): another transport wrote there after it, so what checked(host) knew is stale;
- needs_prepare: whether the run must prepare the destination (staging directory, copy marked incomplete) first;
- cpu_seconds(): CPU-seconds its processes spent on each destination;
- cleanup(): stop what prepare started;
- CAUSES: which of the failure causes below its send may return.

Adding a transport: one module defining a Transport subclass, its entry in _sync_transports.TRANSPORTS (and in a
chain of CHAINS if a transport choice uses it), the choice in model_sync's argument spec, and its tests.
"""

from __future__ import annotations

OK = "ok"
# Why a send did not deliver every file. The run decides from the cause alone what happens next.
CAUSES = {
    "unavailable": "nothing was sent (the transport could not start on the destination or connect to it): the next "
                   "transport of the chain takes every file",
    "partial": "some files were not delivered: the next transport of the chain takes the rest",
    "nospace": "the destination's disk is full: no other transport is tried (it would fill the same disk)",
    "failed": "the transfer failed: no other transport is tried",
}
# Causes after which the next transport of the chain takes over.
FALL_THROUGH = frozenset(("unavailable", "partial"))


class Outcome(object):
    """What one send did: status (OK or a key of CAUSES), msg (None when OK), the names delivered, bytes sent and
    resumed (a restarted file's bytes already in place), and files: how many files the transport counted as sent."""

    __slots__ = ("status", "msg", "delivered", "sent", "resumed", "files")

    def __init__(self, status, msg=None, delivered=(), sent=0, resumed=0, files=None):
        if status != OK and status not in CAUSES:
            raise ValueError("unknown transport outcome %r" % status)
        self.status = status
        self.msg = msg
        self.delivered = set(delivered)
        self.sent = int(sent)
        self.resumed = int(resumed)
        self.files = len(self.delivered) if files is None else int(files)

    @property
    def ok(self):
        return self.status == OK


class Transport(object):
    """Base of every transport; a subclass sets name and CAUSES and implements send. One instance per run: run is the
    ModelSync (its params, runner, ssh commands to a host, shared lock and warnings)."""

    name = None
    # The causes (keys of CAUSES) this transport's send may return.
    CAUSES = ()
    # True when the run must prepare the destination (staging directory, copy marked incomplete) before send; a
    # transport whose receiver does that itself leaves it False.
    needs_prepare = False

    def __init__(self, run):
        self.run = run

    @staticmethod
    def commands(dest):
        """{name: shell command} this transport runs on a destination for dest (fixed: no run-time value in them)."""
        return {}

    def prepare(self, holders, pending, moved):
        """Set up before the fan-out (called on the chain's first transport only); returns the holders that may feed."""
        return holders

    def send(self, feeder, target, moved, info):
        """Move moved ([(name, size)]) from feeder to target; an Outcome."""
        raise NotImplementedError

    def source_hashes(self):
        """({name: sha256} of source files hashed while sending, error or None)."""
        return {}, None

    def checked(self, host):
        """(listing {name: size} of host's dest taken after the transfer or None, names whose hash was checked there)."""
        return None, set()

    def forget(self, host):
        """Another transport wrote into host's dest after this one: drop what checked(host) would report."""

    def cpu_seconds(self):
        """{host: CPU-seconds} this transport's processes spent on destinations."""
        return {}

    def cleanup(self):
        """Stop what prepare started; called once, whatever happened."""
