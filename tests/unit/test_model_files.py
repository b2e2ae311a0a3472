"""tests/unit/support/model_files.py: the one safetensors writer of the tests and bench/model_sync.py."""

from __future__ import annotations

import os

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._safetensors import read_header
from ansible_collections.sparkfleet.vllm.tests.unit.support.model_files import shard_name, write_model


def test_a_written_model_is_what_the_format_and_the_index_say(tmp_path):
    write_model(str(tmp_path), 3, (8 << 20) + 4096 * 4, step=4096)   # shards larger than one written piece
    for i in range(1, 4):
        header = read_header(str(tmp_path / shard_name(i, 3)))
        assert header["tensor_names"] == ["w%d" % i] and header["data_bytes"] == (8 << 20) + 4096 * (4 - i)
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model-00001-of-00003.safetensors",
                                            "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors",
                                            "model.safetensors.index.json"]


def test_keep_leaves_a_shard_of_the_right_size_and_other_shard_counts_go(tmp_path):
    write_model(str(tmp_path), 2, 10000, step=100)
    first = (tmp_path / shard_name(1, 2)).read_bytes()
    write_model(str(tmp_path), 2, 10000, step=100, keep=True)
    assert (tmp_path / shard_name(1, 2)).read_bytes() == first          # kept: same random bytes
    write_model(str(tmp_path), 2, 10000, step=100)
    assert (tmp_path / shard_name(1, 2)).read_bytes() != first          # written again without keep
    write_model(str(tmp_path), 3, 10000, step=100, keep=True)
    assert not (tmp_path / shard_name(1, 2)).exists() and (tmp_path / shard_name(3, 3)).exists()
