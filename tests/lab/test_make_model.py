"""The fake model generator writes a model directory that real tools accept, byte-identical per seed."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

import make_model
from sparklab_vllm.safetensors_io import list_shards, read_header, read_slice


def _digests(d):
    return {n: hashlib.sha256(open(os.path.join(d, n), "rb").read()).hexdigest() for n in sorted(os.listdir(d))}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("m") / "model")
    rc = make_model.main(["--out", out, "--shards", "3", "--shard-mb", "1", "--seed", "7"])
    assert rc == 0
    return out


def test_files_and_names(model):
    assert sorted(os.listdir(model)) == [
        "config.json", "generation_config.json", "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors", "model.safetensors.index.json",
        "tokenizer.json", "tokenizer_config.json"]


def test_index_matches_shards(model):
    index = json.load(open(os.path.join(model, "model.safetensors.index.json")))
    total = 0
    seen = {}
    for path in list_shards(model):
        header, meta, _start, data_len = read_header(path)
        assert meta == {"format": "pt"}
        total += data_len
        for name in header:
            seen[name] = os.path.basename(path)
        assert data_len == 1 << 20
    assert index["metadata"]["total_size"] == total
    assert index["weight_map"] == seen
    assert "model.embed_tokens.weight" in seen and "lm_head.weight" in seen


def test_real_safetensors_library_reads_every_shard(model):
    safetensors = pytest.importorskip("safetensors")
    for path in list_shards(model):
        with safetensors.safe_open(path, framework="numpy") as f:
            keys = list(f.keys())
            assert len(keys) == make_model.TENSORS_PER_SHARD
            assert f.metadata() == {"format": "pt"}


def test_config_files_are_realistic(model):
    cfg = json.load(open(os.path.join(model, "config.json")))
    assert cfg["architectures"] == ["Qwen3_5MoeForConditionalGeneration"] and cfg["model_type"] == "qwen3_5_moe"
    assert cfg["num_hidden_layers"] == 3 and cfg["max_position_embeddings"] > 0
    tok = json.load(open(os.path.join(model, "tokenizer.json")))
    assert tok["model"]["type"] == "BPE" and len(tok["model"]["vocab"]) == cfg["vocab_size"]
    assert json.load(open(os.path.join(model, "tokenizer_config.json")))["eos_token"] == "<|im_end|>"
    assert "eos_token_id" in json.load(open(os.path.join(model, "generation_config.json")))


def test_same_seed_same_bytes_other_seed_other_bytes(model, tmp_path):
    again = str(tmp_path / "again")
    other = str(tmp_path / "other")
    make_model.make_model(again, 3, 1, seed=7)
    make_model.make_model(other, 3, 1, seed=8)
    assert _digests(again) == _digests(model)
    a, b = _digests(model), _digests(other)
    assert a["config.json"] == b["config.json"]
    assert a["model-00002-of-00003.safetensors"] != b["model-00002-of-00003.safetensors"]


def test_rank_slices_cover_the_data_exactly(model):
    path = list_shards(model)[0]
    assert read_slice(path, 0, 2) + read_slice(path, 1, 2) == 1 << 20
    assert sum(read_slice(path, r, 3) for r in range(3)) == 1 << 20


def test_bad_arguments_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        make_model.main(["--out", str(tmp_path / "x"), "--shards", "0", "--shard-mb", "1"])
    assert exc.value.code == 2
    assert "--shards must be >= 1" in capsys.readouterr().err
