# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One vLLM log line as a person reads it (private to sparkfleet.vllm).

Takes off what wraps a line on its way to the log (collector and journal prefixes, ANSI colours, Ray's process
prefixes, "[repeated Nx across cluster]", vLLM's, Ray's and uvicorn's headers) and reads its clock. Pure: no I/O.
"""

from __future__ import annotations

import calendar
import re
import time

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")
# One process prefix: "(APIServer pid=1) ", "(RayWorkerWrapper pid=860, ip=192.168.200.13) ",
# "(EngineCore_DP0 pid=12)", "(VllmWorker rank=1 pid=9)", "(raylet, ip=10.0.0.2)".
# Every part is bounded so a line of thousands of "(a=b, " costs linear time.
_PREFIX_RE = re.compile(
    r"\s{0,8}\((?P<body>[A-Za-z_][\w.:\-]{0,80}(?:[ ,]{1,4}[A-Za-z_]{1,40}=[^()\s,]{1,80}){0,8}|"
    r"[A-Za-z_]{1,40}=[^()\s,]{1,80}(?:[ ,]{1,4}[A-Za-z_]{1,40}=[^()\s,]{1,80}){0,8})\)\s?"
)
# At most this many nested process prefixes are taken off one line.
_MAX_PREFIXES = 8
# torch.distributed's "[rank0]: " and "[W1120 10:00:42.311 socket.cpp:755] "-style glog prefixes.
_RANK_PREFIX_RE = re.compile(r"^\[rank\d+\]:\s?")
# Ray's C++ log header: "[2025-08-20 10:14:40,020 E 402 402] (raylet) ".
_GLOG_RE = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,.]+ [DIWEF] \d+ \d+\] (?:\(\w+\) )?")
_BARE_ANSI_RE = re.compile(r"\[(?:\d{1,3};)*\d{1,3}m")
_KV_RE = re.compile(r"(?<![A-Za-z_])([A-Za-z_]{1,40})=([^()\s,]{1,80})")
_REPEATED_RE = re.compile(r"\[repeated \d{1,9}x across cluster\]\s{0,8}$")
# Outer line prefixes added by log collectors.
_DOCKER_TS_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s")
_SYSLOG_RE = re.compile(
    r"^(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>\d+) "
    r"(?P<time>\d\d:\d\d:\d\d)(?:\.\d+)? \S+ [^\s:\[]+(?:\[\d+\])?: ?"
)
_COLLECTOR_RE = re.compile(r"^(?:[\w.-]+\s+\| |\[pod/[^\]\s]+\] )")
_HOST_PROC_RE = re.compile(r"^[\w.-]+ [\w.@/-]+\[\d+\]: ?")
_ISO_PREFIX_RE = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?[ \t|]+")
# vLLM's own header: "INFO 05-07 00:37:03 [core.py:1136] msg" (0.8+) or "INFO 10-10 12:00:00 core.py:99] msg".
_VLLM_HDR_RE = re.compile(
    r"^(?P<lvl>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(?:(?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.\d+)?\s+)?"
    r"\[[\w./<>-]+(?::\d+)?\]\s?|"
    r"^(?P<lvl0>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(?P<md0>\d\d-\d\d) (?P<hms0>\d\d:\d\d:\d\d)(?:\.\d+)?\s+"
    r"[\w./<>-]+(?::\d+)?\]\s?"
)
# Ray's own header: "2026-11-29 10:55:51,123\tINFO worker.py:1821 -- msg".
_RAY_HDR_RE = re.compile(r"^(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+[\w./-]+:\d+\s+--\s")
# uvicorn: "INFO:     Application startup complete."
_UVICORN_RE = re.compile(r"^(?P<lvl>INFO|WARNING|ERROR|CRITICAL):\s+")
# NCCL's own lines (NCCL_DEBUG=INFO / WARN): "host:pid:tid [dev] NCCL INFO msg", and for warnings (2.2x)
# "[2026-12-01 15:16:22] host:pid:tid [dev] bootstrap.cc:114 NCCL WARN msg". Their level is NCCL's: an INFO line
# about a plugin it could not load is as harmless as any other INFO line.
_NCCL_HDR_RE = re.compile(
    r"^(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] )?[\w.-]{1,253}:\d{1,10}:\d{1,10} \[\d{1,4}\] "
    r"(?:[\w./-]{1,200}:\d{1,6} )?NCCL (?P<lvl>INFO|WARN|TRACE|ABORT)\b:? ?")
_NCCL_LEVELS = {"INFO": "INFO", "TRACE": "DEBUG", "WARN": "WARNING", "ABORT": "ERROR"}

# Longest physical line kept (characters). Longer lines are cut before any pattern sees them, so the work
# per line is bounded whatever arrives (a 1 MB line, /dev/zero); tqdm redraws joined by carriage returns
# keep their first segment (the rank prefix) and their newest ones.
MAX_LINE_CHARS = 16384
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def scrub(text):
    """Text that is valid UTF-8 whatever came in: bytes are decoded with replacement characters, and lone
    surrogates (what ``surrogateescape`` makes of invalid bytes) become U+FFFD, so a result always serialises."""
    if text is None:
        return ""
    if isinstance(text, bytes):
        return text.decode("utf-8", "replace")
    if not isinstance(text, str):
        text = str(text)
    return _SURROGATE_RE.sub("\ufffd", text)


def cap_line(line, limit=MAX_LINE_CHARS):
    """``line`` cut to at most ``limit`` characters (see MAX_LINE_CHARS)."""
    if len(line) <= limit:
        return line
    if "\r" in line:
        head = line.split("\r", 1)[0][:limit // 4]
        tail = line[-(limit // 2):]
        at = tail.find("\r")
        if at >= 0:
            return head + tail[at:]
        return head
    return line[:limit]


_YEAR = 2000
_MONTHS = dict((m, i + 1) for i, m in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]))

# A level word after an ISO stamp that no known header follows: "2026-11-29 10:55:51 INFO: msg".
_LEVEL_WORD_RE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b[\s:]*")


def norm(line):
    """Evidence line without prefixes and headers, to drop the same message printed twice."""
    text = line or ""
    for _i in range(_MAX_PREFIXES):
        m = _PREFIX_RE.match(text)
        if not m:
            break
        text = text[m.end():]
    m = _VLLM_HDR_RE.match(text) or _GLOG_RE.match(text)
    if m:
        text = text[m.end():]
    return text.strip()[:200]


class Line(object):
    """One logical log line after the wrappers are taken off."""

    __slots__ = ("raw", "text", "level", "ts", "prefixes")

    def __init__(self, raw, text, level, ts, prefixes):
        self.raw = raw
        self.text = text
        self.level = level
        self.ts = ts
        self.prefixes = prefixes


def rank_key(prefixes):
    """Key a rank by its Ray ip/pid prefix; local processes by their innermost name and pid."""
    for body in prefixes:
        kv = dict(_KV_RE.findall(body))
        if "ip" in kv:
            return "%s pid=%s" % (kv["ip"], kv["pid"]) if "pid" in kv else kv["ip"]
    if prefixes:
        body = prefixes[-1]
        kv = dict(_KV_RE.findall(body))
        name = re.split(r"[ ,]", body, 1)[0]
        if "=" in name:  # "(pid=412)": no process name
            return "pid=%s" % kv.get("pid")
        return "%s pid=%s" % (name, kv["pid"]) if "pid" in kv else name
    return "local"


class LineReader(object):
    """Unwraps one physical line (or one carriage-return segment of it) into a ``Line``.

    Holds the clock state of one log: the year-less stamps of vLLM and syslog are put in one fixed year, and a
    log that carries a collector's clock (docker, journal) is timed by that clock only.
    """

    def __init__(self):
        self._outer_clock = False
        self._ts_cache = (None, None)
        self._day_base = {}

    def unwrap(self, seg, inherited):
        raw = seg
        if "#033[" in raw or "^[[" in raw:
            # rsyslog writes ESC as "#033", `cat -v` / less as "^[".
            raw = raw.replace("#033[", "\x1b[").replace("^[[", "\x1b[")
        if "\x1b" in raw:
            raw = _ANSI_RE.sub("", raw)
        if "m" in raw and "[" in raw:
            # Colour codes whose ESC was lost on the way (pasted logs): "[36m(RayWorkerWrapper ...)[0m".
            raw = _BARE_ANSI_RE.sub("", raw)
        text = raw.strip()
        ts = None
        outer = None
        m = _COLLECTOR_RE.match(text)  # "vllm-1  | " (docker compose), "[pod/vllm-0/vllm] " (kubectl)
        if m:
            text = text[m.end():]
        m = _DOCKER_TS_RE.match(text)
        if m:
            outer = self._iso_ts(m.group(1))
            text = text[m.end():]
            m = _HOST_PROC_RE.match(text)  # journalctl -o short-iso
            if m:
                text = text[m.end():]
        m = _SYSLOG_RE.match(text)
        if m:
            outer = self._syslog_ts(m) or outer
            text = text[m.end():]
        prefixes = []
        pos = 0
        for _i in range(_MAX_PREFIXES):
            m = _PREFIX_RE.match(text, pos)
            if not m:
                break
            prefixes.append(m.group("body"))
            pos = m.end()
        text = text[pos:]
        m = _RANK_PREFIX_RE.match(text)
        if m:
            text = text[m.end():]
        if "repeated" in text:
            m = _REPEATED_RE.search(text)
            if m:
                text = text[:m.start()]
        text = text.strip()
        if not prefixes and inherited:
            prefixes = list(inherited)
        level = None
        m = _VLLM_HDR_RE.match(text)
        if m:
            level = m.group("lvl") or m.group("lvl0")
            md, hms = (m.group("md"), m.group("hms")) if m.group("lvl") else (m.group("md0"), m.group("hms0"))
            if md:
                ts = self._vllm_ts(md, hms) or ts
            text = text[m.end():]
        else:
            m = _ISO_PREFIX_RE.match(text)
            if m:
                ts = self._iso_ts(m.group(1)) or ts
                text = text[m.end():]
                m2 = _RAY_HDR_RE.match(text)
                if m2:
                    level = m2.group("lvl")
                    text = text[m2.end():]
                else:
                    m2 = _LEVEL_WORD_RE.match(text)
                    if m2:
                        level = m2.group(1)
                        text = text[m2.end():]
            else:
                m = _UVICORN_RE.match(text)
                if m:
                    level = m.group("lvl")
                    text = text[m.end():]
                elif "NCCL " in text:
                    m = _NCCL_HDR_RE.match(text)
                    if m:
                        level = _NCCL_LEVELS[m.group("lvl")]
                        text = text[m.end():]
        if level == "WARN":
            level = "WARNING"
        # One clock per log: the collector's (docker, journal) when present, else vLLM's and Ray's own.
        if outer is not None:
            self._outer_clock = True
            ts = outer
        elif self._outer_clock:
            ts = None
        return Line(raw, text.strip(), level, ts, prefixes)

    # ----- timestamps -----
    def _vllm_ts(self, md, hms):
        if self._ts_cache[0] == (md, hms):
            return self._ts_cache[1]
        val = self._vllm_ts_uncached(md, hms)
        self._ts_cache = ((md, hms), val)
        return val

    def _vllm_ts_uncached(self, md, hms):
        base = self._day_base.get(md)
        if base is None:
            try:
                base = calendar.timegm((_YEAR, int(md[:2]), int(md[3:5]), 0, 0, 0, 0, 0, 0))
            except (ValueError, OverflowError):
                return None
            self._day_base[md] = base
        return base + int(hms[:2]) * 3600 + int(hms[3:5]) * 60 + int(hms[6:8])

    def _iso_ts(self, text):
        # vLLM and syslog stamps carry no year: every clock is put in one fixed (leap) year.
        try:
            t = time.strptime(text.replace("T", " "), "%Y-%m-%d %H:%M:%S")
            return calendar.timegm((_YEAR, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, 0, 0, 0))
        except (ValueError, OverflowError):
            return None

    def _syslog_ts(self, m):
        try:
            h, mi, s = [int(x) for x in m.group("time").split(":")]
            return calendar.timegm((_YEAR, _MONTHS[m.group("mon")], int(m.group("day")), h, mi, s, 0, 0, 0))
        except (ValueError, KeyError, OverflowError):
            return None
