# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What vllm_wait does (private to sparkfleet.vllm); the module holds only its documentation and argument spec.

- ``option_problem(params)``: every refusal, made before anything is read; each names the option and the fix.
- The log sources, each read from its END and bounded in bytes, lines and time, whatever the log's size:
  ``FileSource`` (a file: at most ``max_bytes`` per read, the first read from the tail; a file replaced under the
  same name is noticed by its identity, its size and the bytes before the offset, and read from its start),
  ``JournalSource`` (``journalctl -n``) and ``DockerSource`` (``docker logs --tail``), whose output passes through
  ``tail -c`` so a read never holds more than ``max_bytes`` in memory, under coreutils' ``timeout``.
- ``ApiProbe``: ready means ``/v1/models`` lists the model and a one-token completion answers.
- ``StartupWaiter``: the loop (``step``/``sleep``/``result``); ``run(module)`` and ``finish(module, result)``.
The parser itself (phases, causes) is ``_vllm_log``; nothing here knows a role.
"""

from __future__ import annotations

import calendar
import codecs
import json
import math
import os
import re
import stat
import time
from urllib.parse import urlsplit

from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.urls import open_url

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json
from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import render_text, setting_names_problem
from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine._vllm_log import (
    PHASE_INDEX,
    VllmLogParser,
    gate_refusal,
    scrub,
    summary as make_summary,
)

# /v1/models or a one-token completion answers in kilobytes; more is not an answer we read.
API_MAX_BYTES = 4 * 1024 * 1024
# journalctl and systemctl print plain text for a parser: no colours, no pager.
_SYSTEMD_ENV = {"SYSTEMD_COLORS": "0", "SYSTEMD_PAGER": ""}
# After a failing line, read once more this much later so the rest of the traceback (written in the
# same burst) is classified too; small enough to stay within one poll interval.
_SETTLE_S = 0.05
# A bare exception with no fatal marker ends the startup if nothing moves for this long.
_WEAK_CONFIRM_S = 60.0
# Text is parsed in pieces of this size, the clock checked between them, so a call stops at its deadline.
_READ_CHUNK = 256 * 1024
# A log file missing for this many reads in a row (and at least this long) is reported as log_missing.
_MISSING_POLLS = 3
_MISSING_MIN_S = 2.0
_MISSING_GRACE_S = 15.0
# A first read keeps at most this many lines (the newest): a startup is a few thousand lines, and the parse time of
# a read is bounded by its lines, whatever their length (8 MiB of 2-byte lines are 4 million lines).
MAX_LINES = 100000
# Every command and API call is bounded by the time left; one that gets less than this would fail for nothing.
_MIN_COMMAND_S = 5.0
# The bytes before the read offset kept to notice a file rewritten under the same inode.
_MARK_BYTES = 64
# A unit that ended cleanly (exit 0, or the stop signal it counts as success) and that systemd is about to start
# again (Restart=always) is followed into its next start, this many times at most (systemd's NRestarts since the
# deploy's own start): that start says what happened (it serves, a known failure, or the memory gate's escalation).
# Seen in CI: an engine ended cleanly during the deploy's wait, and the next start's gate escalated.
CLEAN_RESTARTS_FOLLOWED = 3
# How long journald may take to make a line that a unit's process wrote readable (its stream is read asynchronously).
_JOURNAL_LAG_S = 1.0
# Bounds that keep every number a number the clock and the memory can hold.
MAX_TIMEOUT_S = 7 * 86400
MAX_POLL_S = 3600.0
MIN_MAX_BYTES = 65536
MAX_MAX_BYTES = 256 * 1024 * 1024
MAX_OFFSET = 2 ** 62
_UNIT_RE = re.compile(r"^[A-Za-z0-9:_.\\@-]{1,255}$")
_CONTAINER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$")
_CURSOR_RE = re.compile(r"^[\x21-\x7e]{1,512}$")
# "2026-11-29 10:55[:00]", or systemd's "Sun 2026-11-29 10:55:00 UTC" (local time with the zone's abbreviation)
_SINCE_ABS_RE = re.compile(
    r"^(?:[A-Z][a-z]{2} )?(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d(?::\d\d)?)(?: ([A-Za-z0-9+-]{1,8}))?$")
_SINCE_REL_RE = re.compile(r"^-?(\d{1,7})([smhd])$")
_SINCE_EPOCH_RE = re.compile(r"^@?(\d{1,12})(?:\.\d{1,9})?$")
# docker's words for a container that is gone or going (a --rm container is removed as it stops)
_CONTAINER_GONE_RE = re.compile(r"No such container|dead or marked for removal|removal of container .{0,80} is already")
_DOCKER_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?\S*)\s")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


# ----- options -----

def since_epoch(text, now=None):
    """``since`` as epoch seconds: "2026-11-29 10:55[:00]" (the node's local time), systemd's "Sun 2026-11-29
    10:55:00 UTC", "@1764413700" or "1764413700", or "10m" / "-10m" (ago; s, m, h, d). None when it is none of
    these."""
    text = (text or "").strip()
    now = time.time() if now is None else now
    m = _SINCE_EPOCH_RE.match(text)
    if m:
        return int(m.group(1))
    m = _SINCE_REL_RE.match(text)
    if m:
        return int(now) - int(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    m = _SINCE_ABS_RE.match(text)
    if m:
        hms = m.group(2) if m.group(2).count(":") == 2 else m.group(2) + ":00"
        try:
            parsed = time.strptime("%s %s" % (m.group(1), hms), "%Y-%m-%d %H:%M:%S")
            return int(calendar.timegm(parsed) if m.group(3) in ("UTC", "GMT") else time.mktime(parsed))
        except (ValueError, OverflowError):
            return None
    return None


def _url_problem(url):
    if not re.match(r"^https?://(\[[0-9A-Fa-f:.]+\]|[^/\s:\[\]]+)(:\d{1,5})?(/\S*)?$", url):
        return "url must be http://HOST[:PORT] or https://HOST[:PORT] (got %r)" % url
    try:
        port = urlsplit(url).port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        return "url's port must be 1-65535 (got %r)" % url
    return None


def option_problem(p):
    """(msg, hint) for the first option that cannot be used, else None. Every message names its option."""
    for name in ("timeout", "stall_timeout"):
        if not 0 <= p[name] <= MAX_TIMEOUT_S:
            return ("%s must be 0 to %d seconds (got %d)" % (name, MAX_TIMEOUT_S, p[name]),
                    "timeout 0 reads the log once; stall_timeout 0 never calls a quiet log stalled.")
    if not 0 <= p["since_offset"] <= MAX_OFFSET:
        return ("since_offset must be 0 or more (got %d)" % p["since_offset"],
                "Pass the offset an earlier call returned, or leave it out.")
    poll = p["poll_interval"]
    if not (isinstance(poll, float) and math.isfinite(poll)) or not 0 < poll <= MAX_POLL_S:
        return ("poll_interval must be a number of seconds above 0 and at most %d (got %r)" % (MAX_POLL_S, poll),
                "Use a few seconds, e.g. 5.")
    if not MIN_MAX_BYTES <= p["max_bytes"] <= MAX_MAX_BYTES:
        return ("max_bytes must be %d to %d (got %d)" % (MIN_MAX_BYTES, MAX_MAX_BYTES, p["max_bytes"]),
                "Leave max_bytes at its default (8388608, 8 MiB) unless the log is larger per poll.")
    if p["url"] is not None:
        problem = _url_problem(p["url"])
        if problem:
            return problem, "Give the API's base address, e.g. http://10.1.230.180:30000."
    key = p["api_key"]
    if key is not None and not re.match(r"^[\x21-\x7e]*$", key):
        # An HTTP header carries only visible ASCII: such a key can never be sent, so waiting cannot help.
        return ("api_key must be visible ASCII characters only (no spaces, newlines or non-ASCII letters)",
                "Give the key the server was started with (vLLM --api-key); it cannot hold such characters.")
    for name, rx, what in (("unit", _UNIT_RE, "a systemd unit name such as vllm-serve.service"),
                           ("container", _CONTAINER_RE, "a docker container name or ID"),
                           ("cursor", _CURSOR_RE, "the cursor an earlier call returned")):
        value = p[name]
        if value is not None and (not rx.match(value) or value.startswith("-")):
            return "%s must be %s (got %r)" % (name, what, value), "Check the %s option." % name
    if p["since"] is not None and since_epoch(p["since"]) is None:
        return ("since must be a time such as '2026-11-29 10:55:00', '@1764413700' or '10m' (got %r)" % p["since"],
                "Pass the time the server was started, e.g. systemctl show -p InactiveExitTimestamp --timestamp=unix.")
    if p["log_file"] is not None and (not p["log_file"] or "\x00" in p["log_file"]):
        return "log_file must be a path (got %r)" % p["log_file"], "Point log_file at the file the server writes."
    bad = sorted(str(k) for k, v in (p["rank_names"] or {}).items() if not isinstance(v, str))
    if bad:
        return ("rank_names values must be strings (%s)" % ", ".join(bad),
                'Map a Ray node IP or rank key to a name, e.g. {"192.168.200.13": "spark-2"}.')
    return setting_names_problem(p["setting_names"])


# ----- reading -----

def tail_lines(text, limit):
    """(the last ``limit`` lines of ``text``, characters dropped before them)."""
    at = len(text)
    for _i in range(limit + 1):
        at = text.rfind("\n", 0, at)
        if at < 0:
            return text, 0
    return text[at + 1:], at + 1


def _line_budget(max_bytes):
    return max(1000, min(MAX_LINES, max_bytes // 32))


def bounded(runner, argv, max_bytes, timeout, merge_stderr=False):
    """Run ``argv`` keeping only the last ``max_bytes + 1`` bytes of its output (``tail -c``): memory stays bounded
    whatever it prints. Its own exit status stands (pipefail); ``timeout`` seconds at most."""
    script = 'set -o pipefail; "$@" %s| tail -c %d' % ("2>&1 " if merge_stderr else "", int(max_bytes) + 1)
    return runner.run([runner.bin("bash"), "-c", script, "bash"] + list(argv), timeout=int(math.ceil(timeout)),
                      kill_after=2)


def _trim(text, max_bytes):
    """Output that ``tail -c`` may have cut inside a line: (whole lines only, characters dropped)."""
    if len(text) < max_bytes // 4 or len(text.encode("utf-8", "surrogateescape")) <= max_bytes:
        return text, 0
    nl = text.find("\n")
    return (text[nl + 1:], nl + 1) if nl >= 0 else ("", len(text))


class FileSource(object):
    """A log file, read from ``offset`` in bounded pieces; the first read starts at most ``max_bytes`` (and
    MAX_LINES lines) before the end. A file replaced under the same name (another inode, a smaller size, other
    bytes before the offset) is read again from its start."""

    kind = "file"

    def __init__(self, module, path, offset, max_bytes):
        self.module = module
        self.path = path
        self.offset = max(0, offset or 0)
        self.max_bytes = max_bytes
        self.first = True
        self.bytes_read = 0
        self.skipped_bytes = 0
        self.replaced = 0
        self.error = None
        self.identity = None
        self.mark = b""  # the last bytes before offset
        self._aligning = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _restart(self):
        self.offset = 0
        self.mark = b""
        self.first = True
        self._aligning = False
        self._decoder.reset()

    def _same_file(self, fh, st):
        """False when the file under ``path`` is no longer the one read so far."""
        if self.identity is not None and (st.st_dev, st.st_ino) != self.identity:
            return False
        if st.st_size < self.offset:
            return False
        if self.mark and self.offset >= len(self.mark):
            fh.seek(self.offset - len(self.mark))
            return fh.read(len(self.mark)) == self.mark
        return True

    def _start_from_tail(self, fh, size):
        """First read: start at most max_bytes before the end, and at most MAX_LINES lines before it."""
        start = max(self.offset, size - self.max_bytes)
        fh.seek(start)
        tail = fh.read(size - start)
        budget = _line_budget(self.max_bytes)
        if tail.count(b"\n") > budget:
            at = len(tail)
            for _i in range(budget + 1):
                at = tail.rfind(b"\n", 0, at)
            start += at + 1
        elif start > self.offset:
            self._aligning = True  # started inside a line
        self.skipped_bytes += start - self.offset
        self.offset = start

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
                st = os.fstat(fh.fileno())
                if not self._same_file(fh, st):
                    # Rotated, truncated or replaced (even by a longer file): a new log, read from its start.
                    self.replaced += 1
                    self._restart()
                self.identity = (st.st_dev, st.st_ino)
                if self.first:
                    self._start_from_tail(fh, st.st_size)
                self.first = False
                fh.seek(self.offset)
                data = fh.read(limit)
        except (IOError, OSError) as exc:
            self.error = to_text(exc, errors="surrogate_or_replace")
            return None
        self.error = None
        self.offset += len(data)
        self.bytes_read += len(data)
        self.mark = (self.mark + data)[-_MARK_BYTES:]
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
        return {"offset": self.offset, "bytes_read": self.bytes_read, "skipped_bytes": self.skipped_bytes,
                "replaced": self.replaced}


class JournalSource(object):
    """A unit's journal, newest entries first: ``journalctl -n`` bounded by lines, ``tail -c`` by bytes."""

    kind = "journal"

    def __init__(self, runner, unit, cursor, since, max_bytes, limit, last_run=False):
        self.runner = runner
        self.unit = unit
        self.cursor = cursor
        self.since = since  # epoch seconds or None
        self.max_bytes = max_bytes
        self.limit = limit  # seconds the next command may take
        # With no cursor or since, read only the unit's latest run (its systemd invocation).
        self.last_run = last_run
        self.skipped = 0
        self.error = None
        self.refused = False    # the gate refused the last start read (not its last refusal)
        self.sub_state = None
        self.journalctl = self.runner.bin("journalctl")
        self.systemctl = self.runner.bin("systemctl", required=False)

    def invocation(self):
        if not self.systemctl:
            return None
        res = self.runner.run([self.systemctl, "show", self.unit, "-p", "InvocationID", "--value"],
                              timeout=int(self.limit()), kill_after=2)
        inv = res.stdout.strip() if res.ok else ""
        return inv if re.match(r"^[0-9a-f]{32}$", inv) else None

    def read(self):
        tail = ["-o", "cat", "--no-pager", "-q", "--show-cursor", "-n", str(_line_budget(self.max_bytes))]
        cmd = [self.journalctl, "-u", self.unit] + tail
        if self.cursor:
            cmd += ["--after-cursor", self.cursor]
        elif self.since is not None:
            cmd += ["--since", "@%d" % self.since]
        elif self.last_run:
            inv = self.invocation()
            if inv:
                # The service's output and systemd's words about this run (journalctl ORs across "+").
                cmd = [self.journalctl, "_SYSTEMD_INVOCATION_ID=%s" % inv, "+", "INVOCATION_ID=%s" % inv] + tail
        res = bounded(self.runner, cmd, self.max_bytes, self.limit())
        if res.timed_out:
            self.error = "journalctl did not answer within %d s" % int(self.limit())
            return ""
        if not res.ok and not res.stdout:
            self.runner.fail(res, "journalctl failed for unit %s" % self.unit,
                             hint="Check the unit name and that this user may read the journal (become: true).")
        self.error = None
        raw, cut = _trim(res.stdout, self.max_bytes)
        self.skipped += cut
        keep = []
        for ln in raw.split("\n"):
            if ln.startswith("-- cursor: "):
                self.cursor = ln[len("-- cursor: "):].strip()
            elif ln.strip() != "-- No entries --":
                keep.append(ln)
                self._note_gate(ln)
        text = "\n".join(keep)
        if text and not text.endswith("\n"):
            text += "\n"
        return text

    def _note_gate(self, line):
        if "memory gate: " in line:
            refused = gate_refusal(line)
            self.refused = self.refused if refused is None else refused

    def retrying_after_refusal(self):
        """The last run read ended in the memory gate's refusal (not its last), and systemd starts the unit again:
        the next start says what happened (it serves, the gate refuses again, or it escalates; the gate counts its
        refusals and escalates at the last itself, so following is bounded by the gate). Seen in CI: the deploy's
        wait answered engine_exited ("Scheduled restart job") a few seconds before the gate's escalation."""
        return self.sub_state == "auto-restart" and self.refused

    def alive(self):
        if not self.systemctl:
            return None, None
        cmd = [self.systemctl, "show", self.unit, "-p", "ActiveState", "-p", "SubState", "-p", "Result",
               "-p", "ExecMainStatus", "-p", "NRestarts"]
        res = self.runner.run(cmd, timeout=int(self.limit()), kill_after=2)
        if not res.ok:
            return None, None
        props = dict(ln.split("=", 1) for ln in res.stdout.splitlines() if "=" in ln)
        active = props.get("ActiveState", "")
        sub = self.sub_state = props.get("SubState", "")
        gone = active in ("failed", "inactive") or sub in ("auto-restart", "failed", "dead")
        ev = "systemd: %s ActiveState=%s SubState=%s Result=%s ExecMainStatus=%s" % (
            self.unit, active, sub, props.get("Result", ""), props.get("ExecMainStatus", ""))
        if sub == "auto-restart" and props.get("Result") == "success":
            restarts = props.get("NRestarts", "")
            restarts = int(restarts) if restarts.isdigit() else CLEAN_RESTARTS_FOLLOWED
            if restarts < CLEAN_RESTARTS_FOLLOWED:
                return True, ev     # ended cleanly, and systemd starts it again: its next start tells
            ev += " NRestarts=%d (each run ended cleanly, without a known failure)" % restarts
        if props.get("Result") == "exit-code" and self.retrying_after_refusal():
            return True, ev         # the memory gate refused this start: systemd starts it again
        return (not gone), ev

    def last_write(self):
        if self.error:
            return None  # the journal did not answer the read: do not wait on it twice in one poll
        cmd = [self.journalctl, "-u", self.unit, "-n", "1", "-o", "short-unix", "--no-pager", "-q"]
        res = self.runner.run(cmd, timeout=int(self.limit()), kill_after=2)
        try:
            return float(res.stdout.split(None, 1)[0]) if res.ok and res.stdout.strip() else None
        except ValueError:
            return None

    def result(self):
        return {"cursor": self.cursor} if self.cursor else {}


class DockerSource(object):
    """A container's log, newest lines first: ``docker logs --tail`` bounded by lines, ``tail -c`` by bytes; later
    reads ask only for lines since the last one read."""

    kind = "docker"

    def __init__(self, runner, container, since, max_bytes, limit):
        self.runner = runner
        self.container = container
        self.since = since  # epoch seconds or None
        self.max_bytes = max_bytes
        self.limit = limit
        self.skipped = 0
        self.error = None
        self.docker = self.runner.bin("docker")
        self.last_ts = None
        # The stamp of the last complete line read and the lines carrying it: later reads ask docker only for
        # lines since then (--since is inclusive), so a poll costs what is new, not the whole log again.
        self.last_stamp = None
        self.at_last = set()

    def read(self):
        cmd = [self.docker, "logs", "--timestamps", "--tail", str(_line_budget(self.max_bytes))]
        since = self.last_stamp or (str(self.since) if self.since is not None else None)
        if since:
            cmd += ["--since", since]
        cmd.append(self.container)
        # Both streams into one pipe: docker writes whole stamped entries, sorted back into one timeline below.
        res = bounded(self.runner, cmd, self.max_bytes, self.limit(), merge_stderr=True)
        if res.timed_out:
            self.error = "docker logs did not answer within %d s" % int(self.limit())
            return ""
        if not res.ok:
            if _CONTAINER_GONE_RE.search(res.stdout[-2000:] + res.stderr[-2000:]):
                return None
            self.runner.fail(res, "docker logs failed for %s" % self.container,
                             hint="Check the container name and docker access.")
        self.error = None
        text, cut = _trim(res.stdout, self.max_bytes)
        self.skipped += cut
        # Complete lines only: an unfinished one is read whole on the next poll.
        lines = text.split("\n")[:-1]
        # Fixed-width RFC 3339 stamps: sorting on them merges stdout and stderr back into one timeline.
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
        res = self.runner.run(cmd, timeout=int(self.limit()), kill_after=2)
        if res.timed_out:
            return None, None
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
    """The OpenAI-compatible API: ready when /v1/models lists the model and a one-token completion answers."""

    def __init__(self, module, limit):
        self.module = module
        self.limit = limit
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
                            method="POST" if body is not None else "GET", timeout=min(30.0, self.limit()),
                            validate_certs=self.module.params["validate_certs"])
            return resp.getcode(), _json.loads(to_text(resp.read(API_MAX_BYTES + 1)), "the API's answer", API_MAX_BYTES)
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
                    msg="The API at %s serves %s, not %s" % (self.base, ", ".join(str(i) for i in ids), self.model),
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

    A role calls the module in a loop of short calls, so this call's own clock is not enough: the log tells how
    long before its last line progress stopped (in its own clock, so time zones do not matter) and the source
    tells how long ago that last line was written. ``now`` is the wall clock (the clock of file times and journal
    or docker stamps); ``in_call`` is the quiet time this call measured itself, on the monotonic clock.
    """
    idle = in_call
    if source is None:
        return idle
    quiet = parser.quiet_for()
    written = source.last_write()
    if quiet is not None and written is not None:
        idle = max(idle, max(0.0, now - written) + quiet)
    return idle


def new_parser(p):
    return VllmLogParser(stall_timeout=p["stall_timeout"], rank_names=p["rank_names"],
                         setting_names=p["setting_names"])


class StartupWaiter(object):
    """Follows one vLLM startup until it is ready, has failed, or the call's time is up.

    Like kubernetes.core's waiter, the caller drives it: ``step()`` reads what is new and decides, returning
    None to go on or why it stopped (``ready``, ``failed``, ``timed_out``, ``read`` for a single read);
    ``sleep()`` waits for the next beat; ``result()`` is the module's answer. Deadlines and waits use the
    monotonic clock; the wall clock only meets the log's own write times (see ``quiet_seconds``). Every command
    and API call gets the time left (at least _MIN_COMMAND_S), so a slow journal cannot hold a call past it.
    """

    def __init__(self, module):
        self.module = module
        p = self.p = module.params
        self.parser = new_parser(p)
        self.source = None
        self.journal = None  # the unit's journal, read when the container is gone
        self.once = p["timeout"] <= 0
        self.start = time.monotonic()
        self.deadline = self.start + max(0, p["timeout"])
        runner = Runner(module, env=_SYSTEMD_ENV)
        since = since_epoch(p["since"]) if p["since"] is not None else None
        if p["log_file"]:
            self.source = FileSource(module, p["log_file"], p["since_offset"], p["max_bytes"])
        elif p["container"]:
            self.source = DockerSource(runner, p["container"], since, p["max_bytes"], self.command_time)
            if p["unit"] and runner.bin("journalctl", required=False):
                self.journal = JournalSource(runner, p["unit"], None, since, p["max_bytes"], self.command_time,
                                             last_run=True)
        elif p["unit"]:
            self.source = JournalSource(runner, p["unit"], p["cursor"], since, p["max_bytes"], self.command_time)
        self.api = ApiProbe(module, self.command_time) if p["url"] else None
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

    def command_time(self):
        """Seconds the next command or API call may take: the time left, at least _MIN_COMMAND_S."""
        return max(_MIN_COMMAND_S, self.deadline - time.monotonic())

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
        if not self.read_once:
            # First read: its newest MAX_LINES lines (the source bounded its bytes already).
            text, cut = tail_lines(text, _line_budget(self.p["max_bytes"]))
            self.skipped += cut
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
            replaced = self.source.replaced
            text = self.source.read(min(_READ_CHUNK, budget))
            if text is None:
                return True
            if self.source.replaced != replaced:
                # Another file now: its lines are a new log, not the rest of the old line.
                self.parser.finish()
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
        jp = new_parser(self.p)
        # The unit's state first, then its journal: a line written before the unit ended (the memory gate's
        # escalation, printed just before it exits) is then in the read. journald takes a stream's lines a moment
        # after they are written: an end with no cause in the read is read once more, a little later.
        alive, evidence = self.journal.alive()
        for late in (False, True):
            if late:
                time.sleep(_JOURNAL_LAG_S)
            text = self.journal.read()
            if text:
                jp.feed(tail_lines(text, _line_budget(self.p["max_bytes"]))[0])
            if alive is not False or jp.failed:
                break
        if alive is False and not jp.failed and self.journal.retrying_after_refusal():
            alive = True        # the gate refused this start (read just now): follow the next one
        jp.finish()
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
            self.parser.settle(final=False)
            if not self.parser.failed and self.source.kind == "journal":
                time.sleep(_JOURNAL_LAG_S)      # its last lines may reach journald just after the unit ended
                self.pull()
                if not self.parser.failed and self.source.retrying_after_refusal():
                    return False    # the memory gate refused this start: systemd starts the unit again
            self.parser.finish()
            self.parser.settle(final=True)
            if not self.parser.failed and self.source.kind == "docker" and self.journal is not None:
                # A --rm container removed between the log read and this look: its last lines (the cause) are
                # no longer in docker, but its unit's journal has them (seen in the lab: a rank died 2 s into loading).
                jp = self._from_unit_journal()
                if jp is not None and jp.failed and jp.failure()["class"] != "engine_exited":
                    self.parser = jp
                    self.from_journal = True
                    return True
                if jp is None and self.journal.alive()[0] is True:
                    return False    # its unit runs on, or restarts after a clean end: wait for the next container
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
                result["skipped_chars"] = self.skipped + self.source.skipped
            if self.source.error and self.source.kind != "file":
                result["read_error"] = self.source.error
        if api is not None:
            result["api"] = api.state
        return clean(result)


def clean(value):
    """Every string valid UTF-8 (no lone surrogates from undecodable log bytes): Ansible drops a whole
    result it cannot encode, class and hint with it."""
    if isinstance(value, dict):
        return dict((clean(k), clean(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, str):
        return scrub(value)
    return value


def _non_finite(value):
    try:
        return isinstance(value, (float, str)) and not math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def refuse_unreadable(module_class, argument_spec):
    """ansible-core's int check raises (OverflowError, ValueError) on an infinite or NaN float instead of refusing
    it: answer with a refusal naming the option, through a module that takes every value as given."""
    spec = dict((k, dict(type="raw", no_log=v.get("no_log", False))) for k, v in argument_spec.items())
    bare = module_class(argument_spec=spec, supports_check_mode=True)
    bad = sorted(k for k, v in bare.params.items() if argument_spec[k].get("type") == "int" and _non_finite(v))
    bare.fail_json(msg="%s must be a whole number (got %s)" % (
        ", ".join(bad) or "a number option", ", ".join(repr(bare.params[k]) for k in bad) or "no number"),
        hint="Give a number of seconds or bytes, not inf or nan.")


def run(module):
    """Check the options (failing before anything is read), then wait; the module's result."""
    problem = option_problem(module.params)
    if problem:
        module.fail_json(msg=problem[0], hint=problem[1])
    waiter = StartupWaiter(module)
    while waiter.step() is None:
        waiter.sleep()
    return waiter.result()


def finish(module, result):
    """fail_json with the cause for a failed startup (or a timeout with fail_on_timeout), else exit_json."""
    if result["failure"]:
        f = result["failure"]
        first = f["evidence"][0] if f["evidence"] else "no log line"
        msg = "vLLM startup failed in %s: %s: %s" % (result["failed_phase"], f["class"], first[:300])
        module.fail_json(msg=scrub(msg), hint=f["hint"], **result)
    if result["timed_out"] and module.params["fail_on_timeout"]:
        module.fail_json(msg="vLLM not ready after %d s: %s" % (module.params["timeout"], result["summary"]),
                         hint="Raise timeout, or look at phase_times to see which phase is slow.", **result)
    module.exit_json(**result)
