"""_image: the probe's answer read back, and the verdict on real captured answers (the lab image's stand-in at
vLLM 0.17.1 and 0.10.2, an image without Ray, a python without vLLM)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.image import _image
from ansible_collections.sparkfleet.vllm.plugins.module_utils.ray import _ray

FIX = os.path.join(os.path.dirname(__file__), "..", "modules", "fixtures", "image_check")
STANDIN = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "lab", "standin")
QWEN35 = ["Qwen3_5MoeForConditionalGeneration"]
# What the vllm_serve role renders for the lab (the model path first).
ARGV = ["/models/m", "--served-model-name", "sparklab/tiny-moe", "--tensor-parallel-size", "2",
        "--pipeline-parallel-size", "1", "--distributed-executor-backend", "ray", "--gpu-memory-utilization", "0.85",
        "--max-model-len", "4096", "--host", "10.99.0.11", "--port", "30000"]


def facts(name):
    with open(os.path.join(FIX, name)) as handle:
        return _image.parse_probe(handle.read())


def test_probe_answers_of_the_lab_image():
    new, old = facts("standin-0.17.1.out"), facts("standin-0.10.2.out")
    assert (new["vllm"], new["ray"], old["vllm"], old["ray"]) == ("0.17.1", "2.53.0", "0.10.2", "2.53.0")
    assert "Qwen3_5MoeForConditionalGeneration" in new["architectures"]
    assert "Qwen3_5MoeForConditionalGeneration" not in old["architectures"]
    assert new["flags"]["--safetensors-load-strategy"]["choices"] == ["eager", "lazy", "torchao"]
    assert "--safetensors-load-strategy" not in old["flags"]
    assert new["flags"]["--enforce-eager"]["takes_value"] is False


def test_probe_runs_against_the_standin_package(tmp_path):
    """The probe text itself works: run it against the stand-in's vllm package (no Ray here)."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(STANDIN), SPARKLAB_VLLM_RELEASE="0.10.2")
    p = subprocess.run([sys.executable, "-c", _image.PROBE], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path), timeout=60, check=False)
    got = _image.parse_probe(p.stdout)
    assert got["vllm"] == "0.10.2" and "--tensor-parallel-size" in got["flags"]


@pytest.mark.parametrize("stdout, error", [
    ("", "printed no probe answer"),
    ("INFO some vLLM log line\n", "printed no probe answer"),
    (_image.PROBE_MARK + "{not json\n", "not JSON"),
    (_image.PROBE_MARK + '{"format": 99}\n', "unknown format"),
])
def test_unreadable_probe_answers(stdout, error):
    with pytest.raises(_image.ProbeError, match=error):
        _image.parse_probe(stdout)


def test_log_lines_before_the_answer_are_ignored():
    out = "WARNING 11-30 23:59:01 [__init__.py:10] no CUDA\n" + open(os.path.join(FIX, "standin-0.17.1.out")).read()
    assert _image.parse_probe(out)["vllm"] == "0.17.1"


def test_the_proven_release_fits_the_lab_deployment():
    assert _image.judge(facts("standin-0.17.1.out"), ARGV + ["--safetensors-load-strategy", "eager"], QWEN35,
                        min_vllm_version="0.17.1", min_ray_version="2.52") == []


def test_too_old_release_names_version_architecture_and_flag():
    problems = _image.judge(facts("standin-0.10.2.out"), ARGV + ["--safetensors-load-strategy", "eager"], QWEN35,
                            min_vllm_version="0.17.1")
    assert problems[0] == "vLLM 0.10.2 is older than 0.17.1"
    assert problems[1].startswith("the model's architectures ['Qwen3_5MoeForConditionalGeneration'] are not in")
    assert problems[2] == "`vllm serve` of vLLM 0.10.2 does not accept --safetensors-load-strategy"
    assert len(problems) == 3


@pytest.mark.parametrize("extra, problem", [
    (["--safetensors-load-strategy", "prefetch"], "vLLM 0.17.1 accepts --safetensors-load-strategy "
                                                  "eager|lazy|torchao only, not 'prefetch'"),
    (["--safetensors-load-strategy=prefetch"], "not 'prefetch'"),
    (["--distributed-executor-backend", "nccl"], "not 'nccl'"),
    (["--tensor-paralel-size", "2"], "does not accept --tensor-paralel-size (did you mean --tensor-parallel-size?)"),
    (["--no-such-flag"], "does not accept --no-such-flag"),
])
def test_flags_and_values_the_image_rejects(extra, problem):
    problems = _image.judge(facts("standin-0.17.1.out"), ARGV + extra, QWEN35)
    assert len(problems) == 1 and problem in problems[0]


