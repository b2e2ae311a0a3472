#!/usr/bin/env python3
"""Benchmark B5: model_sync to 1 and to 3 workers on the 4-node lab; the time ratio beside the linear figure.

    SPARKLAB_NAME=perf lab/labctl up --hosts 4 && .venv/bin/python bench/fanout.py [--shape 1gbit]

Run as root from the repo root. The same generated model as bench/model_sync.py goes from spark-1 to spark-2, then
(every worker emptied) to spark-2, spark-3 and spark-4 in one run: model_sync fans out as a tree (a finished
worker feeds the next), so 3 workers take 2 rounds. "linear" is the head sending every copy itself over its one
link: 3.00x. Target (issue 8): <= 2.2x. With --shape the fabric is capped by tbf first (each host's egress), which
makes the link, not this 2-core machine's CPU, the bound, as on real Sparks. Prints one BENCH-JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_sync as b  # noqa: E402  (bench/model_sync.py: lab helpers)

WORKERS = ["spark-2", "spark-3", "spark-4"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=2200)  # 40 uneven shards: >= 2 GB in all
    ap.add_argument("--shards", type=int, default=40)
    ap.add_argument("--shape", default=None)
    args = ap.parse_args()
    if args.shape:
        b.sh(b.LABCTL, "shape", args.shape)
    try:
        files = b.setup(args.size_mb, args.shards, workers=WORKERS)
        total = sum(s for _n, s in files)
        print("machine: %s" % b.machine())
        print("model: %d files, %.1f MB; shape %s" % (len(files), total / 1e6, args.shape or "none"), flush=True)
        rows = {}
        for n in (1, 3):
            b.clean(WORKERS)
            res = b.run_module([b.fabric_ip(w) for w in WORKERS[:n]])
            for w in WORKERS[:n]:
                if b.arrived(w) != total:
                    raise SystemExit("%s did not get the whole model" % w)
            rows[n] = {"transfer_seconds": res["transfer_seconds"], "seconds": res["seconds"],
                       "rounds": res["rounds"],
                       "transports": sorted(set(d["transport"] for d in res["destinations"].values()))}
            print("  %d worker(s): %.2f s transfer (%.2f s all), rounds %s, transport %s"
                  % (n, res["transfer_seconds"], res["seconds"], res["rounds"], rows[n]["transports"]), flush=True)
        b.clean(WORKERS)
    finally:
        if args.shape:
            b.sh(b.LABCTL, "shape", "off")
    ratio = rows[3]["transfer_seconds"] / rows[1]["transfer_seconds"]
    ratio_all = rows[3]["seconds"] / rows[1]["seconds"]
    print("ratio 3/1 workers %.2fx (whole run %.2fx); linear head-only 3.00x; tree ideal 2.00x" % (ratio, ratio_all))
    print("BENCH-JSON " + json.dumps({"bench": "B5", "shape": args.shape, "bytes": total, "rows": rows,
                                      "ratio": round(ratio, 2), "ratio_all": round(ratio_all, 2), "linear": 3.0}))


if __name__ == "__main__":
    main()
