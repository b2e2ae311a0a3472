# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model files for tests: safetensors written by hand, as the format defines them (an 8-byte little-endian
header length, the JSON header, then the tensor bytes), and model directories made of such shards.

The one writer for the unit tests, the lab tests, the integration tests and bench/model_sync.py. Standard library only, so it
also runs as a program on a lab host (see ``main``):

    python3 model_files.py ROOT SHARDS SHARD_BYTES [MODEL_TYPE [STEP [keep]]]
"""

from __future__ import annotations

import json
import os
import struct
import sys


def encode(header, data=b"", pad=True):
    """A safetensors file's bytes: ``header`` (a dict) as JSON, padded with spaces to 8-byte alignment as
    writers do (``pad=False`` leaves it as is), then ``data``."""
    raw = json.dumps(header).encode("utf-8")
    if pad:
        raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def tensors_file(tensors, metadata=None, pad=True):
    """The bytes of a file holding ``tensors``, {name: (dtype, shape, bytes)} in order."""
    header = {"__metadata__": dict(metadata)} if metadata is not None else {}
    blobs, offset = [], 0
    for name, (dtype, shape, blob) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    return encode(header, b"".join(blobs), pad=pad)


def write_safetensors(path, tensors, metadata=None, pad=True):
    """Write ``tensors`` ({name: (dtype, shape, bytes)}) to ``path`` as a safetensors file."""
    with open(path, "wb") as handle:
        handle.write(tensors_file(tensors, metadata=metadata, pad=pad))
    return path


def shard_name(i, shards):
    return "model-%05d-of-%05d.safetensors" % (i, shards)


def write_model(root, shards, shard_bytes, model_type="test", step=4096, keep=False):
    """A model directory: config.json, ``shards`` one-tensor shards of random F8 bytes (shard i holds
    ``shard_bytes - i * step`` bytes, so no two are alike) and the index naming them. The tensor bytes are written
    in pieces, so a shard of gigabytes (bench/model_sync.py) needs no more memory than one piece. ``keep`` leaves a
    shard that already has its size (a bench run re-uses the last run's model); shards of another shard count are
    removed."""
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "config.json"), "w") as handle:
        json.dump({"model_type": model_type}, handle)
    weight_map = {}
    for i in range(1, shards + 1):
        name = shard_name(i, shards)
        path = os.path.join(root, name)
        n = shard_bytes - i * step
        head = encode({"w%d" % i: {"dtype": "F8_E4M3", "shape": [n], "data_offsets": [0, n]}}, pad=False)
        weight_map["w%d" % i] = name
        if keep and os.path.isfile(path) and os.path.getsize(path) == len(head) + n:
            continue
        with open(path, "wb") as handle:
            handle.write(head)
            left = n
            while left:
                piece = min(left, 8 << 20)
                handle.write(os.urandom(piece))
                left -= piece
    with open(os.path.join(root, "model.safetensors.index.json"), "w") as handle:
        json.dump({"weight_map": weight_map}, handle)
    for name in os.listdir(root):
        if name.endswith(".safetensors") and name not in weight_map.values():
            os.unlink(os.path.join(root, name))
    return root


def main(argv):
    """ROOT SHARDS SHARD_BYTES [MODEL_TYPE [STEP [keep]]]: write the model, then print each file's size and name."""
    root, shards, size = argv[0], int(argv[1]), int(argv[2])
    write_model(root, shards, size, model_type=argv[3] if len(argv) > 3 else "test",
                step=int(argv[4]) if len(argv) > 4 else 4096, keep=len(argv) > 5 and argv[5] == "keep")
    for name in sorted(os.listdir(root)):
        print("%d %s" % (os.path.getsize(os.path.join(root, name)), name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
