"""The serving recipe on the lab (issue 44 item 2): site.yml proves each recipe item against the runtime image
(the stand-in plays vLLM 0.17.1, without the fastsafetensors package), the served engine gets every item the image
proves, and the fast loader, whose package the image lacks, is dropped with a warning naming it, not a failed start."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.lab

HEAD = "spark-1"
MTP = '{"method":"mtp","num_speculative_tokens":1}'


def _image_checks(r):
    """The head's image_check results of a run (the runtime_image play's, and vllm_serve's when it asked again)."""
    return [e["res"] for e in r["events"] if e["host"] == HEAD and e["event"] == "runner_on_ok"
            and isinstance(e.get("res"), dict) and "recipe" in e["res"] and "recipe_args" in e["res"]]


def _last(lab, pattern):
    """The newest line of the head's vLLM journal holding pattern ('' when none)."""
    return lab.sh(HEAD, "journalctl -u sparkfleet-vllm --no-pager -o cat | grep -F %s | tail -n 1"
                  % json.dumps(pattern)).stdout.strip()


@pytest.fixture(scope="module")
def recipe_run(lab, serving, tmp_path_factory):
    """site.yml with the defaults (the recipe on), on a lab that serves: its run."""
    run = lab.site(tmp_path_factory.mktemp("recipe"))
    lab.wait_serving(limit=600)
    return run


def test_the_served_engine_got_every_recipe_flag_the_image_proves(lab, recipe_run):
    checks = _image_checks(recipe_run)
    assert checks, "no image_check result in the run"
    verdicts = dict((v["variable"], v["used"]) for v in checks[-1]["recipe"])
    assert verdicts == {"vllm_serve_prefix_caching": True, "vllm_serve_kv_cache_dtype": True,
                        "vllm_serve_mtp_tokens": True, "vllm_serve_fast_loader": False,
                        "vllm_serve_max_num_seqs": True}, checks[-1]["recipe"]
    unit = lab.sh(HEAD, "cat /etc/systemd/system/sparkfleet-vllm.service").stdout
    start = [line for line in unit.splitlines() if line.startswith("ExecStart=")][0]
    for words in ("--enable-prefix-caching", "--kv-cache-dtype fp8", "--speculative-config '%s'" % MTP,
                  "--max-num-seqs 64"):
        assert words in start, start
    assert "--load-format" not in start, start
    # What the running engine parsed (vLLM logs its non-default args) and built (its engine config line)
    args = _last(lab, "non-default args:")
    for part in ("'enable_prefix_caching': True", "'kv_cache_dtype': 'fp8'", "'max_num_seqs': 64",
                 "'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 1}"):
        assert part in args, args
    assert "load_format" not in args, args
    config = _last(lab, "Initializing a V1 LLM engine")
    assert "speculative_config=SpeculativeConfig(method='mtp'" in config and "kv_cache_dtype=fp8" in config, config
    assert lab.completion("recipe", max_tokens=4)[0] == 200


@pytest.mark.fault(name="the image lacks the fastsafetensors package (the fast loader's)",
                   expected="vllm_serve_fast_loader dropped with a warning naming it and the package; vLLM serves "
                            "with its own loader")
def test_a_package_the_image_lacks_drops_its_flag_with_a_warning(lab, recipe_run, observe):
    warnings = [w for res in _image_checks(recipe_run) for w in res.get("warnings") or []]
    dropped = [w for w in warnings if "vllm_serve_fast_loader dropped (--load-format fastsafetensors)" in w]
    assert dropped, warnings
    assert "cannot import fastsafetensors" in dropped[0] and "vLLM starts without it" in dropped[0], dropped[0]
    assert all("fastsafetensors" in w for w in warnings if "dropped" in w), warnings  # only the loader is dropped
    packages = _image_checks(recipe_run)[-1]["packages"]
    assert "error" in packages["fastsafetensors"], packages
    observe(dropped[0])
    assert lab.completion("loader", max_tokens=2)[0] == 200


# two site.yml runs, each restarting the engine: over CI's budget
@pytest.mark.long
def test_the_recipe_off_serves_without_its_flags_and_on_again_restores_them(lab, tmp_path):
    off = {"vllm_serve_prefix_caching": False, "vllm_serve_kv_cache_dtype": None, "vllm_serve_mtp_tokens": 0,
           "vllm_serve_fast_loader": False, "vllm_serve_max_num_seqs": None}
    try:
        r, failures = lab.play(tmp_path / "off", "site.yml", extravars=off)
        assert r["status"] == "successful" and not failures, failures[-3:]
        assert all(res["recipe"] == [] for res in _image_checks(r))
        lab.wait_serving(limit=600)
        start = [line for line in lab.sh(HEAD, "cat /etc/systemd/system/sparkfleet-vllm.service").stdout.splitlines()
                 if line.startswith("ExecStart=")][0]
        for flag in ("--enable-prefix-caching", "--kv-cache-dtype", "--speculative-config", "--max-num-seqs",
                     "--load-format"):
            assert flag not in start, start
    finally:
        lab.site(tmp_path / "on")
        lab.wait_serving(limit=600)
    assert "--speculative-config" in lab.sh(HEAD, "cat /etc/systemd/system/sparkfleet-vllm.service").stdout
