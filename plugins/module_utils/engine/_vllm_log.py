# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure, incremental parser for vLLM startup logs (private to sparkfleet.vllm).

Feed text with ``VllmLogParser.feed()`` as it arrives (any chunking), call ``finish()`` when
no more text will come, and read ``snapshot()``. No I/O happens here.

The parser is the state machine: phases, progress, and which failure the lines show. How one line is
unwrapped and timed is in ``_vllm_lines``; what each failure class is (patterns, priority, hint) is in
``_vllm_causes``.
"""

from __future__ import annotations

import re

from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine._vllm_causes import (
    CAUSE,
    LINE_CAUSES,
    PRIORITY,
    render_hint,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine._vllm_lines import (
    MAX_LINE_CHARS,
    LineReader,
    cap_line,
    norm,
    rank_key,
    scrub,
)

PHASES = (
    "starting",
    "engine_init",
    "placement",
    "loading_weights",
    "profiling",
    "cuda_graphs",
    "api_starting",
    "ready",
)
PHASE_INDEX = dict((p, i) for i, p in enumerate(PHASES))

# Classes the caller decides (no log line can show them).
CALLER_CLASSES = ("log_missing",)
PLACEMENT_STALL_S = 300

# "Loading safetensors checkpoint shards:  44% Completed | 17/39 [05:06<06:40, 18.20s/it]"
# Found from the ": NN% ... |" head (one start per colon, bounded after it), the description is the text
# before that colon: linear on any line (a description group searched from every position is not).
_SHARD_HEAD_RE = re.compile(r":[ \t]{0,8}(?P<pct>\d{1,3})%[ \t]{0,8}(?P<completed>Completed[ \t]{0,8})?\|")
_SHARD_TAIL_RE = re.compile(
    r"[^\[\]\r]{0,200}?(?P<n>\d{1,9})/(?P<total>\d{1,9})[ \t]{0,8}"
    r"\[(?P<elapsed>[\d:]{1,16})<(?P<remaining>[\d:?]{1,16})(?:,[ \t]{0,8}(?P<rate>[^\]]{0,80}))?\]"
)
_SHARD_DESC_RE = re.compile(r"(?:checkpoint shards|[Ss]hards?|weights?)[ \t]*$")
# "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 45%|####5| 30/67 [00:02<00:03, 12.1it/s]"
_GRAPH_BAR_RE = re.compile(
    r"Capturing (?:CUDA|cuda) ?graph[^:]{0,200}:\s{0,8}(?P<pct>\d{1,3})%\s{0,8}(?:Completed\s{0,8})?\|[^|]{0,200}\|?"
    r"\s{0,8}(?P<n>\d{1,9})/(?P<total>\d{1,9})"
)
_PG_WAIT_RE = re.compile(r"Waiting for creating a placement group of specs for (\d+) seconds")

# (phase, regex) checked in order; the phase only moves forward.
_PHASE_MARKERS = [
    ("ready", re.compile(r"Application startup complete|Uvicorn running on")),
    ("api_starting", re.compile(
        r"Starting vLLM (?:API )?server|Available routes are|Started server process|"
        r"Waiting for application startup|init engine \(profile, create kv cache|init engine took|"
        r"Graph capturing finished|Capturing CUDA graphs? (?:took|finished)|"
        r"vLLM to use .{0,400}? as (?:the )?API|Supported_tasks|Supported tasks")),
    ("cuda_graphs", re.compile(
        r"Capturing (?:CUDA|cuda) ?graph|Capturing cudagraph|Capturing the model for CUDA graphs|"
        r"CUDA graphs can take additional")),
    ("profiling", re.compile(
        r"Loading weights took|Model loading took|Loading model weights took|Memory profiling takes|"
        r"Available KV cache memory|GPU KV cache size|# GPU blocks|# cpu blocks|# CPU blocks|"
        r"Maximum concurrency for|torch\.compile takes|Dynamo bytecode transform time|"
        r"Compiling a graph for|Directly load the compiled graph|Cache the graph of|"
        r"Estimated CUDA graph memory|"
        r"Free memory on device .{0,400}? usable")),
    ("loading_weights", re.compile(
        r"Starting to load model|Loading model from|checkpoint shards|Loading weights with|"
        r"Using model weights format|Loading safetensors|Loading pt checkpoint|"
        r"Prefetching checkpoint files|Loading model from scratch")),
    ("placement", re.compile(
        r"Waiting for creating a placement group|Connecting to existing Ray cluster|"
        r"Connected to Ray cluster|Started a local Ray instance|placement group|"
        r"world_size=\d+ rank=\d+|distributed_init_method=|"
        r"vLLM is using nccl|NCCL version|Using Ray for multi|use_ray=True")),
    ("engine_init", re.compile(
        r"Initializing (?:a V\d |an )?LLM engine|Initializing a V1 LLM engine|"
        r"Waiting for init message from front-end|EngineCore_\w* pid=|Resolved architecture|"
        r"This model supports multiple tasks|Using max model len|Chunked prefill is enabled")),
]

_ANY_PHASE_RE = re.compile("|".join("(?:%s)" % rx.pattern for _p, rx in _PHASE_MARKERS))
_VERSION_RE = re.compile(r"vLLM API server version ([\w.+-]+)|LLM engine \(v([\w.+-]+)\)")
_API_ADDR_RE = re.compile(r"(?:Starting vLLM (?:API )?server(?: \d+)? on|Uvicorn running on) (https?://\S+)")
# After "startup complete" only these lines are looked at: a late bind failure, a new run, or an engine
# that is up but broken (a worker that cannot import or run what the driver sends it).
_ENGINE_BROKEN_RE = re.compile(
    r"EngineDeadError|EngineCore encountered a fatal error|Engine core proc .{0,200}? died|RayTaskError|"
    r"RayActorError|ActorDiedError|failed to import on the worker|Version mismatch: The cluster|"
    r"Can't get attribute '")
_AFTER_READY_CAUSE_RE = re.compile(_ENGINE_BROKEN_RE.pattern + r"|ModuleNotFoundError|No module named|ImportError|"
                                   r"invalid device function|no kernel image|out of memory|OutOfMemoryError")
_AFTER_READY_RE = re.compile(r"rrno|in use|vLLM API server version|non-default args|args: Namespace|^memory gate: |"
                             r"^sparkfleet-watchdog: |"
                             + _AFTER_READY_CAUSE_RE.pattern)
# A collective the NCCL watchdog stopped (or a GPU fault in it) breaks a running engine too. Its patterns are many, so
# a serving line is tested against them only when it holds one of these words (a long serving log stays cheap).
_COLLECTIVE_WORDS = ("atchdog", "ollective", "NCCL", "Cuda failure", "ncclRemote", "remote process", "NET/IB")
_COLLECTIVE_RE = CAUSE["collective_failed"].strong

# The memory gate's refusal of a start (roles/sparkfleet/files/sparkfleet_watchdog.py's refuse(): ExecStartPre exit 3,
# systemd starts the unit again, and the gate escalates at the last refusal itself) and the first line of each gate run.
# systemd's words after a refusal ("Control process exited", "Scheduled restart job") end that start, not the engine.
GATE_REFUSED_RE = re.compile(r"memory gate: not starting the engine yet .*\(refusal (\d{1,6}) of (\d{1,6}) before escalating\)")
GATE_RUN_RE = re.compile(r"^memory gate: ")
# supervision's own words at a start of the unit (the gate's refusal or escalation)
_GATE_WORDS_RE = re.compile(r"^sparkfleet-watchdog: (?:memory gate: not starting|supervision of \S+ ESCALATED)")


def gate_refusal(text):
    """True for the gate's refusal of a start that is not its last, False for another gate line, else None."""
    m = GATE_REFUSED_RE.search(text)
    if m:
        return int(m.group(1)) < int(m.group(2))
    return False if GATE_RUN_RE.match(text) else None


