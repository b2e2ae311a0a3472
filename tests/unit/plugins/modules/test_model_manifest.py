"""plugins/modules/model_manifest.py: recorded once, unchanged on a re-run, nothing written in check mode, bad input
refused before anything is written."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.sparkfleet.vllm.plugins.modules import model_manifest
from ansible_collections.sparkfleet.vllm.tests.unit.support.model_files import shard_name, write_model

SHARD2 = shard_name(2, 3)


@pytest.fixture
def model(tmp_path):
    root = str(tmp_path / "models" / "m")
    write_model(root, 3, 128 << 10)
    return root


def args(model, tmp_path, **kw):
    return dict(dict(path=model, manifest=str(tmp_path / "state" / "model-manifest.json"), node="spark-2"), **kw)


def test_recorded_once_then_unchanged(run_module, model, tmp_path):
    first = run_module(model_manifest, args(model, tmp_path))
    assert first["changed"] and first["files"] == 5 and first["changes"] == []
    data = json.loads((tmp_path / "state" / "model-manifest.json").read_text())
    assert set(data["files"][SHARD2]) == {"size", "mtime_ns", "ctime_ns", "inode"}
    again = run_module(model_manifest, args(model, tmp_path))
    assert not again["changed"] and again["msg"].startswith("spark-2: kept 5 files")


def test_a_repair_is_recorded_and_named(run_module, model, tmp_path):
    run_module(model_manifest, args(model, tmp_path))
    shard = os.path.join(model, SHARD2)
    with open(shard, "rb") as fh:
        data = fh.read()
    with open(shard + ".new", "wb") as fh:
        fh.write(data)
    os.replace(shard + ".new", shard)                        # as the sync puts a re-sent file in place
    got = run_module(model_manifest, args(model, tmp_path))
    assert got["changed"] and [c["file"] for c in got["changes"]] == [SHARD2]


def test_check_mode_writes_nothing(run_module, model, tmp_path):
    got = run_module(model_manifest, args(model, tmp_path), check_mode=True)
    assert got["changed"] and got["msg"].startswith("spark-2: would record")
    assert not (tmp_path / "state").exists()


def test_the_head_hashes_reach_the_workers(run_module, model, tmp_path):
    digest = "ab" * 32
    got = run_module(model_manifest, args(model, tmp_path, head_hashes={"config.json": digest}))
    assert got["head_hashes"] == {"config.json": digest}
    data = json.loads((tmp_path / "state" / "model-manifest.json").read_text())
    assert data["head"] == {"config.json": digest}


@pytest.mark.parametrize("kw, words", [
    (dict(head_hashes={"config.json": "not-a-hash"}), "head_hashes must map each file to its SHA-256"),
    (dict(path="/nonexistent/m"), "the model directory /nonexistent/m does not exist"),
    (dict(manifest="MODEL/manifest.json"), "lies inside the model directory"),
    (dict(manifest="relative.json"), "must be absolute paths"),
])
def test_bad_input_is_refused_before_anything_is_written(run_module, model, tmp_path, kw, words):
    if kw.get("manifest", "").startswith("MODEL/"):
        kw = dict(manifest=os.path.join(model, "manifest.json"))
    got = run_module(model_manifest, args(model, tmp_path, **kw))
    assert got["failed"] and "spark-2" in got["msg"] and words in got["msg"]
    assert not (tmp_path / "state").exists() and not os.path.exists(os.path.join(model, "manifest.json"))
