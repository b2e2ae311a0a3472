# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""model_sync's ssh transport: rsync over ssh, every byte encrypted on the wire.

Streams are rsync processes, each with a list of files (packed by size) and a connection of its own. A destination
that already holds the model feeds the next one by running rsync itself, reaching the target with a per-run agent that
holds only the sync key (forwarded for that hop). rsync does not hash, so the source's hashes of the files it sends
are read in the background while it sends them. The run also uses rsync whatever the transport: the checksum plan and
re-check (checksum=true) and the delete pass (push_argv).
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import (
    pack_bins,
    parse_itemize,
    rsync_argv,
    rsync_target,
    ssh_argv,
    summarize,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_transport import OK, Outcome, Transport


class RsyncTransport(Transport):
    """rsync over ssh, fed from the source or relayed by a holder through the per-run agent."""

    name = "ssh"
    CAUSES = ("failed",)
    # rsync writes into the staging directory the prepare command makes (and marks the copy incomplete first).
    needs_prepare = True

    def __init__(self, run):
        super(RsyncTransport, self).__init__(run)
        self.agent_env = {}
        self.agent_bin = None
        self.agent_pid = None
        self.background = None
        self.background_hashes = None

    # ------------------------------------------------------------------ command lines
    def push_argv(self, feeder, target, dry_run=False, checksum=None, delete=False,
                  files_from=False, bwlimit=0, existing_only=False):
        """(argv, env) of the rsync that pushes the model from feeder (run.SOURCE or a destination) to target."""
        run = self.run
        p = run.p
        checksum = p["checksum"] if checksum is None else checksum
        tgt = rsync_target(target, run.dest, run.user)
        # A file list holds exactly what must move, content mismatches of the same size and mtime included.
        ignore_times = files_from
        if feeder == run.SOURCE:
            # Data streams get connections of their own (each its own cipher stream), control runs use the master.
            argv = rsync_argv(run.rsync_bin, run.ssh(mux=not files_from), run.src, tgt, checksum=checksum,
                              bwlimit=bwlimit, dry_run=dry_run, delete=delete,
                              files_from=files_from, timeout=p["timeout"], ignore_times=ignore_times)
            if existing_only:
                argv[1:1] = ["--existing", "--ignore-existing"]
            return argv, None
        # Feeder is a destination: it runs rsync itself (following no symlink) and reaches the target with the
        # forwarded agent.
        hop = ssh_argv("ssh", p["ssh_cipher"], None, p["ssh_opts"], timeout=p["timeout"])
        inner = rsync_argv("rsync", hop, run.dest, tgt, checksum=checksum, bwlimit=bwlimit,
                           dry_run=dry_run, delete=delete, files_from=files_from,
                           timeout=p["timeout"], ignore_times=ignore_times, copy_links=False)
        remote = " ".join(shlex.quote(a) for a in inner)
        return run.to(feeder, remote, forward_agent=True, mux=False), dict(self.agent_env)

    def _run_stream(self, feeder, target, names, bwlimit):
        argv, env = self.push_argv(feeder, target, files_from=True, bwlimit=bwlimit)
        return self.run.runner.run(argv, data=self.run.names_data(names), env=env)

    # ------------------------------------------------------------------ the per-run agent
    def start_agent(self):
        """Per-run agent holding only the sync key, for destination-to-destination hops."""
        runner = self.run.runner
        agent = runner.bin("ssh-agent", required=False)
        add = runner.bin("ssh-add", required=False)
        if not agent or not add:
            return "ssh-agent/ssh-add not found"
        sock_dir = tempfile.mkdtemp(prefix="sparkfleet-agent-")
        sock = os.path.join(sock_dir, "agent.sock")
        res = runner.run([agent, "-s", "-a", sock])
        m = re.search(r"SSH_AGENT_PID=(\d+)", res.stdout or "")
        if not res.ok or not m:
            return res.why("ssh-agent failed")
        self.agent_bin = agent
        self.agent_pid = m.group(1)
        self.agent_env = {"SSH_AUTH_SOCK": sock, "SSH_AGENT_PID": self.agent_pid}
        lifetime = str(max(600, 4 * 3600))
        key = self.run.p["ssh_key"]
        res = runner.run([add, "-t", lifetime] + ([key] if key else []), env=self.agent_env)
        if not res.ok:
            self.stop_agent()
            return res.why("ssh-add failed")
        return None

    def stop_agent(self):
        if self.agent_pid:
            self.run.runner.run([self.agent_bin, "-k"], env=self.agent_env)
            sock = self.agent_env.get("SSH_AUTH_SOCK")
            if sock and os.path.isdir(os.path.dirname(sock)):
                try:
                    os.rmdir(os.path.dirname(sock))
                except OSError:
                    pass
        self.agent_pid = None
        self.agent_env = {}

    # ------------------------------------------------------------------ the interface
    def prepare(self, holders, pending, moved):
        run = self.run
        # Only this transport relays through a forwarded agent (a tcp hop runs the fixed sender on the feeder).
        if pending and len(holders) + len(pending) > 2:
            why = self.start_agent()
            if why:
                run.warnings.append("every destination is fed from this node (no tree fan-out): %s" % why)
                holders = [run.SOURCE]
        if run.source_hashes is not None:
            # rsync does not hash: the source's hashes of the files it sends are read while it sends them.
            names = sorted(set(n for h in pending for n, _s in moved[h]) - set(run.source_hashes))
            if names:
                self.background = ThreadPoolExecutor(max_workers=1)
                self.background_hashes = self.background.submit(run.local_hashes, names, False)
        return holders

    def send(self, feeder, target, moved, info):
        run = self.run
        p = run.p
        bins = pack_bins(moved, p["streams"])
        if bins:
            info["streams"] = len(bins)
        per_stream = (max(1, p["bwlimit"] // len(bins)) if p["bwlimit"] and bins else 0)
        # A relay needs the per-run agent, which only this transport as the chain's first starts: a fallback to it
        # comes from the source.
        rsync_feeder = feeder if self.agent_pid else run.SOURCE
        nfiles = nbytes = 0
        errors = []
        if bins:
            with ThreadPoolExecutor(max_workers=len(bins)) as pool:
                futures = [pool.submit(self._run_stream, rsync_feeder, target, b, per_stream) for b in bins]
                for fut in futures:
                    res = fut.result()
                    f, b, _n, _d = summarize(parse_itemize(res.stdout))
                    nfiles += f
                    nbytes += b
                    if not res.ok:
                        errors.append(res.why("rsync", lines=8))
        if errors:
            return Outcome("failed", "; ".join(errors), sent=nbytes, files=nfiles)
        return Outcome(OK, sent=nbytes, files=nfiles)

    def source_hashes(self):
        if self.background_hashes is None:
            return {}, None
        got, err = self.background_hashes.result()
        return got or {}, err

    def cleanup(self):
        self.stop_agent()
        if self.background:
            self.background.shutdown(wait=True)
