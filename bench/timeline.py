#!/usr/bin/env python3
"""Benchmark B7 (on paper): the budget of a first deploy on two DGX Sparks, phase by phase, against the operators' day.

    .venv/bin/python bench/timeline.py [--json]

No lab and no hardware: every phase is a low and a high estimate from stated inputs, each with its source
(/work/shared/DOMAIN.md sections 1, 6 and 9, the README's estimates) and the lab ratio it uses (a figure measured
side by side on the lab, in bench/RESULTS.md), beside what the same phase took the operators by hand (DOMAIN 1).
It prints each phase, the launch-to-ready sum (target, issue 8: <= 4 min) and the first deploy's total against the
operators' day, then an engine restart (issue 44 item 4: 122 s measured) phase by phase with what the collection does
about each and the expected total. Change an input here when a measurement on real Sparks (or a new lab run) replaces it.
"""

from __future__ import annotations

import datetime
import json
import sys

GB = 1e9
MODEL_BYTES = 119 * GB        # Qwen3.5-122B-A10B-FP8 on disk (DOMAIN 1)
SHARDS = 39                   # 39-53 safetensors files; the operators' 18 s per shard was over 39 (DOMAIN 1)
IMAGE_BYTES = 20 * GB         # the README's estimate of the vLLM image ("a ~20 GB image"); not measured
SSH_STREAM = (0.4 * GB, 0.65 * GB)   # one rsync/ssh stream (DOMAIN 6)
DISKS = (4.0 * GB, 6.0 * GB)  # cold reads at depth (DOMAIN 6)
OPS_RSYNC_S = MODEL_BYTES / (0.64 * GB)   # the operators' rsync -avP --compress at ~640 MB/s (DOMAIN 1): 186 s
OPS_LOAD_S = 18 * SHARDS      # ~18 s per shard, mmap (DOMAIN 1, 6): 702 s

# Lab ratios the budget uses (bench/RESULTS.md; each taken side by side in one run on the lab).
LAB = {
    "b1": (3.07, "B1 2026-12-01 07:24 UTC: model_sync's whole first sync 3.07x the operators' `rsync -avP "
                 "--compress` (b/a, whole run), 2 GB, load 20-49 on 2 shared cores"),
    "b6": (121.1, "B6 2026-12-01 08:15 UTC: a cold deploy minus the stand-in's load, 121 s on the lab (its image, "
                  "sync, Ray and waits on 2 shared cores, load 13-20)"),
    "b3": (24.4, "B3 2026-12-01 08:26 UTC: a no-op re-run, 24.4 s on the idle lab machine (the tasks' fixed cost)"),
}