def test_bare_boolean_flags_and_json_values_pass():
    assert _image.judge(facts("standin-0.17.1.out"), ARGV + ["--enforce-eager", "--no-enable-prefix-caching",
                                                             "--compilation-config", '{"level":3}', "-tp", "2"]) == []


def test_known_values_apply_where_the_parser_lists_no_choices():
    f = facts("standin-0.17.1.out")
    f["flags"]["--safetensors-load-strategy"]["choices"] = None  # real vLLM validates later, not in argparse
    problems = _image.judge(f, ARGV + ["--safetensors-load-strategy", "prefetch"])
    assert problems == ["vLLM 0.17.1 accepts --safetensors-load-strategy eager|lazy|torchao only, not 'prefetch'"]
    f["vllm"] = "0.20.1"  # outside the table: the parser is the only authority
    assert _image.judge(f, ARGV + ["--safetensors-load-strategy", "prefetch"]) == []


def test_missing_ray_and_missing_vllm():
    # captured with Ray's package removed in the probe's container: every interpreter that needs it says so too
    assert _image.judge(facts("standin-0.17.1-no-ray.out")) == [
        "no Ray in the image (ModuleNotFoundError: No module named 'ray'); the cluster needs Ray inside the vLLM "
        "image",
        "python3 on the image's PATH (/opt/venv/bin/python3, Python 3.11.2) cannot import ray, ray._raylet.GcsClient, "
        "ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy (ModuleNotFoundError: No module named 'ray'); "
        "sparkfleet-wait gpus (vLLM's wait for the cluster's GPUs), sparkfleet-ray-guard (our identity in Ray's GCS), "
        "the Ray watchdog's GCS read and ray_cluster_check run it in the image",
        "the interpreter of the image's `ray` command (/opt/venv/bin/python3, Python 3.11.2) cannot import ray, "
        "ray.scripts.scripts.main (ModuleNotFoundError: No module named 'ray'); the Ray unit (--entrypoint ray: ray "
        "start) and the head watchdog's ray status run it in the image"]
    problems = _image.judge(facts("no-vllm.out"), ARGV, QWEN35)
    assert problems[0] == "no `vllm` command on the image's PATH (the units start the image with --entrypoint vllm)"
    assert problems[1] == ("no usable vLLM in the image (ModuleNotFoundError: No module named 'vllm', "
                           "under /usr/bin/python3)")
    assert any(p.startswith("could not read vLLM's model registry") for p in problems)
    assert any(p.startswith("could not read `vllm serve`'s arguments") for p in problems)


@pytest.mark.parametrize("found, wanted, older", [
    ("0.17.1rc1", "0.17.1", False), ("0.17.1rc1.dev3+g12ab", "0.17", False), ("0.11.1", "0.17.1", True),
    ("2.53.0", "2.52", False), ("2.51.1", "2.52", True), ("unknown", "2.52", False),
])
def test_version_comparison(found, wanted, older):
    f = {"vllm": found, "ray": found, "architectures": [], "flags": {}}
    problems = _image.judge(f, min_vllm_version=wanted)
    assert bool(problems) is older


def test_argv_flags():
    assert _image.argv_flags(["/m", "--a", "1", "--b", "--c=x", "-tp", "2", "--d", "-1"]) == [
        ("--a", "1"), ("--b", None), ("--c", "x"), ("-tp", "2"), ("--d", "-1")]


def test_image_id_key():
    h = "a" * 64
    assert _image.image_id_key("sha256:" + h) == h and _image.image_id_key(h + "\n") == h
    assert _image.image_id_key("sparklab/x:1") is None and _image.image_id_key(None) is None


def test_docker_load_output():
    out = ("Loaded image: sparklab/vllm-runtime:e6d599975e19\n"
           "Loaded image ID: sha256:%s\n" % ("b" * 64))
    assert _image.parse_docker_load(out) == {"tags": ["sparklab/vllm-runtime:e6d599975e19"],
                                             "ids": ["sha256:" + "b" * 64]}


