"""Pure text formats the stand-in writes: vLLM log lines, tqdm progress bars, fault texts, metrics, auth.

Nothing here imports ray or torch, so the unit tests (tests/unit/lab/) run in the controller venv.
The formats follow vLLM 0.13 (logger, weight_utils, kv_cache_utils, gpu_model_runner, launcher) and tqdm.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import sys
import time

# vllm/logger.py: "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s", datefmt "%m-%d %H:%M:%S"
LOG_DATE_FORMAT = "%m-%d %H:%M:%S"
# vllm/model_executor/model_loader/weight_utils.py
WEIGHTS_BAR_FORMAT = "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]\n"
WEIGHTS_BAR_DESC = "Loading safetensors checkpoint shards"
PG_WAIT_TIMEOUT = 1800  # vllm/v1/executor/ray_utils.py


def log_line(level, fileinfo, lineno, message, now=None):
    """One vLLM log record, without the process prefix: 'INFO 11-29 11:02:03 [core.py:93] msg'."""
    stamp = time.strftime(LOG_DATE_FORMAT, time.localtime(time.time() if now is None else now))
    first, _sep, rest = message.partition("\n")
    head = "%s %s [%s:%d] " % (level, stamp, fileinfo, lineno)
    line = head + first
    # vLLM's NewLineFormatter repeats the record prefix on continuation lines.
    for extra in rest.split("\n") if rest else ():
        line += "\n" + head + extra
    return line


def process_prefix(name, pid, color=False):
    """vLLM's per-process stdout prefix: '(APIServer pid=1) ' / '(EngineCore_DP0 pid=79) '."""
    if color:
        return "\033[1;36m(%s pid=%d)\033[0;0m " % (name, pid)
    return "(%s pid=%d) " % (name, pid)


class PrefixedStream:
    """Wrap a text stream so every line starts with a process prefix, as vLLM's _add_prefix does."""

    def __init__(self, stream, prefix):
        self._stream = stream
        self._prefix = prefix
        self._start = True

    def write(self, s):
        if not s:
            return 0
        out = []
        for piece in s.splitlines(True):
            if self._start:
                out.append(self._prefix)
            out.append(piece)
            self._start = piece.endswith("\n")
        self._stream.write("".join(out))
        self._stream.flush()
        return len(s)

    def flush(self):
        self._stream.flush()

    def isatty(self):
        return False

    def fileno(self):
        return self._stream.fileno()

    def __getattr__(self, name):
        return getattr(self._stream, name)


class Logger:
    """Minimal vLLM-style logger writing to stdout (the prefix is added by PrefixedStream)."""

    def __init__(self, fileinfo, stream=None):
        self.fileinfo = fileinfo
        self.stream = stream

    def _emit(self, level, lineno, msg, args):
        if args:
            msg = msg % args
        out = self.stream or sys.stdout
        out.write(log_line(level, self.fileinfo, lineno, msg) + "\n")
        out.flush()

    def info(self, lineno, msg, *args):
        self._emit("INFO", lineno, msg, args)

    def warning(self, lineno, msg, *args):
        self._emit("WARNING", lineno, msg, args)

    def error(self, lineno, msg, *args):
        self._emit("ERROR", lineno, msg, args)


# ---------------------------------------------------------------- tqdm
def format_interval(seconds):
    """tqdm.format_interval: 'MM:SS' or 'H:MM:SS'."""
    mins, s = divmod(int(seconds), 60)
    h, m = divmod(mins, 60)
    if h:
        return "{0:d}:{1:02d}:{2:02d}".format(h, m, s)
    return "{0:02d}:{1:02d}".format(m, s)


def _rate_fields(n, total, elapsed, rate):
    if rate is None and elapsed:
        rate = n / elapsed
    inv_rate = 1 / rate if rate else None
    rate_noinv_fmt = ("{0:5.2f}".format(rate) if rate else "?") + "it/s"
    rate_inv_fmt = ("{0:5.2f}".format(inv_rate) if inv_rate else "?") + "s/it"
    rate_fmt = rate_inv_fmt if inv_rate and inv_rate > 1 else rate_noinv_fmt
    remaining = (total - n) / rate if rate and total else 0
    remaining_str = format_interval(remaining) if rate else "?"
    return rate_fmt, remaining_str


