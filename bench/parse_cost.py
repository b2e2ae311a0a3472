#!/usr/bin/env python3
"""B9: the vLLM log parser's cost grows linearly with its input (issue 43: measured here, never asserted in a test).

Two inputs, each parsed at size N and 2N in one run, interleaved, median of --repeat rounds:
  serving      a ready startup followed by N Engine-000 metric lines (the journal of a long-serving engine)
  adversarial  lines built to make backtracking patterns explode (the inputs of the unit test
               test_long_adversarial_lines_are_parsed), N characters each
Prints seconds per size and the ratio t(2N)/t(N): about 2 for a linear parser, about 4 for a quadratic pattern.
Before the patterns were bounded one 10 KB adversarial line took 257 s.

  .venv/bin/python bench/parse_cost.py [--lines 100000] [--chars 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))
from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine._vllm_log import VllmLogParser  # noqa: E402

FIXTURES = os.path.join(ROOT, "tests", "unit", "plugins", "modules", "fixtures", "vllm_wait")
METRIC = ("(APIServer pid=1) INFO 08-20 10:20:%02d [loggers.py:123] Engine 000: Avg prompt throughput: "
          "12.0 tokens/s, Avg generation throughput: 27.1 tokens/s, Running: 1 reqs, Waiting: 0 reqs\n")
ADVERSARIAL = ["a", " ", "0", ":", "a.", "(", "%", "|", "/", "(a=b, ", "a.safetensors ", "placement group ",
               "cudaMalloc ", "Tokenizer ", "1%|", "Loading ", "Capturing CUDA graph ", "Worker ", "[1;",
               "\x1b[", "ERROR 01-01 00:00:00 ", "(A) ", "ray::", "File \"", "tokenization_a.py "]
HEADS = ("", "ERROR 08-20 10:00:34 [core.py:700] ", "(RayWorkerWrapper pid=1, ip=1.2.3.4) ")


def _parse(text):
    p = VllmLogParser(stall_timeout=600)
    p.feed(text)
    p.finish()
    p.settle(final=True)
    return p.snapshot()


def serving(n):
    with gzip.open(os.path.join(FIXTURES, "ok_v1_010_ray.log.gz"), "rt", newline="", encoding="utf-8") as fh:
        head = fh.read()
    return [head + "".join(METRIC % (i % 60) for i in range(n))]


def adversarial(n):
    return [h + (u * (n // len(u) + 1))[:n] + " 5% / x\n" for u in ADVERSARIAL for h in HEADS]


def timed(texts):
    t0 = time.perf_counter()
    for text in texts:
        _parse(text)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=100000)
    ap.add_argument("--chars", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print("# B9 parse cost, %s, %s, python %s, load %s" % (
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), platform.node(), platform.python_version(),
        " ".join("%.1f" % x for x in os.getloadavg())))
    print("| input | N | t(N) s | t(2N) s | t(2N)/t(N) |")
    print("|---|---|---|---|---|")
    for name, make, n in (("serving lines", serving, a.lines), ("adversarial chars", adversarial, a.chars)):
        small, big = make(n), make(2 * n)
        ts, tb = [], []
        for _ in range(a.repeat):           # interleaved: the machine's load falls on both sizes alike
            ts.append(timed(small))
            tb.append(timed(big))
        s, b = statistics.median(ts), statistics.median(tb)
        print("| %s | %d | %.2f | %.2f | %.2f |" % (name, n, s, b, b / s if s else float("nan")))


if __name__ == "__main__":
    main()
