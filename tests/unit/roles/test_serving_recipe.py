"""The serving recipe (issue 44 item 2): each recipe variable renders one item, image_check keeps what the image's
captured probe answer proves and drops the rest with a warning naming the variable, and vLLM's command line (the
unit's docker run) carries exactly the items kept, after the role's own flags.

The roles' own defaults and vars are rendered with ansible-core's Templar (as test_served_names does); the verdicts
come from the module's helpers on the probe answers captured from the lab's stand-in images
(tests/unit/plugins/modules/fixtures/image_check)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from ansible_collections.sparkfleet.vllm.plugins.module_utils.image import _image
from ansible_collections.sparkfleet.vllm.plugins.filter.vllm_serve_args import vllm_serve_args
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate as v

from .test_served_names import render, templar

REPO = Path(__file__).resolve().parents[3]
FIX = REPO / "tests/unit/plugins/modules/fixtures/image_check"
QWEN35 = ["Qwen3_5MoeForConditionalGeneration"]
MTP_WORDS = ["--speculative-config", '{"method":"mtp","num_speculative_tokens":1}']


def facts(name="standin-0.17.1.out"):
    return _image.parse_probe((FIX / name).read_text())


def recipe(**over):
    return render(templar(**over), "{{ _vllm_serve_recipe }}")


def docker_args(check, **over):
    """vars/main.yml's _vllm_serve_docker_args rendered, the vllm_serve_args filter called here (Templar outside a
    playbook does not load the collection's filters) on the cfg the role renders."""
    text = yaml.safe_load((REPO / "roles/vllm_serve/vars/main.yml").read_text())["_vllm_serve_docker_args"]
    call = "(_vllm_serve_args_cfg | sparkfleet.vllm.vllm_serve_args)"
    assert call in text
    serve = vllm_serve_args(render(templar(**over), "{{ _vllm_serve_args_cfg }}"))
    over = dict(over, _vllm_serve_docker_args=text.replace(call, "_test_serve_args"), _test_serve_args=serve)
    t = templar(sparkfleet_image_check=check, sparkfleet_vllm_unit="sparkfleet-vllm", sparkfleet_ray_unit="sparkfleet-ray",
                sparkfleet_config_dir="/etc/sparkfleet", sparkfleet_cache_dir="/var/cache/sparkfleet",
                sparkfleet_ray_tmp_dir="/tmp/ray", sparkfleet_container_gpu_args=["--gpus", "all"],
                sparkfleet_fabric_ip="192.168.200.12", _vllm_serve_model_state={}, **over)
    return [str(w) for w in render(t, "{{ _vllm_serve_docker_args }}")]


def test_the_defaults_render_every_item_in_order_with_vllm_0_17_1_s_spelling():
    items = recipe()
    assert [i["variable"] for i in items] == ["vllm_serve_prefix_caching", "vllm_serve_kv_cache_dtype",
                                              "vllm_serve_mtp_tokens", "vllm_serve_fast_loader",
                                              "vllm_serve_max_num_seqs"]
    words = dict((i["variable"], i["args"]) for i in items)
    assert words["vllm_serve_prefix_caching"] == ["--enable-prefix-caching"]
    assert words["vllm_serve_kv_cache_dtype"] == ["--kv-cache-dtype", "fp8"]
    assert words["vllm_serve_mtp_tokens"] == MTP_WORDS
    assert json.loads(words["vllm_serve_mtp_tokens"][1]) == {"method": "mtp", "num_speculative_tokens": 1}
    assert words["vllm_serve_fast_loader"] == ["--load-format", "fastsafetensors"]
    assert words["vllm_serve_max_num_seqs"] == ["--max-num-seqs", "64"]
    mtp = [i for i in items if i["variable"] == "vllm_serve_mtp_tokens"][0]
    assert "Qwen3_5MoeForConditionalGeneration" in mtp["architectures"]
    loader = [i for i in items if i["variable"] == "vllm_serve_fast_loader"][0]
    assert loader["packages"] == ["fastsafetensors"]