def format_meter(n, total, elapsed, desc, bar_format=WEIGHTS_BAR_FORMAT, rate=None):
    """tqdm.format_meter for a custom bar_format without a {bar} field (what vLLM's weight bar uses)."""
    rate_fmt, remaining_str = _rate_fields(n, total, elapsed, rate)
    return bar_format.format(
        desc=desc, percentage=(n / total * 100) if total else 0, n_fmt=str(n), total_fmt=str(total),
        elapsed=format_interval(elapsed), remaining=remaining_str, rate_fmt=rate_fmt)


_BAR_CHARS = " " + "".join(chr(0x258F - i) for i in range(7)) + "\u2588"  # ' ▏▎▍▌▋▊▉█'


def format_meter_default(n, total, elapsed, desc, rate=None, width=10):
    """tqdm.format_meter with tqdm's default bar (no terminal: 10 cells), e.g. CUDA graph capture bars."""
    rate_fmt, remaining_str = _rate_fields(n, total, elapsed, rate)
    frac = n / total if total else 0
    nsyms = len(_BAR_CHARS) - 1
    full, part = divmod(int(frac * width * nsyms), nsyms)
    cells = _BAR_CHARS[-1] * full
    if full < width:
        cells = cells + _BAR_CHARS[part] + _BAR_CHARS[0] * (width - full - 1)
    return "%s: %3.0f%%|%s| %d/%d [%s<%s, %s]" % (
        desc, frac * 100, cells, n, total, format_interval(elapsed), remaining_str, rate_fmt)


class _EMA:
    """tqdm's exponential moving average (smoothing 0.3) with its bias correction."""

    def __init__(self, smoothing=0.3):
        self.alpha = smoothing
        self.last = 0.0
        self.calls = 0

    def __call__(self, x=None):
        beta = 1 - self.alpha
        if x is not None:
            self.last = self.alpha * x + beta * self.last
            self.calls += 1
        return self.last / (1 - beta ** self.calls) if self.calls else self.last


class ProgressBar:
    """Writes what tqdm writes for vLLM's bars: '\\r' + line per update, the final line again, then '\\n'.

    weights=True uses vLLM's WEIGHTS_BAR_FORMAT (each update ends in '\\n'); otherwise tqdm's default bar.
    """

    def __init__(self, total, desc, stream, weights=True, clock=time.time, mininterval=0.1):
        self.total = total
        self.desc = desc
        self.stream = stream
        self.weights = weights
        self.clock = clock
        self.start = clock()
        self.last_t = self.start
        self.last_n = 0
        self.mininterval = mininterval
        self.n = 0
        self._dn = _EMA()
        self._dt = _EMA()
        self._last_len = 0
        self._display(rate=None)

    def _render(self, rate):
        elapsed = self.clock() - self.start
        if self.weights:
            return format_meter(self.n, self.total, elapsed, self.desc, rate=rate)
        return format_meter_default(self.n, self.total, elapsed, self.desc, rate=rate)

    def _display(self, rate):
        # tqdm's status_printer pads with spaces when the new line is shorter than the previous one
        line = self._render(rate)
        self.stream.write("\r" + line + " " * max(self._last_len - len(line), 0))
        self._last_len = len(line)
        self.stream.flush()

    def update(self, k=1):
        # as tqdm.update: redraw at most every mininterval; the averages take the counts since the last redraw
        self.n += k
        now = self.clock()
        dt = now - self.last_t
        if dt < self.mininterval:
            return
        self._dn(self.n - self.last_n)
        self._dt(dt)
        self.last_n, self.last_t = self.n, now
        ema_dt = self._dt()
        self._display(rate=(self._dn() / ema_dt) if ema_dt else None)

    def close(self):
        # tqdm.close(): redisplay with the overall rate (no EMA), then a newline
        elapsed = self.clock() - self.start
        self._display(rate=(self.n / elapsed) if elapsed else None)
        self.stream.write("\n")
        self.stream.flush()


# ---------------------------------------------------------------- HTTP / API
def api_key_allows(path, method, authorization, api_keys):
    """vLLM's AuthenticationMiddleware: only /v1 paths need 'Authorization: Bearer <key>'; OPTIONS passes."""
    if not api_keys or method == "OPTIONS" or not path.startswith("/v1"):
        return True
    if not authorization or not authorization.startswith("Bearer "):
        return False
    given = hashlib.sha256(authorization[len("Bearer "):].encode()).digest()
    return any(hmac.compare_digest(given, hashlib.sha256(k.encode()).digest()) for k in api_keys)


UNAUTHORIZED_BODY = {"error": "Unauthorized"}


