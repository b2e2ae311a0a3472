"""Parser behaviour on vLLM startup logs: phases, per-rank shard progress, failure classes."""

from __future__ import annotations

import gzip
import json
import os
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine._vllm_causes import (
    CAUSES,
    FAILURE_CLASSES,
    HINTS,
    render_hint,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import unknown_settings
from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine._vllm_log import (
    CALLER_CLASSES,
    MAX_LINE_CHARS,
    VllmLogParser,
    summary,
)

# A variable of this collection's roles, as a hint would name it.
_ROLE_VAR = r"\b((?:vllm_serve|ray_cluster|model_sync|gpu_cleanup|sparkfleet)_[a-z0-9_]+)"

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "modules", "fixtures", "vllm_wait")
EXPECTED = json.load(open(os.path.join(FIXTURES, "expected.json")))


def _read(name):
    # Stored gzipped: the logs' tqdm carriage returns are real and ansible-test refuses CR in text files.
    with gzip.open(os.path.join(FIXTURES, name + ".gz"), "rt", newline="", encoding="utf-8") as fh:
        return fh.read()


def parse(text, chunks=None, stall_timeout=600, rank_names=None):
    p = VllmLogParser(stall_timeout=stall_timeout, rank_names=rank_names)
    if chunks:
        pos = 0
        rng = random.Random(chunks)
        while pos < len(text):
            step = rng.randint(1, 400)
            p.feed(text[pos:pos + step])
            pos += step
    else:
        p.feed(text)
    p.finish()
    p.settle(final=True)
    return p.snapshot()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_classified(name):
    exp = EXPECTED[name]
    snap = parse(_read(name))
    got = {
        "phase": snap["phase"],
        "class": (snap["failure"] or {}).get("class"),
        "failed_phase": snap["failed_phase"],
    }
    assert got == exp
    if exp["class"]:
        assert snap["failure"]["evidence"], "a failure must show the lines that prove it"
        assert snap["failure"]["hint"] == HINTS[exp["class"]]


def test_every_failure_class_has_two_fixtures():
    counts = dict((c, 0) for c in FAILURE_CLASSES if c not in CALLER_CLASSES)
    for exp in EXPECTED.values():
        if exp["class"]:
            counts[exp["class"]] += 1
    assert all(n >= 2 for n in counts.values()), counts


