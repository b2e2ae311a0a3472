"""Pure parts of the vLLM stand-in: what it prints and answers must read as vLLM, Ray and tqdm do."""

from __future__ import annotations

import io
import json
import re
import struct

import pytest

from ansible_collections.sparkfleet.vllm.tests.unit.support.model_files import encode
from sparklab_vllm import __version__, cli, formats
from sparklab_vllm.safetensors_io import SafetensorError, read_header

tqdm_std = pytest.importorskip("tqdm.std")

# vllm/logger.py _FORMAT "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s", date "%m-%d %H:%M:%S"
VLLM_RECORD = re.compile(r"^(INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+\.py:\d+\] ")


# ------------------------------------------------------------------ argument parsing
def _run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_unknown_serve_option_is_rejected_like_vllm(capsys):
    code, _out, err = _run_cli(["serve", "/models/m", "--tensor-parallel-size", "2", "--foo"], capsys)
    assert code == 2
    assert err.startswith("usage: vllm ")
    assert err.rstrip("\n").endswith("vllm: error: unrecognized arguments: --foo")


def test_bad_choice_is_rejected_with_argparse_text(capsys):
    code, _out, err = _run_cli(["serve", "m", "--distributed-executor-backend", "nccl"], capsys)
    assert code == 2
    assert "argument --distributed-executor-backend: invalid choice: 'nccl'" in err


def test_version(capsys):
    code, out, _err = _run_cli(["--version"], capsys)
    assert code == 0 and out.strip() == __version__


def test_serve_accepts_the_flags_the_collection_renders():
    args = cli.parse([
        "serve", "/models/qwen", "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1",
        "--distributed-executor-backend", "ray", "--gpu-memory-utilization", "0.85", "--max-model-len", "32768",
        "--host", "10.99.1.11", "--port", "30000", "--served-model-name", "qwen", "--api-key", "k",
        "--load-format", "safetensors", "--safetensors-load-strategy", "eager", "--enforce-eager",
        "--trust-remote-code", "--dtype", "bfloat16", "--max-num-seqs", "8", "--kv-cache-dtype", "fp8",
        "--disable-log-requests", "--enable-prefix-caching", "--swap-space", "4", "-tp", "2"])
    assert args.model == "/models/qwen" and args.tensor_parallel_size == 2
    assert args.distributed_executor_backend == "ray" and args.port == 30000
    assert args.served_model_name == ["qwen"] and args.api_key == ["k"]
    assert args.enforce_eager is True and args.gpu_memory_utilization == 0.85


def test_served_model_name_defaults_to_the_model_and_keys_are_not_logged():
    args = cli.parse(["serve", "/models/qwen", "--api-key", "secret-key", "--port", "30000"])
    assert args.served_model_name == ["/models/qwen"]
    shown = cli.non_default_args(args)
    assert shown["port"] == 30000 and shown["model"] == "/models/qwen"
    assert "secret-key" not in repr(shown)


def test_help_names_the_stand_in(capsys):
    code, out, _err = _run_cli(["serve", "--help"], capsys)
    assert code == 0 and "SPARKLAB STAND-IN" in out and "usage: vllm serve [model_tag] [options]" in out


# ------------------------------------------------------------------ progress bars
@pytest.mark.parametrize("n,total,elapsed,rate", [
    (0, 39, 0, None), (17, 39, 31.2, 1 / 1.82), (1, 13, 7.56, 1 / 7.56), (13, 13, 182.98, None),
    (5, 6, 1.5, 3.33), (1, 2, 4000, 1 / 3999.0)])
def test_weight_bar_equals_tqdm_with_vllm_bar_format(n, total, elapsed, rate):
    ours = formats.format_meter(n, total, elapsed, formats.WEIGHTS_BAR_DESC, rate=rate)
    theirs = tqdm_std.tqdm.format_meter(n, total, elapsed, prefix=formats.WEIGHTS_BAR_DESC,
                                        bar_format=formats.WEIGHTS_BAR_FORMAT, rate=rate)
    assert ours == theirs


def test_weight_bar_matches_the_domain_example():
    line = formats.format_meter(17, 39, 31.5, formats.WEIGHTS_BAR_DESC, rate=1 / 1.82)
    assert line == "Loading safetensors checkpoint shards:  44% Completed | 17/39 [00:31<00:40,  1.82s/it]\n"


