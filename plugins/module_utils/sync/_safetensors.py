# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Safetensors header checks without the safetensors package.

A safetensors file is: 8 bytes little-endian unsigned header length N, N bytes of UTF-8 JSON
(an object: tensor name -> {dtype, shape, data_offsets: [begin, end]}, plus an optional
``__metadata__`` map of strings), then the data buffer. Offsets are relative to the buffer; the
buffer must be covered exactly, with no hole and no overlap. Only the header is read, so checking
a 119 GB model costs kilobytes of I/O.
"""

from __future__ import annotations

import os
import struct

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json

# Same ceiling as the reference implementation: a larger length is corruption, not a header.
MAX_HEADER_BYTES = 100 * 1000 * 1000

# Bits per element; unknown dtypes are accepted without the size cross-check.
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64,
    "I64": 64, "U64": 64, "F64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


class SafetensorsError(ValueError):
    """The file is not a complete, well-formed safetensors file."""


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def parse_header_bytes(prefix, file_size):
    """Parse the 8-byte length and the JSON header from ``prefix`` (the file's first bytes).

    ``file_size`` is the size of the whole file on disk. Returns a summary dict
    ``{header_bytes, data_bytes, tensors, tensor_names, metadata}``. Raises SafetensorsError.
    """
    if file_size < 8 or len(prefix) < 8:
        raise SafetensorsError("file is %d bytes, shorter than the 8-byte header length" % file_size)
    (header_len,) = struct.unpack("<Q", prefix[:8])
    if header_len == 0:
        raise SafetensorsError("header length is 0")
    if header_len > MAX_HEADER_BYTES:
        raise SafetensorsError("header length %d exceeds %d bytes: not a safetensors file or corrupt"
                               % (header_len, MAX_HEADER_BYTES))
    if 8 + header_len > file_size:
        raise SafetensorsError("header length %d runs past the end of the %d-byte file (truncated)"
                               % (header_len, file_size))
    raw = prefix[8:8 + header_len]
    if len(raw) < header_len:
        raise SafetensorsError("could read only %d of %d header bytes" % (len(raw), header_len))
    try:
        header = _json.loads(raw.decode("utf-8"), "the header", MAX_HEADER_BYTES)
    except (UnicodeDecodeError, ValueError) as exc:
        raise SafetensorsError("header is not valid UTF-8 JSON: %s" % exc)
    if not isinstance(header, dict):
        raise SafetensorsError("header JSON is a %s, not an object" % type(header).__name__)

    data_bytes = file_size - 8 - header_len
    metadata = header.get("__metadata__")
    if metadata is not None and not (
            isinstance(metadata, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise SafetensorsError("__metadata__ must map strings to strings")

    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise SafetensorsError("tensor %r: entry is not an object" % name)
        dtype = info.get("dtype")
        shape = info.get("shape")
        offsets = info.get("data_offsets")
        if not isinstance(dtype, str):
            raise SafetensorsError("tensor %r: dtype missing or not a string" % name)
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise SafetensorsError("tensor %r: shape must be a list of non-negative integers" % name)
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(_is_int(o) for o in offsets)):
            raise SafetensorsError("tensor %r: data_offsets must be [begin, end] integers" % name)
        begin, end = offsets
        if begin < 0 or end < begin:
            raise SafetensorsError("tensor %r: data_offsets [%d, %d] are inverted or negative"
                                   % (name, begin, end))
        if end > data_bytes:
            raise SafetensorsError("tensor %r: data ends at %d but the file holds only %d data bytes (truncated)"
                                   % (name, end, data_bytes))
        bits = DTYPE_BITS.get(dtype)
        if bits is not None:
            numel = 1
            for dim in shape:
                numel *= dim
            if (numel * bits) % 8 != 0 or (numel * bits) // 8 != end - begin:
                raise SafetensorsError("tensor %r: %s%s needs %s bytes, offsets span %d"
                                       % (name, dtype, shape, (numel * bits) / 8.0, end - begin))
        spans.append((begin, end, name))

    spans.sort()
    cursor = 0
    for begin, end, name in spans:
        if begin != cursor:
            what = "a hole" if begin > cursor else "an overlap"
            raise SafetensorsError("tensor %r starts at %d where %d was expected: %s in the data buffer"
                                   % (name, begin, cursor, what))
        cursor = end
    if cursor != data_bytes:
        raise SafetensorsError("tensors cover %d data bytes but the file holds %d (%s)"
                               % (cursor, data_bytes,
                                  "truncated" if cursor > data_bytes else "trailing bytes"))
    return {
        "header_bytes": header_len,
        "data_bytes": data_bytes,
        "tensors": len(spans),
        "tensor_names": sorted(name for _b, _e, name in spans),
        "metadata": metadata or {},
    }


def read_header(path):
    """Read and check the header of the safetensors file at ``path`` (reads only the header)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) == 8:
                (header_len,) = struct.unpack("<Q", prefix)
                if 0 < header_len <= MAX_HEADER_BYTES and 8 + header_len <= size:
                    prefix += handle.read(header_len)
    except (IOError, OSError) as exc:
        raise SafetensorsError("cannot read: %s" % exc)
    return parse_header_bytes(prefix, size)