@pytest.mark.parametrize("name", ["ok_v1_010_ray.log", "fail_ray_oom_killed_v1_graphs.log",
                                  "progress_v1_midload.log", "ok_v0_063_ray.log", "fail_worker_died_v0.log"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_chunking_does_not_change_the_answer(name, seed):
    whole = parse(_read(name))
    pieces = parse(_read(name), chunks=seed)
    for key in ("phase", "failed_phase", "failure", "progress", "ranks", "phase_times"):
        assert pieces[key] == whole[key], key


def _role_setting_names():
    """The names the roles give vllm_wait's hints (roles/sparkfleet/vars/main.yml), or None without the roles."""
    import yaml
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "sparkfleet", "vars", "main.yml")
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return yaml.safe_load(fh)["sparkfleet_setting_names"]


def test_hints_name_role_variables():
    # module_utils knows no role: its hints name generic settings, the role passes its variables' names.
    for cls in FAILURE_CLASSES:
        assert cls in HINTS
        assert not re.search(_ROLE_VAR, HINTS[cls]), HINTS[cls]
    names = _role_setting_names()
    if names is None:
        pytest.skip("no roles next to the tests")
    assert "vllm_serve_gpu_memory_utilization" in render_hint("ray_oom_killed", names)
    assert "sparkfleet_fabric_interface" in render_hint("nccl_error", names)
    # Every setting a hint uses has the role's name, so the role's user never sees a generic one.
    used = set(s for c in CAUSES for s in c.settings)
    assert sorted(used - set(names)) == []
    # ... and the role names no setting vllm_wait does not know (it would refuse the role's call).
    assert unknown_settings(names) == []


# ---- progress ----

def test_slowest_rank_sets_progress_and_summary():
    snap = parse(_read("progress_v1_midload.log"), rank_names={"192.168.200.13": "spark-2"})
    assert snap["phase"] == "loading_weights"
    prog = snap["progress"]
    assert (prog["n"], prog["total"], prog["percent"]) == (14, 39, 36)
    assert prog["slowest_rank"] == "spark-2"
    assert prog["s_per_shard"] == pytest.approx(21.6)
    assert prog["eta_s"] == 9 * 60
    # the head's own rank is further along, under its own key
    assert snap["ranks"]["RayWorkerWrapper pid=412"]["n"] == 17
    assert snap["ranks"]["192.168.200.13 pid=861"]["name"] == "spark-2"
    assert summary(snap) == ("loading_weights 14/39 shards (36%), 21.6 s/shard, ETA 540 s; "
                             "slowest rank spark-2")


def test_tqdm_carriage_returns_after_a_ray_prefix_only_line():
    text = ("(RayWorkerWrapper pid=860, ip=192.168.200.13) \n"
            "Loading safetensors checkpoint shards:   0% Completed | 0/39 [00:00<?, ?it/s]\r"
            "Loading safetensors checkpoint shards:   3% Completed | 1/39 [00:18<11:24, 18.01s/it]\r"
            "Loading safetensors checkpoint shards:   5% Completed | 2/39 [00:36<11:06, 18.01s/it]\n")
    snap = parse(text)
    assert list(snap["ranks"]) == ["192.168.200.13 pid=860"]
    assert snap["ranks"]["192.168.200.13 pid=860"]["n"] == 2
    assert snap["phase"] == "loading_weights"


def test_unfinished_tqdm_line_is_peeked_not_consumed():
    p = VllmLogParser()
    p.feed("INFO 08-20 10:00:35 [gpu_model_runner.py:1953] Starting to load model /m...\n"
           "Loading safetensors checkpoint shards:  10% Completed | 4/39 [01:12<10:30, 18.00s/it]")
    p.peek_tail()
    assert p.snapshot()["progress"]["n"] == 4
    p.feed("\rLoading safetensors checkpoint shards:  13% Completed | 5/39 [01:30<10:12, 18.00s/it]\n")
    assert p.snapshot()["progress"]["n"] == 5
    assert p.lines_seen == 3


def test_ansi_and_repeated_suffix_are_ignored():
    text = ("\x1b[1;36m(EngineCore pid=301)\x1b[0m \x1b[0;32mINFO\x1b[0m 03-02 14:20:27 [core.py:93] "
            "Initializing a V1 LLM engine (v0.18.1) with config: model='/m'\n"
            "(RayWorkerProc pid=77, ip=192.168.200.13) (Worker_DP0_TP1_EP1 pid=77) Loading safetensors checkpoint "
            "shards:  50% Completed | 2/4 [00:04<00:04,  2.00s/it] [repeated 2x across cluster]\n")
    snap = parse(text)
    assert snap["vllm_version"] == "0.18.1"
    assert snap["ranks"]["192.168.200.13 pid=77"]["n"] == 2
    assert snap["ranks"]["192.168.200.13 pid=77"]["eta_s"] == 4


def test_cuda_graph_progress():
    snap = parse(_read("ok_v1_010_ray.log").split("Graph capturing finished")[0].rsplit("\n", 1)[0] + "\n")
    assert snap["phase"] == "cuda_graphs"
    assert snap["progress"]["unit"] == "graphs"
    assert summary(snap).startswith("cuda_graphs ")


def test_phase_times_from_timestamps():
    snap = parse(_read("ok_v1_010_ray.log"))
    times = snap["phase_times"]
    # 10:00:35 first shard line .. 10:13:02 "Loading weights took"
    assert times["loading_weights"] == 747
    assert set(times) >= {"starting", "placement", "loading_weights", "profiling", "api_starting"}
    assert all(v >= 0 for v in times.values())


def test_journal_and_docker_clocks_are_used_when_present():
    text = ("2026-11-29T10:00:00.123456789Z INFO 08-20 10:00:01 [core.py:74] Initializing a V1 LLM engine (v0.10.1)\n"
            "2026-11-29T10:00:30.000000000Z INFO 08-20 10:00:02 [gpu_model_runner.py:1] Starting to load model /m\n"
            "2026-11-29T10:05:30.000000000Z INFO 08-20 10:00:03 [default_loader.py:262] Loading weights took 300 s\n")
    times = parse(text)["phase_times"]
    assert times["engine_init"] == 30
    assert times["loading_weights"] == 300


# ---- failures ----

def test_specific_cause_beats_generic_marker_printed_before_it():
    text = ("(EngineCore_0 pid=9) ERROR 08-20 10:00:34 [core.py:700] EngineCore failed to start.\n"
            "(EngineCore_0 pid=9) ERROR 08-20 10:00:34 [core.py:700] Traceback (most recent call last):\n"
            "(EngineCore_0 pid=9) ERROR 08-20 10:00:34 [core.py:700] safetensors_rust.SafetensorError: "
            "Error while deserializing header: MetadataIncompleteBuffer\n"
            "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above.\n")
    f = parse(text)["failure"]
    assert f["class"] == "weights_corrupt"
    assert "MetadataIncompleteBuffer" in f["evidence"][0]
    assert any("Engine core initialization failed" in ln for ln in f["evidence"])


def test_generic_only_when_nothing_specific():
    text = ("(EngineCore_0 pid=9) ERROR 08-20 10:00:34 [core.py:700] EngineCore failed to start.\n"
            "(EngineCore_0 pid=9) ERROR 08-20 10:00:34 [core.py:700] AssertionError\n"
            "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above.\n")
    assert parse(text)["failure"]["class"] == "engine_init_failed"


def test_ray_oom_beats_the_actor_death_it_causes():
    text = ("ERROR 08-20 10:14:41 [core.py:700] ray.exceptions.RayActorError: The actor died unexpectedly.\n"
            "ERROR 08-20 10:14:41 [core.py:700] ray.exceptions.OutOfMemoryError: Task was killed due to the node "
            "running low on memory.\n")
    assert parse(text)["failure"]["class"] == "ray_oom_killed"


@pytest.mark.parametrize("line", [
    "WARNING 08-20 10:00:16 [ray_utils.py:200] tensor_parallel_size=2 is bigger than a reserved number of GPUs "
    "(1 GPUs) in a node 192.168.200.13.",
    "Tensor parallel size (2) exceeds available GPUs (1). This may result in Ray placement group allocation failures.",
    "ERROR 08-20 10:00:16 [ray_executor.py:213] Tensor parallel size (2) exceeds available GPUs (1).",
    "WARNING 08-20 10:00:16 [utils.py:186] Failed to import from vllm._C with ModuleNotFoundError(\"No module named 'vllm._C'\")",
    "WARNING 08-20 10:00:16 [cuda.py:1] CUDA out of memory handling: set PYTORCH_CUDA_ALLOC_CONF",
    "INFO 08-20 10:00:16 [x.py:1] NCCL error handling is set to async",
])
def test_benign_lines_never_fail(line):
    text = ("INFO 08-20 10:00:15 [core.py:74] Initializing a V1 LLM engine (v0.10.1) with config: model='/m'\n"
            + line + "\n")
    snap = parse(text)
    assert snap["phase"] == "engine_init"
    assert snap["failure"] is None


def test_error_followed_by_progress_is_not_a_failure():
    text = ("INFO 08-20 10:00:15 [core.py:74] Initializing a V1 LLM engine (v0.10.1) with config: model='/m'\n"
            "Traceback (most recent call last):\n"
            '  File "/usr/lib/python3/dist-packages/foo.py", line 1, in <module>\n'
            "KeyError: 'HF_HUB_OFFLINE'\n"
            "INFO 08-20 10:00:35 [gpu_model_runner.py:1953] Starting to load model /m...\n")
    snap = parse(text)
    assert snap["phase"] == "loading_weights"
    assert snap["failure"] is None


def test_unknown_exception_at_the_end_is_a_failure():
    text = ("INFO 10-17 09:12:31 model_runner.py:1056] Starting to load model /m...\n"
            "Traceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/qwen2.py", line 1, in load\n'
            "KeyError: 'model.layers.0.mlp.gate'\n")
    snap = parse(text)
    assert snap["phase"] == "failed"
    assert snap["failed_phase"] == "loading_weights"


def test_traceback_frames_do_not_move_the_phase():
    text = ("INFO 10-17 09:12:13 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='/m'\n"
            "Traceback (most recent call last):\n"
            '  File "/x/vllm/config.py", line 1, in _verify_arch\n'
            '    self.model_runner.load_model(); self.profile_run()\n'
            "ValueError: Model architectures ['FooForCausalLM'] are not supported for now.\n")
    snap = parse(text)
    assert snap["failed_phase"] == "engine_init"
    assert snap["failure"]["class"] == "model_unsupported"


def test_frames_tell_the_phase_of_a_bare_traceback():
    text = ("[rank0]: Traceback (most recent call last):\n"
            '[rank0]:   File "/x/vllm/worker/worker.py", line 183, in determine_num_available_blocks\n'
            "[rank0]:     self.model_runner.profile_run()\n"
            "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    snap = parse(text)
    assert (snap["failure"]["class"], snap["failed_phase"]) == ("cuda_oom", "profiling")


def test_placement_wait_is_a_stall_only_past_stall_timeout():
    line = ("INFO 08-20 10:%02d:15 [ray_utils.py:255] Waiting for creating a placement group of specs for %d "
            "seconds. specs=[{'GPU': 1.0}, {'GPU': 1.0}].\n")
    text = "".join(line % (i, 10 * (i + 1)) for i in range(20))
    assert parse(text, stall_timeout=900)["phase"] == "placement"
    assert parse(text + line % (21, 300), stall_timeout=900)["failure"]["class"] == "stalled"
    snap = parse(text, stall_timeout=150)
    assert snap["failure"]["class"] == "stalled"
    assert snap["failed_phase"] == "placement"
    assert parse(text, stall_timeout=0)["phase"] == "placement"


def test_crash_loop_reports_the_earlier_failure():
    first = _read("fail_insufficient_memory_free_v1.log")
    second = _read("progress_v1_midload.log")
    snap = parse(first + second)
    assert snap["attempts"] == 2
    assert snap["phase"] == "failed"
    assert snap["failure"]["class"] == "insufficient_memory"
    # What a person reads (status.yml): the engine is starting again, where it is now, and why it restarted.
    assert snap["restarting_phase"] == "loading_weights"
    assert summary(snap).startswith("starting again (attempt 2, now loading_weights) after it failed in ")
    assert "insufficient_memory" in summary(snap)
    alone = parse(first)
    assert alone["restarting_phase"] is None and summary(alone).startswith("failed in ")


def test_restart_that_comes_up_is_ready():
    snap = parse(_read("restart_then_ready.log"))
    assert snap["phase"] == "ready"
    assert snap["attempts"] == 2
    assert snap["previous_failure"]["class"] == "insufficient_memory"


def test_mark_exited_and_stalled_from_the_caller():
    p = VllmLogParser()
    p.feed(_read("progress_v1_midload.log"))
    p.mark_exited("systemd: vllm.service ActiveState=failed SubState=failed Result=exit-code ExecMainStatus=1")
    snap = p.snapshot()
    assert (snap["failure"]["class"], snap["failed_phase"]) == ("engine_exited", "loading_weights")
    p = VllmLogParser()
    p.feed(_read("progress_v1_midload.log"))
    p.mark_stalled(900)
    assert p.snapshot()["failure"]["class"] == "stalled"


def test_cause_inside_a_generic_marker_line_is_kept():
    text = ("INFO 10-17 09:12:30 pynccl.py:63] vLLM is using nccl==2.20.5\n"
            "RuntimeError: Worker failed with error 'NCCL error: unhandled system error (run with NCCL_DEBUG=INFO "
            "for details)', please check the stack trace above for the root cause\n")
    snap = parse(text)
    assert snap["failure"]["class"] == "nccl_error"


def test_long_serving_log_after_ready_stays_ready():
    # Its cost (linear in the lines) is measured by bench/parse_cost.py, not asserted here.
    metric = ("(APIServer pid=1) INFO 08-20 10:20:%02d [loggers.py:123] Engine 000: Avg prompt throughput: "
              "12.0 tokens/s, Avg generation throughput: 27.1 tokens/s, Running: 1 reqs, Waiting: 0 reqs\n")
    request_error = ("(APIServer pid=1) ERROR 08-20 11:00:00 [serving_chat.py:222] ValueError: This model's maximum "
                     "context length is 40960 tokens.\n")
    text = _read("ok_v1_010_ray.log") + "".join(metric % (i % 60) for i in range(100000)) + request_error
    snap = parse(text)
    assert snap["phase"] == "ready"


def test_c10d_retry_warnings_alone_do_not_fail_a_startup_that_moves_on():
    text = ("INFO 08-20 10:00:31 [parallel_state.py:1134] world_size=2 rank=0 local_rank=0 "
            "distributed_init_method=tcp://192.168.200.12:41337 backend=nccl\n"
            "[W1120 10:00:32.311021 socket.cpp:755] [c10d] The client socket has failed to connect to "
            "[::ffff:127.0.0.1]:41337 (errno: 97 - Address family not supported by protocol).\n"
            "[W1120 10:00:32.311021 socket.cpp:755] [c10d] The client socket has failed to connect to "
            "[192.168.200.12]:41337 (errno: 111 - Connection refused).\n"
            "INFO 08-20 10:00:35 [gpu_model_runner.py:1953] Starting to load model /m...\n")
    snap = parse(text)
    assert snap["failure"] is None
    assert snap["phase"] == "loading_weights"
    # ...but the same warning as the last word of a log is a rendezvous failure
    snap = parse(text.rsplit("INFO 08-20 10:00:35", 1)[0])
    assert snap["failure"]["class"] == "rendezvous_failed"


@pytest.mark.parametrize("wrap", ["vllm-1  | %s", "[pod/vllm-head-0/vllm] %s", "%s"])
def test_collector_prefixes_are_taken_off(wrap):
    lines = ["INFO 10-17 09:12:31 model_runner.py:1056] Starting to load model /models/x...",
             "Loading safetensors checkpoint shards:  24% Completed | 9/37 [00:22<01:10,  2.51s/it]",
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    snap = parse("".join(wrap % ln + "\n" for ln in lines))
    assert snap["failure"]["class"] == "cuda_oom"
    assert snap["failed_phase"] == "loading_weights"
    assert snap["progress"]["n"] == 9


def test_colour_codes_that_lost_their_escape():
    text = ("[36m(RayWorkerWrapper pid=860, ip=192.168.200.13)[0m Loading safetensors checkpoint shards:  50% "
            "Completed | 2/4 [00:04<00:04,  2.00s/it]\n"
            "[36m(RayWorkerWrapper pid=860, ip=192.168.200.13)[0m ERROR 08-20 10:06:40 [worker_base.py:620] "
            "safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge\n")
    snap = parse(text)
    assert snap["ranks"]["192.168.200.13 pid=860"]["n"] == 2
    assert snap["failure"]["class"] == "weights_corrupt"


def test_peeked_bar_after_a_prefix_only_line_belongs_to_that_rank():
    p = VllmLogParser()
    p.feed("(RayWorkerWrapper pid=860, ip=192.168.200.13) \n"
           "Loading safetensors checkpoint shards:  10% Completed | 4/39 [01:12<10:30, 18.00s/it]")
    p.peek_tail()
    assert list(p.snapshot()["ranks"]) == ["192.168.200.13 pid=860"]


def test_phase_started_by_an_unstamped_bar_still_gets_a_time():
    text = ("INFO 10-17 09:12:13 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='/m'\n"
            "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:02<00:02,  2.00s/it]\n"
            "INFO 10-17 09:12:43 model_runner.py:1067] Loading model weights took 67.7709 GB\n")
    assert parse(text)["phase_times"]["loading_weights"] == 30


@pytest.mark.parametrize("last", [
    "ray.exceptions.RayTaskError(AttributeError): ray::RayWorkerWrapper.execute_method() (pid=861, ip=192.168.200.13)",
    "Exception: Call to collective_rpc method failed: boom",
    "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised: LoweringException",
])
def test_unusual_exception_names_still_end_a_startup(last):
    text = ("INFO 08-20 10:00:35 [gpu_model_runner.py:1953] Starting to load model /m...\n"
            "Traceback (most recent call last):\n" + last + "\n")
    snap = parse(text)
    assert snap["phase"] == "failed"
    assert snap["failure"]["class"] == "engine_init_failed"


def test_rank_names_by_ip_and_local():
    snap = parse(_read("progress_v1_midload.log"), rank_names={"192.168.200.13": "spark-2", "local": "spark-1"})
    names = sorted(r["name"] for r in snap["ranks"].values())
    assert names == ["spark-1", "spark-2"]


@pytest.mark.parametrize("esc", ["\x1b[", "#033[", "^[["])
def test_escape_spellings_of_colour_codes(esc):
    text = ("%s0;36m(APIServer pid=7)%s0;0m INFO 12-28 04:44:45 [utils.py:253] non-default args: {'model': '/m'}\n"
            "%s0;36m(APIServer pid=7)%s0;0m ValueError: No tokenizer file found in directory: /m\n") % ((esc,) * 4)
    snap = parse(text)
    assert snap["failure"]["class"] == "tokenizer_error"
    assert snap["failure"]["evidence"][0].startswith("(APIServer pid=7) ValueError")


@pytest.mark.parametrize("tail, cls", [
    ("usage: vllm serve [model_tag] [options]\nvllm serve: error: unrecognized arguments: --gpu-mem 0.8\n",
     "engine_init_failed"),
    ("/bin/sh: 1: vllm: not found\n", "dependency_missing"),
    ("terminate called after throwing an instance of 'c10::Error'\n  what():  CUDA error: out of memory\n",
     "cuda_oom"),
    ("terminate called after throwing an instance of 'std::runtime_error'\n  what():  boom\n", "engine_exited"),
])
def test_startups_that_never_reach_python_tracebacks(tail, cls):
    text = "INFO 08-20 10:00:01 [api_server.py:1805] vLLM API server version 0.10.1.1\n" + tail
    snap = parse(text)
    assert snap["failure"]["class"] == cls


@pytest.mark.parametrize("line, cls", [
    ('docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
     "dependency_missing"),
    ("docker: Error response from daemon: driver failed programming external connectivity on endpoint vllm: "
     "Bind for 0.0.0.0:30000 failed: port is already allocated.", "port_in_use"),
    ("docker: Error response from daemon: No such image: vllm/vllm-openai:v9.9.9.", "engine_init_failed"),
])
def test_container_that_never_started(line, cls):
    assert parse(line + "\n")["failure"]["class"] == cls


def test_hints_only_name_variables_that_exist():
    """A hint that names a renamed or invented variable sends the operator nowhere."""
    import glob
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
    sources = glob.glob(os.path.join(root, "roles", "*", "defaults", "main.yml"))
    sources += glob.glob(os.path.join(root, "inventories", "*", "group_vars", "*", "*.yml"))
    sources += glob.glob(os.path.join(root, "inventories", "*", "host_vars", "*.yml"))
    if not sources:
        pytest.skip("no roles or inventories next to the tests")
    defined = set()
    for path in sources:
        with open(path) as fh:
            defined.update(re.findall(r"^([a-z][a-z0-9_]*):", fh.read(), re.M))
    names = _role_setting_names()
    named = set()
    for cls in FAILURE_CLASSES:
        named.update(re.findall(_ROLE_VAR, render_hint(cls, names)))
    for value in names.values():  # the module's own hints (API key, served model name) use them too
        named.update(re.findall(_ROLE_VAR, value))
    assert named, "hints must name role variables"
    assert sorted(named - defined) == []


# ---- hardening: undecodable bytes, long lines, patterns that must not backtrack ----

def test_bytes_that_are_not_utf8_become_replacement_characters():
    p = VllmLogParser()
    p.feed(b"INFO 08-20 10:00:35 [gpu_model_runner.py:1953] Starting to load model /m...\n")
    p.feed(b"[rank0]: torch.OutOfMemoryError: CUDA out of memory \xff\xfe tried\n")
    p.feed("[rank0]: lone \udcff surrogate from surrogateescape\n")
    p.finish()
    snap = p.snapshot()
    assert snap["failure"]["class"] == "cuda_oom"
    assert "\ufffd" in snap["failure"]["evidence"][0]
    json.dumps(snap, ensure_ascii=False).encode("utf-8")


def test_a_1mb_line_is_cut_before_any_pattern_sees_it(monkeypatch):
    seen = []
    real = VllmLogParser._logical

    def spy(self, line):
        seen.append(len(line.text))
        return real(self, line)
    monkeypatch.setattr(VllmLogParser, "_logical", spy)
    line = "ERROR 08-20 10:00:34 [core.py:700] RuntimeError: CUDA error: out of memory " + "x" * (1 << 20)
    snap = parse(line + "\n")
    assert max(seen) <= MAX_LINE_CHARS
    assert snap["failure"]["class"] == "cuda_oom"


def test_a_line_that_never_ends_does_not_grow_memory():
    p = VllmLogParser()
    for _chunk in range(40):
        p.feed("\0" * 262144)  # 10 MB of /dev/zero
        assert len(p._buf) <= MAX_LINE_CHARS
    p.feed("\nINFO 08-20 10:00:35 [gpu_model_runner.py:1953] Starting to load model /m...\n")
    assert p.phase == "loading_weights"
    assert p.truncated_lines == 1


def test_a_long_tqdm_line_keeps_its_rank_and_newest_step():
    segs = ["Loading safetensors checkpoint shards: %3d%% Completed | %d/999 [00:01<00:02,  1.00s/it]"
            % (i * 100 // 999, i) for i in range(999)]
    text = "(RayWorkerWrapper pid=860, ip=192.168.200.13) \r" + "\r".join(segs) + "\n"
    assert len(text) > MAX_LINE_CHARS
    snap = parse(text)
    assert snap["ranks"]["192.168.200.13 pid=860"]["n"] == 998


_ADVERSARIAL = ["a", " ", "0", ":", "a.", "(", "%", "|", "/", "(a=b, ", "a.safetensors ", "placement group ",
                "cudaMalloc ", "Tokenizer ", "1%|", "Loading ", "Capturing CUDA graph ", "Worker ", "[1;",
                "\x1b[", "ERROR 01-01 00:00:00 ", "(A) ", "ray::", "File \"", "tokenization_a.py "]


def test_long_adversarial_lines_are_parsed():
    """40 KB lines built to make backtracking patterns explode. Before the patterns were bounded, one of
    these took 257 s for 10 KB (the shard bar); all of them together now take about a second. The cost (the
    ratio of 2N to N) is measured by bench/parse_cost.py; a quadratic pattern coming back shows there, and here
    as a test that no longer ends within CI's time."""
    for unit in _ADVERSARIAL:
        for head in ("", "ERROR 08-20 10:00:34 [core.py:700] ", "(RayWorkerWrapper pid=1, ip=1.2.3.4) "):
            body = (unit * (40000 // len(unit) + 1))[:40000]
            snap = parse(head + body + " 5% / x\n")
            json.dumps(snap)


# ---- the failure families of issue 11 point 7 ----

def test_a_zero_count_ray_oom_summary_is_not_an_oom():
    text = ("INFO 08-20 10:00:35 [gpu_model_runner.py:1953] Starting to load model /m...\n"
            "(raylet) [2025-08-20 10:14:40,020 E 402 402] (raylet) node_manager.cc:3193: 0 Workers (tasks / actors) "
            "killed due to memory pressure (OOM), 1 Workers crashed due to other reasons at node (ID: 5f, IP: 10.0.0.2)\n"
            "INFO 08-20 10:00:36 [default_loader.py:262] Loading weights took 1.00 seconds\n")
    snap = parse(text)
    assert snap["failure"] is None and snap["phase"] == "profiling"


def test_request_errors_after_ready_stay_ready_but_a_dead_engine_fails():
    up = _read("ok_v1_010_ray.log")
    request_error = ("(APIServer pid=1) ERROR 08-20 11:00:00 [serving_chat.py:222] ModuleNotFoundError: No module "
                     "named 'partial_json_parser'\n")
    assert parse(up + request_error)["phase"] == "ready"
    dead = ("(EngineCore_0 pid=233) ERROR 08-20 11:00:01 [core.py:720] EngineCore encountered a fatal error.\n"
            "(EngineCore_0 pid=233) ERROR 08-20 11:00:01 [core.py:720] RuntimeError: CUDA error: invalid device "
            "function\n")
    snap = parse(up + request_error + dead)
    assert snap["phase"] == "failed"
    assert snap["failure"]["class"] == "gpu_arch_unsupported"


def test_import_error_on_the_driver_too_is_a_missing_dependency_not_a_mismatch():
    text = ("INFO 08-20 10:00:31 [parallel_state.py:1134] world_size=2 rank=0 local_rank=0 backend=nccl\n"
            "(RayWorkerWrapper pid=861, ip=192.168.200.13) ERROR 08-20 10:00:32 [worker_base.py:620] "
            "ModuleNotFoundError: No module named 'flashinfer'\n"
            "(RayWorkerWrapper pid=412) ERROR 08-20 10:00:32 [worker_base.py:620] ModuleNotFoundError: No module "
            "named 'flashinfer'\n")
    assert parse(text)["failure"]["class"] == "dependency_missing"
    remote_only = text.rsplit("(RayWorkerWrapper pid=412)", 1)[0]
    assert parse(remote_only)["failure"]["class"] == "worker_env_mismatch"


def test_tokenizer_frames_do_not_leak_into_the_next_traceback():
    text = ("INFO 08-20 10:00:15 [core.py:74] Initializing a V1 LLM engine (v0.10.1) with config: model='/m'\n"
            "Traceback (most recent call last):\n"
            '  File "/x/vllm/transformers_utils/tokenizer.py", line 238, in get_tokenizer\n'
            "Traceback (most recent call last):\n"
            '  File "/x/vllm/model_executor/models/qwen2.py", line 1, in load\n'
            "KeyError: 'model.layers.0.mlp.gate'\n")
    assert parse(text)["failure"]["class"] == "engine_init_failed"


# ---- properties (hypothesis) ----

_PROPS = settings(max_examples=200, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Strong failure markers (one per class family) a startup cannot survive, as vLLM and Ray print them.
_MARKERS = [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
    "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
    "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
    "safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge",
    "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already in use",
    "RuntimeError: Version mismatch: The cluster was started with:",
    "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.",
]
_WRAPS = ["", "(EngineCore_0 pid=233) ERROR 08-20 10:05:00 [core.py:700] ",
          "(RayWorkerWrapper pid=861, ip=192.168.200.13) ", "[rank0]: ", "(APIServer pid=1) "]
# Noise: any characters but the ones that could spell a marker that ends or restarts a run.
_NOISE = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=300).filter(
    lambda s: not any(w in s for w in ("startup complete", "Uvicorn running", "args", "version", "EngineCore",
                                       "WARNING", "Warning")))


@_PROPS
@given(st.text(max_size=3000), st.integers(min_value=1, max_value=500))
def test_property_any_text_in_any_chunks_never_raises(text, step):
    p = VllmLogParser(stall_timeout=600)
    for i in range(0, len(text), step):
        p.feed(text[i:i + step])
        assert len(p._buf) <= MAX_LINE_CHARS
    p.peek_tail()
    p.finish()
    p.settle(final=True)
    snap = p.snapshot()
    summary(snap)
    json.dumps(snap, ensure_ascii=False).encode("utf-8")


@_PROPS
@given(st.binary(max_size=3000))
def test_property_any_bytes_never_raise(data):
    p = VllmLogParser()
    p.feed(data)
    p.finish()
    json.dumps(p.snapshot(), ensure_ascii=False).encode("utf-8")


@_PROPS
@given(st.lists(_NOISE, max_size=12), st.lists(_NOISE, max_size=12), st.sampled_from(_MARKERS),
       st.sampled_from(_WRAPS), st.integers(min_value=0, max_value=4))
def test_property_never_ready_on_a_failed_log(before, after, marker, wrap, upto):
    # A startup that got some way (0..4 phases of a real log), noise, a fatal marker, more noise.
    head = _read("ok_v1_010_ray.log").split("\n")
    up = min(i for i, ln in enumerate(head) if "startup complete" in ln or "Available routes" in ln)
    cut = upto * up // 4
    text = "\n".join(head[:cut] + before + [wrap + marker] + after) + "\n"
    snap = parse(text)
    assert snap["phase"] == "failed", (marker, wrap)


@_PROPS
@given(st.sampled_from(_ADVERSARIAL), st.integers(min_value=1, max_value=200000), st.sampled_from(_WRAPS))
def test_property_every_line_is_capped_before_matching(unit, length, wrap):
    seen = []
    p = VllmLogParser()
    real = p._logical
    p._logical = lambda line: (seen.append(len(line.text)), real(line))
    p.feed(wrap + (unit * (length // len(unit) + 1))[:length] + "\n")
    p.finish()
    assert all(n <= MAX_LINE_CHARS for n in seen)


def test_a_request_oom_after_ready_alone_does_not_fail_a_completed_startup():
    up = _read("ok_v1_010_ray.log")
    oom = ("(APIServer pid=1) ERROR 08-20 11:00:00 [serving_chat.py:222] torch.OutOfMemoryError: CUDA out of memory. "
           "Tried to allocate 20.00 MiB\n")
    assert parse(up + oom)["phase"] == "ready"
    dead = "(APIServer pid=1) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n"
    snap = parse(up + oom + dead)
    assert (snap["phase"], snap["failure"]["class"]) == ("failed", "cuda_oom")


# ---- healthy starts: their INFO and WARN lines are never causes (issue 17, diagnosis) ----

# Real healthy starts captured with NCCL_DEBUG=INFO (an H200, NCCL 2.28.9) and Ray 2.60 (the lab), and vLLM's Ray
# executor forwarding every NCCL INFO line of NCCL_DEBUG_SUBSYS=ALL.
HEALTHY = sorted(n for n in EXPECTED if EXPECTED[n]["class"] is None and (n.startswith("real_") or "nccl" in n))
_GENERIC_END = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"


def test_the_healthy_captures_cover_nccl_and_ray():
    assert len([n for n in HEALTHY if "nccl" in n]) >= 5 and "real_ray_healthy_lab.log" in HEALTHY


@pytest.mark.parametrize("name", HEALTHY)
def test_no_line_of_a_healthy_start_is_a_cause(name):
    p = VllmLogParser(stall_timeout=600)
    p.feed(_read(name))
    p.finish()
    assert p.candidates == [], [c["line"] for c in p.candidates][:3]
    if EXPECTED[name]["phase"] == "ready":
        return
    # Ended by a failure that names no cause, the startup is the generic failure, not one of its lines' classes.
    snap = parse(_read(name) + _GENERIC_END)
    assert snap["failure"]["class"] == "engine_init_failed"
    healthy = set(ln.strip() for ln in _read(name).splitlines())
    assert not [ln for ln in snap["failure"]["evidence"] if ln in healthy]


def test_an_nccl_warning_names_the_cause_of_a_failure_other_lines_end():
    warn = ("(RayWorkerProc pid=77, ip=192.168.200.13) [2026-12-01 15:16:24] spark-2:77:77 [0] init.cc:904 NCCL WARN"
            " Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60\n")
    alone = parse(warn)
    assert alone["failure"] is None  # a warning alone ends nothing
    snap = parse(warn + "RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)\n")
    assert snap["failure"]["class"] == "nccl_duplicate_gpu"


def test_nccl_info_lines_about_plugins_and_symbols_are_not_causes():
    lines = [
        "spark-1:520:520 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so",
        "spark-1:520:520 [0] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such"
        " file or directory No plugin found (libnccl-net.so), using internal implementation",
        "spark-1:520:520 [0] NCCL INFO dlvsym failed on mlx5dv_reg_dmabuf_mr - /lib/aarch64-linux-gnu/libmlx5.so:"
        " undefined symbol: mlx5dv_reg_dmabuf_mr, version MLX5_1.25",
        "spark-1:520:520 [0] NCCL INFO NET/Plugin: Failed to find ncclNetPlugin_v8 symbol.",
        "spark-1:520:520 [0] NCCL INFO Failed to initialize NET plugin IB",
    ]
    p = VllmLogParser()
    p.feed("\n".join(lines) + "\n")
    p.finish()
    p.settle(final=True)
    assert p.candidates == [] and not p.failed


def test_a_collective_failure_after_startup_complete_ends_the_startup():
    ready = _read("ok_018_ray_newest.log")
    line = ("(RayWorkerProc pid=77, ip=192.168.200.13) [rank1]:[E1201 15:18:05.395425641 ProcessGroupNCCL.cpp:689]"
            " [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=4,"
            " NumelOut=4, Timeout(ms)=600000) ran for 600084 milliseconds before timing out.\n")
    assert parse(ready)["phase"] == "ready"
    snap = parse(ready + line)
    assert snap["phase"] == "failed" and snap["failure"]["class"] == "collective_failed"


def test_short_lines_are_counted_and_change_no_answer():
    text = _read("fail_cuda_oom_v1_profiling.log")
    padded = "".join(ln + "ab\n\n" for ln in text.splitlines(True))
    for chunks in (None, 7):
        snap = parse(padded, chunks=chunks)
        assert snap["failure"] == parse(text)["failure"]
    p = VllmLogParser()
    p.feed("x\n" * 300000 + text)
    p.finish()
    assert p.lines_seen >= 300000 and p.failed


@pytest.mark.parametrize("line, cls", [
    ("[rank1]:[E1201 10:00:00.1 ProcessGroupNCCL.cpp:1703] [PG ID 0 PG GUID 0(default_pg) Rank 1] Exception (either"
     " an error or timeout) detected by watchdog at work: 2, last enqueued NCCL work: 2, last completed NCCL work: 1.",
     "collective_failed"),
    ("terminate called after throwing an instance of 'c10::DistBackendError'", "nccl_error"),
    ("RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != nullptr. Unable to"
     " find address for: sparkfab0", "rendezvous_failed"),
    ("spark-2:77:90 [0] misc/socket.cc:484 NCCL WARN NET/Socket : no interface found", None),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, remote process exited or there"
     " was a network error, NCCL version 2.28.3\nncclRemoteError: A call failed possibly due to a network error or a"
     " remote process exiting prematurely.", "collective_failed"),
    ("spark-2:77:95 [0] transport/net_ib.cc:1695 NCCL WARN NET/IB : Got completion from peer 192.168.200.12<42271>"
     " with status=12 opcode=1 len=0 vendor err 129 (Send) localGid ::ffff:192.168.200.13\n"
     "RuntimeError: NCCL error: unhandled system error", "collective_failed"),
])
def test_nccl_and_torch_distributed_lines(line, cls):
    snap = parse(line + "\n")
    assert (snap["failure"] or {}).get("class") == cls