# ------------------------------------------------------------------------------------------- image identity
IDENT = os.path.join(os.path.dirname(__file__), "..", "modules", "fixtures", "image_identity")


def inspected(name):
    with open(os.path.join(IDENT, name)) as handle:
        return _image.parse_inspect(handle.read())[0]


def test_content_identity_survives_a_save_and_load_into_a_containerd_store():
    # captured in the lab: Docker 20.10 (classic store) saved, Docker 26.1 with the containerd image store loaded
    head, worker = inspected("head-classic-docker20.10.json"), inspected("worker-containerd-docker26.1.json")
    assert head["Id"] != worker["Id"]                       # moby #44833: the local IDs differ
    assert _image.content_identity(head) == _image.content_identity(worker)
    a, b = _image.image_summary(head), _image.image_summary(worker)
    assert _image.same_image(a, b) and a["platform"] == b["platform"] == "linux/amd64" and a["layers"] == 1
    assert b["repo_digests"] and not a["repo_digests"]      # the containerd store's local digest is no registry's


def test_an_env_only_layer_is_another_image_though_its_layers_are_the_same():
    # lab/stage.sh --release: FROM the image, ENV only (no filesystem layer): same diff IDs, another run configuration
    base, env = inspected("head-classic-docker20.10.json"), inspected("head-classic-env-layer.json")
    assert base["RootFS"]["Layers"] == env["RootFS"]["Layers"]
    assert _image.content_identity(base) != _image.content_identity(env)
    assert not _image.same_image(_image.image_summary(base), _image.image_summary(env))


def test_empty_config_fields_do_not_change_the_identity():
    head = inspected("head-classic-docker20.10.json")
    trimmed = dict(head, Config={k: v for k, v in head["Config"].items() if v not in (None, "", False, [], {})})
    assert _image.content_identity(trimmed) == _image.content_identity(head)
    other = dict(head, Config=dict(head["Config"], Entrypoint=["sh"]))
    assert _image.content_identity(other) != _image.content_identity(head)


def test_a_shared_repo_digest_is_the_same_image():
    assert _image.same_image({"repo_digests": ["a@sha256:1"], "content": "x"}, {"repo_digests": ["a@sha256:1"]})
    assert not _image.same_image({"repo_digests": [], "content": ""}, {"repo_digests": [], "content": ""})


@pytest.mark.parametrize("entry", [{}, {"RootFS": {"Layers": []}}, "x"])
def test_content_identity_refuses_what_is_not_an_image(entry):
    with pytest.raises(ValueError):
        _image.content_identity(entry)


@pytest.mark.parametrize("api, platform, args", [
    ((1, 41), "linux/arm64", []),
    ((1, 47), "linux/arm64", []),
    ((1, 48), "linux/arm64", ["--platform", "linux/arm64"]),
    ((1, 51), "linux/arm64/v8", ["--platform", "linux/arm64/v8"]),
    ((1, 51), "", []),
    (None, "linux/arm64", []),
])
def test_save_names_the_platform_only_where_the_daemon_takes_it(api, platform, args):
    assert _image.save_platform_args(api, platform) == args


@pytest.mark.parametrize("text, version", [("1.41\n", (1, 41)), ("1.48", (1, 48)), ("", None), ("x", None)])
def test_api_version(text, version):
    assert _image.api_version(text) == version


@pytest.mark.parametrize("ref, bad", [
    ("hellohal2064/vllm-qwen3.5-gb10:latest", False),
    ("hellohal2064/vllm-qwen3.5-gb10@sha256:" + "a" * 64, False),
    ("hellohal2064/vllm-qwen3.5-gb10@sha256:PIN-THE-DIGEST-OF-YOUR-IMAGE", True),
    ("hellohal2064/vllm-qwen3.5-gb10@sha256:" + "a" * 63, True),
    ("hellohal2064/vllm-qwen3.5-gb10@md5:" + "a" * 64, True),
])
def test_image_ref_problem(ref, bad):
    assert bool(_image.image_ref_problem(ref)) is bad