@pytest.mark.parametrize("over, gone", [
    ({"vllm_serve_prefix_caching": False}, "vllm_serve_prefix_caching"),
    ({"vllm_serve_kv_cache_dtype": None}, "vllm_serve_kv_cache_dtype"),
    ({"vllm_serve_mtp_tokens": 0}, "vllm_serve_mtp_tokens"),
    ({"vllm_serve_fast_loader": False}, "vllm_serve_fast_loader"),
    ({"vllm_serve_load_format": "safetensors"}, "vllm_serve_fast_loader"),  # the operator's loader wins, silently
    ({"vllm_serve_max_num_seqs": None}, "vllm_serve_max_num_seqs"),
])
def test_each_item_is_off_by_its_own_variable(over, gone):
    names = [i["variable"] for i in recipe(**over)]
    assert gone not in names and len(names) == 4


def test_mtp_tokens_render_into_the_json_vllm_parses():
    words = dict((i["variable"], i["args"]) for i in recipe(vllm_serve_mtp_tokens=3))["vllm_serve_mtp_tokens"]
    assert json.loads(words[1]) == {"method": "mtp", "num_speculative_tokens": 3}


def test_the_0_17_1_image_proves_every_item_but_the_fast_loader_whose_package_it_lacks():
    f = facts()
    assert f["format"] == _image.PROBE_FORMAT
    assert "error" in f["packages"]["fastsafetensors"]
    verdicts = _image.recipe_verdicts(f, recipe(), serve_args=["/models/m", "--tensor-parallel-size", "2"],
                                      architectures=QWEN35)
    used = dict((x["variable"], x["used"]) for x in verdicts)
    assert used == {"vllm_serve_prefix_caching": True, "vllm_serve_kv_cache_dtype": True,
                    "vllm_serve_mtp_tokens": True, "vllm_serve_fast_loader": False, "vllm_serve_max_num_seqs": True}
    dropped = [x for x in verdicts if not x["used"]][0]
    warning = _image.recipe_warning("sparklab/vllm-runtime:x", dropped)
    assert "vllm_serve_fast_loader dropped (--load-format fastsafetensors)" in warning
    assert "cannot import fastsafetensors" in warning and "vLLM starts without it" in warning
    assert _image.recipe_args(verdicts) == (["--enable-prefix-caching", "--kv-cache-dtype", "fp8"] + MTP_WORDS
                                            + ["--max-num-seqs", "64"])


def test_an_image_with_fastsafetensors_gets_the_fast_loader():
    f = facts()
    f["packages"]["fastsafetensors"] = {"version": "0.1.15"}
    verdicts = _image.recipe_verdicts(f, recipe(), serve_args=["/models/m"], architectures=QWEN35)
    assert all(x["used"] for x in verdicts)
    assert ["--load-format", "fastsafetensors"] == _image.recipe_args(verdicts)[-4:-2]


def test_a_format_3_answer_never_proves_a_package():
    f = facts()
    del f["packages"]
    verdicts = _image.recipe_verdicts(f, recipe(), serve_args=["/models/m"], architectures=QWEN35)
    loader = [x for x in verdicts if x["variable"] == "vllm_serve_fast_loader"][0]
    assert not loader["used"] and "did not ask" in loader["why"]


@pytest.mark.parametrize("flag, variable", [
    ("--enable-prefix-caching", "vllm_serve_prefix_caching"),
    ("--kv-cache-dtype", "vllm_serve_kv_cache_dtype"),
    ("--speculative-config", "vllm_serve_mtp_tokens"),
    ("--max-num-seqs", "vllm_serve_max_num_seqs"),
])
def test_an_image_whose_vllm_lacks_a_flag_drops_only_that_item_with_a_warning_naming_it(flag, variable):
    f = copy.deepcopy(facts())
    del f["flags"][flag]
    f["packages"]["fastsafetensors"] = {"version": "0.1.15"}
    verdicts = _image.recipe_verdicts(f, recipe(), serve_args=["/models/m"], architectures=QWEN35)
    dropped = [x for x in verdicts if not x["used"]]
    assert [x["variable"] for x in dropped] == [variable]
    assert "does not accept %s" % flag in _image.recipe_warning("img", dropped[0])
    assert flag not in _image.recipe_args(verdicts)