# (phase, low s, high s, operators' s or None, how, source, lab ratio used)
INPUTS = [
    ("image transfer: ~20 GB head -> worker", IMAGE_BYTES / SSH_STREAM[1], IMAGE_BYTES / SSH_STREAM[0],
     IMAGE_BYTES / SSH_STREAM[0],
     "`docker save | ssh docker load` over the fabric (the worker has no registry), one ssh stream, as the operators "
     "did; in site.yml it runs while the GPU is freed and the model syncs, so it overlaps the next rows (counted in "
     "full here)",
     "README (image ~20 GB, one ssh stream), DOMAIN 6 (0.4-0.65 GB/s), DOMAIN 9 (save | load)",
     "1.0x: the operators' own pipe (none measured apart)"),
    ("model sync: 119 GB head -> worker", MODEL_BYTES / DISKS[0], OPS_RSYNC_S / LAB["b1"][0], OPS_RSYNC_S,
     "tcp transport, 4 sendfile streams, SHA-256 on both ends overlapped with the sending. Low: the disks' 4 GB/s; "
     "high: the operators' 186 s divided by the lab's ratio (the lab's CPU-bound ratio is a lower bound on two "
     "Sparks with their own cores)",
     "DOMAIN 1 (640 MB/s, 119 GB), DOMAIN 6 (disks 4-6 GB/s)", "%.2fx (%s)" % LAB["b1"]),
    ("page-cache drop of the synced files", 1, 5, None,
     "posix_fadvise DONTNEED per file on both nodes, so the loader does not fight a full page cache for the GPU's "
     "memory", "DOMAIN 6", "none (a syscall per file)"),
    ("the collection's own tasks (preflight, GPU cleanup, Ray, waits, checks)", LAB["b3"][0], LAB["b6"][0], None,
     "low: the tasks' fixed cost (the lab's no-op re-run on an idle machine); high: the lab's cold deploy minus the "
     "stand-in's load, which still holds the lab's image load and sync on 2 shared cores",
     "lab (bench/RESULTS.md)", "1.0x of B3 and B6 (a Spark's cores are no slower than the lab's shared vCPUs)"),
    ("engine init and Ray placement", 10, 20, None, "Ray placement of 2 bundles, NCCL init over the CX7 twins",
     "DOMAIN 6 (a 2-node GB10 restart: 122 s in all)", "none (GPU and NCCL: the stand-in only stands in)"),
    ("weight load: 119 GB, each rank its half", 40, 70, OPS_LOAD_S,
     "eager (non-mmap) load from a cold page cache: 10x or more faster than the operators' 18 s/shard mmap path "
     "(702 s / 10 = 70 s); ~60 GB per node at 4-6 GB/s is 10-15 s of disk, the rest CPU and GPU copies",
     "DOMAIN 1 and 6 (18 s/shard, 10x), DOMAIN 9 (0.17.x: --safetensors-load-strategy eager)",
     "none (GPU: the stand-in's load is configured; B6 measures it beside the deploy)"),
    ("profile run and KV cache", 5, 15, None, "one dummy forward pass", "DOMAIN 6 (restart 122 s in all)",
     "none (GPU)"),
    ("CUDA graph capture / torch.compile", 20, 130, 130,
     "20 s with the compile caches kept on the host (vllm_serve_cache_dir mounted at /root/.cache), up to 130 s "
     "when they are empty (a first run)", "DOMAIN 6 (20-130 s), DOMAIN 9 (caches lost with --rm unless mounted)",
     "none (GPU)"),
    ("first token: the API up and a real completion", 2, 5, None,
     "healthcheck's one-token completion, then /v1/models, the Ray and NCCL proofs",
     "DOMAIN 6 (~27-40 tok/s single stream)", "1.0x (the lab's completion is the same HTTP call)"),
]
LAUNCH = {"engine init and Ray placement", "weight load: 119 GB, each rank its half", "profile run and KV cache",
          "CUDA graph capture / torch.compile", "first token: the API up and a real completion"}
# The operators' one working run (DOMAIN 1): rsync, then `sleep 600` blind, the load (~11.7 min) and graph capture,
# before any answer; the hours of trial before it (an older stack stopped by hand, SGLang, image grafts, Ray's IPs,
# an OOM kill) are not counted.
OPS_DAY = "many hours (DOMAIN 1: old stack stopped by hand, the model rsynced, SGLang and image grafts tried, Ray's " \
          "IPs fixed, an OOM kill found after a blind `sleep 600`)"


# An engine restart on two Sparks (restart.yml, or a watchdog's restart): measured at 122 s in all by the operators
# (DOMAIN 6); nothing published splits it. (phase, low s, high s, what the collection does about it, source)
RESTART = [
    ("stop: the engine's clean shutdown, the container gone", 2, 10,
     "`docker stop` through the unit (TimeoutStopSec=90 bounds it); a clean stop frees the ranks' unified memory "
     "(a SIGKILL leaks it on GB10: DOMAIN 11), so the unit never kills first",
     "DOMAIN 11 (leaks on kill); the unit file"),
    ("memory gate: free memory proven before the engine starts", 0, 5,
     "sparkfleet-must reads the node's free memory (MemAvailable as 0.17.1 reads it) against gpu_memory_utilization "
     "and waits for the GPU to be free, instead of a start that vLLM refuses or that wedges the host",
     "DOMAIN 11 (vllm#48140, #46307); README (the unified-memory gate)"),
    ("engine init and Ray placement", 10, 20,
     "Ray stays up across an engine restart (only the vLLM unit restarts): placement of 2 bundles and NCCL init over "
     "the CX7 twins", "DOMAIN 6 (122 s in all)"),
    ("weight load: 119 GB, each rank its half", 40, 70,
     "this range assumes the eager loader: vllm_serve_safetensors_load_strategy: eager (checked against the "
     "image's vLLM; the default, null, leaves vLLM's lazy mmap, DOMAIN's 18 s/shard, up to 702 s); model_sync "
     "drops the files it wrote from the page cache (DONTNEED) so the loader does not fight it for the GPU's memory; "
     "`--load-format fastsafetensors` needs the package in the image, which the flag check cannot prove",
     "DOMAIN 6 (18 s/shard mmap, 10x faster without), DOMAIN 9"),
    ("profile run and KV cache", 5, 15, "one dummy forward pass; nothing to cut", "DOMAIN 6"),
    ("CUDA graph capture / torch.compile", 20, 30,
     "the compile caches are kept on the host (sparkfleet_cache_dir mounted at /root/.cache, never recreated): a "
     "restart reuses them (130 s when empty: the first start only)", "DOMAIN 6 (20-130 s), DOMAIN 9"),
    ("API up and a real completion", 2, 5, "vllm_wait polls every second; healthcheck's one-token completion",
     "DOMAIN 6"),
]
RESTART_MEASURED_S = 122   # the operators' 2-node GB10 restart (DOMAIN 6)


