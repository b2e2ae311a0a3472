#!/usr/bin/env python3
"""Merge a lab run's fault table (tests/output/fault-table.md) into the kept one (docs/fault-table.md).

Every row of the kept table is the last observation of one test marked `fault`, and its `run` column says when and
from which commit it was taken (tests/integration/conftest.py writes it on every row). A partial run (CI's, which
leaves out the tests marked `long`, or `scripts/faults.sh -k NAME`) therefore refreshes the rows of the tests it ran
and leaves every other row as old as it is: nothing in the table claims a newer run than the one that observed it.
Rows of tests that no longer exist are dropped; tests marked `fault` that no run has observed yet are listed under
the table. The order is pytest's collection order.

The "Bad input" section is kept the same way from the unit tests marked `bad_input` (one row per case: the input,
the refusal expected, the refusal seen), which every unit run writes to tests/output/bad-input-table.md.

Usage: scripts/fault-table.py [--run tests/output/fault-table.md] [--bad-input-run tests/output/bad-input-table.md]
                              [--into docs/fault-table.md] [--check]
  --check: write nothing; exit 1 if the kept table would change (a row dropped, added or refreshed).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["fault / bad input", "expected", "observed", "verdict", "test", "run"]
HEADER = """# Fault and bad-input table

Each row is the last observation of a lab test marked `fault`: what was injected, what a user must see, what the
test saw, its verdict, and the run that observed it (date and commit; `+changes`: the checkout had changes not yet
committed). CI refreshes the rows of the tests it runs (all but those marked `long`), `scripts/faults.sh` all of
them; `scripts/fault-table.py` merges a run's `tests/output/fault-table.md` into this file. Runs are on the
development machine's namespace lab (2 cores, no GPU; 2 lab hosts) unless a row says otherwise.
"""
BAD_INPUT = "## Bad input"
BAD_HEADER = """%s

Each row is the last observation of a unit test marked `bad_input`: one bad value of a variable, a filter argument or a
module option, the refusal a user must see, and the refusal the test saw (CI's unit stage refreshes every row). The
preflight play runs the same checks on every host before anything changes; the lab's bad-input rows are above.
""" % BAD_INPUT


def split_row(line):
    """The cells of a Markdown table row ('\\|' stays inside a cell)."""
    inner = line.strip()[1:-1] if line.strip().endswith("|") else line.strip()[1:]
    return [c.strip() for c in re.split(r"(?<!\\)\|", inner)]


def read_rows(path, section="fault"):
    """{test id: cells} from a fault table with the six columns; fails naming the file otherwise.

    section: "fault" reads the table before the "Bad input" heading, "bad" the one after it."""
    rows = {}
    text = Path(path).read_text(encoding="utf-8")
    before, _heading, after = text.partition("\n" + BAD_INPUT + "\n")
    text = before if section == "fault" else after
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    if not lines:
        return rows
    head = split_row(lines[0])
    if head != COLUMNS:
        sys.exit("%s: columns %s, expected %s (a table written before rows carried their run?)" % (path, head, COLUMNS))
    for line in lines[2:]:
        cells = split_row(line)
        if len(cells) != len(COLUMNS):
            sys.exit("%s: a row with %d cells instead of %d: %s" % (path, len(cells), len(COLUMNS), line[:200]))
        rows[cells[4]] = cells
    return rows


def fault_tests(marker="fault", where="tests/integration"):
    """The ids of the tests marked `fault`, in collection order (pytest --collect-only; no lab needed)."""
    p = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "pytest", "--collect-only", "-q", "-m", marker,
                        "-p", "no:cacheprovider", where], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, check=False)
    ids = [ln.strip() for ln in p.stdout.splitlines() if "::" in ln]
    if p.returncode != 0 or not ids:
        sys.exit("pytest could not list the fault tests (rc %d):\n%s%s" % (p.returncode, p.stdout[-2000:],
                                                                           p.stderr[-2000:]))
    return ids


def merge(kept, run, tests):
    """(rows in collection order, tests with no row, ids dropped, ids whose row comes from this run)."""
    rows, missing = [], []
    for test in tests:
        row = run.get(test) or kept.get(test)
        if row:
            rows.append(row)
        else:
            missing.append(test)
    dropped = sorted(set(kept) - set(tests))
    refreshed = [t for t in tests if t in run]
    return rows, missing, dropped, refreshed


def render(rows, missing, bad_rows=(), bad_missing=()):
    lines = [HEADER, "| %s |" % " | ".join(COLUMNS), "|%s" % ("---|" * len(COLUMNS))]
    lines += ["| %s |" % " | ".join(row) for row in rows]
    if missing:
        lines += ["", "Not observed by any run yet (%d):" % len(missing), ""]
        lines += ["- `%s`" % test for test in missing]
    if bad_rows or bad_missing:
        lines += ["", BAD_HEADER, "| %s |" % " | ".join(COLUMNS), "|%s" % ("---|" * len(COLUMNS))]
        lines += ["| %s |" % " | ".join(row) for row in bad_rows]
        if bad_missing:
            lines += ["", "Not observed by any run yet (%d):" % len(bad_missing), ""]
            lines += ["- `%s`" % test for test in bad_missing]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default=str(ROOT / "tests" / "output" / "fault-table.md"))
    ap.add_argument("--bad-input-run", default=str(ROOT / "tests" / "output" / "bad-input-table.md"))
    ap.add_argument("--into", default=str(ROOT / "docs" / "fault-table.md"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    run = read_rows(args.run) if Path(args.run).exists() else {}
    kept = read_rows(args.into) if Path(args.into).exists() else {}
    rows, missing, dropped, refreshed = merge(kept, run, fault_tests())
    bad_run = read_rows(args.bad_input_run) if Path(args.bad_input_run).exists() else {}
    bad_kept = read_rows(args.into, "bad") if Path(args.into).exists() else {}
    bad_rows, bad_missing, bad_dropped, bad_refreshed = merge(bad_kept, bad_run, fault_tests("bad_input", "tests/unit"))
    text = render(rows, missing, bad_rows, bad_missing)
    old = Path(args.into).read_text(encoding="utf-8") if Path(args.into).exists() else ""
    print("%d rows (%d from this run), %d tests not observed yet, %d dropped: %s"
          % (len(rows), len(refreshed), len(missing), len(dropped), ", ".join(dropped) or "none"))
    print("bad input: %d rows (%d from this run), %d not observed yet, %d dropped"
          % (len(bad_rows), len(bad_refreshed), len(bad_missing), len(bad_dropped)))
    if args.check:
        return 1 if text != old else 0
    Path(args.into).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
