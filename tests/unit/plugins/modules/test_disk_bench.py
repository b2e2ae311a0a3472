"""disk_bench on real files: what it reads, where it stops, what it refuses."""

from __future__ import annotations

import os

import pytest

from ansible_collections.sparkfleet.vllm.plugins.modules import disk_bench


@pytest.fixture
def model(tmp_path):
    d = tmp_path / "model"
    (d / "sub").mkdir(parents=True)
    for i, size in enumerate((3 << 20, 2 << 20, 1 << 20)):
        (d / ("model-%05d.safetensors" % i)).write_bytes(os.urandom(size))
    (d / "config.json").write_text("{}")
    (d / "sub" / "empty").write_bytes(b"")
    return d


def test_reads_every_file_largest_first(run_module, model):
    result = run_module(disk_bench, {"path": str(model), "block": 1 << 20}, check_mode=True)
    assert result.get("failed") is None, result
    assert result["bytes_read"] == result["bytes_total"] == (6 << 20) + 2
    assert result["files_read"] == result["files_total"] == 4  # the empty file is not a file to read
    assert result["stopped_by"] == "end" and result["cold"] is True and result["gbps"] > 0
    assert result["changed"] is False
    assert [os.path.basename(p) for p, _s in disk_bench.model_files(str(model))][0] == "model-00000.safetensors"


def test_stops_at_max_bytes(run_module, model):
    result = run_module(disk_bench, {"path": str(model), "max_bytes": 1 << 20, "threads": 1, "block": 1 << 19})
    assert result["stopped_by"] == "max_bytes" and result["bytes_read"] == 1 << 20


def test_stops_at_the_time_limit():
    ticks = iter(range(1000))
    files = [(__file__, os.path.getsize(__file__))]
    got, _secs, _n, stopped, _errors = disk_bench.read_files(files, 1 << 40, 0.5, 1, 64, True, clock=ticks.__next__)
    assert stopped == "seconds" and got == 64


@pytest.mark.parametrize("path, message", [
    ("/", "is a system directory"),
    ("/etc/", "is a system directory"),
    ("/nonexistent/model", "is not a directory on this node"),
])
def test_refuses_what_is_not_a_model_directory(run_module, path, message):
    result = run_module(disk_bench, {"path": path})
    assert result["failed"] and message in result["msg"]


def test_an_empty_directory_is_refused(run_module, tmp_path):
    result = run_module(disk_bench, {"path": str(tmp_path)})
    assert result["failed"] and "holds no file to read" in result["msg"]
