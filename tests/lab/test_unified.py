"""The stand-in's unified memory (sparklab_vllm/unified.py, worker.py): vLLM 0.17.1's startup check against the
host's memory cgroup, the allocation sizing, and the leak file's lifecycle."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import pytest

from sparklab_vllm import unified
from sparklab_vllm.worker import RayWorkerWrapper

GiB = 1 << 30
MiB = 1 << 20


def _v1(d, limit, usage):
    d.mkdir(exist_ok=True)
    (d / "memory.limit_in_bytes").write_text("%d\n" % limit)
    (d / "memory.usage_in_bytes").write_text("%d\n" % usage)
    return d


def _v2(d, limit, usage):
    d.mkdir(exist_ok=True)
    (d / "memory.max").write_text(("%d\n" % limit) if limit is not None else "max\n")
    (d / "memory.current").write_text("%d\n" % usage)
    return d


def test_host_memory_reads_v1_and_v2_and_counts_page_cache_as_used(tmp_path):
    assert unified.host_memory(str(_v1(tmp_path / "a", 5 * GiB, 2 * GiB)), rule="free") == (3 * GiB, 5 * GiB)
    assert unified.host_memory(str(_v2(tmp_path / "b", 4 * GiB, 1 * GiB)), rule="free") == (3 * GiB, 4 * GiB)


def test_0_17_1_counts_clean_page_cache_as_free_and_the_later_rule_does_not(tmp_path, monkeypatch):
    # vLLM 0.17.1's mem_utils.py reads MemAvailable on compute capability 12.1; vllm#48140 (0.24) MemFree
    d = _v1(tmp_path / "a", 5 * GiB, 4 * GiB)
    (d / "memory.stat").write_text("cache 1\ntotal_cache %d\ntotal_active_file %d\ntotal_inactive_file %d\n"
                                   % (3 * GiB, GiB, 2 * GiB))
    monkeypatch.delenv("SPARKLAB_UMA_FREE", raising=False)
    assert unified.host_memory(str(d)) == (4 * GiB, 5 * GiB)
    monkeypatch.setenv("SPARKLAB_UMA_FREE", "free")
    assert unified.host_memory(str(d)) == (1 * GiB, 5 * GiB)


def test_no_files_or_no_limit_means_no_host_memory(tmp_path):
    assert unified.host_memory(str(tmp_path / "absent")) is None
    assert unified.host_memory(str(_v2(tmp_path / "b", None, GiB))) is None
    assert unified.host_memory(str(_v1(tmp_path / "c", 0x7FFFFFFFFFFFF000, GiB))) is None


def test_startup_check_is_vllm_0171s_text_and_rule():
    total = 5 * GiB
    free = int(1.5 * GiB)
    with pytest.raises(ValueError) as e:
        unified.request_memory(free, total, 0.5)
    # vllm/v1/worker/utils.py request_memory (0.17.1): figures shown as a GB10's (x 119.70 / 5)
    assert str(e.value) == (
        "Free memory on device cuda:0 (35.91/119.7 GiB) on startup is less than desired GPU memory utilization "
        "(0.5, 59.85 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")
    # the rule: free < ceil(total x utilization) refuses; equal passes
    requested = math.ceil(total * 0.5)
    assert unified.request_memory(requested, total, 0.5) == requested
    with pytest.raises(ValueError):
        unified.request_memory(requested - 1, total, 0.5)


def test_worker_checks_the_host_memory_in_init_and_falls_back_without_it(tmp_path, monkeypatch):
    w = RayWorkerWrapper()
    monkeypatch.setenv("SPARKLAB_HOSTMEM_DIR", str(tmp_path / "none"))
    assert w.check_free_memory(0.9) is None and w.hostmem is None
    # without the files: the constant GB10 figures, as before
    monkeypatch.setenv("SPARKLAB_PROFILE_SECONDS", "0")
    w.weights_bytes = 0
    assert w.determine_available_memory(0.5) == int((119.70 * 0.5 - 2.35) * (1 << 30))
    _v1(tmp_path / "hm", 4 * GiB, 3 * GiB)
    monkeypatch.setenv("SPARKLAB_HOSTMEM_DIR", str(tmp_path / "hm"))
    with pytest.raises(ValueError, match=r"^Free memory on device cuda:0 \(29.93/119.7 GiB\) on startup"):
        w.check_free_memory(0.3)
    assert w.check_free_memory(0.25) == GiB


def test_kv_cache_is_requested_less_weights_and_overhead_and_really_held(tmp_path, monkeypatch):
    total = 64 * MiB  # a small "host": the overhead (2.35 GiB of a GB10) scales with it
    over = int(2.35 * GiB * total / (119.70 * GiB))
    assert unified.kv_cache_bytes(40 * MiB, 8 * MiB, total) == 40 * MiB - 8 * MiB - over
    assert unified.kv_cache_bytes(MiB, 8 * MiB, total) == 0
    # the worker's footprint: weights + KV = requested - overhead, logged as a GB10's GiB
    _v1(tmp_path / "hm", total, 0)
    monkeypatch.setenv("SPARKLAB_HOSTMEM_DIR", str(tmp_path / "hm"))
    monkeypatch.setenv("SPARKLAB_PROFILE_SECONDS", "0")
    w = RayWorkerWrapper()
    w.requested = w.check_free_memory(0.5)
    w.weights_bytes = 8 * MiB
    w.held.append(unified.Allocation(w.weights_bytes))
    kv = w.determine_available_memory(0.5)
    held = sum(a.nbytes for a in w.held)
    assert held == w.requested - over
    assert kv == int(unified.to_gb10(w.requested - 8 * MiB - over, total))
    assert abs(kv / GiB - (119.70 * 0.5 - 119.70 * 8 / 64 - 2.35)) < 0.01
    w.release()
    assert w.held == []


def test_allocation_touches_every_page():
    before = _rss()
    a = unified.Allocation(64 * MiB)
    assert _rss() - before >= 60 * MiB
    a.close()


def _rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def test_leak_file_is_written_and_a_clean_release_removes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKLAB_UVM_DIR", str(tmp_path))
    assert unified.leak_mib() is None
    (tmp_path / "leak-mib").write_text("3\n")
    assert unified.leak_mib() == 3
    w = RayWorkerWrapper()
    w.leak_path = unified.create_leak(unified.leak_mib(), pid=1234, ident="abc")
    p = tmp_path / "rank-1234-abc"
    assert p.stat().st_size == 3 * MiB and os.stat(p).st_blocks * 512 >= 3 * MiB  # written, not a hole
    w.release()
    assert not p.exists()


def test_the_engines_clean_shutdown_releases_every_rank(tmp_path, monkeypatch):
    from sparklab_vllm.engine import EngineCore
    monkeypatch.setenv("SPARKLAB_UVM_DIR", str(tmp_path))
    (tmp_path / "leak-mib").write_text("1")
    core = EngineCore({}, 4096)
    core.start_local_worker()
    core.local.leak_path = unified.create_leak(1, ident="x")
    core.release()  # what engine_main does on the API server's "shutdown" (docker stop's SIGTERM)
    assert sorted(os.listdir(tmp_path)) == ["leak-mib"]


def test_a_sigkilled_rank_leaves_its_leak_file(tmp_path):
    (tmp_path / "leak-mib").write_text("2")
    code = ("import os, sys, time; sys.path.insert(0, %r)\n"
            "from sparklab_vllm import unified\n"
            "p = unified.create_leak(unified.leak_mib(), ident='t')\n"
            "print(p, flush=True); time.sleep(60)\n") % os.path.dirname(os.path.dirname(unified.__file__))
    env = dict(os.environ, SPARKLAB_UVM_DIR=str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    path = child.stdout.readline().strip()
    assert path == str(tmp_path / ("rank-%d-t" % child.pid))
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    time.sleep(0.1)
    assert os.path.getsize(path) == 2 * MiB