# ------------------------------------------------------------------------- the interpreter vllm runs under
def test_the_probe_runs_under_the_interpreter_of_the_images_vllm_command():
    # labctl break path-python: /usr/bin first on PATH, so python3 there is Debian's, without vLLM and Ray
    old_way = facts("pathpython-python3-on-path.out")     # docker run --entrypoint python3 (the old probe)
    assert old_way["executable"] == "/usr/bin/python3" and "vllm" not in old_way
    assert any(p.startswith("no usable vLLM in the image") for p in _image.judge(old_way, ARGV, QWEN35))
    new_way = facts("standin-0.17.1-pathpython.out")      # the LAUNCHER: the shebang of the image's `vllm`
    assert new_way["vllm_entrypoint"] == "/opt/venv/bin/vllm" and new_way["executable"] == "/opt/venv/bin/python3"
    assert (new_way["vllm"], new_way["ray"]) == ("0.17.1", "2.53.0")
    # vLLM's own interpreter has everything; the python3 our GPU wait, Ray guard and watchdog run there has no Ray
    assert _image.judge(new_way, ARGV, QWEN35, "0.17.1", "2.52") == [
        "python3 on the image's PATH (/usr/bin/python3, Python 3.11.2) cannot import ray, ray._raylet.GcsClient, "
        "ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy (ModuleNotFoundError: No module named 'ray'); "
        "sparkfleet-wait gpus (vLLM's wait for the cluster's GPUs), sparkfleet-ray-guard (our identity in Ray's GCS), "
        "the Ray watchdog's GCS read and ray_cluster_check run it in the image"]


# ------------------------------------------------------------------------- every interpreter our scripts run
def test_every_interpreter_our_scripts_run_in_the_lab_image_imports_what_they_need():
    fit = facts("standin-0.17.1.out")
    assert [(i["use"], i["interpreter"], i["missing"]) for i in fit["interpreters"]] == [
        ("python3", "/opt/venv/bin/python3", {}), ("ray", "/opt/venv/bin/python3", {})]
    assert _image.interpreter_problems(fit) == []


def test_an_image_without_a_ray_command_names_the_ray_unit():
    problems = _image.interpreter_problems(facts("no-vllm.out"))
    assert problems[1] == ("the image's `ray` command: no ray on the image's PATH; the Ray unit (--entrypoint ray: ray "
                           "start) and the head watchdog's ray status run it in the image")


def test_every_script_that_runs_python_in_the_image_is_covered():
    """The interpreters the probe asks are the ones our scripts run: each `docker exec ... python3`, `--entrypoint
    python3` and `ray status` in the role's files is accounted for in IMAGE_INTERPRETERS, and what those scripts import
    there is what the probe checks."""
    roles = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles")
    floor = os.path.join(roles, "sparkfleet", "files")   # the scripts both units run (the floor's)
    wait = open(os.path.join(floor, "sparkfleet-wait")).read()
    guard = open(os.path.join(roles, "ray_cluster", "files", "sparkfleet-ray-guard")).read()
    watchdog = open(os.path.join(floor, "sparkfleet_watchdog.py")).read()
    assert 'docker exec "$container" python3 -c "$code"' in wait and "import ray, sys" in wait
    assert 'docker exec "$3" python3 -c "$KV"' in guard and "--entrypoint python3" in guard
    assert "from ray._raylet import GcsClient" in guard and "from ray._raylet import GcsClient" in watchdog
    assert '"docker", "exec", "-i", container, "python3", "-"' in watchdog
    assert '"docker", "exec", container, "ray", "status"' in watchdog
    needs = dict((use, needed) for use, needed, _who in _image.IMAGE_INTERPRETERS)
    assert {"ray", "ray._raylet:GcsClient"} <= set(needs["python3"])
    assert "NodeAffinitySchedulingStrategy" in _ray.PROBE_PROGRAM
    assert "ray.util.scheduling_strategies:NodeAffinitySchedulingStrategy" in needs["python3"]
    assert "ray" in needs["ray"]


