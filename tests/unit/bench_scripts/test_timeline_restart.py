"""bench/timeline.py's engine restart budget (issue 44 item 4): its arithmetic and that every phase says what the
collection does and where its figure comes from; no timings."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import sys

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench")

spec = importlib.util.spec_from_file_location("bench_timeline", os.path.join(BENCH, "timeline.py"))
tl = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tl)


def test_the_restart_phases_add_up_and_hold_the_measured_122_s():
    rows = tl.restart_rows()
    s = tl.restart_summary(rows)
    assert s["low_s"] == sum(r["low_s"] for r in rows) and s["high_s"] == sum(r["high_s"] for r in rows)
    assert s["measured_s"] == 122 and s["inside"] is (s["low_s"] <= 122 <= s["high_s"])
    assert s["largest"].startswith("weight load")
    assert all(r["low_s"] <= r["high_s"] and r["collection"] and r["source"] for r in rows)


def test_a_phase_that_moves_the_total_out_of_range_is_said(monkeypatch):
    slow = [("weight load, lazy mmap", 702, 702, "the default loader", "DOMAIN 6")]
    monkeypatch.setattr(tl, "RESTART", tl.RESTART + slow)
    assert tl.restart_summary(tl.restart_rows())["inside"] is False


def test_the_json_and_the_printed_table_carry_the_restart(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["timeline.py", "--json"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        tl.main()
    data = json.loads(out.getvalue())
    assert data["restart"]["rows"][0]["phase"].startswith("stop") and data["restart"]["measured_s"] == 122
    monkeypatch.setattr(sys, "argv", ["timeline.py"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        tl.main()
    text = out.getvalue()
    assert "restart expected: %d-%d s" % (data["restart"]["low_s"], data["restart"]["high_s"]) in text
    bench = json.loads(text.splitlines()[-1][len("BENCH-JSON "):])
    assert bench["bench"] == "B7" and bench["restart"]["high_s"] == data["restart"]["high_s"]
