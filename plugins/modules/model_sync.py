#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_sync
short_description: Push a model directory from this node to other nodes over the fabric, fast and verified
version_added: 0.1.0
description:
  - Runs on the node that holds the model (the source) and pushes C(src) to C(dest) on every host in
    C(destinations), addressed by their fabric IPs. The controller never carries model bytes.
  - Before anything is copied, O(src) and O(dest) must be model directories (see O(dest)) and the source must
    be complete (C(config.json) parses; every shard named in
    C(model.safetensors.index.json) exists, is non-empty, its safetensors header parses, its data offsets
    cover the file exactly, and it holds the tensors the index puts there) and every destination must have
    room for the files that differ. Either failure stops the run before a byte moves, with the numbers.
  - Transfers only files that differ (size and modification time, or full checksum with C(checksum=true)),
    in C(streams) parallel streams per destination (files packed largest-first into streams of similar total
    size). What differs is decided by an rsync dry run over ssh; the bytes move over the transport of
    O(transport).
  - The C(tcp) transport (tried first by default) moves the bytes over plain TCP on the fabric, unencrypted and
    without an ssh cipher in the way. For each destination a receiver is started through ssh for this run only.
    It listens on the address the ssh connection reached (the fabric IP), on a free port, only once the run
    needs it; a connection must answer a challenge with an HMAC of a random per-run secret that only the ssh
    channel carries; the listening socket closes once every stream is in, and the receiver exits when the run
    ends, when ssh drops (a killed run), or after O(timeout) seconds without data. The sender uses
    C(sendfile(2)) and, with O(verify_content=true), hashes each file (SHA-256) in a thread of its own while it
    sends it, so the source's hashes cost no time before the copy. After each file's bytes comes a trailer with
    the source's hash and an HMAC (per-run secret) over name, size and hash, so the connection is authenticated once
    and each file end to end. Every file lands in C(DEST/.sparkfleet-sync), hashed as it arrives, and gets its final
    name only after its size (and, with O(verify_content=true), its hash against the trailer's) has been checked
    on the destination; a file that does not check out is deleted, never renamed. The checked hashes go into
    the hash caches on both ends, so nothing is read twice and the verify pass does not hash those files again.
  - With the C(ssh) transport (the fallback when the receiver cannot start or no stream can connect, for
    example a firewall), the bytes go through rsync over ssh, C(--whole-file), no compression.
  - Resumable. A killed run never leaves a partial file under its final name; the next run skips every
    finished file. With C(tcp) a partial file of the same version (same name, size and mtime) is continued from
    where it stopped, so only the missing bytes are sent; rsync's staging directory is cleared instead.
  - Several destinations fan out as a tree. A destination that has finished feeds the next one, so the holders
    double every round and the time grows with log2(N + 1), not N. Over C(tcp) the feeder runs the fixed sender
    command on its own copy. With O(transport=ssh) the feeder runs rsync (C(ssh feeder rsync ... target:)) and
    the hop authenticates through a per-run ssh-agent that holds only C(ssh_key) (forwarded with C(ssh -A) for
    the length of the transfer, killed when the module ends; the key is added with a lifetime so it expires even
    if the module is killed); if no key can be loaded, every destination is fed from the source. A fallback from
    C(tcp) to ssh sends from the source. No key file is ever copied to a worker.
  - In check mode, lists per destination what would be transferred or deleted (an rsync dry run) and the
    space needed, and changes nothing.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  src:
    description:
      - Model directory on this (the source) node. It must be a model directory (C(config.json), a weight index
        or C(*.safetensors) at its top); empty, relative, system and home directories are refused.
    type: path
    required: true
  dest:
    description:
      - Directory path on every destination. Created if missing.
      - Refused before anything is copied when it is empty, relative, V(/), a system or home directory (also
        after following symlinks on the destination), not a directory, or a non-empty directory that is not
        a model directory (no C(config.json), no weight index, no C(.sparkfleet-model) marker). The module
        writes that marker into every directory it fills; O(delete=true) never removes it.
    type: path
    required: true
  destinations:
    description:
      - Hosts to push to, as reachable from this node and from each other (fabric IPs or host names).
    type: list
    elements: str
    required: true
  ssh_user:
    description:
      - Remote user on the destinations. Defaults to the ssh client's default (the current user).
    type: str
  ssh_key:
    description:
      - Private key authorized on every destination for O(ssh_user). Also loaded into the per-run agent used
        by destination-to-destination hops. Without it, the ssh client's default identities are used.
    type: path
  ssh_opts:
    description:
      - Extra ssh arguments, one list element per argument (for example V(["-p", "2222"])), for every hop.
    type: list
    elements: str
    default: []
  ssh_cipher:
    description:
      - Cipher list for ssh (C(-c)). AES-GCM is fast on CPUs with AES instructions (GB10 has them).
    type: str
    default: aes128-gcm@openssh.com,chacha20-poly1305@openssh.com
  streams:
    description:
      - Parallel rsync processes per destination. One stream over ssh is CPU bound at about 0.4-0.65 GB/s.
    type: int
    default: 4
  bwlimit:
    description:
      - Bandwidth limit per destination link in KiB/s, split evenly over the streams. V(0) means none; a
        negative value is refused.
    type: int
    default: 0
  checksum:
    description:
      - Decide what differs by full-file checksum instead of size and modification time. Reads every
        file on both ends. With O(verify=true), also re-checks every file by checksum after the sync.
    type: bool
    default: false
  drop_cache:
    description:
      - When done, drop the model's files (those of O(src), nothing else under O(dest)) from the page cache on
        the source and on every destination
        (per file, C(posix_fadvise DONTNEED) after a data sync; never a global C(drop_caches)). On GB10 the
        GPU shares that memory, and weights load faster from a cold cache.
    type: bool
    default: false
  delete:
    description:
      - Delete files under O(dest) that are not in O(src).
    type: bool
    default: false
  verify:
    description:
      - After the sync, check on every destination that every source file exists with the source's size
        (so every shard the index names is there).
    type: bool
    default: true
  verify_content:
    description:
      - Compare a content hash (SHA-256) of every file between the source and each destination, and send the files
        whose content differs even when their size and modification time match (a same-size corruption with
        its mtime restored). After the sync, the files sent are hashed again on the destination.
      - Hashes are cached per file under the home directory of the user on each node
        (C(~/.cache/sparkfleet/)), keyed by size, modification time, inode and change time, so an unchanged
        file is read once; any write moves the change time, so a repaired or damaged file is read again.
      - Needs C(python3) on the destinations.
    type: bool
    default: true
  timeout:
    description:
      - Seconds for an ssh connection to be set up, and for rsync or the TCP receiver to wait on a stalled
        transfer.
    type: int
    default: 60
  transport:
    description:
      - How the bytes move. V(auto) tries V(tcp) on every destination and falls back to V(ssh) (with a warning
        naming why) when the receiver cannot start there or no stream can connect; files the TCP transfer
        could not deliver are then sent over ssh. V(tcp) fails instead of falling back. V(ssh) uses rsync over
        ssh only (every byte encrypted on the wire).
      - The feeder-to-target hops of the fan-out use the same transport.
    type: str
    choices: [auto, tcp, ssh]
    default: auto
    version_added: 0.2.0
notes:
  - Needs rsync (3.2.3 or newer, for C(--mkpath)) on the source and on every destination, and GNU coreutils
    C(dd) on the destinations for O(drop_cache).
  - The feeder-to-target hop uses C(StrictHostKeyChecking=accept-new).
seealso:
  - name: rsync manual
    description: The options this module builds on (--whole-file, --temp-dir, --files-from).
    link: https://download.samba.org/pub/rsync/rsync.1
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Push the model from the head to the workers over the fabric
  sparkfleet.vllm.model_sync:
    src: /models/Qwen3.5-122B-A10B-FP8
    dest: /models/Qwen3.5-122B-A10B-FP8
    destinations: "{{ groups['spark_workers'] | map('extract', hostvars, 'fabric_ip') | list }}"
    ssh_user: spark
    ssh_key: /home/spark/.ssh/sparkfleet_sync
    streams: 4
    drop_cache: true
  delegate_to: "{{ groups['spark_head'][0] }}"

- name: What would move (changes nothing)
  sparkfleet.vllm.model_sync:
    src: /models/m
    dest: /models/m
    destinations: [10.99.1.12]
  check_mode: true
"""

RETURN = r"""
files_total:
  description: Files in the source model directory.
  returned: always
  type: int
  sample: 47
files_transferred:
  description: Files sent, summed over destinations (in check mode, that would be sent).
  returned: always
  type: int
  sample: 47
bytes_transferred:
  description: Bytes of the files sent, summed over destinations (in check mode, that would be sent).
  returned: always
  type: int
  sample: 119000000000
seconds:
  description: Wall-clock seconds of the whole run (checks, transfer, verify, cache drop).
  returned: always
  type: float
  sample: 212.4
transfer_seconds:
  description: Wall-clock seconds of the transfer phase alone.
  returned: always
  type: float
  sample: 190.2
phase_seconds:
  description:
    - Wall-clock seconds per phase, where the run's time went. C(checks) the source model's checks, C(plan) the
      destination guard, free space and the dry run that decides what differs, C(hash) the source's hashes not
      computed during the transfer (files that would be skipped, files sent over ssh), C(transfer), C(verify)
      and, with O(drop_cache=true), C(drop_cache).
  returned: always
  type: dict
  sample: {checks: 0.05, plan: 0.61, hash: 0.02, transfer: 190.2, verify: 0.4}
  version_added: 0.2.0
mb_per_s:
  description: RV(bytes_transferred) / RV(transfer_seconds) in MB/s (10^6 bytes), 0 when nothing moved.
  returned: always
  type: float
  sample: 625.8
fingerprint:
  description:
    - Digest of the source model's content (every file's path, size and content hash). It changes when any
      file of the model changes; null when O(verify_content=false).
  returned: always
  type: str
  sample: 3f9a0c1e5b7d2a4468c0e1f2a3b4c5d6
