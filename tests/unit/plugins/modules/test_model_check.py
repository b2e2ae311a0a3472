"""model_check on real safetensors files: complete, half-downloaded, missing, absent."""

from __future__ import annotations

import json
import os

from ansible_collections.sparkfleet.vllm.plugins.modules import model_check
from ansible_collections.sparkfleet.vllm.tests.unit.plugins.modules.test_model_sync import make_model


def test_a_complete_model_is_complete(run_module, tmp_path):
    root = make_model(str(tmp_path / "m"))
    res = run_module(model_check, {"path": root})
    assert res["complete"] is True and res["problems"] == [] and res["changed"] is False
    assert res["files"] == 7 and res["weight_files"] == 4
    assert res["bytes"] == sum(os.path.getsize(os.path.join(root, n)) for n in os.listdir(root))
    assert res["msg"].startswith(root + " is complete: 7 files")


def test_a_half_downloaded_shard_is_incomplete(run_module, tmp_path):
    """Issue 16: config.json present is not complete; every shard of the index must be there with its size."""
    root = make_model(str(tmp_path / "m"))
    shard = os.path.join(root, "model-00002-of-00004.safetensors")
    os.truncate(shard, os.path.getsize(shard) // 2)
    os.unlink(os.path.join(root, "model-00004-of-00004.safetensors"))
    res = run_module(model_check, {"path": root}, check_mode=True)
    assert res["complete"] is False and res["changed"] is False
    assert any("model-00002-of-00004.safetensors" in p and "truncated" in p for p in res["problems"]), res
    assert any("model-00004-of-00004.safetensors is missing" in p for p in res["problems"]), res
    assert "is incomplete" in res["msg"]


def test_config_alone_is_not_a_model(run_module, tmp_path):
    root = tmp_path / "m"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "qwen3_5_moe"}))
    res = run_module(model_check, {"path": str(root)})
    assert res["complete"] is False and any("no weights" in p for p in res["problems"]), res


def test_an_absent_directory_is_incomplete_not_a_failure(run_module, tmp_path):
    res = run_module(model_check, {"path": str(tmp_path / "nope")})
    assert res.get("failed") is not True and res["complete"] is False
    assert res["problems"] == ["%s is not a directory" % (tmp_path / "nope")]
