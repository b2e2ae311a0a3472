"""image_check with a fake docker that answers like the lab image (captured probe outputs)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.sparkfleet.vllm.plugins.modules import image_check

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "image_check")
IMAGE_ID = "sha256:" + "c" * 64
DOCKER = """#!/bin/sh
echo "$*" >> "$FAKE_LOG"
case "$1 $2" in
  "image inspect") [ -n "$FAKE_MISSING" ] && { echo "Error: No such image: $5" >&2; exit 1; }; echo "$FAKE_ID" ;;
  "run --rm") cat "$FAKE_PROBE" ;;
  *) exit 9 ;;
esac
"""
ARGV = ["/models/m", "--tensor-parallel-size", "2", "--distributed-executor-backend", "ray",
        "--safetensors-load-strategy", "eager"]


@pytest.fixture
def docker(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "docker"
    fake.write_text(DOCKER)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "docker.log"))
    monkeypatch.setenv("FAKE_ID", IMAGE_ID)
    monkeypatch.setenv("FAKE_PROBE", os.path.join(FIX, "standin-0.17.1.out"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3_5MoeForConditionalGeneration"]}))

    class D:
        config = str(model / "config.json")
        cache = str(tmp_path / "cache")

        @staticmethod
        def calls():
            return (tmp_path / "docker.log").read_text().splitlines()

        @staticmethod
        def args(**extra):
            a = {"image": "sparklab/vllm-runtime:x", "serve_args": ARGV, "model_config": D.config,
                 "cache_dir": D.cache, "min_vllm_version": "0.17.1", "min_ray_version": "2.52"}
            a.update(extra)
            return a
    return D


def test_fitting_image_passes_and_the_verdict_is_cached_per_image_id(run_module, docker):
    first = run_module(image_check, docker.args())
    assert not first.get("failed"), first.get("msg")
    assert first["changed"] is False and first["cached"] is False and first["problems"] == []
    assert (first["vllm_version"], first["ray_version"]) == ("0.17.1", "2.53.0")
    assert first["model_architectures"] == ["Qwen3_5MoeForConditionalGeneration"]
    runs = [c for c in docker.calls() if c.startswith("run ")]
    assert len(runs) == 1 and "--entrypoint sh %s -c" % IMAGE_ID in runs[0] and "--network none" in runs[0]
    assert first["python"] == "/opt/venv/bin/python3" and first["vllm_entrypoint"] == "/opt/venv/bin/vllm"
    assert os.path.exists(os.path.join(docker.cache, "c" * 64 + ".json"))
    again = run_module(image_check, docker.args())
    assert again["cached"] is True and again["problems"] == []
    assert len([c for c in docker.calls() if c.startswith("run ")]) == 1


def test_too_old_image_fails_naming_image_versions_and_fix(run_module, docker, monkeypatch):
    monkeypatch.setenv("FAKE_PROBE", os.path.join(FIX, "standin-0.10.2.out"))
    r = run_module(image_check, docker.args())
    assert r["failed"] is True
    assert r["msg"].startswith("image sparklab/vllm-runtime:x (vLLM 0.10.2, Ray 2.53.0,")
    assert "vLLM 0.10.2 is older than 0.17.1" in r["msg"]
    assert "['Qwen3_5MoeForConditionalGeneration'] are not in this vLLM's registry" in r["msg"]
    assert "does not accept --safetensors-load-strategy" in r["msg"]
    assert r["hint"].startswith("Set the server's image to an image whose vLLM") and "vLLM >= 0.17.1" in r["hint"]
    assert len(r["problems"]) == 3
    # The roles pass their variable names: the hint names the one to change.
    r = run_module(image_check, dict(docker.args(), setting_names={"image": "sparkfleet_image"}))
    assert r["failed"] is True and r["hint"].startswith("Set sparkfleet_image to an image whose vLLM")


def test_unknown_setting_name_is_refused_before_docker_runs(run_module, docker, tmp_path):
    r = run_module(image_check, dict(docker.args(), setting_names={"imagee": "x"}))
    assert r["failed"] is True and r["msg"] == "setting_names has unknown setting(s) imagee"
    assert not (tmp_path / "docker.log").exists()  # docker never ran


def test_check_mode_probes_but_writes_no_cache(run_module, docker):
    r = run_module(image_check, docker.args(), check_mode=True)
    assert not r.get("failed") and r["changed"] is False
    assert not os.path.exists(docker.cache)


def test_a_cache_of_another_image_is_not_trusted(run_module, docker):
    os.makedirs(docker.cache)
    with open(os.path.join(docker.cache, "c" * 64 + ".json"), "w") as handle:
        json.dump({"image_id": "sha256:" + "d" * 64, "vllm": "0.17.1"}, handle)
    r = run_module(image_check, docker.args())
    assert r["cached"] is False and not r.get("failed")


def test_missing_image_and_missing_model(run_module, docker, monkeypatch, tmp_path):
    gone = str(tmp_path / "nowhere" / "config.json")
    r = run_module(image_check, docker.args(model_config=gone))
    assert not r.get("failed") and r["model_architectures"] == []
    r = run_module(image_check, docker.args(model_config=gone, require_model=True))
    assert r["failed"] is True and r["msg"] == "model config %s does not exist" % gone
    monkeypatch.setenv("FAKE_MISSING", "1")
    r = run_module(image_check, docker.args())
    assert r["failed"] is True and r["msg"].startswith("image sparklab/vllm-runtime:x is not on this node")


def test_image_without_a_probe_answer(run_module, docker, monkeypatch, tmp_path):
    empty = tmp_path / "empty.out"
    empty.write_text("exec: python3: not found\n")
    monkeypatch.setenv("FAKE_PROBE", str(empty))
    r = run_module(image_check, docker.args())
    assert r["failed"] is True and "printed no probe answer" in r["msg"]


def test_a_python3_on_path_without_ray_fails_naming_the_interpreter_and_who_runs_it(run_module, docker, monkeypatch):
    """labctl break path-python, captured: vLLM's own interpreter has vLLM and Ray, the first python3 on PATH (what our
    GPU wait, Ray guard and watchdog run with docker exec) is Debian's without Ray."""
    monkeypatch.setenv("FAKE_PROBE", os.path.join(FIX, "standin-0.17.1-pathpython.out"))
    r = run_module(image_check, docker.args())
    assert r["failed"] is True and r["python"] == "/opt/venv/bin/python3" and r["ray_version"] == "2.53.0"
    assert r["problems"] == [p for p in r["problems"] if p.startswith("python3 on the image's PATH (/usr/bin/python3")]
    assert "cannot import ray" in r["msg"] and "sparkfleet-wait gpus" in r["msg"] and "sparkfleet-ray-guard" in r["msg"]
    assert "PATH finds its venv's python3 first" in r["hint"]
    assert [i["use"] for i in r["interpreters"]] == ["python3", "ray"]