_NEW_RUN_RE = re.compile(r"vLLM API server version|non-default args:|^args: Namespace\(")

# Lines that look alarming but are expected on one-GPU-per-node Ray clusters and elsewhere.
_BENIGN_RE = re.compile(
    r"Tensor parallel size \(\d+\) exceeds available GPUs|"
    r"is bigger than a reserved number of GPUs|"
    r"exceeds available GPUs \(\d+\)|"
    r"Failed to import from vllm\._C|"
    r"No module named 'vllm\._version'|"
    r"Exception ignored in:|"
    r"errno: 97 - Address family not supported|"
    r"DeprecationWarning|FutureWarning|UserWarning|"
    r"(?<!\d)0 Workers \(tasks / actors\) killed due to memory pressure|"
    r"ERROR\s+\d\d-\d\d \d\d:\d\d:\d\d.{0,400}?\bWARNING\b"
)

_RAY_OOM_RE = CAUSE["ray_oom_killed"].strong
# NCCL prints the specific reason for a failure as a WARN line (NCCL WARN Duplicate GPU detected ...), while the
# exception that ends the startup may say only "NCCL error: invalid usage": such warnings are evidence for the
# class, never a failure by themselves (a healthy start's INFO and WARN lines are never causes).
_EVIDENCE_CLASSES = ("nccl_duplicate_gpu", "nccl_no_interface", "nccl_net_unavailable", "collective_failed")
_WARNING_ONLY_EVIDENCE_RE = re.compile("|".join(CAUSE[c].strong.pattern for c in _EVIDENCE_CLASSES))
# Lines of at most this many characters (no carriage return) are counted, not parsed: none can show a phase, a
# cause or progress ("Killed", the shortest that matters, has 6), and a log of millions of them (2-byte lines)
# must cost no more than a log of a few.
_SHORT_LINES_RE = re.compile(r"(?m)^[^\r\n]{0,5}\n")
# Warnings that are weak evidence of a cause (vLLM logs tolerated problems at WARNING, but these explain
# the error that follows them).
_WARNING_EVIDENCE_RE = re.compile(
    _RAY_OOM_RE.pattern + r"|tokenizer class you load from this checkpoint|"
    r"is not compatible with the current PyTorch installation")
