"""vllm_serve_args: the argv after `vllm serve`, validated."""

from __future__ import annotations

import shlex

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.vllm.plugins.filter.vllm_serve_args import FilterModule, vllm_serve_args

SEED = {
    "model": "/models/Qwen3.5-122B-A10B-FP8",
    "served_model_name": "qwen3.5-122b",
    "tensor_parallel_size": 2,
    "pipeline_parallel_size": 1,
    "distributed_executor_backend": "ray",
    "gpu_memory_utilization": 0.85,
    "max_model_len": 32768,
    "host": "0.0.0.0",
    "port": 30000,
    "api_key": "sk-secret-do-not-leak",
    "load_format": "fastsafetensors",
    "safetensors_load_strategy": "prefetch",
    "enforce_eager": False,
    "trust_remote_code": True,
}


def test_registered_under_its_name():
    assert FilterModule().filters()["vllm_serve_args"] is vllm_serve_args


def test_seed_deployment_command_line():
    assert vllm_serve_args(SEED) == [
        "/models/Qwen3.5-122B-A10B-FP8",
        "--served-model-name", "qwen3.5-122b",
        "--tensor-parallel-size", "2",
        "--pipeline-parallel-size", "1",
        "--distributed-executor-backend", "ray",
        "--gpu-memory-utilization", "0.85",
        "--max-model-len", "32768",
        "--host", "0.0.0.0",
        "--port", "30000",
        "--load-format", "fastsafetensors",
        "--safetensors-load-strategy", "prefetch",
        "--trust-remote-code",
    ]


def test_api_key_never_in_argv():
    argv = vllm_serve_args(SEED)
    assert not any("sk-secret" in w or "api-key" in w for w in argv)


def test_minimal_is_model_only():
    assert vllm_serve_args({"model": "Qwen/Qwen3-0.6B"}) == ["Qwen/Qwen3-0.6B"]


def test_quoted_line_round_trips_through_a_shell():
    cfg = dict(SEED, served_model_name=["qwen", "my model"], extra_args={"compilation_config": {"level": 3}})
    argv = vllm_serve_args(cfg)
    line = " ".join(shlex.quote(w) for w in argv)
    assert shlex.split(line) == argv
    assert argv[argv.index("--served-model-name") + 2] == "my model"
    assert argv[argv.index("--compilation-config") + 1] == '{"level":3}'


def test_extra_args_dict_rules():
    argv = vllm_serve_args({"model": "m", "extra_args": {
        "max_num_seqs": 8, "enable_prefix_caching": True, "enable_chunked_prefill": False,
        "kv_cache_dtype": None, "--swap-space": "4", "allowed_origins": ["a", "b"]}})
    assert argv == ["m", "--swap-space", "4", "--allowed-origins", "a", "b", "--enable-prefix-caching",
                    "--max-num-seqs", "8"]


def test_extra_args_list_verbatim():
    assert vllm_serve_args({"model": "m", "extra_args": ["--max-num-seqs", "8", "--enable-prefix-caching"]}) == [
        "m", "--max-num-seqs", "8", "--enable-prefix-caching"]


def test_int_like_strings_from_extra_vars_are_accepted():
    argv = vllm_serve_args({"model": "m", "tensor_parallel_size": "2", "port": "8000"})
    assert argv == ["m", "--tensor-parallel-size", "2", "--port", "8000"]


def test_max_model_len_size_suffix():
    assert vllm_serve_args({"model": "m", "max_model_len": "32k"})[-1] == "32k"


@pytest.mark.parametrize("cfg,words", [
    ({"model": "m", "tensor_parallel_sise": 2}, ["tensor_parallel_sise", "did you mean tensor_parallel_size", "extra_args"]),
    ({"served_model_name": "x"}, ["model is required"]),
    ({"model": "m", "tensor_parallel_size": 0}, ["tensor_parallel_size", "at least 1"]),
    ({"model": "m", "tensor_parallel_size": True}, ["tensor_parallel_size", "boolean"]),
    ({"model": "m", "tensor_parallel_size": "two"}, ["tensor_parallel_size", "'two'", "whole number"]),
    ({"model": "m", "pipeline_parallel_size": -1}, ["pipeline_parallel_size", "at least 1"]),
    ({"model": "m", "gpu_memory_utilization": 0}, ["gpu_memory_utilization", "(0, 1]"]),
    ({"model": "m", "gpu_memory_utilization": 85}, ["gpu_memory_utilization", "0.85 means 85%"]),
    ({"model": "m", "gpu_memory_utilization": "lots"}, ["gpu_memory_utilization", "number"]),
    ({"model": "m", "port": 70000}, ["port", "65535"]),
    ({"model": "m", "port": 0}, ["port", "between 1"]),
    ({"model": "m", "distributed_executor_backend": "mpi"}, ["distributed_executor_backend", "ray"]),
    ({"model": "m", "enforce_eager": "yes"}, ["enforce_eager", "true or false"]),
    ({"model": "m", "max_model_len": "lots"}, ["max_model_len", "32k"]),
    ({"model": "m", "max_model_len": 0}, ["max_model_len", "positive"]),
    ({"model": "m", "extra_args": {"port": 1}}, ["--port", "set sparkfleet_api_port instead"]),
    ({"model": "m", "extra_args": ["--port=1"]}, ["--port", "set sparkfleet_api_port instead"]),
    ({"model": "m", "extra_args": {"api_key": "x"}}, ["--api-key"]),
    ({"model": "m", "extra_args": "--max-num-seqs 8"}, ["extra_args must be a list"]),
    ({"model": "m", "extra_args": {"bad flag": 1}}, ["bad flag", "not a flag name"]),
    ({"model": "m", "extra_args": [True]}, ["extra_args: list items"]),
    ({"model": "m", "served_model_name": []}, ["served_model_name"]),
    ({"model": "m\nrm -rf /"}, ["model", "newline"]),
    ({"model": "m", "served_model_name": "a$HOME"}, ["served_model_name", "'$'"]),
    ({"model": "m", "host": "%H"}, ["host", "IP address or a host name"]),
    ("model=m", ["input must be a dict"]),
])
def test_invalid_settings_name_key_and_fix(cfg, words):
    with pytest.raises(AnsibleFilterError) as exc:
        vllm_serve_args(cfg)
    for w in words:
        assert w in str(exc.value)