@pytest.mark.parametrize("n,total,elapsed,rate", [(0, 51, 0, None), (2, 51, 0.15, 13.27), (34, 51, 2.5, 8.36),
                                                  (51, 51, 3.3, 15.72), (50, 51, 3.2, 15.8)])
def test_default_bar_equals_tqdm(n, total, elapsed, rate):
    desc = "Capturing CUDA graphs (decode, FULL)"
    assert formats.format_meter_default(n, total, elapsed, desc, rate=rate) == \
        tqdm_std.tqdm.format_meter(n, total, elapsed, prefix=desc, rate=rate)


class _Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.mark.parametrize("weights,steps", [(True, [1.0, 1.3, 0.9, 2.5, 1.1]), (False, [0.02] * 51)])
def test_progress_bar_stream_equals_real_tqdm(monkeypatch, weights, steps):
    """The bytes written (\\r updates, redraw throttling, EMA rate, final redisplay, newline) equal tqdm's."""
    clock = _Clock()
    monkeypatch.setattr(tqdm_std, "time", clock)
    desc = formats.WEIGHTS_BAR_DESC if weights else "Capturing CUDA graphs (decode, FULL)"
    theirs_io, ours_io = io.StringIO(), io.StringIO()
    kw = {"bar_format": formats.WEIGHTS_BAR_FORMAT} if weights else {}
    theirs = tqdm_std.tqdm(total=len(steps), desc=desc, file=theirs_io, ascii=False, **kw)
    ours = formats.ProgressBar(len(steps), desc, ours_io, weights=weights, clock=clock)
    for dt in steps:
        clock.t += dt
        theirs.update(1)
        ours.update(1)
    clock.t += 0.01
    theirs.close()
    ours.close()
    assert ours_io.getvalue() == theirs_io.getvalue()
    if weights:
        # vLLM logs show the 100% line twice (EMA rate, then overall rate), then an empty line
        last, before = ours_io.getvalue().split("\r")[-1], ours_io.getvalue().split("\r")[-2]
        assert "100% Completed | 5/5 [" in before and before.endswith("]\n")
        assert "100% Completed | 5/5 [" in last and last.endswith("]\n\n")


# ------------------------------------------------------------------ log records
def test_log_line_has_vllm_record_format_and_continuations():
    line = formats.log_line("ERROR", "core.py", 866, "EngineCore failed to start.\nTraceback (most recent call last):")
    first, second = line.split("\n")
    assert VLLM_RECORD.match(first) and first.endswith("[core.py:866] EngineCore failed to start.")
    assert VLLM_RECORD.match(second) and second.endswith("Traceback (most recent call last):")


def test_prefixed_stream_prefixes_every_line_once():
    buf = io.StringIO()
    s = formats.PrefixedStream(buf, formats.process_prefix("EngineCore_DP0", 79))
    s.write("a\nb")
    s.write("c\n\n")
    assert buf.getvalue() == "(EngineCore_DP0 pid=79) a\n(EngineCore_DP0 pid=79) bc\n(EngineCore_DP0 pid=79) \n"


# ------------------------------------------------------------------ API key
@pytest.mark.parametrize("path,method,auth,keys,allowed", [
    ("/v1/models", "GET", None, ["k"], False),
    ("/v1/models", "GET", "Bearer wrong", ["k"], False),
    ("/v1/models", "GET", "bearer k", ["k"], False),
    ("/v1/models", "GET", "Bearer k", ["k"], True),
    ("/v1/chat/completions", "POST", "Bearer k2", ["k", "k2"], True),
    ("/v1/completions", "OPTIONS", None, ["k"], True),
    ("/health", "GET", None, ["k"], True),
    ("/metrics", "GET", None, ["k"], True),
    ("/version", "GET", None, ["k"], True),
    ("/v1/models", "GET", None, [], True),
])
def test_api_key_applies_to_v1_routes_only(path, method, auth, keys, allowed):
    assert formats.api_key_allows(path, method, auth, keys) is allowed


def test_unauthorized_body_is_vllms():
    assert json.dumps(formats.UNAUTHORIZED_BODY) == '{"error": "Unauthorized"}'