# Import errors raised inside a Ray worker (its prefix carries ip=, or Ray wraps the task's error).
_RAY_WORKER_ERROR_RE = re.compile(r"ray::\w|RayTaskError\(|RayWorker\w{0,40}\.")
# Traceback frames inside tokenizer loading: the exception that ends such a traceback is the tokenizer's.
_TOKENIZER_FRAME_RE = re.compile(
    r"tokenization_\w{1,60}\.py|transformers_utils/tokenizers?\b|/tokenizers?/|sentencepiece|tiktoken|"
    r", in (?:get_tokenizer|cached_get_tokenizer|init_tokenizer_from_configs|cached_tokenizer_from_config)\b")
# Traceback frames tell the phase when a log is only a traceback: function name -> phase.
_FRAME_FUNC_RE = re.compile(r'^File ".*", line \d+, in (?P<func>[\w<>.]+)')
_FRAME_PHASE = {
    "init_device": "placement", "init_worker_distributed_environment": "placement",
    "ensure_model_parallel_initialized": "placement", "initialize_model_parallel": "placement",
    "init_distributed_environment": "placement", "initialize_ray_cluster": "placement",
    "_init_workers_ray": "placement", "_wait_until_pg_ready": "placement", "ncclCommInitRank": "placement",
    "init_process_group": "placement",
    "load_model": "loading_weights", "load_weights": "loading_weights", "get_model": "loading_weights",
    "safetensors_weights_iterator": "loading_weights", "_prepare_weights": "loading_weights",
    "download_weights_from_hf": "loading_weights",
    "profile_run": "profiling", "determine_num_available_blocks": "profiling",
    "determine_available_memory": "profiling", "_initialize_kv_caches": "profiling",
    "initialize_kv_cache": "profiling", "_check_enough_kv_cache_memory": "profiling",
    "check_enough_kv_cache_memory": "profiling", "raise_if_cache_size_invalid": "profiling",
    "capture_model": "cuda_graphs", "compile_or_warm_up_model": "cuda_graphs",
}
_PORT_IN_USE_RE = CAUSE["port_in_use"].strong
_EXC_IGNORE = ("StopIteration", "KeyboardInterrupt", "SystemExit", "GeneratorExit")

# Generic fatal markers: the startup is over, root cause is earlier (or later in the traceback).
_FATAL_GENERIC_RE = re.compile(
    r"EngineCore failed to start|Engine core initialization failed|Engine process failed to start|"
    r"Engine core proc .{0,400}? failed|Failed core proc|WorkerProc failed to start|"
    r"Worker failed with error|Exception in worker VllmWorkerProcess|"
    r"EngineCore encountered a fatal error|EngineCore hit an exception|Engine core encountered an issue|"
    r"Got fatal signal from worker processes|WorkerProc initialization failed|"
    r"^docker: Error response from daemon|"
    r"^[\w./ -]+: error: (?:unrecognized arguments|argument |the following arguments are required)"
)
# systemd talking about the unit in `journalctl -u`: the process is gone.
_SYSTEMD_EXIT_RE = re.compile(
    r"Main process exited, code=(?:exited|killed|dumped)|Failed with result '|"
    r"\.service: Scheduled restart job|Control process exited|"
    r"^Killed$|^Killed |Segmentation fault|core dumped|^Aborted|Fatal Python error|"
    r"exited with code \d+|Container .{0,400}? exited|terminate called after throwing an instance of"
)
# Python's last traceback line: "ValueError: ...", "torch.OutOfMemoryError: ...", "KeyError".
_EXC_LINE_RE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*(?P<name>(?:[A-Z]\w*)?(?:Error|Exception|Exit|Interrupt|Failure|Failed))"
    r"(?:\([\w.]+\))?(?::|$)"
)
_FRAME_RE = re.compile(r'^(?:File "|Traceback \(|During handling|The above exception|\^+$|raise |return |\w+ = )')
# Lines that repeat while nothing moves: they do not count as progress.
_NO_PROGRESS_RE = re.compile(
    r"Waiting for creating a placement group|No available shared memory broadcast block|"
    r"Waiting for engine core|still waiting|Waiting for .{0,400}? to be ready|"
    r"Avg prompt throughput: 0\.0 tokens/s, Avg generation throughput: 0\.0"
)


def _collective_failure(text):
    return any(w in text for w in _COLLECTIVE_WORDS) and bool(_COLLECTIVE_RE.search(text))


def _parse_hms(text):
    parts = [int(p) for p in text.split(":") if p.isdigit()]
    if not parts or "?" in text:
        return None
    total = 0
    for part in parts:
        total = total * 60 + part
    return total


def _parse_rate(rate):
    """tqdm rate string -> seconds per item, or None."""
    if not rate:
        return None
    m = re.search(r"([\d.]+)\s*s/it", rate)
    if m:
        try:
            return float(m.group(1))
        except ValueError:
            return None
    m = re.search(r"([\d.]+)\s*it/s", rate)
    if m:
        try:
            val = float(m.group(1))
        except ValueError:
            return None
        return 1.0 / val if val > 0 else None
    return None