def test_a_kv_cache_dtype_the_release_does_not_list_is_dropped():
    verdicts = _image.recipe_verdicts(facts(), recipe(vllm_serve_kv_cache_dtype="fp4"), serve_args=["/m"],
                                      architectures=QWEN35)
    kv = [x for x in verdicts if x["variable"] == "vllm_serve_kv_cache_dtype"][0]
    assert not kv["used"] and "not 'fp4'" in kv["why"]


def test_mtp_is_for_qwen3_5_only_and_waits_for_the_model_config():
    other = _image.recipe_verdicts(facts(), recipe(), serve_args=["/m"], architectures=["LlamaForCausalLM"])
    mtp = [x for x in other if x["variable"] == "vllm_serve_mtp_tokens"][0]
    assert not mtp["used"] and "LlamaForCausalLM" in mtp["why"]
    unknown = _image.recipe_verdicts(facts(), recipe(), serve_args=["/m"], architectures=[])
    assert [x for x in unknown if x["variable"] == "vllm_serve_mtp_tokens"][0]["used"]


def test_a_flag_the_operator_set_in_extra_args_is_kept_and_the_item_dropped():
    verdicts = _image.recipe_verdicts(facts(), recipe(), serve_args=["/m", "--kv-cache-dtype", "fp8_e5m2"],
                                      architectures=QWEN35)
    kv = [x for x in verdicts if x["variable"] == "vllm_serve_kv_cache_dtype"][0]
    assert not kv["used"] and "set already" in kv["why"]


def test_vllm_s_command_line_carries_the_kept_items_after_the_role_s_flags():
    kept = ["--enable-prefix-caching", "--kv-cache-dtype", "fp8"] + MTP_WORDS
    args = docker_args({"image_id": "sha256:" + "a" * 64, "recipe_args": kept})
    serve = args[args.index("serve") + 1:]
    assert serve[0] == "/models/qwen3-coder" and serve[-len(kept):] == kept
    assert "--load-format" not in serve
    without = docker_args({"image_id": "sha256:" + "a" * 64, "recipe_args": []})
    assert not set(kept) & set(without)


def test_the_unit_line_quotes_the_speculative_config_as_one_word():
    kept = MTP_WORDS
    args = docker_args({"image_id": "sha256:" + "a" * 64, "recipe_args": kept})
    t = templar(_vllm_serve_docker_args=args, sparkfleet_vllm_unit="sparkfleet-vllm", _vllm_serve_live_restore=False)
    line = render(t, "{{ _vllm_serve_docker_args | map('quote') | join(' ') }}")
    assert "--speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":1}'" in line


@pytest.mark.parametrize("name, value, good", [
    ("vllm_serve_prefix_caching", True, True), ("vllm_serve_prefix_caching", "maybe", False),
    ("vllm_serve_kv_cache_dtype", "fp8", True), ("vllm_serve_kv_cache_dtype", None, True),
    ("vllm_serve_kv_cache_dtype", False, False), ("vllm_serve_kv_cache_dtype", 8, False),
    ("vllm_serve_mtp_tokens", 1, True), ("vllm_serve_mtp_tokens", 0, True), ("vllm_serve_mtp_tokens", -1, False),
    ("vllm_serve_mtp_tokens", 9, False), ("vllm_serve_mtp_tokens", "one", False),
    ("vllm_serve_fast_loader", False, True), ("vllm_serve_fast_loader", "fast", False),
    ("vllm_serve_max_num_seqs", 64, True), ("vllm_serve_max_num_seqs", None, True),
    ("vllm_serve_max_num_seqs", 0, False), ("vllm_serve_max_num_seqs", 6.5, False),
])
def test_the_validator_names_host_variable_and_value(name, value, good):
    errors = v.serving_errors({name: value}, host="spark-1")
    assert (errors == []) is good, errors
    if not good:
        assert errors[0].startswith("spark-1: %s " % name)


def test_every_recipe_variable_is_validated_and_specified():
    names = [i["variable"] for i in recipe()]
    validated = render(templar(), "{{ _vllm_serve_validated_vars }}")
    specs = (REPO / "roles/vllm_serve/meta/argument_specs.yml").read_text()
    readme = (REPO / "roles/vllm_serve/README.md").read_text()
    for name in names:
        assert name in v.SERVING_CHECKS and name in validated and ("      %s:\n" % name) in specs
        assert name in readme
