"""Issue 40.7: every parser of node output either reads it or refuses it with its own error (a ValueError, or the
module's declared error, which its module turns into a message) - never a Python crash (RecursionError on nested
JSON, TypeError on a JSON of the wrong shape, OverflowError on an enormous number ...), whatever the node printed.

The parsers are found by name (every one-argument parse* function of plugins/module_utils and its subpackages), so a
new one is covered.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import stat

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.sparkfleet.vllm.plugins import module_utils as mu
from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json


def _parsers():
    found = []
    # module_utils is grouped into subpackages (fabric/, sync/, ...): every module of every one.
    for info in pkgutil.walk_packages(mu.__path__, mu.__name__ + "."):
        if info.ispkg:
            continue
        mod = importlib.import_module(info.name)
        short = info.name.rsplit(".", 1)[-1]
        errors = tuple(c for _n, c in inspect.getmembers(mod, inspect.isclass)
                       if issubclass(c, Exception) and c.__module__ == mod.__name__)
        for name, fn in inspect.getmembers(mod, inspect.isfunction):
            if fn.__module__ != mod.__name__ or not name.startswith("parse"):
                continue
            required = [p for p in inspect.signature(fn).parameters.values() if p.default is p.empty]
            if len(required) == 1:
                found.append(pytest.param(fn, (ValueError,) + errors, id="%s.%s" % (short, name)))
    return found


PARSERS = _parsers()
JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                       lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                   max_size=4), max_leaves=20)
HOSTILE = [
    "", "\x00", "\udcff", "[" * 50000, '{"a":' * 50000, "9" * 5000, "-" + "9" * 400, "1e999", "-1e999", "nan",
    "\n" * 1000, "a\tb\tc\n" * 3, "1,2,3\n,,\n", '{"NodeID": [], "Resources": 5}', "[null]", "[[]]", '[{"ifname": 5}]',
    '{"start": {"connected": 5}, "end": []}', "0, 18446744073709551616 MiB, 1e400 MiB\n", "Mem: - - -",
    "[" + ",".join(["{}"] * 1000) + "]",
]


def test_the_parsers_are_found():
    names = {p.id for p in PARSERS}
    assert {"_ray.parse_probe_output", "_gpu.parse_gpus", "_gpu.parse_smi_table", "_rdma.parse_ip_addr_json",
            "_run_lock.parse_lock", "_image.parse_inspect"} <= names, names


def _reads_or_refuses(parse, allowed, text):
    try:
        parse(text)
    except allowed:
        pass


@pytest.mark.bad_input(name="a node's output a parser cannot read (nested JSON, enormous numbers, NUL, wrong shapes)",
                       expected="read, or refused with the parser's own error; never a Python crash")
@pytest.mark.parametrize("parse, allowed", PARSERS)
def test_hostile_output_is_read_or_refused(parse, allowed, observe):
    for text in HOSTILE + [json.dumps(v) for v in ([{"a": None}], {"": []}, [1e308, -0.0], {"nodes": {"x": 1}})]:
        _reads_or_refuses(parse, allowed, text)
    observe("%d hostile outputs: read or refused with %s" % (len(HOSTILE) + 4, "/".join(e.__name__ for e in allowed)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@pytest.mark.parametrize("parse, allowed", PARSERS)
@given(text=st.text(max_size=300) | JSONISH.map(json.dumps) | st.binary(max_size=200).map(
    lambda b: b.decode("utf-8", "surrogateescape")))
def test_any_output_is_read_or_refused(parse, allowed, text):
    _reads_or_refuses(parse, allowed, text)


@pytest.mark.bad_input(name="a FIFO, a device or an enormous file where a JSON file of the model or a node is read",
                       expected="refused by type or size, naming the file; the step never blocks")
@pytest.mark.parametrize("kind", ["fifo", "device", "enormous", "directory"])
def test_special_and_enormous_files_are_refused_not_read(tmp_path, kind, observe):
    path = tmp_path / "config.json"
    if kind == "fifo":
        os.mkfifo(path)            # opening it for reading would wait for a writer, for ever
    elif kind == "device":
        path = "/dev/zero"         # reading it would fill the memory
    elif kind == "enormous":
        with open(path, "wb") as fh:
            fh.truncate(_json.MAX_JSON_BYTES + 1)
    else:
        path.mkdir()
    with pytest.raises((ValueError, OSError)) as exc:
        _json.load_file(str(path))
    observe(str(exc.value))
    assert str(path) in str(exc.value) or kind == "directory"


def test_a_regular_json_file_is_read(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"architectures": ["Qwen3ForCausalLM"]}')
    assert _json.load_file(str(path)) == {"architectures": ["Qwen3ForCausalLM"]}
    assert stat.S_ISREG(os.stat(path).st_mode)


@pytest.mark.parametrize("text", ["[" * 100000, '{"a":' * 100000])
def test_nested_json_is_a_value_error_naming_what_was_read(text):
    with pytest.raises(ValueError, match="the probe's output nests JSON deeper"):
        _json.loads(text, "the probe's output")
