# -*- coding: utf-8 -*-
"""scripts/fault-table.py: a partial run's rows replace only their own tests' rows, each keeping its run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fault-table.py"
HEAD = "| fault / bad input | expected | observed | verdict | test | run |\n|---|---|---|---|---|---|\n"


@pytest.fixture(scope="module")
def ft():
    spec = importlib.util.spec_from_file_location("fault_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table(tmp_path, name, *rows):
    path = tmp_path / name
    path.write_text("# Fault and bad-input table\n\nsome text\n\n" + HEAD + "".join("| %s |\n" % " | ".join(r) for r in rows))
    return path


def test_a_cell_keeps_an_escaped_pipe(ft):
    assert ft.split_row(r"| a \| b | c |") == [r"a \| b", "c"]


def test_a_partial_run_refreshes_its_rows_only_and_keeps_the_others_dated(ft, tmp_path):
    kept = ft.read_rows(table(tmp_path, "kept.md",
                              ["old fault", "x", "as expected", "pass", "t.py::a", "2026-12-01 02:05 UTC, 4b339ea"],
                              ["gone", "x", "as expected", "pass", "t.py::removed", "2026-12-01 02:05 UTC, 4b339ea"],
                              ["other", "y", "as expected", "pass", "t.py::b", "2026-12-01 02:05 UTC, 4b339ea"]))
    run = ft.read_rows(table(tmp_path, "run.md",
                             ["old fault", "x", "it broke", "FAIL", "t.py::a", "2026-12-02 07:00 UTC, 0123456789ab"]))
    rows, missing, dropped, refreshed = ft.merge(kept, run, ["t.py::a", "t.py::b", "t.py::c"])
    assert [r[3:] for r in rows] == [["FAIL", "t.py::a", "2026-12-02 07:00 UTC, 0123456789ab"],
                                     ["pass", "t.py::b", "2026-12-01 02:05 UTC, 4b339ea"]]
    assert missing == ["t.py::c"] and dropped == ["t.py::removed"] and refreshed == ["t.py::a"]
    text = ft.render(rows, missing)
    assert "- `t.py::c`" in text and "t.py::removed" not in text
    # what it writes reads back the same
    again = tmp_path / "again.md"
    again.write_text(text)
    assert list(ft.read_rows(again).values()) == rows


def test_a_table_without_the_run_column_is_refused(ft, tmp_path):
    old = tmp_path / "old.md"
    old.write_text("| fault / bad input | expected | observed | verdict | test |\n|---|---|---|---|---|\n"
                   "| f | e | o | pass | t.py::a |\n")
    with pytest.raises(SystemExit, match="columns"):
        ft.read_rows(old)


def test_the_bad_input_section_is_kept_apart_and_reads_back(ft, tmp_path):
    # Issue 17: unit tests marked bad_input fill a section of their own below the lab's table.
    faults = [["f", "x", "as expected", "pass", "t.py::a", "2026-12-01 02:05 UTC, 4b339ea"]]
    bad = [["served_model_name: [qwen, --host=0.0.0.0]", "refused", "spark-1: ... has the element", "pass",
            "tests/unit/x.py::t[a]", "2026-12-01 15:00 UTC, 1b4eddf"]]
    text = ft.render(faults, [], bad, ["tests/unit/x.py::t[b]"])
    kept = tmp_path / "kept.md"
    kept.write_text(text)
    assert list(ft.read_rows(kept).values()) == faults
    assert list(ft.read_rows(kept, "bad").values()) == bad
    assert text.index("## Bad input") > text.index("t.py::a") and "- `tests/unit/x.py::t[b]`" in text
