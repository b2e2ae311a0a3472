# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A bounded load test of an OpenAI-compatible completions API (private to sparkfleet.vllm).

The client streams every request (Server-Sent Events over HTTP/1.1, chunked or not) and times each piece of text as it
arrives: time to first token (TTFT) is the first piece, inter-token latency (ITL) the gaps between the later ones,
as vLLM's own benchmark measures them. A server that sends a whole completion in one piece gives no ITL: the level
says so instead of reporting zero. Output tokens come from the stream's ``usage`` when the server sends it, else one
per piece. Python's standard library only (it runs on the node).

``parse_vllm_bench`` reads what ``vllm bench serve`` prints when the image has it.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import time
from urllib.parse import urlsplit

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json
from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric._fabric_bench import percentile

# One streamed event or error body of a completion: far below this.
EVENT_MAX_BYTES = 4 * 1024 * 1024

# Words for prompts: a fixed list, so that a prompt's length in tokens stays close to its length in words.
WORDS = ("time water people work world house group night point story river music paper field market answer "
         "garden reason window letter mountain silver engine signal planet number village table winter morning").split()


class LoadTestError(Exception):
    """The load test could not run at all (the API does not answer, refuses the key, ...)."""


def prompt(index, words):
    """A prompt of ``words`` words, different per request (no prefix cache hit makes TTFT look better than it is)."""
    return " ".join(WORDS[(index * 7 + i * (index % 5 + 1)) % len(WORDS)] for i in range(words)) + " %d" % index


def _stats(values, scale=1000.0):
    if not values:
        return None
    values = [v * scale for v in values]
    return {"mean": round(sum(values) / len(values), 2), "p50": round(percentile(values, 50), 2),
            "p99": round(percentile(values, 99), 2)}


class SSE(object):
    """Splits a byte stream into SSE ``data:`` payloads."""

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        self.buf += data
        out = []
        while True:
            at = self.buf.find(b"\n\n")
            alt = self.buf.find(b"\r\n\r\n")
            if alt >= 0 and (at < 0 or alt < at):
                at, sep = alt, 4
            elif at >= 0:
                sep = 2
            else:
                return out
            event, self.buf = self.buf[:at], self.buf[at + sep:]
            for line in event.splitlines():
                if line.startswith(b"data:"):
                    out.append(line[5:].strip().decode("utf-8", "replace"))


def piece_text(payload):
    """The generated text of one stream chunk (completions or chat), '' when it carries none."""
    choices = payload.get("choices") or []
    if not choices:
        return ""
    choice = choices[0] or {}
    if "text" in choice:
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    return (delta.get("content") or "") + (delta.get("reasoning_content") or "")