# ------------------------------------------------------------------ faults
def test_ray_oom_text_carries_rays_wording_and_numbers():
    text = formats.ray_oom_message("10.99.1.11", "ab" * 28, "cd" * 16, 860, "ef" * 28, 113.78, 119.70, 0.95,
                                   [(860, 105.8, "ray::RayWorkerWrapper.execute_method")])
    first, second = text.split("\n")[:2]
    assert first == "Task was killed due to the node running low on memory."
    assert "Memory on the node (IP: 10.99.1.11, ID: " in second
    assert "was running was 113.78GB / 119.70GB (0.950543), which exceeds the memory usage threshold of 0.95." \
        in second
    assert text.endswith("To disable worker killing, set the environment variable `RAY_memory_monitor_refresh_ms` "
                         "to zero.")
    assert "860\t105.80\tray::RayWorkerWrapper.execute_method" in text


@pytest.mark.parametrize("util,env,kills", [
    (0.9, {}, True),
    (0.9, {"RAY_memory_monitor_refresh_ms": "0"}, False),
    (0.85, {}, False),
    (0.9, {"RAY_memory_usage_threshold": "0.97"}, False),
    (0.95, {"RAY_memory_usage_threshold": "0.97"}, True),
])
def test_oom_fault_follows_the_fixes_operators_apply(util, env, kills):
    assert formats.oom_would_kill(util, env)[0] is kills


def _write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