# Issue 11.3: vLLM reads underscores as dashes, short aliases and unique prefixes, so every spelling is pinned.
@pytest.mark.parametrize("extra,words", [
    ({"distributed_executor_backend": "mp"}, ["--distributed-executor-backend", "pinned", "Ray"]),
    (["--distributed_executor_backend", "mp"], ["--distributed-executor-backend", "pinned"]),
    (["-tp", "1"], ["-tp", "--tensor-parallel-size", "vllm_serve_tensor_parallel_size"]),
    (["-pp=2"], ["-pp", "--pipeline-parallel-size", "vllm_serve_pipeline_parallel_size"]),
    ({"-tp": 1}, ["-tp", "pinned"]),
    (["--api_key", "k"], ["--api-key", "vllm_serve_api_key", "environment"]),
    (["--api-k=k"], ["--api-k", "reads --api-k as --api-key"]),
    (["--tensor_par", "1"], ["--tensor-par", "--tensor-parallel-size"]),
    (["-t", "1"], ["-t", "--tensor-parallel-size"]),
    (["--config", "/tmp/c.yaml"], ["--config", "pinned"]),
    ({"served_model_name": "x"}, ["--served-model-name", "vllm_serve_served_model_name"]),
    ({"gpu_memory_utilization": 0.5}, ["--gpu-memory-utilization", "vllm_serve_gpu_memory_utilization"]),
    ({"max_num_seq": 8}, ["--max-num-seq", "abbreviation of --max-num-seqs"]),
    ({"middleware": ["m", "--api-key"]}, ["'--api-key'", "read as a flag"]),
    (["--max-num-seqs", "8", "--"], ["'--'"]),
])
def test_pinned_flags_in_every_spelling_and_unknown_flags_are_refused(extra, words):
    cfg = dict(SEED, extra_args=extra)
    with pytest.raises(AnsibleFilterError) as exc:
        vllm_serve_args(cfg)
    for w in words:
        assert w in str(exc.value)


def test_extra_args_are_written_as_vllm_reads_them():
    argv = vllm_serve_args({"model": "m", "extra_args": ["--max_num_seqs=8", "-O3", "--seed", "-1",
                                                         "--compilation_config.mode", "3", "--no-enable-prefix-caching"]})
    assert argv == ["m", "--max-num-seqs=8", "-O3", "--seed", "-1", "--compilation-config.mode", "3",
                    "--no-enable-prefix-caching"]


def test_flags_without_a_key_of_their_own_stay_settable():
    # enforce_eager is pinned only when the input carries it (the role does not).
    assert vllm_serve_args({"model": "m", "extra_args": {"enforce_eager": True}}) == ["m", "--enforce-eager"]
    with pytest.raises(AnsibleFilterError, match="vllm_serve_enforce_eager"):
        vllm_serve_args({"model": "m", "enforce_eager": False, "extra_args": ["--no-enforce-eager"]})


def test_a_flag_newer_than_the_known_list_is_left_to_the_image(monkeypatch):
    """Issue 41.9: flags were checked against a hand-kept list of vLLM 0.17.1's, so a newer image could not take a
    newer flag. A flag the list does not know passes through as written; image_check judges it against the image's own
    `vllm serve` (tests/unit/plugins/module_utils/test_image.py: a typo is refused there, naming the flag meant)."""
    argv = vllm_serve_args({"model": "m", "extra_args": {"kv-cache-offload-policy": "lru", "enable-new-thing": True}})
    assert argv == ["m", "--enable-new-thing", "--kv-cache-offload-policy", "lru"]
    assert vllm_serve_args({"model": "m", "extra_args": ["--tensor-paralel-size", "2"]}) == [
        "m", "--tensor-paralel-size", "2"]