async def _request(url, headers, body, timeout):
    """One streamed request: {ok, ttft, gaps, pieces, tokens, latency, error}."""
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    ctx = ssl.create_default_context() if parts.scheme == "https" else None
    start = time.perf_counter()
    result = {"ok": False, "ttft": None, "gaps": [], "pieces": 0, "tokens": None, "latency": None, "error": None}
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=ctx), timeout)
        data = json.dumps(body).encode("utf-8")
        head = ["POST %s HTTP/1.1" % (parts.path.rstrip("/") + "/v1/completions"), "Host: %s:%d" % (host, port),
                "Content-Type: application/json", "Accept: text/event-stream", "Content-Length: %d" % len(data),
                "Connection: close"] + ["%s: %s" % kv for kv in headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), timeout)
        code = int(status.split()[1]) if len(status.split()) > 1 and status.split()[1].isdigit() else 0
        hdrs = {}
        while True:
            line = await asyncio.wait_for(reader.readline(), timeout)
            if line in (b"\r\n", b"\n", b""):
                break
            k, _sep, v = line.decode("latin-1").partition(":")
            hdrs[k.strip().lower()] = v.strip()
        if code != 200:
            text = await asyncio.wait_for(reader.read(2000), timeout)
            result["error"] = "HTTP %d %s" % (code, _error_text(text))
            return result
        chunked = "chunked" in hdrs.get("transfer-encoding", "").lower()
        sse = SSE()
        last = None
        done = False
        while not done:
            if chunked:
                size_line = await asyncio.wait_for(reader.readline(), timeout)
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    break
                raw = await asyncio.wait_for(reader.readexactly(size + 2), timeout)
                raw = raw[:-2]
            else:
                raw = await asyncio.wait_for(reader.read(65536), timeout)
                if not raw:
                    break
            now = time.perf_counter()
            for payload in sse.feed(raw):
                if payload == "[DONE]":
                    done = True
                    break
                try:
                    obj = _json.loads(payload, "a streamed event", EVENT_MAX_BYTES)
                except ValueError:
                    continue
                if not isinstance(obj, dict):
                    continue
                if obj.get("error"):
                    result["error"] = str(obj["error"].get("message") if isinstance(obj["error"], dict)
                                          else obj["error"])[:300]
                    return result
                if (obj.get("usage") or {}).get("completion_tokens") is not None:
                    result["tokens"] = obj["usage"]["completion_tokens"]
                if piece_text(obj):
                    result["pieces"] += 1
                    if result["ttft"] is None:
                        result["ttft"] = now - start
                    else:
                        result["gaps"].append(now - last)
                    last = now
        result["latency"] = time.perf_counter() - start
        if result["tokens"] is None:
            result["tokens"] = result["pieces"]
        result["ok"] = result["ttft"] is not None
        if not result["ok"]:
            result["error"] = "the stream carried no text"
    except asyncio.TimeoutError:
        result["error"] = "no answer within %s s" % timeout
    except (OSError, ValueError, asyncio.IncompleteReadError) as e:
        result["error"] = "%s: %s" % (e.__class__.__name__, e)
    finally:
        if writer is not None:
            writer.close()
    return result


def _error_text(raw):
    text = raw.decode("utf-8", "replace")
    body = text.split("\r\n\r\n", 1)[-1]
    try:
        obj = _json.loads(body[body.find("{"):], "the error body", EVENT_MAX_BYTES) if "{" in body else {}
        if not isinstance(obj, dict):
            return body[:300]
        err = obj.get("error")
        msg = err.get("message") if isinstance(err, dict) else (err or obj.get("message"))
        return str(msg or body)[:300]
    except ValueError:
        return body.strip()[:300]


