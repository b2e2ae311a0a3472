# -*- coding: utf-8 -*-
"""Every reader of a node's output or file goes through the bounded JSON reader (issue 40 item 7).

json.loads raises RecursionError on a few thousand '[' and the callers caught ValueError only; open() of a FIFO waits
for a writer for ever. Each converted site is fed both here, and a scan keeps new json.load calls from creeping in.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.vllm.plugins.filter import serving_cause, stale_stack
from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric import _allreduce
from ansible_collections.sparkfleet.vllm.plugins.module_utils.host import _firewall
from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu import _gpu_release
from ansible_collections.sparkfleet.vllm.plugins.module_utils.image import _image
from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine import _load_test
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync import (
    _model_sync,
    _safetensors,
)
from ansible_collections.sparkfleet.vllm.plugins.modules import qualify_facts, transfer_progress

ROOT = Path(__file__).resolve().parents[4]
NESTED = "[" * 100000 + "]" * 100000
NESTED_OBJ = '{"a": ' * 50000 + "1" + "}" * 50000


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(str(path))
    return str(path)


@pytest.mark.bad_input(name="nested JSON (100000 levels) in a node's output read by a probe, the firewall, a stream, "
                            "status.yml's markers", expected="skipped or named as unreadable; never a RecursionError")
def test_parsers_of_node_output_survive_nesting(observe):
    assert "error" in qualify_facts.parse_torch(NESTED)
    with pytest.raises(_image.ProbeError):
        _image.parse_probe(_image.PROBE_MARK + NESTED)
    assert _image.parse_progress(_image.PROGRESS_HEADER + NESTED + "\n") == {}
    assert _allreduce.parse(_allreduce.MARK + NESTED + "\n" + _allreduce.MARK + "[1]\n")["error"] is None
    assert _firewall.nft_input_drops(NESTED, "192.0.2.0/24") == []
    assert _firewall.nft_input_drops('{"nftables": 3}', "192.0.2.0/24") == []
    assert stale_stack.parse_record(NESTED) == {"units": [], "containers": []}
    assert serving_cause._model_manifest(NESTED_OBJ, "spark-2") == []
    assert serving_cause._events(NESTED + "\n" + NESTED_OBJ) == []
    assert serving_cause._scheduler_stuck(NESTED, time.time()) is None
    assert serving_cause._escalation(NESTED_OBJ, time.time()) is None
    assert _load_test._error_text(b"HTTP/1.1 500 x\r\n\r\n" + NESTED_OBJ.encode()).startswith('{"a"')
    assert _load_test._error_text(b'HTTP/1.1 500 x\r\n\r\n{"error": {"message": "boom"}}') == "boom"
    observe("13 readers: each skipped the nested document or named it")


def test_a_safetensors_header_nested_deep_is_named_not_a_recursion_error():
    header = ("[" * 60000 + "]" * 60000).encode()
    prefix = len(header).to_bytes(8, "little") + header
    with pytest.raises(_safetensors.SafetensorsError, match="deeper"):
        _safetensors.parse_header_bytes(prefix, len(prefix) + 16)


def test_files_read_on_the_node_refuse_a_fifo_without_blocking(fifo, tmp_path):
    # a FIFO with no writer blocks an open() for ever: refused by type, before any open (a hang would never return)
    assert transfer_progress._job_ended(fifo) is False
    with pytest.raises(ValueError, match="not a regular file"):
        _model_sync._load_json(fifo)
    recorded = _gpu_release.record_stale(fifo, type("Plan", (), {"stale_units": [], "stale_containers": []})(),
                                         check_mode=True)
    assert recorded[0] is True
    nested = tmp_path / "config.json"
    nested.write_text(NESTED)
    with pytest.raises(ValueError, match="deeper"):
        _model_sync._load_json(str(nested))


# json.load/json.loads left in plugins/: each reads what the controller itself wrote (a probe's argv), or runs inside
# a self-contained script that catches RecursionError and bounds its read itself.
ALLOWED = {
    "plugins/module_utils/_json.py": "the bounded reader itself",
    "plugins/module_utils/image/_image.py": "the probe scripts' argv (the module's own JSON) and their own child's answer",
    "plugins/module_utils/ray/_ray.py": "the probe's argv: the module's own JSON",
    "plugins/module_utils/sync/_fast_copy.py": "FAST_SCRIPT's framed messages (<= 64 KiB, RecursionError caught) and its "
                                               "bounded request line and cache",
    "plugins/module_utils/sync/_content_hash.py": "HASH_SCRIPT's cache, bounded in the script",
    "plugins/module_utils/sync/_model_manifest.py": "standard library only on the nodes: bounded reads of its own",
    "plugins/module_utils/sync/_sync_shell.py": "standard library only on the workers: a bounded read of its own",
}


def test_no_unbounded_json_read_outside_the_known_scripts():
    found = []
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ALLOWED:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bjson\.loads?\(", line):
                found.append("%s:%d: %s" % (rel, number, line.strip()))
    assert found == []


def _role_file(name):
    import importlib.util
    import sys
    sys.dont_write_bytecode = True
    spec = importlib.util.spec_from_file_location("nw4_" + name, str(ROOT / "roles/sparkfleet/files" / (name + ".py")))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _node_readers():
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync import _model_manifest, _sync_shell
    return [_model_manifest.read_json_file, _sync_shell.read_json_file, _role_file("sparkfleet_memory").read_json_file]


@pytest.mark.bad_input(name="a FIFO, nested JSON or an oversized file where a script on the node reads its JSON "
                            "(manifest, sync key's allowed commands, memory reports)",
                       expected="refused by type, depth or size at once; never a hang or a RecursionError")
@pytest.mark.parametrize("index", range(3), ids=["sparkfleet_model.py", "sync_shell", "sparkfleet_memory.py"])
def test_node_scripts_read_json_files_bounded_by_type_and_depth(index, fifo, tmp_path, observe):
    read = _node_readers()[index]
    with pytest.raises(ValueError, match="not a regular file"):   # by type, before an open() that would block
        read(fifo)
    nested = tmp_path / "nested.json"
    nested.write_text(NESTED)
    with pytest.raises(ValueError, match="deeper"):
        read(str(nested))
    big = tmp_path / "big.json"
    big.write_text("[" + "0," * 600 + "0]")
    with pytest.raises(ValueError, match="more than"):
        read(str(big), limit=1000)
    assert read(str(big), limit=10000)[:2] == [0, 0]
    with pytest.raises(OSError):
        read(str(tmp_path / "absent"))
    observe("FIFO, nesting and size refused by ValueError (not a regular file, deeper than allowed, too large)")


def test_node_callers_turn_a_fifo_or_nesting_into_nothing(fifo, tmp_path):
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync import _model_manifest, _sync_shell
    nested = tmp_path / "nested.json"
    nested.write_text(NESTED)
    assert _model_manifest.load(fifo) is None
    assert _model_manifest.load(str(nested)) is None
    assert _model_manifest.cached_hashes(fifo, str(tmp_path), {}) == {}
    assert _role_file("sparkfleet_memory").load_json(fifo, default="none") == "none"
    assert _sync_shell.main([str(tmp_path), fifo]) == 126


@pytest.mark.parametrize("cache", ["fifo", "nested"])
def test_the_hash_script_ignores_a_cache_that_is_a_fifo_or_nested(cache, fifo, tmp_path):
    import json
    import subprocess
    import sys
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._content_hash import HASH_SCRIPT
    model = tmp_path / "model"
    model.mkdir()
    (model / "a.bin").write_bytes(b"abc")
    path = fifo
    if cache == "nested":
        path = str(tmp_path / "cache.json")
        Path(path).write_text(NESTED)
    out = subprocess.run([sys.executable, "-c", HASH_SCRIPT, str(model), path], input=b"a.bin\0",
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30, check=True)
    assert json.loads(out.stdout.decode())["a.bin"] == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