RECIPE = [{"variable": "vllm_serve_kv_cache_dtype", "args": ["--kv-cache-dtype", "fp8"]},
          {"variable": "vllm_serve_mtp_tokens", "args": ["--speculative-config", '{"method":"mtp","num_speculative_tokens":1}'],
           "architectures": ["Qwen3_5MoeForConditionalGeneration"]},
          {"variable": "vllm_serve_fast_loader", "args": ["--load-format", "fastsafetensors"],
           "packages": ["fastsafetensors"]}]


def test_the_recipe_keeps_what_the_image_proves_and_warns_naming_what_it_drops(run_module, docker, monkeypatch):
    said = []
    monkeypatch.setattr(image_check.AnsibleModule, "warn", lambda self, text: said.append(text))
    res = run_module(image_check, docker.args(recipe=RECIPE))
    assert res["problems"] == [] and not res.get("failed")
    assert res["recipe_args"] == ["--kv-cache-dtype", "fp8", "--speculative-config",
                                  '{"method":"mtp","num_speculative_tokens":1}']
    assert [x["used"] for x in res["recipe"]] == [True, True, False]
    assert "error" in res["packages"]["fastsafetensors"]
    warned = [w for w in said if "vllm_serve_fast_loader dropped" in w]
    assert len(warned) == 1 and "cannot import fastsafetensors" in warned[0], said
    assert warned[0].startswith("sparklab/vllm-runtime:x: ") and len(said) == 1


def test_an_older_image_drops_a_value_its_parser_lacks_without_failing(run_module, docker, monkeypatch):
    monkeypatch.setenv("FAKE_PROBE", os.path.join(FIX, "standin-0.10.2.out"))
    res = run_module(image_check, docker.args(recipe=[{"variable": "vllm_serve_kv_cache_dtype",
                                                       "args": ["--kv-cache-dtype", "fp9"]}],
                                              serve_args=ARGV[:5], min_vllm_version=None))
    assert res["recipe"][0]["used"] is False and "not 'fp9'" in res["recipe"][0]["why"]
    assert res["recipe_args"] == []
