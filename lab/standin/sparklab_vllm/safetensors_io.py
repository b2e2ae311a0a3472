"""Read safetensors shards the way a rank does: validate the header, then really read its slice of the bytes.

The error type and texts are those of the safetensors library (its Rust extension raises
`safetensors._safetensors_rust.SafetensorError`), so a truncated or corrupted shard fails with the line users see from vLLM.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import types

from .formats import SAFETENSOR_ERRORS

DTYPE_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
MAX_HEADER = 100_000_000  # the safetensors library's limit


try:  # the real library, where installed (controller venv for tests): raise its own error type
    from safetensors import SafetensorError
except ImportError:  # the runtime image has no safetensors: an error type with the same name and texts
    class SafetensorError(Exception):
        pass

    # Tracebacks and Ray's pickled errors name it as the library does
    # (safetensors._safetensors_rust.SafetensorError); register that path so Ray can unpickle it in the driver.
    SafetensorError.__module__ = "safetensors._safetensors_rust"
    _pkg = types.ModuleType("safetensors")
    _pkg.__path__ = []
    _pkg.SafetensorError = SafetensorError
    _mod = types.ModuleType("safetensors._safetensors_rust")
    _mod.SafetensorError = SafetensorError
    sys.modules.setdefault("safetensors", _pkg)
    sys.modules.setdefault("safetensors._safetensors_rust", _mod)


def read_header(path):
    """Return (header dict without __metadata__, metadata, data_start, data_len); raise SafetensorError."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise SafetensorError(SAFETENSOR_ERRORS["short"])
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER:
            raise SafetensorError(SAFETENSOR_ERRORS["large"])
        if 8 + n > size:
            raise SafetensorError(SAFETENSOR_ERRORS["length"])
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError
    except (ValueError, UnicodeDecodeError) as exc:
        raise SafetensorError(SAFETENSOR_ERRORS["json"] % exc) from None
    metadata = header.pop("__metadata__", None) or {}
    data_len = size - 8 - n
    end = 0
    for name, info in header.items():
        try:
            start, stop = info["data_offsets"]
            count = 1
            for d in info["shape"]:
                count *= int(d)
            expect = count * DTYPE_SIZES[info["dtype"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise SafetensorError(SAFETENSOR_ERRORS["json"] % exc) from None
        if stop - start != expect:
            raise SafetensorError(SAFETENSOR_ERRORS["info"])
        end = max(end, stop)
    if end != data_len:
        raise SafetensorError(SAFETENSOR_ERRORS["incomplete"])
    return header, metadata, 8 + n, data_len


def read_slice(path, rank, world, chunk=8 << 20, on_chunk=None):
    """Validate the shard and read rank's 1/world of its data bytes; return the number of bytes read."""
    _header, _meta, start, data_len = read_header(path)
    lo = start + data_len * rank // world
    hi = start + data_len * (rank + 1) // world
    done = 0
    with open(path, "rb") as f:
        f.seek(lo)
        while lo + done < hi:
            buf = f.read(min(chunk, hi - lo - done))
            if not buf:
                raise SafetensorError(SAFETENSOR_ERRORS["incomplete"])
            done += len(buf)
            if on_chunk:
                on_chunk(done, hi - lo)
    return done


def list_shards(model_dir):
    """The shard files vLLM would load: those named by the index's weight_map, else every *.safetensors."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            names = sorted(set(json.load(f).get("weight_map", {}).values()))
    else:
        names = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    return [os.path.join(model_dir, n) for n in names]