def _shard_bar(text):
    """A weight-loading tqdm bar in ``text`` as a dict of its fields, or None (linear time)."""
    for head in _SHARD_HEAD_RE.finditer(text):
        tail = _SHARD_TAIL_RE.match(text, head.end())
        if not tail:
            continue
        before = text[:head.start()]
        desc = before[max(before.rfind(":"), before.rfind("|"), before.rfind("\r")) + 1:]
        if "safetensors" not in desc and not _SHARD_DESC_RE.search(desc):
            # vLLM's own bars all read "Loading ...: NN% Completed | n/total [...]".
            at = desc.find("Loading")
            if at < 0 or not head.group("completed"):
                continue
            desc = desc[at:]
        fields = tail.groupdict()
        fields["desc"] = desc
        fields["pct"] = head.group("pct")
        return fields
    return None


class VllmLogParser(object):
    """Incremental vLLM startup-log state machine.

    Wall-clock decisions (stall, process gone) belong to the caller: it reports them with
    ``mark_stalled()`` / ``mark_exited()``. Timestamps found in lines drive ``phase_times()``.
    """

    def __init__(self, stall_timeout=0, rank_names=None, setting_names=None):
        self.stall_timeout = stall_timeout or 0
        # How hints name the settings to change (see _vllm_causes.render_hint).
        self.setting_names = dict(setting_names or {})
        # A healthy cluster places at once; vLLM's own limit is 1800 s. Waiting this long is a stall.
        self.placement_stall_s = min(self.stall_timeout, PLACEMENT_STALL_S) if self.stall_timeout else 0
        self.rank_names = dict(rank_names or {})
        self._buf = ""
        self._skip_rest = False  # the unfinished line was cut: drop what follows up to its newline
        self.truncated_lines = 0
        self._pending_prefixes = None
        self._bar_prefixes = None
        self._reader = LineReader()
        self.lines_seen = 0
        self.attempts = 0
        self.previous_failure = None
        self.gate_refused = False   # the memory gate refused the latest start (not its last refusal)
        self._reset_attempt()

    # ----- state -----
    def _reset_attempt(self):
        self.phase = "starting"
        self.phase_first_ts = {}
        self.last_ts = None
        self.first_ts = None
        self.ranks = {}
        self.graphs = None
        self.candidates = []  # dicts: cls, line, strong, phase, seq
        self.generic = []  # fatal generic marker lines
        self.exit_lines = []
        self.confirmed = False
        self.failure_phase = None
        self.pg_wait_s = 0
        self.pg_wait_line = None
        self.progress_seq = 0  # bumps on every real progress
        self.last_progress_line = 0
        self.last_progress_ts = None
        self.frame_phase = None
        self.frame_cause = None  # a class the frames of the current traceback point to
        self.in_ray_task = False  # the current traceback is a Ray worker's (RayTaskError)
        self.after_ready = False  # looking at engine failures after "startup complete"
        self.version = None
        self.api_address = None
        self.benign = []
        self._seq = 0

    # ----- input -----
    def feed(self, text):
        """Feed raw text (any chunking). Complete lines are parsed now, the rest is kept."""
        if not text:
            return
        text = scrub(text)
        if self._skip_rest:
            nl = text.find("\n")
            if nl < 0:
                return
            self._skip_rest = False
            text = text[nl:]
        if "\n" not in text:
            self._buf += text
            if len(self._buf) > MAX_LINE_CHARS:
                self._cut_unfinished()
            return
        body, rest = text.rsplit("\n", 1)
        nl = body.find("\n")
        if nl >= 0 and len(body) - nl > 4096:
            # Count (not parse) the short lines after the first newline (the first may continue the buffer).
            tail, dropped = _SHORT_LINES_RE.subn("", body[nl + 1:] + "\n")
            self.lines_seen += dropped
            body = body[:nl + 1] + tail[:-1] if tail else body[:nl]
        first = True
        for physical in body.split("\n"):
            if first:
                physical, first = self._buf + physical, False
            self._physical(physical)
        self._buf = rest
        if len(self._buf) > MAX_LINE_CHARS:
            self._cut_unfinished()

    def _cut_unfinished(self):
        """Keep the unfinished last line within MAX_LINE_CHARS (a line with no end must not grow memory)."""
        self.truncated_lines += 1
        cut = cap_line(self._buf)
        if "\r" not in cut:
            # No tqdm redraws to follow: keep the start, drop the rest of this line as it arrives.
            self._skip_rest = True
        self._buf = cut

    def finish(self):
        """No more text: parse what is left in the buffer."""
        if self._buf:
            rest, self._buf = self._buf, ""
            self._physical(rest)

    def peek_tail(self):
        """Read progress from the unfinished last line (a tqdm bar mid-update) without consuming it."""
        if not self._buf:
            return
        segs = [s for s in self._buf.split("\r") if s.strip()]
        if not segs:
            return
        saved = self._pending_prefixes
        prefixes = self._pending_prefixes or self._bar_prefixes
        for seg in segs:
            line = self._reader.unwrap(seg, prefixes)
            if line.prefixes:
                prefixes = line.prefixes
            self._progress(line)
        self._pending_prefixes = saved

    def _physical(self, physical):
        if len(physical) > MAX_LINE_CHARS:
            self.truncated_lines += 1
            physical = cap_line(physical)
        if (self.phase == "ready" and not self.confirmed and not _AFTER_READY_RE.search(physical)
                and not _collective_failure(physical)):
            # Serving traffic after startup: nothing in it changes the answer.
            self.lines_seen += 1
            return
        if "\r" not in physical:
            line = self._reader.unwrap(physical, None)
            self._logical(line)
            return
        segs = physical.split("\r")
        inherited = None
        for seg in segs:
            if not seg.strip() and len(segs) > 1:
                continue
            line = self._reader.unwrap(seg, inherited)
            self._logical(line)
            if line.prefixes:
                inherited = line.prefixes

    # ----- the machine -----
    def _set_phase(self, phase, ts):
        if PHASE_INDEX[phase] <= PHASE_INDEX[self.phase]:
            return False
        if ts is None:
            ts = self.last_ts  # a tqdm bar carries no stamp: the phase began by the last one seen
        for p in PHASES[PHASE_INDEX[self.phase] + 1:PHASE_INDEX[phase] + 1]:
            self.phase_first_ts.setdefault(p, ts)
        self.phase = phase
        return True

    def _bump(self):
        self.progress_seq += 1
        self._progressed()

    def _progressed(self):
        """Something moved: remember where (line count) and when (in the log's own clock)."""
        self.last_progress_line = self.lines_seen
        self.last_progress_ts = self.last_ts

    def _logical(self, line):
        text = line.text
        if not text:
            # A line holding only a Ray prefix: the next line (a tqdm bar) belongs to it.
            self._pending_prefixes = line.prefixes or None
            return
        pend = self._pending_prefixes
        if pend and len(line.prefixes) < len(pend) and pend[:len(line.prefixes)] == line.prefixes:
            line.prefixes = list(pend)
        self._pending_prefixes = None
        is_bar = "Completed |" in text or "it/s]" in text or "s/it]" in text
        if is_bar and not line.prefixes and self._bar_prefixes:
            # tqdm redraws split onto their own lines keep the rank of the bar they continue.
            line.prefixes = list(self._bar_prefixes)
        self._bar_prefixes = line.prefixes if is_bar else None
        self.lines_seen += 1
        self._seq += 1
        if line.ts is not None:
            if self.first_ts is None:
                self.first_ts = line.ts
                self.phase_first_ts.setdefault(self.phase, line.ts)
            self.last_ts = line.ts

        # The unit started again after a run that served (or ended): the memory gate's first words, or supervision's
        # escalation when the gate refuses at once, begin a new attempt even though no vLLM line comes after them.
        # Seen on the lab: a re-deploy restarted a serving engine, the gate escalated, and the wait read the served
        # run's "ready" and took the escalation for words after a finished startup (engine_exited).
        if ((self.phase == "ready" or self.confirmed) and text.startswith(("memory gate: ", "sparkfleet-watchdog: "))
                and (GATE_RUN_RE.match(text) or _GATE_WORDS_RE.match(text))):
            self._new_attempt(line)
            self.phase_first_ts.setdefault("starting", line.ts)
        if "memory gate: " in text:
            refused = gate_refusal(text)
            if refused is not None:
                self.gate_refused = refused
                if refused:
                    return      # our own word, not the engine's: systemd starts the unit again
        # A new server run in the same log (restart by systemd or docker).
        if ("args" in text or "version" in text) and _NEW_RUN_RE.search(text) and (self.confirmed or PHASE_INDEX[self.phase] >= PHASE_INDEX["engine_init"]):
            self._new_attempt(line)
            self.phase_first_ts.setdefault("starting", line.ts)
            self.first_ts = line.ts
            self.last_ts = line.ts
        if self.attempts == 0:
            self.attempts = 1

        if self.phase == "ready" and not self.confirmed:
            # Up: only a late bind failure, a new run or a broken engine matter; skip the rest (long
            # serving logs, request errors).
            if "rrno" in text or "in use" in text:
                self._failure_checks(line)
            elif _AFTER_READY_CAUSE_RE.search(text) or _collective_failure(text):
                # The API answers but the engine behind it is broken (for example a worker whose packages
                # differ from the driver's fails at the first request).
                self.after_ready = True
                self._failure_checks(line)
                if _ENGINE_BROKEN_RE.search(text) or _collective_failure(text):
                    self._confirm()
                else:
                    # A cause on its own after startup (one request's CUDA OOM or import error) is kept as
                    # evidence, but only an engine that is gone ends a completed startup.
                    self.confirmed = False
                    self.failure_phase = None
            return
        if not self.version and ("version" in text or "engine (v" in text):
            m = _VERSION_RE.search(text)
            if m:
                self.version = m.group(1) or m.group(2)
        if "http" in text:
            m = _API_ADDR_RE.search(text)
            if m:
                self.api_address = m.group(1)

        if self.confirmed:
            # After the end, keep collecting causes (the traceback follows the marker).
            self._failure_checks(line)
            return

        if line.level not in ("INFO", "DEBUG") and _BENIGN_RE.search(text):
            self.benign.append(text[:160])
            return

        if ("%" in text and "/" in text) and self._progress(line):
            return
        self._phase_checks(line)
        self._failure_checks(line)

    def _new_attempt(self, line):
        failure = self.failure() if self.confirmed else None
        attempts = self.attempts
        self._reset_attempt()
        self.attempts = attempts + 1
        if failure:
            self.previous_failure = failure

    def _progress(self, line):
        text = line.text
        m = _shard_bar(text)
        if m and "graph" not in m["desc"].lower():
            n, total = int(m["n"]), int(m["total"])
            if total <= 0:
                return False
            key = rank_key(line.prefixes) if line.prefixes else "local"
            rank = self.ranks.setdefault(key, {"n": 0, "total": total})
            changed = (n, total) != (rank.get("n"), rank.get("total")) or "ts" not in rank
            rank.update({
                "n": n,
                "total": total,
                "percent": int(round(100.0 * n / total)),
                "elapsed_s": _parse_hms(m["elapsed"]),
                "eta_s": _parse_hms(m["remaining"]),
                "s_per_shard": _parse_rate(m["rate"]),
                "desc": m["desc"].strip(),
                "ts": line.ts,
            })
            if changed:
                self._bump()
            if n < total:
                self._set_phase("loading_weights", line.ts)
            else:
                self._set_phase("loading_weights", line.ts)
            return True
        m = _GRAPH_BAR_RE.search(text)
        if m:
            n, total = int(m.group("n")), int(m.group("total"))
            if self.graphs != (n, total):
                self._bump()
            self.graphs = (n, total)
            self._set_phase("cuda_graphs", line.ts)
            return True
        return False

    def _phase_checks(self, line):
        text = line.text
        if line.level in ("ERROR", "CRITICAL") or _FRAME_RE.match(text) or _EXC_LINE_RE.match(text):
            # Traceback frames name functions like load_model: they are not progress.
            return
        m = _PG_WAIT_RE.search(text)
        if m:
            self._set_phase("placement", line.ts)
            self.pg_wait_s = max(self.pg_wait_s, int(m.group(1)))
            self.pg_wait_line = line.raw.strip()
            return
        if not _ANY_PHASE_RE.search(text):
            if not _NO_PROGRESS_RE.search(text) and line.level in ("INFO", "DEBUG"):
                self._progressed()
            return
        for phase, rx in _PHASE_MARKERS:
            if rx.search(text):
                if self._set_phase(phase, line.ts):
                    self._bump()
                    # Progress after a weak cause means that cause did not stop the startup.
                    self.candidates = [c for c in self.candidates if c["strong"]]
                break
        else:
            if not _NO_PROGRESS_RE.search(text) and line.level in ("INFO", "DEBUG"):
                self._progressed()

    def _failure_checks(self, line):
        text = line.text
        if self.phase == "ready" and not self.after_ready and not _PORT_IN_USE_RE.search(text):
            # A completed startup stays completed: later request errors or a stop are not startup
            # failures (uvicorn may still fail to bind after "startup complete").
            return
        if line.level in ("INFO", "DEBUG", "WARNING") and not _SYSTEMD_EXIT_RE.search(text):
            # vLLM logs tolerated problems at WARNING; INFO never ends a startup. Ray's OOM notice
            # is the exception: it arrives as a WARNING from the raylet.
            if line.level == "WARNING" and _WARNING_ONLY_EVIDENCE_RE.search(text):
                self._evidence(line)
                return
            if not (line.level == "WARNING" and _WARNING_EVIDENCE_RE.search(text)):
                return
        if _BENIGN_RE.search(text):
            return
        if _FRAME_RE.match(text):
            if text.startswith("Traceback ("):
                self.frame_cause = None
                self.in_ray_task = False
            elif _TOKENIZER_FRAME_RE.search(text):
                self.frame_cause = "tokenizer_error"
            m = _FRAME_FUNC_RE.match(text)
            hint = _FRAME_PHASE.get(m.group("func")) if m else None
            if hint and PHASE_INDEX[hint] > PHASE_INDEX.get(self.frame_phase or "starting", 0):
                self.frame_phase = hint
            return
        marker = False
        if _RAY_WORKER_ERROR_RE.search(text):
            self.in_ray_task = True
        if _FATAL_GENERIC_RE.search(text):
            self.generic.append(self._ev(line))
            self._confirm()
            marker = True
        elif _SYSTEMD_EXIT_RE.search(text):
            if self.gate_refused and not self.confirmed:
                return          # the end of a start the memory gate refused, not of an engine
            self.exit_lines.append(self._ev(line))
            self._confirm()
            marker = True
        # A marker line may carry the cause too: "Worker failed with error 'NCCL error: ...'".
        for cause in LINE_CAUSES:
            cls, strong_rx, weak_rx = cause.name, cause.strong, cause.weak
            strong = bool(strong_rx and strong_rx.search(text))
            if strong or (weak_rx and weak_rx.search(text)):
                if cls == "dependency_missing" and not strong and (
                        self.in_ray_task or any("ip=" in p for p in line.prefixes)):
                    # The driver imported it, a Ray worker could not: the worker's packages differ.
                    cls = "worker_env_mismatch"
                self._seq += 1
                self.candidates.append({
                    "cls": cls, "line": self._ev(line), "strong": strong,
                    "phase": self.phase, "seq": self._seq,
                })
                if strong:
                    self._confirm()
                return
        m = _EXC_LINE_RE.match(text)
        if m and not marker and m.group("name") not in _EXC_IGNORE:
            self._seq += 1
            self.candidates.append({
                "cls": self.frame_cause or "engine_init_failed", "line": self._ev(line), "strong": False,
                "phase": self.phase, "seq": self._seq,
            })

    def _evidence(self, line):
        """A warning that names a cause without ending the startup: it classifies a failure other lines end."""
        for cause in LINE_CAUSES:
            # The first class whose pattern names the line, as for any line ("Cuda failure 'invalid device
            # function'" is the image's missing kernels before it is a failed collective).
            if cause.strong is not None and cause.strong.search(line.text):
                self._seq += 1
                self.candidates.append({"cls": cause.name, "line": self._ev(line), "strong": False,
                                        "evidence": True, "phase": self.phase, "seq": self._seq})
                return

    def _ev(self, line):
        return line.raw.strip()[:500]

    def _confirm(self):
        if not self.confirmed:
            self.confirmed = True
            self.failure_phase = self.phase

    # ----- output -----
    def _weak_candidates(self):
        return [c for c in self.candidates if not c["strong"] and not c.get("evidence")]

    @property
    def weak_cause_pending(self):
        """An error line that does not end a startup by itself waits for the rest of the log to decide it:
        progress after it clears it, and ``settle(final=True)`` (no more log) makes it the failure."""
        return not self.confirmed and bool(self._weak_candidates())

    def settle(self, final=False):
        """Decide weak causes: at the end of input (``final``) an unanswered error ends the startup."""
        if self.confirmed or self.phase == "ready":
            return
        if final and self._weak_candidates():
            self._confirm()
            self.failure_phase = self._weak_candidates()[0]["phase"]
        if self.placement_stall_s and self.pg_wait_s >= self.placement_stall_s and self.phase == "placement":
            self.candidates.append({
                "cls": "stalled", "line": self.pg_wait_line, "strong": True,
                "phase": "placement", "seq": self._seq + 1,
            })
            self._confirm()

    def mark_stalled(self, seconds):
        """The caller saw no progress for ``seconds`` (wall clock)."""
        if self.confirmed:
            return
        ev = self.pg_wait_line or "no new progress for %d s in phase %s" % (seconds, self.phase)
        self.candidates.append({"cls": "stalled", "line": ev, "strong": True, "phase": self.phase, "seq": self._seq + 1})
        self._confirm()

    def mark_missing(self, evidence):
        """The caller could not find the log (a log file that does not exist)."""
        if self.confirmed:
            return
        self.candidates.append({"cls": "log_missing", "line": scrub(evidence), "strong": True, "phase": self.phase,
                                "seq": self._seq + 1})
        self._confirm()

    def mark_exited(self, evidence):
        """The caller saw the process (unit/container) gone."""
        if self.phase == "ready" and not self.confirmed:
            self.exit_lines.append(evidence)
            self._confirm()
            return
        self.exit_lines.append(evidence)
        if self._weak_candidates() and not self.confirmed:
            self.failure_phase = self._weak_candidates()[0]["phase"]
        self._confirm()

    def quiet_for(self):
        """Seconds of the log's own clock between the last progress and the last line, or None."""
        if self.last_ts is None:
            return None
        since = self.last_progress_ts if self.last_progress_ts is not None else self.first_ts
        if since is None:
            return None
        return max(0, self.last_ts - since)

    @property
    def failed(self):
        return self.confirmed

    def failure(self):
        if not self.confirmed:
            return None
        best = None
        for c in self.candidates:
            if best is None or (PRIORITY[c["cls"]], c["seq"]) < (PRIORITY[best["cls"]], best["seq"]):
                best = c
        if best is not None:
            cls = best["cls"]
            evidence = []
            seen = set()
            # Strong lines first (the exception itself), then the weak ones (warnings that led to it).
            for c in sorted(self.candidates, key=lambda c: (not c["strong"], c["seq"])):
                key = norm(c["line"])
                if c["cls"] == cls and key not in seen:
                    seen.add(key)
                    evidence.append(c["line"])
            evidence = evidence[:6]
            phase = best["phase"]
        elif self.generic:
            cls = "engine_init_failed"
            evidence = []
            phase = self.failure_phase
        else:
            cls = "engine_exited"
            evidence = []
            phase = self.failure_phase
        extra = [ln for ln in self.generic[:2] + self.exit_lines[:2] if ln not in evidence]
        evidence = evidence + extra
        if not evidence:
            evidence = [c["line"] for c in self.candidates][:4]
        phase = phase or self.phase
        if self.frame_phase and PHASE_INDEX[self.frame_phase] > PHASE_INDEX.get(phase, 99):
            phase = self.frame_phase
        if phase == "ready":
            # e.g. uvicorn failing to bind after "startup complete": the API never came up.
            phase = "api_starting"
        return {
            "class": cls,
            "evidence": evidence[:8],
            "hint": render_hint(cls, self.setting_names),
            "phase": phase,
        }

    def slowest_rank(self):
        loading = [(k, v) for k, v in self.ranks.items() if v.get("total")]
        if not loading:
            return None, None
        key, val = min(loading, key=lambda kv: (float(kv[1]["n"]) / kv[1]["total"], -(kv[1].get("eta_s") or 0)))
        return key, val

    def rank_label(self, key):
        if key is None:
            return None
        ip = key.split(" ", 1)[0]
        local = None if ip[:1].isdigit() or ":" in ip else self.rank_names.get("local")
        return self.rank_names.get(key) or self.rank_names.get(ip) or local or key

    def phase_times(self):
        out = {}
        seen = [p for p in PHASES if self.phase_first_ts.get(p) is not None]
        for i, p in enumerate(seen):
            start = self.phase_first_ts[p]
            end = self.phase_first_ts[seen[i + 1]] if i + 1 < len(seen) else self.last_ts
            if end is not None and 0 <= end - start < 7 * 86400:
                out[p] = end - start
        return out

    def snapshot(self):
        failure = self.failure()
        restarting = None
        if failure is None and self.previous_failure and self.phase != "ready":
            # Restarted after a failure and not up yet: a crash loop until shown otherwise (the phase stays
            # "failed"; the summary says the engine is starting again, and where it is).
            failure = self.previous_failure
            restarting = self.phase
        key, slow = self.slowest_rank()
        progress = {}
        if slow:
            progress = {
                "unit": "shards",
                "n": slow["n"],
                "total": slow["total"],
                "percent": slow["percent"],
                "s_per_shard": slow.get("s_per_shard"),
                "eta_s": slow.get("eta_s"),
                "slowest_rank": self.rank_label(key),
            }
        if self.graphs and self.phase == "cuda_graphs":
            progress = {
                "unit": "graphs",
                "n": self.graphs[0],
                "total": self.graphs[1],
                "percent": int(round(100.0 * self.graphs[0] / self.graphs[1])) if self.graphs[1] else 0,
                "s_per_shard": None,
                "eta_s": None,
                "slowest_rank": None,
            }
        ranks = {}
        for k, v in self.ranks.items():
            ranks[k] = dict((f, v.get(f)) for f in ("n", "total", "percent", "s_per_shard", "eta_s"))
            ranks[k]["name"] = self.rank_label(k)
        return {
            "phase": "failed" if failure else self.phase,
            "failed_phase": failure["phase"] if failure else None,
            "failure": dict((k, failure[k]) for k in ("class", "evidence", "hint")) if failure else None,
            "progress": progress,
            "ranks": ranks,
            "phase_times": self.phase_times(),
            "placement_wait_s": self.pg_wait_s,
            "vllm_version": self.version,
            "api_address": self.api_address,
            "attempts": self.attempts,
            "previous_failure": self.previous_failure,
            "restarting_phase": restarting,
            "benign_warnings": self.benign[:5],
            "lines": self.lines_seen,
        }


