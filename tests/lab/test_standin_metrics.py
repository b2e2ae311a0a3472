"""The stand-in's /metrics: vLLM 0.17.1's names, types, labels and bucket bounds, valid exposition text."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from sparklab_vllm import metrics

# (name, type) as vLLM 0.17.1's PrometheusStatLogger registers them (vllm/v1/metrics/loggers.py) for a plain
# engine (counters as prometheus_client's text format names them, with _total): no spec decode, no LoRA, no KV connector, VLLM_COMPUTE_NANS_IN_LOGITS off
VLLM_0171_FAMILIES = {
    "vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge",
    "vllm:engine_sleep_state": "gauge", "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries_total": "counter", "vllm:prefix_cache_hits_total": "counter",
    "vllm:num_preemptions_total": "counter", "vllm:prompt_tokens_total": "counter", "vllm:prompt_tokens_cached_total": "counter",
    "vllm:generation_tokens_total": "counter", "vllm:request_success_total": "counter",
    "vllm:request_prompt_tokens": "histogram", "vllm:request_generation_tokens": "histogram",
    "vllm:iteration_tokens_total": "histogram", "vllm:request_max_num_generation_tokens": "histogram",
    "vllm:request_params_n": "histogram", "vllm:request_params_max_tokens": "histogram",
    "vllm:time_to_first_token_seconds": "histogram", "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram", "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram", "vllm:request_inference_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram", "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_prefill_kv_computed_tokens": "histogram",
}


def _served(requests=((3, 8, 16, 0.05, 0.8),), max_model_len=4096):
    m = metrics.EngineMetrics(max_model_len)
    for req in requests:
        m.observe_request(*req)
    return m.render("qwen3.5", running=1, waiting=2, kv_usage=0.25)


def test_every_family_has_vllm_0171s_name_and_type():
    text = _served()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    assert types == VLLM_0171_FAMILIES


def test_every_sample_carries_model_name_and_engine():
    for line in _served().splitlines():
        if not line.startswith("#"):
            assert 'engine="0"' in line and 'model_name="qwen3.5"' in line, line


def test_bucket_bounds_are_the_releases():
    text = _served()
    bounds = re.findall(r'vllm:time_to_first_token_seconds_bucket\{engine="0",le="([^"]+)"', text)
    assert bounds[0] == "0.001" and bounds[-2:] == ["2560.0", "+Inf"] and len(bounds) == 23
    bounds = re.findall(r'vllm:e2e_request_latency_seconds_bucket\{engine="0",le="([^"]+)"', text)
    assert bounds[0] == "0.3" and bounds[-2:] == ["7680.0", "+Inf"] and len(bounds) == 22
    # token histograms: 1, 2, 5, ... up to max_model_len (vLLM's build_1_2_5_buckets)
    assert metrics.buckets_1_2_5(100) == (1, 2, 5, 10, 20, 50, 100)
    assert metrics.buckets_1_2_5(4096)[-1] == 2000


def test_histograms_are_cumulative_and_count_real_requests():
    text = _served(requests=((3, 8, 16, 0.05, 0.8), (5, 2, 2, 1.0, 0.2)))

    def value(name):
        return float(re.search(r"^%s (\S+)$" % re.escape(name), text, re.M).group(1))

    assert value('vllm:e2e_request_latency_seconds_count{engine="0",model_name="qwen3.5"}') == 2
    assert value('vllm:e2e_request_latency_seconds_sum{engine="0",model_name="qwen3.5"}') == pytest.approx(2.05)
    assert value('vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.8",model_name="qwen3.5"}') == 0
    assert value('vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="qwen3.5"}') == 1
    assert value('vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.5",model_name="qwen3.5"}') == 2
    # 7 gaps between 8 tokens, 1 between 2
    assert value('vllm:inter_token_latency_seconds_count{engine="0",model_name="qwen3.5"}') == 8
    assert value('vllm:generation_tokens_total{engine="0",model_name="qwen3.5"}') == 10
    counts = [float(v) for v in re.findall(
        r'^vllm:request_queue_time_seconds_bucket\{[^}]*\} (\S+)$', text, re.M)]
    assert counts == sorted(counts) and counts[-1] == 2


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus package) not installed")
def test_promtool_reads_the_exposition_text():
    # promtool check metrics parses the text format and lints it: a malformed line or type is an error (exit 3)
    # while lint remarks (counters named like vLLM's) only print; the parse must pass
    run = subprocess.run(["promtool", "check", "metrics"], input=_served(), capture_output=True, text=True,
                         check=False)
    assert "error while linting" not in run.stderr + run.stdout, run.stderr
    assert run.returncode in (0, 3), run.stderr
