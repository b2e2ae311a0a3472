#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_wait
short_description: Follow a vLLM startup to ready, reporting phase, shard progress and the cause of a failure
version_added: 0.1.0
description:
  - Reads a vLLM server's log (a file, a systemd unit's journal or a container's log) and tells where the
    startup is - C(starting), C(engine_init), C(placement), C(loading_weights), C(profiling), C(cuda_graphs),
    C(api_starting), C(ready) - or that it C(failed), with the failure's class, the log lines that show it and
    a hint naming the settings to change (by the names in I(setting_names)).
  - 'Understands vLLM 0.6 to 0.33 logs, V0 and V1 engines, Ray worker prefixes such as
    "(RayWorkerWrapper pid=860, ip=192.168.200.13)" and "(RayWorkerProc ...) (Worker_DP0_TP1_EP1 ...)",
    Ray''s "[repeated 2x across cluster]" suffixes, ANSI colour codes and tqdm bars redrawn with carriage returns.'
  - Weight-loading progress is tracked per rank (keyed by the Ray C(ip pid) prefix); the slowest rank sets the
    reported shard count, percentage, seconds per shard and ETA.
  - 'Known benign warnings, for example "Tensor parallel size (2) exceeds available GPUs (1)" and
    "tensor_parallel_size=2 is bigger than a reserved number of GPUs (1 GPUs) in a node", never count as failures.'
  - When a specific cause and the generic C(Engine core initialization failed) both appear, the specific cause
    wins. The module fails within one I(poll_interval) of a failing line appearing.
  - "Ready means: with I(url), C(/v1/models) lists I(model) and a one-token completion succeeds; without I(url),
    the log shows C(Application startup complete)."
  - "Design for progress while waiting: a module cannot stream to the terminal, so call it in a loop with a short
    I(timeout) (for example C(timeout: 10), C(until: result is failed or result.ready), C(retries)). Each call re-reads the log of
    this startup from I(since_offset) (file), I(cursor) or I(since) (journal, container), so it always sees the whole
    startup and returns C(phase), C(progress), C(ranks), C(phase_times) and a one-line C(summary). Record C(offset)
    (or C(cursor)) from a call made B(before) restarting the server and pass it back so an older run in the same
    log is not read."
  - Read-only; it changes nothing and runs the same in check mode.