def summary(snap):
    """One line a person can read at a glance."""
    phase = snap["phase"]
    if phase == "failed":
        f = snap["failure"]
        first = norm(f["evidence"][0]) if f["evidence"] else ""
        failed = "failed in %s: %s%s" % (snap["failed_phase"], f["class"], (" (%s)" % first[:160]) if first else "")
        if snap.get("restarting_phase"):
            return "starting again (attempt %d, now %s) after it %s" % (
                snap.get("attempts") or 2, snap["restarting_phase"], failed)
        return failed
    prog = snap.get("progress") or {}
    parts = [phase]
    if phase == "loading_weights" and prog.get("unit") == "shards":
        s = "%s %d/%d shards (%d%%)" % (phase, prog["n"], prog["total"], prog["percent"])
        if prog.get("s_per_shard"):
            s += ", %.1f s/shard" % prog["s_per_shard"]
        if prog.get("eta_s") is not None:
            s += ", ETA %d s" % prog["eta_s"]
        if prog.get("slowest_rank") and len(snap.get("ranks") or {}) > 1:
            s += "; slowest rank %s" % prog["slowest_rank"]
        return s
    if phase == "cuda_graphs" and prog.get("unit") == "graphs":
        return "cuda_graphs %d/%d graphs (%d%%)" % (prog["n"], prog["total"], prog["percent"])
    times = snap.get("phase_times") or {}
    if phase == "placement" and snap.get("placement_wait_s"):
        parts.append("(waiting %d s for a Ray placement group)" % snap["placement_wait_s"])
    elif phase == "ready" and times:
        parts.append("after %d s" % sum(v for k, v in times.items() if k != "ready"))
    elif times.get(phase) is not None:
        parts.append("(%d s so far)" % times[phase])
    return " ".join(parts)
