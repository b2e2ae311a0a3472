"""The engine's Prometheus metrics under vLLM 0.17.1's own names, types, labels and bucket bounds.

Taken from vLLM 0.17.1's vllm/v1/metrics/loggers.py (PrometheusStatLogger): every series carries the labels
model_name (the first served name) and engine ("0"); the request histograms use the release's bounds. stdlib only:
the runtime image has no prometheus_client, so this writes the text exposition format (version 0.0.4) itself.

The stand-in's engine answers a request in one step, all tokens at once; the timings are measured around that step
(queue: from arrival until the engine takes the request; inference: the step) and the step is split evenly over
the generated tokens, so the first token arrives after queue + step/n and each next one step/n later. The counters
and histograms move only with real requests.
"""

from __future__ import annotations

import threading

# vLLM 0.17.1's bounds (loggers.py)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")  # vLLM 0.17.1's FinishReason, str() of each
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")


def buckets_1_2_5(max_value):
    """1, 2, 5, 10, 20, 50, ... up to max_value (vLLM's build_1_2_5_buckets)."""
    out = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * scale
            if value > max_value:
                return tuple(out)
            out.append(value)
        scale *= 10


def _num(value):
    return repr(float(value))


def _le(bound):
    return repr(float(bound))


class Histogram:
    def __init__(self, bounds):
        self.bounds = tuple(bounds)
        self.counts = [0] * len(self.bounds)
        self.count = 0
        self.total = 0.0

    def observe(self, value):
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
        self.count += 1
        self.total += value

    def samples(self):
        """(suffix, le or None, value): cumulative buckets, +Inf, _sum, _count."""
        out = [("_bucket", _le(b), c) for b, c in zip(self.bounds, self.counts)]
        out.append(("_bucket", "+Inf", self.count))
        out.append(("_sum", None, self.total))
        out.append(("_count", None, self.count))
        return out


# name, help (vLLM 0.17.1's documentation strings), bounds key
HISTOGRAMS = (
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "len"),
    ("vllm:request_generation_tokens", "Number of generation tokens processed.", "len"),
    ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", "iter"),
    ("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", "len"),
    ("vllm:request_params_n", "Histogram of the n request parameter.", "n"),
    ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", "len"),
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft"),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "itl"),
    ("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", "itl"),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "req"),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", "req"),
    ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", "req"),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", "req"),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", "req"),
    ("vllm:request_prefill_kv_computed_tokens",
     "Histogram of new KV tokens computed during prefill (excluding cached tokens).", "len"),
)

# name without _total, help
COUNTERS = (
    ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."),
    ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."),
    ("vllm:num_preemptions", "Cumulative number of preemption from the engine."),
    ("vllm:prompt_tokens", "Number of prefill tokens processed."),
    ("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."),
    ("vllm:generation_tokens", "Number of generation tokens processed."),
)


class EngineMetrics:
    """What one engine (engine="0") has counted since it started; thread-safe."""

    def __init__(self, max_model_len):
        self.max_model_len = int(max_model_len)
        bounds = {"len": buckets_1_2_5(self.max_model_len), "iter": ITERATION_TOKEN_BUCKETS, "n": PARAMS_N_BUCKETS,
                  "ttft": TTFT_BUCKETS, "itl": ITL_BUCKETS, "req": REQUEST_LATENCY_BUCKETS}
        self.lock = threading.Lock()
        self.histograms = {name: Histogram(bounds[key]) for name, _h, key in HISTOGRAMS}
        self.counters = {name: 0 for name, _h in COUNTERS}
        self.success = {reason: 0 for reason in FINISH_REASONS}

    def observe_request(self, prompt_tokens, generation_tokens, max_tokens, queue_s, step_s, finish="length", n=1):
        """One finished request: its token counts and the engine's measured queue and step times."""
        gen = max(int(generation_tokens), 1)
        per_token = step_s / gen
        with self.lock:
            h = self.histograms
            h["vllm:request_prompt_tokens"].observe(prompt_tokens)
            h["vllm:request_generation_tokens"].observe(generation_tokens)
            h["vllm:iteration_tokens_total"].observe(prompt_tokens + generation_tokens)
            h["vllm:request_max_num_generation_tokens"].observe(max_tokens)
            h["vllm:request_params_n"].observe(n)
            h["vllm:request_params_max_tokens"].observe(max_tokens)
            h["vllm:time_to_first_token_seconds"].observe(queue_s + per_token)
            for _ in range(gen - 1):
                h["vllm:inter_token_latency_seconds"].observe(per_token)
            h["vllm:request_time_per_output_token_seconds"].observe(per_token)
            h["vllm:e2e_request_latency_seconds"].observe(queue_s + step_s)
            h["vllm:request_queue_time_seconds"].observe(queue_s)
            h["vllm:request_inference_time_seconds"].observe(step_s)
            h["vllm:request_prefill_time_seconds"].observe(per_token)
            h["vllm:request_decode_time_seconds"].observe(step_s - per_token)
            h["vllm:request_prefill_kv_computed_tokens"].observe(prompt_tokens)
            self.counters["vllm:prefix_cache_queries"] += prompt_tokens
            self.counters["vllm:prompt_tokens"] += prompt_tokens
            self.counters["vllm:generation_tokens"] += generation_tokens
            self.success[finish if finish in self.success else "length"] += 1

    def render(self, model_name, running=0, waiting=0, kv_usage=0.0, awake=True):
        """The text exposition format, as vLLM's /metrics shows these families (prometheus_client sorts labels)."""
        base = {"engine": "0", "model_name": model_name}
        out = []

        def family(name, kind, help_text):
            out.append("# HELP %s %s" % (name, help_text))
            out.append("# TYPE %s %s" % (name, kind))

        def sample(name, value, **extra):
            labels = dict(base, **extra)
            text = ",".join('%s="%s"' % (k, _escape(labels[k])) for k in sorted(labels))
            out.append("%s{%s} %s" % (name, text, _num(value)))

        family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.")
        sample("vllm:num_requests_running", running)
        family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.")
        sample("vllm:num_requests_waiting", waiting)
        family("vllm:engine_sleep_state", "gauge",
               "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
               "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.")
        for state in SLEEP_STATES:
            sample("vllm:engine_sleep_state", 1 if state == "awake" and awake else 0, sleep_state=state)
        family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.")
        sample("vllm:kv_cache_usage_perc", kv_usage)
        with self.lock:
            # prometheus_client's text format 0.0.4 names a counter's family with its _total suffix
            for name, help_text in COUNTERS:
                family(name + "_total", "counter", help_text)
                sample(name + "_total", self.counters[name])
            family("vllm:request_success_total", "counter", "Count of successfully processed requests.")
            for reason in FINISH_REASONS:
                sample("vllm:request_success_total", self.success[reason], finished_reason=reason)
            for name, help_text, _key in HISTOGRAMS:
                family(name, "histogram", help_text)
                for suffix, le, value in self.histograms[name].samples():
                    if le is None:
                        sample(name + suffix, value)
                    else:
                        sample(name + suffix, value, le=le)
        return "\n".join(out) + "\n"


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