def test_the_probe_asks_each_interpreter_for_real(tmp_path):
    """The probe text run here: python3 on PATH is this interpreter, the `ray` command a pip script in its long-path
    form (the two-line #!/bin/sh header) naming this interpreter."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(sys.executable)
    (bindir / "ray").write_text("#!/bin/sh\n'''exec' %s \"$0\" \"$@\"\n" % sys.executable)
    (bindir / "ray").chmod(0o755)
    env = {"PATH": "%s:/usr/bin:/bin" % bindir, "PYTHONPATH": os.path.abspath(STANDIN)}
    p = subprocess.run([sys.executable, "-c", _image.PROBE], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path), timeout=120, check=False)
    got = _image.parse_probe(p.stdout)
    by_use = dict((i["use"], i) for i in got["interpreters"])
    assert by_use["python3"]["command"] == str(bindir / "python3")
    assert by_use["ray"]["command"] == str(bindir / "ray") and by_use["ray"]["interpreter"] == sys.executable
    have_ray = subprocess.run([sys.executable, "-c", "import ray"], capture_output=True, check=False).returncode == 0
    assert ("ray" in by_use["python3"]["missing"]) is not have_ray
    assert ("ray" in by_use["ray"]["missing"]) is not have_ray


PIP_LONG_PATH = "'''exec' /opt/a long/bin/python3 \"$0\" \"$@\""


@pytest.mark.parametrize("first, second, runs", [
    ("#!/opt/venv/bin/python3", "import sys", "/opt/venv/bin/python3"),
    ("#!/usr/bin/env python3", "import sys", "/usr/bin/env python3"),
    ("#!/bin/sh", PIP_LONG_PATH, "/opt/a long/bin/python3"),
    ("\x7fELF", "", None),
])
def test_launcher_reads_the_vllm_commands_interpreter(tmp_path, first, second, runs):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "vllm").write_text(first + "\n" + second + "\n")
    (bindir / "vllm").chmod(0o755)
    # print what would be run instead of running it
    script = _image.LAUNCHER.replace('exec "$interp" -c', 'echo "$interp"; exit #')
    script = script.replace("exec $interp -c", "echo $interp; exit #").replace('exec python3 -c "$probe"', "echo fallback")
    out = subprocess.run(["sh", "-c", script, "probe", "PROBE"], capture_output=True, text=True, check=False,
                         env={"PATH": "%s:/usr/bin:/bin" % bindir}).stdout.strip()
    assert out == (runs or "fallback")


def test_parser_flags_are_checked_against_the_images_registries():
    f = facts("standin-0.17.1.out")
    qwen = ARGV + ["--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder"]
    assert _image.judge(f, qwen, QWEN35) == []
    problems = _image.judge(f, ARGV + ["--tool-call-parser", "qwen35_coder", "--reasoning-parser", "qwen35"], QWEN35)
    assert problems == ["vLLM 0.17.1 registers no tool-call parser 'qwen35_coder' (closest: qwen3_coder)",
                        "vLLM 0.17.1 registers no reasoning parser 'qwen35' (closest: qwen3)"]
    assert _image.judge(f, ARGV + ["--enable-auto-tool-choice"], QWEN35) == [
        "--enable-auto-tool-choice needs --tool-call-parser (vLLM refuses to start without it)"]
    unreadable = dict(f, tool_parsers_error="ImportError: x")
    unreadable.pop("tool_parsers")
    assert _image.judge(unreadable, ARGV + ["--tool-call-parser", "qwen3_coder"]) == [
        "could not read vLLM's tool-call parser registry to check --tool-call-parser qwen3_coder (ImportError: x)"]


def test_a_flag_only_a_newer_vllm_has_is_judged_by_the_image():
    """Issue 41.9: the image's own parser decides (preflight's 0.17.1 list leaves unknown flags to it)."""
    old = facts("standin-0.17.1.out")
    assert _image.judge(old, ARGV + ["--kv-cache-offload-policy", "lru"]) == [
        "`vllm serve` of vLLM 0.17.1 does not accept --kv-cache-offload-policy"]
    newer = facts("standin-0.17.1.out")
    newer["vllm"] = "0.18.0"
    newer["flags"]["--kv-cache-offload-policy"] = {"choices": ["lru", "arc"], "takes_value": True}
    assert _image.judge(newer, ARGV + ["--kv-cache-offload-policy", "lru"]) == []
    assert _image.judge(newer, ARGV + ["--kv-cache-offload-policy", "fifo"]) == [
        "vLLM 0.18.0 accepts --kv-cache-offload-policy lru|arc only, not 'fifo'"]