def error_body(message, err_type, code, param=None):
    """vLLM's OpenAI-style ErrorResponse."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


_WORDS = ("the", "cluster", "answers", "across", "two", "nodes", "while", "fabric", "links", "carry",
          "tensors", "between", "ranks", "and", "every", "shard", "loads", "from", "local", "disk",
          "spark", "model", "serves", "tokens", "quickly", "because", "ray", "placed", "workers", "on",
          "each", "gpu", "memory", "holds", "weights", "cache", "grows", "with", "context", "length",
          "so", "operators", "watch", "logs", "for", "progress", "before", "traffic", "arrives", "again")


def tokenize(text):
    """A crude tokenizer for usage counts: words and punctuation marks."""
    return re.findall(r"\w+|[^\w\s]", text or "")


def seed_ids(prompt, rank, count, vocab=len(_WORDS)):
    """The ids one rank contributes to a step; the all-reduced sum picks the words."""
    out = []
    for i in range(count):
        digest = hashlib.sha256(("%d|%d|%s" % (rank, i, prompt)).encode()).digest()
        out.append(int.from_bytes(digest[:4], "big") % vocab)
    return out


def words_from_ids(ids):
    return " " + " ".join(_WORDS[int(i) % len(_WORDS)] for i in ids)


# ---------------------------------------------------------------- faults
def ray_oom_message(ip, node_id, actor_id, pid, worker_id, used_gb, total_gb, threshold, top_users):
    """Ray's memory-monitor kill message (ray.exceptions.OutOfMemoryError), as raylet words it."""
    frac = used_gb / total_gb
    lines = [
        "Task was killed due to the node running low on memory.",
        "Memory on the node (IP: %s, ID: %s) where the task (actor ID: %s, name=RayWorkerWrapper.execute_method, "
        "pid=%d, memory used=%.2fGB) was running was %.2fGB / %.2fGB (%f), which exceeds the memory usage "
        "threshold of %s. Ray killed this worker (ID: %s) because it was the most recently scheduled task; to see "
        "more information about memory usage on this node, use `ray logs raylet.out -ip %s`. To see the logs of "
        "the worker, use `ray logs worker-%s*out -ip %s. Top 10 memory users:"
        % (ip, node_id, actor_id, pid, top_users[0][1] if top_users else used_gb, used_gb, total_gb, frac,
           threshold, worker_id, ip, worker_id, ip),
        "PID\tMEM(GB)\tCOMMAND",
    ]
    lines += ["%d\t%.2f\t%s" % (p, gb, cmd) for p, gb, cmd in top_users]
    lines.append(
        "Refer to the documentation on how to address the out of memory issue: "
        "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more "
        "memory on this node or reducing task parallelism by requesting more CPUs per task. Set max_restarts and "
        "max_task_retries to enable retry when the task crashes due to OOM. To adjust the kill threshold, set the "
        "environment variable `RAY_memory_usage_threshold` when starting Ray. To disable worker killing, set the "
        "environment variable `RAY_memory_monitor_refresh_ms` to zero.")
    return "\n".join(lines)


def oom_would_kill(gpu_memory_utilization, env):
    """Whether the stand-in's ray_oom_graph fault fires, given the worker's environment.

    Graph capture on GB10 pushes unified memory to about (utilization + 0.05) of 119.70 GB; Ray kills above
    RAY_memory_usage_threshold (0.95) unless RAY_memory_monitor_refresh_ms=0. Returns (kill, used_gb, total_gb,
    threshold).
    """
    total_gb = 119.70
    used_gb = round(total_gb * min(gpu_memory_utilization + 0.0506, 0.999), 2)
    try:
        threshold = float(env.get("RAY_memory_usage_threshold", "0.95"))
    except ValueError:
        threshold = 0.95
    disabled = env.get("RAY_memory_monitor_refresh_ms", "").strip() == "0"
    return (not disabled and used_gb / total_gb > threshold), used_gb, total_gb, threshold


# safetensors (0.8) SafetensorError texts, checked against the library
SAFETENSOR_ERRORS = {
    "short": "Error while deserializing header: header too small",
    "large": "Error while deserializing header: header too large",
    "length": "Error while deserializing header: invalid header length",
    "json": "Error while deserializing header: invalid JSON in header: %s",
    "incomplete": "Error while deserializing header: incomplete metadata, file not fully covered",
    "info": "Error while deserializing header: invalid shape, data type, or offset for tensor",
}