rounds:
  description:
    - Fan-out as run, each wave a list of [feeder, target] started together; C(source) is this node.
    - In check mode, the plan if every transfer took the same time.
  returned: always
  type: list
  elements: list
  sample: [[["source", "10.99.1.12"]], [["source", "10.99.1.13"], ["10.99.1.12", "10.99.1.14"]]]
destinations:
  description: Per destination details.
  returned: always
  type: dict
  sample:
    10.99.1.12:
      status: synced
      fed_from: source
      files_transferred: 47
      bytes_transferred: 119000000000
      files_deleted: 0
      bytes_needed: 119000000000
      bytes_available: 3500000000000
      seconds: 190.2
      mb_per_s: 625.8
      streams: 4
      transport: tcp
      bytes_resumed: 0
      verified: true
      would_transfer: []
      would_delete: []
      content_mismatch: []
"""

import os
import pwd
import re
import shlex
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from ansible.module_utils.basic import AnsibleModule

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


def main():
    module = AnsibleModule(
        argument_spec=dict(
            src=dict(type="path", required=True),
            dest=dict(type="path", required=True),
            destinations=dict(type="list", elements="str", required=True),
            ssh_user=dict(type="str"),
            ssh_key=dict(type="path", no_log=False),
            ssh_opts=dict(type="list", elements="str", default=[]),
            ssh_cipher=dict(type="str", default="aes128-gcm@openssh.com,chacha20-poly1305@openssh.com"),
            streams=dict(type="int", default=4),
            bwlimit=dict(type="int", default=0),
            checksum=dict(type="bool", default=False),
            drop_cache=dict(type="bool", default=False),
            delete=dict(type="bool", default=False),
            verify=dict(type="bool", default=True),
            verify_content=dict(type="bool", default=True),
            timeout=dict(type="int", default=60),
            transport=dict(type="str", default="auto", choices=["auto", "tcp", "ssh"]),
        ),
        supports_check_mode=True,
    )
    ModelSync(module).run()


if __name__ == "__main__":
    main()
