"""Safetensors header checks on real files written by hand (struct + json, as the format defines)."""

from __future__ import annotations

import json
import os
import struct

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._safetensors import (
    MAX_HEADER_BYTES,
    SafetensorsError,
    read_header,
)
from ansible_collections.sparkfleet.vllm.tests.unit.support.model_files import encode


def good_header():
    return {
        "__metadata__": {"format": "pt"},
        "model.embed.weight": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]},
        "model.layers.0.w": {"dtype": "F8_E4M3", "shape": [16, 4], "data_offsets": [64, 128]},
        "model.layers.0.w_scale": {"dtype": "F32", "shape": [1], "data_offsets": [128, 132]},
    }


@pytest.fixture
def write(tmp_path):
    def _write(blob, name="model-00001-of-00001.safetensors"):
        path = tmp_path / name
        path.write_bytes(blob)
        return str(path)
    return _write


def test_a_well_formed_file_parses(write):
    path = write(encode(good_header(), os.urandom(132)))
    info = read_header(path)
    assert info["tensors"] == 3
    assert info["data_bytes"] == 132
    assert info["tensor_names"] == ["model.embed.weight", "model.layers.0.w", "model.layers.0.w_scale"]
    assert info["metadata"] == {"format": "pt"}


def test_offsets_out_of_order_in_json_are_fine(write):
    header = good_header()
    ordered = {k: header[k] for k in reversed(list(header))}
    assert read_header(write(encode(ordered, bytes(132))))["tensors"] == 3


def test_empty_tensor_list_with_no_data(write):
    assert read_header(write(encode({"__metadata__": {}})))["tensors"] == 0


@pytest.mark.parametrize("cut, words", [
    (1, "truncated"),            # last data byte missing
    (100, "truncated"),          # most of the data gone
])
def test_truncated_data_is_caught(write, cut, words):
    blob = encode(good_header(), bytes(132))
    with pytest.raises(SafetensorsError, match=words):
        read_header(write(blob[:-cut]))


def test_truncated_inside_header(write):
    blob = encode(good_header(), bytes(132))
    with pytest.raises(SafetensorsError, match="runs past the end"):
        read_header(write(blob[:40]))


def test_shorter_than_length_prefix(write):
    with pytest.raises(SafetensorsError, match="shorter than the 8-byte"):
        read_header(write(b"\x01\x02\x03"))


def test_empty_file(write):
    with pytest.raises(SafetensorsError, match="0 bytes"):
        read_header(write(b""))


def test_absurd_header_length(write):
    with pytest.raises(SafetensorsError, match="exceeds"):
        read_header(write(struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{}"))


def test_big_endian_length_is_not_accepted(write):
    raw = json.dumps(good_header()).encode()
    with pytest.raises(SafetensorsError):
        read_header(write(struct.pack(">Q", len(raw)) + raw + bytes(132)))


def test_garbage_header_bytes(write):
    raw = b"\x00\xff" * 20
    with pytest.raises(SafetensorsError, match="not valid UTF-8 JSON"):
        read_header(write(struct.pack("<Q", len(raw)) + raw))


def test_header_json_not_an_object(write):
    with pytest.raises(SafetensorsError, match="not an object"):
        read_header(write(encode([1, 2, 3])))


def test_trailing_bytes_after_last_tensor(write):
    with pytest.raises(SafetensorsError, match="trailing bytes"):
        read_header(write(encode(good_header(), bytes(140))))


def test_hole_between_tensors(write):
    header = good_header()
    header["model.layers.0.w"]["data_offsets"] = [72, 136]
    header["model.layers.0.w_scale"]["data_offsets"] = [136, 140]
    with pytest.raises(SafetensorsError, match="hole"):
        read_header(write(encode(header, bytes(140))))


def test_overlapping_tensors(write):
    header = good_header()
    header["model.layers.0.w"]["data_offsets"] = [60, 124]
    header["model.layers.0.w_scale"]["data_offsets"] = [124, 128]
    with pytest.raises(SafetensorsError, match="overlap"):
        read_header(write(encode(header, bytes(128))))


def test_size_disagrees_with_dtype_and_shape(write):
    header = good_header()
    header["model.embed.weight"]["shape"] = [4, 9]  # 72 bytes of BF16, offsets span 64
    with pytest.raises(SafetensorsError, match="needs 72"):
        read_header(write(encode(header, bytes(132))))


def test_inverted_offsets(write):
    header = good_header()
    header["model.layers.0.w_scale"]["data_offsets"] = [132, 128]
    with pytest.raises(SafetensorsError, match="inverted"):
        read_header(write(encode(header, bytes(132))))


@pytest.mark.parametrize("entry", [
    {"shape": [1], "data_offsets": [0, 4]},
    {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]},
    {"dtype": "F32", "shape": [1], "data_offsets": [0]},
    {"dtype": "F32", "shape": [1], "data_offsets": [0, True]},
    {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]},
])
def test_malformed_tensor_entries(write, entry):
    with pytest.raises(SafetensorsError, match="tensor 't'"):
        read_header(write(encode({"t": entry}, bytes(4))))


def test_metadata_must_be_strings(write):
    with pytest.raises(SafetensorsError, match="__metadata__"):
        read_header(write(encode({"__metadata__": {"n": 1}})))


def test_unknown_dtype_skips_only_the_size_cross_check(write):
    header = {"t": {"dtype": "X9_NEW", "shape": [3], "data_offsets": [0, 5]}}
    assert read_header(write(encode(header, bytes(5))))["tensors"] == 1


def test_sub_byte_dtype_sizes(write):
    header = {"t": {"dtype": "F4", "shape": [2, 8], "data_offsets": [0, 8]}}
    assert read_header(write(encode(header, bytes(8))))["data_bytes"] == 8


def test_reads_only_the_header(write, monkeypatch):
    """A 119 GB model must not be read in full: the check reads 8 + header bytes per shard."""
    path = write(encode(good_header(), bytes(132)))
    reads = []
    real_open = open

    class Spy(object):
        def __init__(self, handle):
            self.handle = handle

        def read(self, n=-1):
            reads.append(n)
            return self.handle.read(n)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    monkeypatch.setattr("builtins.open", lambda p, mode="r": Spy(real_open(p, mode)))
    read_header(path)
    assert -1 not in reads and sum(reads) < 8 + 1024


def test_missing_file(tmp_path):
    with pytest.raises(SafetensorsError, match="cannot read"):
        read_header(str(tmp_path / "nope.safetensors"))