@pytest.mark.parametrize("name,data", [
    ("short", b"abc"),
    ("large", struct.pack("<Q", 200_000_000) + b"{}"),
    ("length", struct.pack("<Q", 100) + b"{}"),
    ("incomplete", encode({"a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}, pad=False) + b"1234"),
    ("too_long", encode({"a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}, pad=False) + b"1234567890"),
    ("info", encode({"a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 6]}}, pad=False) + b"123456"),
])
def test_broken_shards_fail_with_the_safetensors_librarys_text(tmp_path, name, data):
    safetensors = pytest.importorskip("safetensors")
    path = _write(tmp_path, name + ".safetensors", data)
    with pytest.raises(Exception) as real:
        safetensors.safe_open(path, framework="numpy")
    with pytest.raises(SafetensorError) as ours:
        read_header(path)
    assert str(ours.value) == str(real.value)
    assert type(ours.value).__name__ == "SafetensorError"


def test_corrupt_shard_fault_text_is_a_library_text():
    assert formats.SAFETENSOR_ERRORS["incomplete"] == \
        "Error while deserializing header: incomplete metadata, file not fully covered"


# ------------------------------------------------------------------ metrics + generation
def test_generated_words_are_deterministic_and_count_exactly():
    ids = [a + b for a, b in zip(formats.seed_ids("hello", 0, 7), formats.seed_ids("hello", 1, 7))]
    text = formats.words_from_ids(ids)
    assert text == formats.words_from_ids(ids) and len(text.split()) == 7
    assert formats.seed_ids("hello", 0, 7) != formats.seed_ids("hullo", 0, 7)


@pytest.mark.parametrize("text,value", [("8192", 8192), ("32k", 32000), ("32K", 32768), ("1M", 1048576),
                                        ("1.5k", 1500)])
def test_max_model_len_accepts_vllms_human_readable_numbers(text, value):
    assert cli.parse(["serve", "m", "--max-model-len", text]).max_model_len == value


# ------------------------------------------------------------------ releases (the image check's probe answers)
def test_default_release_is_the_proven_qwen35_image(monkeypatch):
    from sparklab_vllm import releases
    monkeypatch.delenv("SPARKLAB_VLLM_RELEASE", raising=False)
    version, rel = releases.current()
    assert version == "0.17.1"
    assert "Qwen3_5MoeForConditionalGeneration" in rel["architectures"]
    assert rel["safetensors_load_strategies"] == ("eager", "lazy", "torchao")


def test_too_old_release_lacks_qwen35_and_the_load_strategy(monkeypatch):
    from sparklab_vllm import releases
    monkeypatch.setenv("SPARKLAB_VLLM_RELEASE", "0.10.2")
    version, rel = releases.current()
    assert version == "0.10.2"
    assert "Qwen3_5MoeForConditionalGeneration" not in rel["architectures"]
    assert "--safetensors-load-strategy" in rel["serve_flags_absent"]
    monkeypatch.setenv("SPARKLAB_VLLM_RELEASE", "9.9.9")
    with pytest.raises(SystemExit, match="plays 0.10.2, 0.17.1"):
        releases.current()


def test_prefetch_is_not_a_017_load_strategy(capsys):
    code, _out, err = _run_cli(["serve", "m", "--safetensors-load-strategy", "prefetch"], capsys)
    assert code == 2 and "invalid choice: 'prefetch'" in err


def test_hf_download_writes_the_lab_model(tmp_path, monkeypatch, capsys):
    from sparklab_vllm import hf
    monkeypatch.setenv("SPARKLAB_HF_SHARDS", "2")
    monkeypatch.setenv("SPARKLAB_HF_SHARD_MB", "0.1")
    assert hf.main(["download", "Qwen/Qwen3.5-122B-A10B-FP8", "--local-dir", str(tmp_path / "m")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "m")
    cfg = json.load(open(tmp_path / "m" / "config.json"))
    assert cfg["architectures"] == ["Qwen3_5MoeForConditionalGeneration"]
    assert (tmp_path / "m" / "model.safetensors.index.json").exists()


# ------------------------------------------------------------------ the serving recipe (issue 44 item 2)
def test_serve_accepts_the_serving_recipe_flags_as_0_17_1_does():
    args = cli.parse(["serve", "/models/m", "--enable-prefix-caching", "--kv-cache-dtype", "fp8",
                      "--speculative-config", '{"method":"mtp","num_speculative_tokens":1}', "--max-num-seqs", "64",
                      "--load-format", "fastsafetensors"])
    assert args.enable_prefix_caching is True and args.kv_cache_dtype == "fp8" and args.max_num_seqs == 64
    assert args.speculative_config == {"method": "mtp", "num_speculative_tokens": 1}
    assert args.load_format == "fastsafetensors"  # the parser takes it in any image; the load needs the package


def test_a_kv_cache_dtype_0_17_1_does_not_list_is_refused_by_the_parser(capsys):
    code, _out, err = _run_cli(["serve", "m", "--kv-cache-dtype", "fp4"], capsys)
    assert code == 2 and "argument --kv-cache-dtype: invalid choice: 'fp4'" in err


def test_the_per_model_mtp_name_is_rewritten_to_mtp_with_a_warning(capsys):
    from sparklab_vllm.api_server import speculative_error
    args = cli.parse(["serve", "m", "--speculative-config", '{"method":"qwen3_5_mtp","num_speculative_tokens":1}'])
    assert speculative_error(args) is None
    assert args.speculative_config["method"] == "mtp"
    out = capsys.readouterr()
    assert "method `qwen3_5_mtp` is deprecated and replaced with mtp." in out.out + out.err


@pytest.mark.parametrize("spec, why", [
    ('{"method":"qwen3_6_mtp","num_speculative_tokens":1}', "qwen3_6_mtp"),
    ('{"method":"mtp","num_speculative_tokens":0}', "num_speculative_tokens"),
    ('"mtp"', "JSON object"),
])
def test_a_speculative_config_0_17_1_refuses_fails_the_start(spec, why):
    from sparklab_vllm.api_server import speculative_error
    refused = speculative_error(cli.parse(["serve", "m", "--speculative-config", spec]))
    assert refused and why in refused


def test_fastsafetensors_without_its_package_fails_at_weight_load(tmp_path, monkeypatch):
    import builtins
    from sparklab_vllm.worker import RayWorkerWrapper
    real_import = builtins.__import__

    def no_fastsafetensors(name, *a, **kw):
        if name == "fastsafetensors":
            raise ImportError("No module named 'fastsafetensors'")
        return real_import(name, *a, **kw)
    monkeypatch.setattr(builtins, "__import__", no_fastsafetensors)
    w = RayWorkerWrapper()
    w.rank, w.world = 0, 1
    with pytest.raises(ModuleNotFoundError, match="fastsafetensors"):
        w.load_model(str(tmp_path), "", -1, False, "fastsafetensors")
