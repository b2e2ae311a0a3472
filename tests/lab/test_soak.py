"""bench/soak.py's bookkeeping: the fault plan, when a fault counts as healed, the per-fault figures, status.yml's
agreement with the requests and the model comparison (no lab needed)."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


@pytest.fixture(scope="module")
def soak():
    spec = importlib.util.spec_from_file_location("soak_bench", SOAK)
    mod = importlib.util.module_from_spec(spec)
    sys.dont_write_bytecode, saved = True, sys.dont_write_bytecode
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.dont_write_bytecode = saved
    return mod


def ok(t, dt=0.1):
    return [t, dt, "ok"]


def bad(t, dt=10.0, what="timeout"):
    return [t, dt, what]


def test_every_kind_comes_once_before_any_comes_twice(soak):
    kinds = list(soak.KINDS)
    got = soak.plan(kinds, 12, random.Random(3))
    assert sorted(got[:len(kinds)]) == sorted(kinds)
    assert len(got) == 12 and set(got[len(kinds):]) <= set(kinds)


def test_healed_needs_a_run_of_good_answers_after_the_fault(soak):
    rows = [ok(0), ok(1), bad(100), bad(101), ok(130), ok(131), bad(140), ok(150)] + [ok(150 + i) for i in range(1, 80)]
    assert soak.healed_since(rows, 99, hold=60) == pytest.approx(150.1)
    assert soak.healed_since(rows[:8], 99, hold=60) is None


def test_fault_figures_from_the_request_log(soak):
    f1 = soak.Fault(1, "kill-engine", "spark-1", 0)
    f1.t_start, f1.t_end = 100.0, 101.0
    f2 = soak.Fault(2, "pause-engine", "spark-1", 300)
    f2.t_start, f2.t_end = 300.0, 300.5
    rows = ([ok(t) for t in range(90, 100)] + [bad(t, 1.0, "refused") for t in range(100, 130)]
            + [ok(t) for t in range(130, 300)] + [bad(t) for t in range(300, 400)])
    s1, s2 = soak.fault_stats([f1, f2], rows, end=400.0)
    assert (s1["requests"], s1["failed"], s1["kinds"]) == (200, 30, ["refused"])
    assert s1["recovery_s"] == pytest.approx(130.1 - 101.0)
    assert s2["failed"] == 100 and s2["recovery_s"] is None      # never came back before the end


def test_a_fault_served_through_has_no_recovery_time(soak):
    f = soak.Fault(1, "fabric-flap-head", "spark-1", 0)
    f.t_start, f.t_end = 10.0, 50.0
    (s,) = soak.fault_stats([f], [ok(t) for t in range(0, 100)], end=100.0)
    assert s["failed"] == 0 and s["recovery_s"] == 0.0


def test_status_samples_against_the_requests(soak):
    rows = [ok(t) for t in range(0, 50)] + [bad(t, 1.0, "refused") for t in range(50, 100)]
    got = soak.agreement([[10, 20, 0], [60, 70, 2], [60, 70, 0], [10, 20, 2], [45, 56, 0]], rows)
    assert [(a[3], a[4]) for a in got] == [(True, True), (False, True), (False, False), (True, False), (None, True)]


def test_model_bytes_lost_or_changed(soak):
    ref = {"./a.safetensors": (100, "aa"), "./b.safetensors": (50, "bb"), "./config.json": (5, "cc")}
    nodes = {"spark-1": dict(ref),
             "spark-2": {"./a.safetensors": (100, "xx"), "./config.json": (5, "cc"), "./.sparkfleet-model": (0, "e")}}
    assert soak.compare_models(ref, nodes) == {
        "spark-1": {"files": 3, "bytes_lost": 0, "bytes_changed": 0},
        "spark-2": {"files": 3, "bytes_lost": 50, "bytes_changed": 100}}


def test_failures_just_before_the_next_fault_and_human_steps(soak):
    f1 = soak.Fault(1, "kill-engine", "spark-1", 0)
    f1.t_start, f1.t_end = 0.0, 1.0
    f2 = soak.Fault(2, "kill-gcs", "spark-1", 300)
    f2.t_start, f2.t_end, f2.human, f2.settled_at = 300.0, 301.0, [["site.yml", 500, 0, 601]], 640.0
    rows = ([bad(t, 1.0) for t in range(0, 20)] + [ok(t) for t in range(20, 295)] + [bad(t) for t in range(295, 300)]
            + [bad(t, 1.0) for t in range(300, 700)] + [ok(t) for t in range(700, 720)])
    s1, s2 = soak.fault_stats([f1, f2], rows, end=720.0)
    assert s1["recovery_s"] == pytest.approx(20.1 - 1.0)       # the next fault's victims do not count for it
    assert s2["recovery_s"] == pytest.approx(640.0 - 301.0)    # the soak's own observation when a human stepped in
