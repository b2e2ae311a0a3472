#!/usr/bin/env python3
"""Issue 18: the outage budget of a chaos soak, from its recorded results (no lab needed).

For each soak result directory (bench/soak.py --out: faults.json, summary.json and, where kept, the head's
supervision-spark-1.jsonl) it prints, fault by fault, how long the fault itself held (link down, node down,
dockerd down), how long the API took to answer again after it ended, and whether the engine (sparkfleet-vllm on the
head) stopped within the fault's window. Then the run's figures against the >= 99 % target:

- the budget: 1 % of the run's seconds, and what that leaves per fault;
- the lab's floor: the faults' own seconds (the tensor-parallel engine spans both nodes, so nothing can answer while
  a node, its fabric or its dockerd is away), plus, per fault that stopped the engine, the fastest return of the API
  seen in the run (a lower bound on one engine restart on the lab at that load); the answered share that floor
  allows, beside the measured one;
- two DGX Sparks: the same faults with the engine restart measured on a 2-node GB10 pair (DOMAIN.md section 6:
  122 s), which no supervision can shorten.

Usage: .venv/bin/python bench/soak_budget.py [RESULT_DIR ...]   (default: every bench/soak-results/*/)
"""

import argparse
import glob
import json
import os
import sys

SPARK_ENGINE_RESTART_S = 122        # DOMAIN.md 6: a 2-node GB10 restart measured at 122 s in all
TARGET_PCT = 99.0
HERE = os.path.dirname(os.path.abspath(__file__))


def engine_stops(run_dir):
    """Times the head's sparkfleet-vllm stopped (its supervision log), or None where the run did not keep it."""
    path = os.path.join(run_dir, "supervision-spark-1.jsonl")
    if not os.path.exists(path):
        return None
    stops = []
    with open(path) as fh:
        for line in fh:
            e = json.loads(line)
            if e.get("unit") == "sparkfleet-vllm" and e.get("event") == "stopped":
                stops.append(e["time"])
    return stops


def budget(run_dir):
    """The run's faults and figures (a dict), from its files."""
    with open(os.path.join(run_dir, "faults.json")) as fh:
        faults = [f for f in json.load(fh) if f.get("injected")]
    with open(os.path.join(run_dir, "summary.json")) as fh:
        summary = json.load(fh)
    meta = summary.get("meta", {})
    duration = (meta.get("args") or {}).get("duration") or summary["requests"]
    stops = engine_stops(run_dir)
    rows = []
    for i, f in enumerate(faults):
        window_end = faults[i + 1]["t_start"] if i + 1 < len(faults) else meta.get("t_end", f["t_end"] + 600)
        back = f["settled_at"] - f["t_end"] if f.get("settled_at") else None
        stopped = None if stops is None else any(f["t_start"] - 1 <= t < window_end for t in stops)
        rows.append({"kind": f["kind"], "host": f["host"], "own_s": f["t_end"] - f["t_start"], "back_s": back,
                     "engine_stopped": stopped})
    backs = [r["back_s"] for r in rows if r["back_s"] is not None]
    # Unknown (no supervision log) counts as a restart; the fastest restart is taken over those faults only.
    restarted = [r for r in rows if r["engine_stopped"] is not False]
    restarts = len(restarted)
    own = sum(r["own_s"] for r in rows)
    fastest = min([r["back_s"] for r in restarted if r["back_s"] is not None] or [0.0])
    floor_s = own + restarts * fastest
    spark_s = own + restarts * SPARK_ENGINE_RESTART_S
    return {"dir": os.path.basename(os.path.normpath(run_dir)), "commit": meta.get("commit", "?"),
            "date": meta.get("date", "?"), "duration_s": duration, "faults": len(rows), "rows": rows,
            "answered_pct": summary["answered_pct"], "budget_s": duration * (100 - TARGET_PCT) / 100,
            "own_s": own, "back_s": sum(backs), "engine_restarts": restarts, "restarts_known": stops is not None,
            "fastest_back_s": fastest, "lab_floor_s": floor_s,
            "lab_ceiling_pct": 100.0 * max(0.0, 1 - floor_s / duration),
            "own_ceiling_pct": 100.0 * max(0.0, 1 - own / duration),
            "spark_outage_s": spark_s, "spark_ceiling_pct": 100.0 * max(0.0, 1 - spark_s / duration)}


def fmt(v, unit=" s"):
    return "-" if v is None else "%.0f%s" % (v, unit)


def report(b, out=sys.stdout):
    w = out.write
    w("== %s (commit %s, %s): %d s, %d faults, %.1f %% answered\n" % (
        b["dir"], b["commit"], b["date"], b["duration_s"], b["faults"], b["answered_pct"]))
    w("  %-20s %-8s %8s %9s  %s\n" % ("fault", "node", "own", "back", "engine stopped"))
    for r in b["rows"]:
        stopped = {True: "yes", False: "no", None: "not recorded"}[r["engine_stopped"]]
        w("  %-20s %-8s %8s %9s  %s\n" % (r["kind"], r["host"], fmt(r["own_s"]), fmt(r["back_s"]), stopped))
    per_fault = b["budget_s"] / b["faults"] if b["faults"] else b["budget_s"]
    w("  budget at %.0f %%: %.0f s of no answer in the run, %.1f s per fault\n" % (TARGET_PCT, b["budget_s"], per_fault))
    w("  the faults' own time: %.0f s = %.1fx the budget (ceiling %.1f %% even if every fault healed the instant"
      " it ended)\n" % (b["own_s"], b["own_s"] / b["budget_s"], b["own_ceiling_pct"]))
    w("  lab floor: own %.0f s + %d engine restart(s)%s x %.0f s (the fastest return seen) = %.0f s:"
      " ceiling %.1f %%, measured %.1f %% (%.1f points left for supervision to win)\n" % (
          b["own_s"], b["engine_restarts"], "" if b["restarts_known"] else " (not recorded: every fault counted)",
          b["fastest_back_s"], b["lab_floor_s"], b["lab_ceiling_pct"], b["answered_pct"],
          b["lab_ceiling_pct"] - b["answered_pct"]))
    w("  two DGX Sparks, same faults: own %.0f s + %d x %d s engine restart (DOMAIN.md 6) = %.0f s:"
      " ceiling %.1f %%; ratio of one engine restart to the per-fault budget %.0fx\n" % (
          b["own_s"], b["engine_restarts"], SPARK_ENGINE_RESTART_S, b["spark_outage_s"], b["spark_ceiling_pct"],
          SPARK_ENGINE_RESTART_S / per_fault))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="*", help="soak result directories (default: every bench/soak-results/*/)")
    ap.add_argument("--json", action="store_true", help="also print one BENCH-JSON line per run")
    args = ap.parse_args(argv)
    dirs = args.dirs or sorted(os.path.dirname(p) for p in glob.glob(os.path.join(HERE, "soak-results", "*",
                                                                                   "faults.json")))
    if not dirs:
        ap.error("no soak results found: give a directory bench/soak.py --out wrote")
    for d in dirs:
        if not os.path.exists(os.path.join(d, "faults.json")):
            ap.error("%s: no faults.json (not a bench/soak.py --out directory)" % d)
        b = budget(d)
        report(b)
        if args.json:
            print("BENCH-JSON " + json.dumps({k: v for k, v in b.items() if k != "rows"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
