"""bench/soak_budget.py on the soak results kept in the repo (real runs): its arithmetic, not timings."""

from __future__ import annotations

import importlib.util
import io
import json
import os

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench")
RUN = os.path.join(BENCH, "soak-results", "main-7b23cdb")

spec = importlib.util.spec_from_file_location("bench_soak_budget", os.path.join(BENCH, "soak_budget.py"))
sb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sb)


def test_a_recorded_run_adds_up():
    b = sb.budget(RUN)
    with open(os.path.join(RUN, "faults.json")) as fh:
        faults = json.load(fh)
    assert b["faults"] == 12 and b["duration_s"] == 3600
    assert b["budget_s"] == pytest.approx(36.0)
    assert b["own_s"] == pytest.approx(sum(f["t_end"] - f["t_start"] for f in faults))
    assert 135 < b["own_s"] < 150                       # three flaps, a reboot, dockerd down
    # The head's supervision log shows sparkfleet-vllm stopped after each of the 12 faults.
    assert b["restarts_known"] and b["engine_restarts"] == 12
    assert b["fastest_back_s"] == pytest.approx(min(f["settled_at"] - f["t_end"] for f in faults))
    assert b["lab_floor_s"] == pytest.approx(b["own_s"] + 12 * b["fastest_back_s"])
    assert b["answered_pct"] < b["lab_ceiling_pct"] < b["own_ceiling_pct"] < 99.0
    assert b["spark_outage_s"] == pytest.approx(b["own_s"] + 12 * 122)


def test_without_a_supervision_log_every_fault_counts_as_a_restart(tmp_path):
    for name in ("faults.json", "summary.json"):
        with open(os.path.join(RUN, name)) as src:
            (tmp_path / name).write_text(src.read())
    b = sb.budget(str(tmp_path))
    assert not b["restarts_known"] and b["engine_restarts"] == 12
    assert all(r["engine_stopped"] is None for r in b["rows"])
    out = io.StringIO()
    sb.report(b, out)
    assert "not recorded: every fault counted" in out.getvalue()


def test_a_fault_after_which_the_engine_ran_on_is_no_restart(tmp_path):
    with open(os.path.join(RUN, "faults.json")) as fh:
        faults = json.load(fh)
    for name in ("faults.json", "summary.json"):
        with open(os.path.join(RUN, name)) as src:
            (tmp_path / name).write_text(src.read())
    # Keep the log's stops for every fault but the first.
    with open(os.path.join(RUN, "supervision-spark-1.jsonl")) as fh:
        kept = [ln for ln in fh if not (json.loads(ln).get("unit") == "sparkfleet-vllm"
                                        and json.loads(ln)["time"] < faults[1]["t_start"])]
    (tmp_path / "supervision-spark-1.jsonl").write_text("".join(kept))
    b = sb.budget(str(tmp_path))
    assert b["rows"][0]["engine_stopped"] is False and b["engine_restarts"] == 11


def test_the_report_names_the_budget_and_both_ceilings():
    out = io.StringIO()
    sb.report(sb.budget(RUN), out)
    text = out.getvalue()
    assert "budget at 99 %: 36 s of no answer in the run, 3.0 s per fault" in text
    assert "the faults' own time: 142 s" in text and "lab floor:" in text and "two DGX Sparks" in text


def test_a_directory_without_results_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        sb.main([str(tmp_path)])
    assert "no faults.json" in capsys.readouterr().err


def test_the_fastest_restart_is_taken_over_faults_that_stopped_the_engine():
    # 4 Dec, live-restore on: docker restarted on the head, the engine ran on and answered 1 s after.
    b = sb.budget(os.path.join(BENCH, "soak-results", "main-64fc36a-liverestore"))
    docker = [r for r in b["rows"] if r["kind"] == "restart-docker"]
    assert docker and docker[0]["engine_stopped"] is False and docker[0]["back_s"] < 5
    assert b["engine_restarts"] == 11
    assert b["fastest_back_s"] == min(r["back_s"] for r in b["rows"] if r["engine_stopped"])
    assert b["fastest_back_s"] > 10