options:
  log_file:
    description:
      - Path of a file the vLLM server logs to (stdout and stderr). It must be a regular file.
      - Mutually exclusive with I(unit) and I(container).
      - A file that cannot be found is reported as failure class C(log_missing) at once with I(timeout=0),
        else after three reads over at least two seconds (a server that has just been started may create
        it a moment later). A file this user may not read fails at once.
    type: path
  unit:
    description:
      - A systemd unit whose journal holds the log, read with C(journalctl -u UNIT -o cat).
      - When the unit is no longer active (failed, inactive, restarting) and the log shows no known failure,
        the failure class is C(engine_exited).
      - May be given with I(container) (the unit that runs C(docker run --rm) in the foreground). Then the
        container's log is followed, and once the container is gone the unit's journal of its latest run
        (its systemd invocation, or since I(since)) is read instead, so a server that died within seconds is
        still classified from its own log, not as C(engine_exited). While the unit is active and its
        container is missing (image pull, restart), the module keeps waiting.
    type: str
  container:
    description:
      - A Docker container whose log holds the server's output, read with C(docker logs --timestamps).
      - When the container has exited or is restarting and the log shows no known failure, the failure class is
        C(engine_exited).
      - Without I(unit), a container that does not exist is taken as exited (a C(--rm) container is removed when
        it stops) once it stays missing for half of I(timeout), at most 15 seconds, or at once with I(timeout=0).
      - Mutually exclusive with I(log_file).
    type: str
  since_offset:
    description:
      - With I(log_file), the byte offset where this startup begins; lines before it are ignored.
      - Take it from the C(offset) a previous call returned before the server was (re)started.
      - If the file is now shorter than the offset (rotated or truncated), it is read from the start.
    type: int
    default: 0
  cursor:
    description:
      - With I(unit), a journal cursor; only entries after it are read (C(journalctl --after-cursor)).
      - Take it from the C(cursor) a previous call returned.
    type: str
  since:
    description:
      - With I(unit) or I(container), read only entries since this time (C(journalctl --since) /
        C(docker logs --since) syntax, for example C(2026-11-29 10:55:00) or C(10m)).
      - Ignored for I(unit) when I(cursor) is given.
    type: str
  url:
    description:
      - Base URL of the OpenAI-compatible API, for example C(http://192.168.200.12:30000) (a trailing C(/v1) is
        accepted). When set, ready requires C(/v1/models) to list I(model) and a one-token completion to succeed.
      - With no log source, the module only polls the API and reports C(starting) until it answers.
    type: str
  api_key:
    description:
      - Bearer token for the API (vLLM C(--api-key)).
    type: str
  model:
    description:
      - Served model name that C(/v1/models) must list (the C(--served-model-name), else the model path or id).
      - When omitted, the first listed model is used for the completion test.
    type: str
  validate_certs:
    description:
      - Verify TLS certificates when I(url) is https.
    type: bool
    default: true
  timeout:
    description:
      - Seconds to wait for ready. C(0) reads the log once and returns at once.
      - "When the time runs out the module does not fail (unless I(fail_on_timeout)): it returns C(ready: false),
        C(timed_out: true) and the current phase, so a loop can call it again."
    type: int
    default: 900
  fail_on_timeout:
    description:
      - Fail when I(timeout) runs out before the server is ready.
    type: bool
    default: false
  stall_timeout:
    description:
      - Fail with class C(stalled) when the log shows no progress (no new phase, no shard or CUDA graph step, no new
        informational line; placement-group waiting lines do not count) for this many seconds while waiting.
      - The quiet time is measured across calls, so a loop of short calls (I(timeout=10)) still sees a stall - the
        log's own timestamps tell how long before its last line progress stopped, and the file's modification time,
        the journal or docker's timestamps tell when that last line was written.
      - A placement-group wait that vLLM reports as longer than this or 300 s, whichever is less, is a stall
        too, also on a single read (I(timeout=0)); a healthy cluster places the workers at once.
      - C(0) disables stall detection.
    type: int
    default: 900
  poll_interval:
    description:
      - Seconds between reads while waiting.
    type: float
    default: 5
  max_bytes:
    description:
      - With I(log_file), the most bytes read per poll. The first read starts at most this far before the end
        of the file (the rest of a long serving log is skipped, see C(skipped_bytes)); later reads continue
        from where the last stopped, this much per poll, so a fast-growing or huge file never takes more
        memory or time than this.
      - With I(unit) or I(container), only the last this many characters of the first read are parsed
        (see C(skipped_chars)); later reads fetch only what is new (C(--after-cursor), C(--since) the last
        line's stamp).
      - Lines longer than 16384 characters are cut before they are matched, so the work per line is bounded.
      - Parsing stops at the deadline (I(timeout)) and resumes on the next poll.
    type: int
    default: 8388608
  rank_names:
    description:
      - 'Names to show for ranks, keyed by Ray node IP or by rank key, for example
        C({"192.168.200.13": "spark-2", "local": "spark-1"}).'
      - The key C(local) names ranks on the node that runs the API server, whose lines Ray prints without an IP.
    type: dict
    default: {}
notes:
  - 'Failure classes, from the one that wins when several show in a log to the most generic: C(ray_oom_killed),
    C(cuda_oom), C(gpu_arch_unsupported) (the image has no kernels for this GPU), C(insufficient_memory),
    C(port_in_use), C(dependency_missing), C(worker_env_mismatch) (a Ray worker runs other packages than the
    driver), C(model_unsupported), C(tokenizer_error), C(weights_corrupt), C(ray_unreachable), C(rendezvous_failed),
    C(nccl_error), C(placement_group), C(worker_died), C(stalled) (no progress for I(stall_timeout)),
    C(engine_exited) (process or unit gone without a failure in the log), C(engine_init_failed) (generic, only when
    nothing more specific is in the log) and C(log_missing) (I(log_file) does not exist).'
  - After the log says the startup completed, an engine that dies at its first request (for example a Ray worker
    that cannot import what the driver sends) is still a failure; ordinary request errors are not.
  - Returned text is always valid UTF-8; undecodable bytes in the log become U+FFFD.
  - A log that holds a failed run followed by a restarted run reports the restarted run; while that run is not
    ready, the earlier failure is reported (a crash loop).
  - Phase times come from timestamps in the log (vLLM, Ray, journal or docker timestamps); lines without one
    count toward the last seen timestamp.
  - A tqdm bar redrawn with carriage returns only reaches the journal or a container log when a newline ends it;
    the module also reads the unfinished last line of a I(log_file), and Ray forwards each worker's redraws, so
    shard progress of Ray ranks shows while it happens.
  - Without a process to watch (I(log_file)), a server killed without a word (for example by the kernel's OOM
    killer) is only seen as no progress, so C(stalled) after I(stall_timeout); prefer I(unit) or I(container).
author:
  - sparkfleet.vllm contributors (@sparkfleet)
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.setting_names
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Wait for the server, one call per 10 s so progress shows
  sparkfleet.vllm.vllm_wait:
    unit: vllm-serve.service
    since: "{{ _vllm_serve_started_at }}"
    url: "http://{{ sparkfleet_fabric_ip }}:{{ sparkfleet_api_port }}"
    api_key: "{{ vllm_serve_api_key | default(omit) }}"
    model: "{{ sparkfleet_model_id }}"
    timeout: 10
    rank_names: {"192.168.200.13": "spark-2", "local": "spark-1"}
  register: _vllm_wait
  # Stop at ready, or at once on a failure (a failed result is final, retrying cannot fix it).
  until: _vllm_wait is failed or _vllm_wait.ready
  retries: 180
  delay: 0

- name: Show where the startup stands
  ansible.builtin.debug:
    msg: "{{ _vllm_wait.summary }}"

- name: Diagnose a captured log once
  sparkfleet.vllm.vllm_wait:
    log_file: /var/log/vllm/serve.log
    timeout: 0
  register: _vllm_state
  failed_when: false

- name: Remember where the log ends before restarting, then follow only the new run
  sparkfleet.vllm.vllm_wait:
    log_file: /var/log/vllm/serve.log
    timeout: 0
  register: _before_restart
  failed_when: false

- name: Follow the new run
  sparkfleet.vllm.vllm_wait:
    log_file: /var/log/vllm/serve.log
    since_offset: "{{ _before_restart.offset }}"
    timeout: 1800
    fail_on_timeout: true
"""

RETURN = r"""
phase:
  description: Where the startup is, or C(failed).
  returned: always
  type: str
  sample: loading_weights
ready:
  description: The server is ready (API checked when I(url) is set, else the log's startup-complete marker).
  returned: always
  type: bool
  sample: false
failed_phase:
  description: The phase the startup was in when it failed.
  returned: always
  type: str
  sample: cuda_graphs
failure:
  description: Why the startup failed; null when it has not.
  returned: always
  type: dict
  contains:
    class:
      description: One of the failure classes listed in the notes.
      type: str
      sample: ray_oom_killed
    evidence:
      description: The log lines that show the failure, most telling first.
      type: list
      elements: str
    hint:
      description: What to change, naming each setting as I(setting_names) says.
      type: str
summary:
  description: One line for people.
  returned: always
  type: str
  sample: "loading_weights 17/39 shards (44%), 2.1 s/shard, ETA 46 s; slowest rank spark-2"
progress:
  description: Progress of the slowest rank in the current phase (shards while loading, graphs while capturing).
  returned: always
  type: dict
  sample: {"unit": "shards", "n": 17, "total": 39, "percent": 44, "s_per_shard": 2.1, "eta_s": 46,
           "slowest_rank": "spark-2"}
ranks:
  description: Weight-loading progress per rank, keyed by the Ray C(ip pid=N) prefix (or the local process name).
  returned: always
  type: dict
  sample: {"192.168.200.13 pid=861": {"n": 17, "total": 39, "percent": 44, "s_per_shard": 2.1, "eta_s": 46,
           "name": "spark-2"}}
phase_times:
  description: Seconds spent in each phase, from the first line of the phase to the first line of the next
    (or the last line seen), when the log carries timestamps.
  returned: always
  type: dict
  sample: {"starting": 14, "engine_init": 1, "placement": 20, "loading_weights": 707}
offset:
  description: With I(log_file), the byte offset of the end of what was read; pass it as I(since_offset).
  returned: when log_file is set
  type: int
bytes_read:
  description: With I(log_file), bytes this call read from the file.
  returned: when log_file is set
  type: int
skipped_bytes:
  description: With I(log_file), bytes before the last I(max_bytes) of the file that the first read skipped.
  returned: when log_file is set
  type: int
skipped_chars:
  description: With I(unit) or I(container), characters before the last I(max_bytes) of the first read that
    were not parsed.
  returned: when unit or container is set
  type: int
log_source:
  description: Where the answer came from, C(file), C(journal) or C(docker); C(journal) with I(container)
    when the container was gone and the unit's journal was read instead.
  returned: when log_file, unit or container is set
  type: str
  sample: journal
cursor:
  description: With I(unit), the journal cursor after the last entry read; pass it as I(cursor).
  returned: when unit is set and the journal returned entries
  type: str
timed_out:
  description: I(timeout) ran out before ready.
  returned: always
  type: bool
elapsed:
  description: Seconds this call waited.
  returned: always
  type: float
placement_wait_s:
  description: Longest placement-group wait the log reported, in seconds.
  returned: always
  type: int
vllm_version:
  description: vLLM version the log announced.
  returned: always
  type: str
api:
  description: What the API check saw (models listed, completion result), when I(url) is set.
  returned: when url is set
  type: dict
attempts:
  description: Server runs seen in the log (restarts add one).
  returned: always
  type: int
previous_failure:
  description: The failure of an earlier run in the same log, when the server was restarted after it.
  returned: always
  type: dict
api_address:
  description: Address the API server announced in the log.
  returned: always
  type: str
  sample: http://0.0.0.0:30000
lines:
  description: Log lines read.
  returned: always
  type: int
benign_warnings:
  description: Known harmless warnings that were seen and ignored (first few).
  returned: always
  type: list
  elements: str
"""

import calendar
import codecs
import json
import os
import re
import stat
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.urls import open_url

from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import render_text, setting_names_problem
from ansible_collections.sparkfleet.vllm.plugins.module_utils._vllm_log import (
    PHASE_INDEX,
    VllmLogParser,
    scrub,
    summary as make_summary,
)

# journalctl and systemctl print plain text for a parser: no colours, no pager.
_SYSTEMD_ENV = {"SYSTEMD_COLORS": "0", "SYSTEMD_PAGER": ""}
# After a failing line, read once more this much later so the rest of the traceback (written in the
# same burst) is classified too; small enough to stay within one poll interval.
_SETTLE_S = 0.05
# A bare exception with no fatal marker ends the startup if nothing moves for this long.
_WEAK_CONFIRM_S = 60.0
# A log file is read in pieces of this size, the parser fed between them, so a call stops at its deadline.
_READ_CHUNK = 256 * 1024
# A log file missing for this many reads in a row (and at least this long) is reported as log_missing.
_MISSING_POLLS = 3
_MISSING_MIN_S = 2.0


class FileSource(object):
    """A log file, read from ``offset`` in bounded pieces.

    The first read starts at most ``max_bytes`` before the end (a long serving log is not read whole); later
    reads continue from where the last one stopped. ``bytes_read`` and ``skipped_bytes`` say what was done.
    """

    kind = "file"

    def __init__(self, module, path, offset, max_bytes):
        self.module = module
        self.path = path
        self.offset = max(0, offset or 0)
        self.max_bytes = max_bytes
        self.first = True
        self.bytes_read = 0
        self.skipped_bytes = 0
        self.error = None
        self._aligning = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read(self, limit=None):
        """Up to ``limit`` bytes (default ``max_bytes``) as text; None when the file cannot be read."""
        limit = self.max_bytes if limit is None else min(limit, self.max_bytes)
        try:
            st = os.stat(self.path)
            if not stat.S_ISREG(st.st_mode):
                # /dev/zero never ends, a FIFO blocks the open: neither is a log this module can follow.
                self.module.fail_json(
                    msg="log_file %s is not a regular file" % self.path,
                    hint="Point log_file at the file the vLLM server writes, or follow its unit or container "
                         "(unit / container) instead.")
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < self.offset:
                    # Rotated or truncated: a new file.
                    self.offset = 0
                    self._decoder.reset()
                if self.first and size - self.offset > self.max_bytes:
                    start = size - self.max_bytes
                    self.skipped_bytes += start - self.offset
                    self.offset = start
                    self._aligning = True
                self.first = False
                fh.seek(self.offset)
                data = fh.read(limit)
        except (IOError, OSError) as exc:
            self.error = to_text(exc, errors="surrogate_or_replace")
            return None
        self.error = None
        self.offset += len(data)
        self.bytes_read += len(data)
        if self._aligning:
            # Started inside a line: drop its rest (over as many reads as it takes), the parser must not
            # see half a line.
            nl = data.find(b"\n")
            cut = len(data) if nl < 0 else nl + 1
            self._aligning = nl < 0 and len(data) > 0
            self.skipped_bytes += cut
            data = data[cut:]
        return self._decoder.decode(data)

    def alive(self):
        return None, None

    def last_write(self):
        try:
            return os.stat(self.path).st_mtime
        except OSError:
            return None

    def result(self):
        return {"offset": self.offset, "bytes_read": self.bytes_read, "skipped_bytes": self.skipped_bytes}


class JournalSource(object):
    kind = "journal"

    def __init__(self, runner, unit, cursor, since, last_run=False):
        self.runner = runner
        self.unit = unit
        self.cursor = cursor
        self.since = since
        # With no cursor or since, read only the unit's latest run (its systemd invocation).
        self.last_run = last_run
        self.journalctl = self.runner.bin("journalctl")
        self.systemctl = self.runner.bin("systemctl", required=False)

    def invocation(self):
        if not self.systemctl:
            return None
        res = self.runner.run([self.systemctl, "show", self.unit, "-p", "InvocationID", "--value"])
        inv = res.stdout.strip() if res.ok else ""
        return inv if re.match(r"^[0-9a-f]{32}$", inv) else None

    def read(self):
        cmd = [self.journalctl, "-u", self.unit, "-o", "cat", "--no-pager", "-q", "--show-cursor"]
        if self.cursor:
            cmd += ["--after-cursor", self.cursor]
        elif self.since:
            cmd += ["--since", self.since]
        elif self.last_run:
            inv = self.invocation()
            if inv:
                # The service's output and systemd's words about this run (journalctl ORs across "+").
                cmd = [self.journalctl, "_SYSTEMD_INVOCATION_ID=%s" % inv, "+", "INVOCATION_ID=%s" % inv,
                       "-o", "cat", "--no-pager", "-q", "--show-cursor"]
        res = self.runner.run(cmd)
        if not res.ok and not res.stdout:
            self.runner.fail(res, "journalctl failed for unit %s" % self.unit,
                             hint="Check the unit name and that this user may read the journal (become: true).")
        lines = res.stdout.split("\n")
        keep = []
        for ln in lines:
            if ln.startswith("-- cursor: "):
                self.cursor = ln[len("-- cursor: "):].strip()
            elif ln.strip() == "-- No entries --":
                continue
            else:
                keep.append(ln)
        text = "\n".join(keep)
        if text and not text.endswith("\n"):
            text += "\n"
        return text

    def alive(self):
        if not self.systemctl:
            return None, None
        cmd = [self.systemctl, "show", self.unit, "-p", "ActiveState", "-p", "SubState", "-p", "Result",
               "-p", "ExecMainStatus"]
        res = self.runner.run(cmd)
        if not res.ok:
            return None, None
        props = dict(ln.split("=", 1) for ln in res.stdout.splitlines() if "=" in ln)
        active = props.get("ActiveState", "")
        sub = props.get("SubState", "")
        gone = active in ("failed", "inactive") or sub in ("auto-restart", "failed", "dead")
        ev = "systemd: %s ActiveState=%s SubState=%s Result=%s ExecMainStatus=%s" % (
            self.unit, active, sub, props.get("Result", ""), props.get("ExecMainStatus", ""))
        return (not gone), ev

    def last_write(self):
        cmd = [self.journalctl, "-u", self.unit, "-n", "1", "-o", "short-unix", "--no-pager", "-q"]
        res = self.runner.run(cmd)
        try:
            return float(res.stdout.split(None, 1)[0]) if res.ok and res.stdout.strip() else None
        except ValueError:
            return None

    def result(self):
        return {"cursor": self.cursor} if self.cursor else {}


_MISSING_GRACE_S = 15.0
_DOCKER_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?\S*)\s")


class DockerSource(object):
    kind = "docker"

    def __init__(self, runner, container, since):
        self.runner = runner
        self.container = container
        self.since = since
        self.docker = self.runner.bin("docker")
        self.last_ts = None
        # The stamp of the last complete line read and the lines carrying it: later reads ask docker only for
        # lines since then (--since is inclusive), so a poll costs what is new, not the whole log again.
        self.last_stamp = None
        self.at_last = set()

    def read(self):
        cmd = [self.docker, "logs", "--timestamps"]
        since = self.last_stamp or self.since
        if since:
            cmd += ["--since", since]
        cmd.append(self.container)
        res = self.runner.run(cmd)
        if not res.ok:
            if "No such container" in res.stderr:
                return None
            self.runner.fail(res, "docker logs failed for %s" % self.container,
                             hint="Check the container name and docker access.")
        lines = []
        for stream in (res.stdout, res.stderr):
            # Complete lines only: an unfinished one is read whole on the next poll.
            lines.extend(stream.split("\n")[:-1])
        # Both streams carry fixed-width RFC 3339 stamps; sorting on them merges one timeline back.
        lines.sort(key=lambda ln: ln.split(" ", 1)[0])
        new = []
        for ln in lines:
            stamp = ln.split(" ", 1)[0]
            if self.last_stamp is not None and (stamp < self.last_stamp or
                                                (stamp == self.last_stamp and ln in self.at_last)):
                continue
            new.append(ln)
        if lines:
            last = lines[-1].split(" ", 1)[0]
            if last != self.last_stamp:
                self.at_last = set()
            self.at_last.update(ln for ln in lines if ln.split(" ", 1)[0] == last)
            self.last_stamp = last
            m = _DOCKER_TS.match(lines[-1])
            if m:
                self.last_ts = _rfc3339(m.group(1))
        return "\n".join(new) + ("\n" if new else "")

    def alive(self):
        cmd = [self.docker, "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}}",
               self.container]
        res = self.runner.run(cmd)
        if not res.ok:
            return False, "docker: container %s not found" % self.container
        fields = res.stdout.split()
        status = fields[0] if fields else ""
        ev = "docker: %s status=%s exit_code=%s oom_killed=%s" % (
            self.container, status, fields[1] if len(fields) > 1 else "", fields[2] if len(fields) > 2 else "")
        return status not in ("exited", "dead", "restarting", "removing"), ev

    def last_write(self):
        return self.last_ts

    def result(self):
        return {}


def _rfc3339(text):
    """Docker's UTC stamp "2026-11-29T10:55:51.123456789Z" -> epoch seconds."""
    try:
        return calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


class ApiProbe(object):
    def __init__(self, module):
        self.module = module
        base = module.params["url"].rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        self.base = base
        self.model = module.params["model"]
        self.headers = {"Content-Type": "application/json"}
        if module.params["api_key"]:
            self.headers["Authorization"] = "Bearer %s" % module.params["api_key"]
        self.state = {"url": base, "models": [], "completion_ok": False, "error": None}

    def _hint(self, text):
        return render_text(text, self.module.params["setting_names"])

    def _call(self, path, body=None):
        data = json.dumps(body) if body is not None else None
        try:
            resp = open_url(self.base + path, data=data, headers=self.headers,
                            method="POST" if body is not None else "GET", timeout=30,
                            validate_certs=self.module.params["validate_certs"])
            return resp.getcode(), json.loads(to_text(resp.read()))
        except Exception as exc:  # connection refused, HTTP errors, bad JSON: all mean "not ready"
            code = getattr(exc, "code", None)
            return code, to_text(exc)

    def check(self):
        """True when ready; raises via fail_json on answers that waiting cannot fix."""
        code, body = self._call("/v1/models")
        if code in (401, 403):
            self.module.fail_json(msg="The API at %s refused the key (HTTP %s)" % (self.base, code),
                                  hint=self._hint("Pass the server's --api-key as api_key ({api_key})."))
        if code != 200 or not isinstance(body, dict):
            self.state["error"] = "GET /v1/models: %s" % (body if code is None else "HTTP %s" % code)
            return False
        ids = [m.get("id") for m in body.get("data", []) if isinstance(m, dict)]
        self.state["models"] = ids
        if self.model and self.model not in ids:
            if ids:
                self.module.fail_json(
                    msg="The API at %s serves %s, not %s" % (self.base, ", ".join(ids), self.model),
                    hint=self._hint("Set model to the server's --served-model-name ({served_model_name})."),
                    api=self.state)
            self.state["error"] = "model %s not listed yet" % self.model
            return False
        model = self.model or (ids[0] if ids else None)
        if not model:
            self.state["error"] = "no model listed yet"
            return False
        one_token = {"model": model, "prompt": "Hi", "max_tokens": 1, "temperature": 0}
        code, body = self._call("/v1/completions", one_token)
        if code in (400, 404):
            chat = {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]}
            code, body = self._call("/v1/chat/completions", chat)
        ok = code == 200 and isinstance(body, dict) and bool(body.get("choices"))
        self.state["completion_ok"] = ok
        self.state["error"] = None if ok else "completion: %s" % (body if code is None else "HTTP %s" % code)
        return ok


def quiet_seconds(source, parser, now, in_call):
    """How long the startup has shown no progress, across calls.

    A role calls this module in a loop of short calls, so this call's own clock is not enough:
    the log tells how long before its last line progress stopped (in its own clock, so time zones
    do not matter) and the source tells how long ago that last line was written. ``now`` is the
    wall clock (the clock of file times and journal or docker stamps); ``in_call`` is the quiet time
    this call measured itself, on the monotonic clock.
    """
    idle = in_call
    if source is None:
        return idle
    quiet = parser.quiet_for()
    written = source.last_write()
    if quiet is not None and written is not None:
        idle = max(idle, max(0.0, now - written) + quiet)
    return idle


def _new_parser(p):
    return VllmLogParser(stall_timeout=p["stall_timeout"], rank_names=p["rank_names"],
                         setting_names=p["setting_names"])


class StartupWaiter(object):
    """Follows one vLLM startup until it is ready, has failed, or the call's time is up.

    Like kubernetes.core's waiter, the caller drives it: ``step()`` reads what is new and decides, returning
    None to go on or why it stopped (``ready``, ``failed``, ``timed_out``, ``read`` for a single read);
    ``sleep()`` waits for the next beat; ``result()`` is the module's answer. Deadlines and waits use the
    monotonic clock; the wall clock only meets the log's own write times (see ``quiet_seconds``).
    """

    def __init__(self, module):
        self.module = module
        p = self.p = module.params
        self.parser = _new_parser(p)
        self.source = None
        self.journal = None  # the unit's journal, read when the container is gone
        runner = Runner(module, env=_SYSTEMD_ENV)
        if p["log_file"]:
            self.source = FileSource(module, p["log_file"], p["since_offset"], p["max_bytes"])
        elif p["container"]:
            self.source = DockerSource(runner, p["container"], p["since"])
            if p["unit"] and runner.bin("journalctl", required=False):
                self.journal = JournalSource(runner, p["unit"], None, p["since"], last_run=True)
        elif p["unit"]:
            self.source = JournalSource(runner, p["unit"], p["cursor"], p["since"])
        self.api = ApiProbe(module) if p["url"] else None
        self.once = p["timeout"] <= 0
        self.start = time.monotonic()
        self.deadline = self.start + max(0, p["timeout"])
        self.next_tick = self.start
        self.progress_mark = (self.parser.progress_seq, self.parser.last_progress_line)
        self.last_progress = self.start
        # A container started with --rm disappears when it exits; one missing for this long (within one call) is gone.
        self.missing_grace = min(_MISSING_GRACE_S, max(2.0, p["timeout"] / 2.0))
        self.container_missing_since = None
        self.file_missing_reads = 0
        self.file_missing_since = None
        self.from_journal = False
        self.read_once = False
        self.pending = ""  # journal or docker text left unparsed at the deadline
        self.skipped = 0
        self.api_ready = False
        self.timed_out = False

    def _out_of_time(self):
        return not self.once and time.monotonic() >= self.deadline

    # ----- reading -----
    def pull(self):
        """Feed the parser what is new; True when the source is not there (no file, no container)."""
        if self.source is None:
            return False
        if self.source.kind == "file":
            return self._pull_file()
        text = self.source.read()
        if text is None:
            return True
        max_bytes = self.p["max_bytes"]
        if not self.read_once and len(text) > max_bytes:
            # First read of a long journal or container log: its last max_bytes, from a line start.
            tail = text[-max_bytes:]
            tail = tail[tail.find("\n") + 1:]
            self.skipped += len(text) - len(tail)
            text = tail
        self.read_once = True
        text = self.pending + text
        self.pending = ""
        for at in range(0, len(text), _READ_CHUNK):
            if at and self._out_of_time():
                # Out of time: the rest is parsed on the next poll (journal and docker do not re-send it).
                self.pending = text[at:]
                break
            self.parser.feed(text[at:at + _READ_CHUNK])
        return False

    def _pull_file(self):
        # A file is read in pieces up to max_bytes per poll, and not past the deadline (timeout bounds the
        # whole call, parsing included); what is left is read on the next poll or call, from offset.
        budget = self.p["max_bytes"]
        while budget > 0:
            before = self.source.bytes_read
            text = self.source.read(min(_READ_CHUNK, budget))
            if text is None:
                return True
            self.parser.feed(text)
            got = self.source.bytes_read - before
            if got <= 0:
                break
            budget -= got
            if self._out_of_time():
                break
        return False

    # ----- one poll -----
    def step(self):
        missing = self.pull()
        if self._log_file_missing(missing):
            return "failed"
        if self.once:
            self.parser.finish()
        else:
            self.parser.peek_tail()
        if self._failure_seen():
            return "failed"
        if missing and self.source.kind == "docker":
            if self._container_gone():
                return "failed"
        else:
            self.container_missing_since = None
        if self._process_gone(missing):
            return "failed"
        if self._ready():
            return "ready"
        if self.once:
            self.parser.settle(final=True)
            return "read"
        return self._quiet()

    def _log_file_missing(self, missing):
        """A log file that stays missing (three reads, two seconds; at once when reading once) is log_missing."""
        if self.source is None or self.source.kind != "file":
            return False
        if not missing:
            self.file_missing_reads = 0
            self.file_missing_since = None
            return False
        if self.source.error and "ermission denied" in self.source.error:
            self.module.fail_json(msg="Log file %s cannot be read: %s" % (self.p["log_file"], self.source.error),
                                  hint="Run the task as a user that may read it (become: true).")
        self.file_missing_reads += 1
        if self.file_missing_since is None:
            self.file_missing_since = time.monotonic()
        waited = time.monotonic() - self.file_missing_since
        if self.once or (self.file_missing_reads >= _MISSING_POLLS and waited >= _MISSING_MIN_S):
            self.parser.mark_missing("log file %s cannot be read (%s); tried %d time(s) over %.0f s" % (
                self.p["log_file"], self.source.error, self.file_missing_reads, waited))
            return True
        return False

    def _failure_seen(self):
        if (self.parser.failed or (self.parser.previous_failure and self.parser.phase != "ready")) and not self.once:
            # A failure (or a restart after one) is final. Let the rest of the traceback (the root
            # cause) arrive before classifying.
            time.sleep(_SETTLE_S)
            self.pull()
            self.parser.finish()
            return True
        return self.parser.failed

    def _container_gone(self):
        """The container is not there. With its unit, the unit's journal tells why (or that it is still starting);
        without, a container missing for the grace period has exited and was removed (--rm)."""
        if self.journal is not None:
            jp = self._from_unit_journal()
            if jp is not None:
                self.parser = jp
                self.from_journal = True
                return True
            # The unit still runs (pulling the image, or restarting): wait for its container.
            if self.container_missing_since is None:
                self.container_missing_since = time.monotonic()
            return False
        if self.container_missing_since is None:
            self.container_missing_since = time.monotonic()
        if self.once or time.monotonic() - self.container_missing_since >= self.missing_grace:
            self.parser.finish()
            self.parser.settle(final=True)
            if not self.parser.failed:
                self.parser.mark_exited(
                    "docker: container %s does not exist: it exited and was removed (--rm), or never started; see the"
                    " unit that runs it (systemctl status, journalctl -u)" % self.p["container"])
            return True
        return False

    def _from_unit_journal(self):
        """Read the unit's journal of this run (docker run's output), so the cause comes from the log. Returns the
        journal's parser when it settles the answer, else None."""
        jp = _new_parser(self.p)
        text = self.journal.read()
        if text:
            jp.feed(text[-self.p["max_bytes"]:])
        jp.finish()
        alive, evidence = self.journal.alive()
        if alive is False:
            jp.settle(final=True)
            if not jp.failed:
                jp.mark_exited(evidence)
        if jp.failed or (alive is False):
            return jp
        return None

    def _process_gone(self, missing):
        """The unit or container stopped before ready: classify from the whole log, else engine_exited."""
        if self.source is None or self.parser.phase == "ready":
            return False
        alive, evidence = self.source.alive()
        if alive is False and not missing:
            self.pull()
            self.parser.finish()
            self.parser.settle(final=True)
            if not self.parser.failed:
                self.parser.mark_exited(evidence)
            return True
        return False

    def _ready(self):
        log_ready = self.parser.phase == "ready"
        if self.api is None:
            return log_ready
        if self.source is None or PHASE_INDEX[self.parser.phase] >= PHASE_INDEX["api_starting"]:
            self.api_ready = self.api.check()
        return self.api_ready

    def _quiet(self):
        """Nothing decided yet: a weak cause with nothing after it, a stall, or the end of this call's time."""
        now = time.monotonic()
        mark = (self.parser.progress_seq, self.parser.last_progress_line)
        if mark != self.progress_mark:
            self.progress_mark = mark
            self.last_progress = now
        self.parser.settle(final=False)
        if self.parser.failed:
            return "failed"
        idle = quiet_seconds(self.source, self.parser, time.time(), now - self.last_progress)
        if self.parser.weak_cause_pending and idle >= _WEAK_CONFIRM_S:
            self.parser.settle(final=True)
            return "failed"
        if self.source is not None and self.p["stall_timeout"] and idle >= self.p["stall_timeout"]:
            self.parser.mark_stalled(int(idle))
            return "failed"
        if now >= self.deadline:
            self.timed_out = True
            return "timed_out"
        return None

    def sleep(self):
        """Wait for the next poll, on a fixed beat so reading and parsing time does not stretch the interval."""
        self.next_tick += self.p["poll_interval"]
        time.sleep(max(0.0, min(self.next_tick, self.deadline) - time.monotonic()))

    # ----- the answer -----
    def result(self):
        snap = self.parser.snapshot()
        api = self.api
        ready = (self.api_ready if api is not None else snap["phase"] == "ready") and snap["phase"] != "failed"
        if api is not None and self.api_ready and snap["phase"] != "failed":
            snap["phase"] = "ready"
        if api is not None and not self.api_ready and snap["phase"] == "ready":
            # The log says up but the API does not answer yet.
            snap["phase"] = "api_starting"
        result = dict(
            changed=False,
            phase=snap["phase"],
            ready=ready,
            failed_phase=snap["failed_phase"],
            failure=snap["failure"],
            summary=make_summary(snap),
            progress=snap["progress"],
            ranks=snap["ranks"],
            phase_times=snap["phase_times"],
            placement_wait_s=snap["placement_wait_s"],
            vllm_version=snap["vllm_version"],
            api_address=snap["api_address"],
            attempts=snap["attempts"],
            previous_failure=snap["previous_failure"],
            benign_warnings=snap["benign_warnings"],
            lines=snap["lines"],
            timed_out=self.timed_out,
            elapsed=round(time.monotonic() - self.start, 2),
        )
        if self.source is not None:
            result.update(self.source.result())
            result["log_source"] = "journal" if self.from_journal else self.source.kind
            if self.source.kind != "file":
                result["skipped_chars"] = self.skipped
        if api is not None:
            result["api"] = api.state
        return _clean(result)


def run(module):
    waiter = StartupWaiter(module)
    while waiter.step() is None:
        waiter.sleep()
    return waiter.result()


def _clean(value):
    """Every string valid UTF-8 (no lone surrogates from undecodable log bytes): Ansible drops a whole
    result it cannot encode, class and hint with it."""
    if isinstance(value, dict):
        return dict((_clean(k), _clean(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, str):
        return scrub(value)
    return value


def main():
    module = AnsibleModule(
        argument_spec=dict(
            log_file=dict(type="path"),
            unit=dict(type="str"),
            container=dict(type="str"),
            since_offset=dict(type="int", default=0),
            cursor=dict(type="str"),
            since=dict(type="str"),
            url=dict(type="str"),
            api_key=dict(type="str", no_log=True),
            model=dict(type="str"),
            validate_certs=dict(type="bool", default=True),
            timeout=dict(type="int", default=900),
            fail_on_timeout=dict(type="bool", default=False),
            stall_timeout=dict(type="int", default=900),
            poll_interval=dict(type="float", default=5),
            rank_names=dict(type="dict", default={}),
            max_bytes=dict(type="int", default=8388608),
            setting_names=dict(type="dict", default={}),
        ),
        mutually_exclusive=[("log_file", "unit"), ("log_file", "container")],
        required_one_of=[("log_file", "unit", "container", "url")],
        supports_check_mode=True,
    )
    if module.params["poll_interval"] <= 0:
        module.fail_json(msg="poll_interval must be greater than 0", hint="Use a few seconds, e.g. 5.")
    for name in ("timeout", "stall_timeout", "since_offset"):
        if module.params[name] < 0:
            module.fail_json(msg="%s must be 0 or more (got %d)" % (name, module.params[name]),
                             hint="timeout 0 reads the log once; stall_timeout 0 never calls a quiet log stalled.")
    url = module.params["url"]
    if url is not None and not re.match(r"^https?://(\[[0-9A-Fa-f:.]+\]|[^/\s:\[\]]+)(:\d{1,5})?(/\S*)?$", url):
        module.fail_json(msg="url must be http://HOST[:PORT] or https://HOST[:PORT] (got %r)" % url,
                         hint="Give the API's base address, e.g. http://10.1.230.180:30000.")
    if module.params["max_bytes"] < 65536:
        module.fail_json(msg="max_bytes must be at least 65536 (got %d)" % module.params["max_bytes"],
                         hint="Leave max_bytes at its default (8388608, 8 MiB) unless the log is larger per poll.")
    problem = setting_names_problem(module.params["setting_names"])
    if problem:
        module.fail_json(msg=problem[0], hint=problem[1])
    result = run(module)
    if result["failure"]:
        f = result["failure"]
        first = f["evidence"][0] if f["evidence"] else "no log line"
        msg = "vLLM startup failed in %s: %s: %s" % (result["failed_phase"], f["class"], first[:300])
        module.fail_json(msg=scrub(msg), hint=f["hint"], **result)
    if result["timed_out"] and module.params["fail_on_timeout"]:
        module.fail_json(msg="vLLM not ready after %d s: %s" % (module.params["timeout"], result["summary"]),
                         hint="Raise timeout, or look at phase_times to see which phase is slow.", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