async def _level(url, headers, model, concurrency, requests, input_words, output_tokens, timeout, seconds, base):
    queue = list(range(requests))
    results = []
    stop_at = time.perf_counter() + seconds
    started = time.perf_counter()

    async def user():
        while queue and time.perf_counter() < stop_at:
            i = queue.pop(0)
            body = {"model": model, "prompt": prompt(base + i, input_words), "max_tokens": output_tokens,
                    "temperature": 0, "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
            left = max(stop_at - time.perf_counter(), 1.0)
            results.append(await _request(url, headers, body, min(timeout, left)))

    await asyncio.gather(*[user() for _i in range(concurrency)])
    return results, time.perf_counter() - started, len(queue)


def summarize(concurrency, results, duration, skipped):
    """A level's figures from its requests: throughput, TTFT, ITL (null when no request streamed more than one
    piece), end-to-end latency, failures."""
    ok = [r for r in results if r["ok"]]
    tokens = sum(r["tokens"] or 0 for r in ok)
    gaps = [g for r in ok for g in r["gaps"]]
    # time per output token after the first, for streams that came in pieces (one piece tells nothing about decode)
    tpots = [(r["latency"] - r["ttft"]) / (r["tokens"] - 1) for r in ok if (r["tokens"] or 0) > 1 and r["pieces"] > 1]
    errors = sorted(set(r["error"] for r in results if not r["ok"] and r["error"]))
    return {
        "concurrency": concurrency,
        "requests": len(results),
        "ok": len(ok),
        "failed": len(results) - len(ok),
        "not_sent": skipped,
        "duration_s": round(duration, 3),
        "output_tokens": tokens,
        "output_tok_s": round(tokens / duration, 2) if duration > 0 else None,
        "request_s": round(len(ok) / duration, 3) if duration > 0 else None,
        "ttft_ms": _stats([r["ttft"] for r in ok]),
        "itl_ms": _stats(gaps),
        "tpot_ms": _stats(tpots),
        "e2el_ms": _stats([r["latency"] for r in ok]),
        "itl_note": None if gaps or not ok else "the server sent each completion in one piece: no inter-token gaps",
        "errors": errors[:5],
    }


def run_levels(url, api_key, model, levels, requests_for, input_words, output_tokens, timeout, seconds):
    """Every concurrency level in turn: [summary]. ``requests_for(c)`` gives a level's request count."""
    headers = {"Authorization": "Bearer %s" % api_key} if api_key else {}
    out = []
    base = 0
    for concurrency in levels:
        n = requests_for(concurrency)
        results, duration, skipped = asyncio.run(_level(url, headers, model, concurrency, n, input_words,
                                                        output_tokens, timeout, seconds, base))
        base += n
        out.append(summarize(concurrency, results, duration, skipped))
        if not any(r["ok"] for r in results):
            break  # nothing answers: do not pile on more levels
    return out


# ------------------------------------------------------------------------------------------- vllm bench serve
_BENCH_LINE_RE = re.compile(r"^(?P<key>[A-Za-z][^:]*?)\s*:\s+(?P<value>-?[\d.]+)\s*$")
BENCH_KEYS = {
    "Successful requests": "ok", "Failed requests": "failed", "Benchmark duration (s)": "duration_s",
    "Total generated tokens": "output_tokens", "Request throughput (req/s)": "request_s",
    "Output token throughput (tok/s)": "output_tok_s", "Maximum request concurrency": "concurrency",
    "Mean TTFT (ms)": ("ttft_ms", "mean"), "Median TTFT (ms)": ("ttft_ms", "p50"), "P99 TTFT (ms)": ("ttft_ms", "p99"),
    "Mean TPOT (ms)": ("tpot_ms", "mean"), "Median TPOT (ms)": ("tpot_ms", "p50"), "P99 TPOT (ms)": ("tpot_ms", "p99"),
    "Mean ITL (ms)": ("itl_ms", "mean"), "Median ITL (ms)": ("itl_ms", "p50"), "P99 ITL (ms)": ("itl_ms", "p99"),
    "Mean E2EL (ms)": ("e2el_ms", "mean"), "Median E2EL (ms)": ("e2el_ms", "p50"), "P99 E2EL (ms)": ("e2el_ms", "p99"),
}


def parse_vllm_bench(text):
    """The 'Serving Benchmark Result' block of `vllm bench serve` -> a level summary like summarize()'s."""
    out = {"ttft_ms": None, "itl_ms": None, "tpot_ms": None, "e2el_ms": None, "failed": 0, "errors": [],
           "itl_note": None, "not_sent": 0}
    seen = False
    for line in (text or "").splitlines():
        if "Serving Benchmark Result" in line:
            seen = True
        m = _BENCH_LINE_RE.match(line.strip())
        if not m or m.group("key") not in BENCH_KEYS:
            continue
        key, value = BENCH_KEYS[m.group("key")], float(m.group("value"))
        if isinstance(key, tuple):
            out[key[0]] = out[key[0]] or {}
            out[key[0]][key[1]] = value
        else:
            out[key] = int(value) if key in ("ok", "failed", "output_tokens", "concurrency") else value
    if not seen or "ok" not in out:
        raise LoadTestError("vllm bench serve printed no result: %s" % (text or "").strip()[-400:])
    out["requests"] = out["ok"] + out["failed"]
    return out