def restart_rows():
    return [{"phase": n, "low_s": lo, "high_s": hi, "collection": how, "source": src}
            for n, lo, hi, how, src in RESTART]


def restart_summary(r):
    low, high = sum(x["low_s"] for x in r), sum(x["high_s"] for x in r)
    return {"low_s": low, "high_s": high, "measured_s": RESTART_MEASURED_S,
            "inside": low <= RESTART_MEASURED_S <= high,
            "largest": max(r, key=lambda x: x["high_s"])["phase"]}


def rows():
    out = []
    for name, low, high, ops, how, src, lab in INPUTS:
        out.append({"phase": name, "low_s": round(low), "high_s": round(high),
                    "operators_s": round(ops) if ops else None, "how": how, "source": src, "lab_ratio": lab})
    return out


def summary(r):
    launch = [sum(x[k] for x in r if x["phase"] in LAUNCH) for k in ("low_s", "high_s")]
    first = [sum(x[k] for x in r) for k in ("low_s", "high_s")]
    # the working run's machine time: the same image transfer, the rsync, the load, at least 20 s of graph capture
    ops_known = sum(x["operators_s"] or 0 for x in r) - 130 + 20
    return {"launch": launch, "first": first, "operators_run_s": round(ops_known), "operators_day": OPS_DAY}


def main():
    r = rows()
    s = summary(r)
    rr = restart_rows()
    rs = restart_summary(rr)
    if "--json" in sys.argv:
        print(json.dumps(dict(s, rows=r, restart=dict(rs, rows=rr))))
        return
    for x in r:
        print("%-62s %4d-%4d s  operators %5s  lab ratio: %s  [%s]" % (
            x["phase"], x["low_s"], x["high_s"], "%d s" % x["operators_s"] if x["operators_s"] else "-",
            x["lab_ratio"], x["source"]))
    print("launch-to-ready (vllm serve started -> a completion): %d-%d s (%.1f-%.1f min); target <= 4 min"
          % (s["launch"][0], s["launch"][1], s["launch"][0] / 60.0, s["launch"][1] / 60.0))
    print("first deploy, image and model on the head to a served completion: %d-%d s (%.1f-%.1f min); the operators' "
          "one working run took >= %d s (%.1f min) of machine time, their day %s"
          % (s["first"][0], s["first"][1], s["first"][0] / 60.0, s["first"][1] / 60.0, s["operators_run_s"],
             s["operators_run_s"] / 60.0, s["operators_day"]))
    print("\nan engine restart on two Sparks, phase by phase (the operators measured %d s in all; nothing published "
          "splits it):" % rs["measured_s"])
    for x in rr:
        print("  %-56s %3d-%3d s  %s  [%s]" % (x["phase"], x["low_s"], x["high_s"], x["collection"], x["source"]))
    print("restart expected: %d-%d s (%.1f-%.1f min); the measured %d s is %s this range; the largest phase: %s"
          % (rs["low_s"], rs["high_s"], rs["low_s"] / 60.0, rs["high_s"] / 60.0, rs["measured_s"],
             "inside" if rs["inside"] else "outside", rs["largest"]))
    print("BENCH-JSON " + json.dumps(dict(s, bench="B7", rows=r, restart=dict(rs, rows=rr), date=datetime.datetime.utcnow().strftime(
        "%Y-%m-%d %H:%M UTC"))))


if __name__ == "__main__":
    main()
