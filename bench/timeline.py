#!/usr/bin/env python3
"""Benchmark B7 (on paper): the expected first deploy and launch-to-ready on two DGX Sparks, from stated inputs.

    .venv/bin/python bench/timeline.py [--json]

No lab and no hardware: every input is a figure with its source (/work/shared/DOMAIN.md sections 1, 6 and 9, and
this lab's measured ratios in bench/RESULTS.md). It prints each phase with a low and a high estimate and the sum;
target (issue 8): launch-to-ready <= 4 min. Change an input here when a measurement on real Sparks replaces it.
"""

from __future__ import annotations

import json
import sys

GB = 1e9
MODEL_BYTES = 119 * GB        # Qwen3.5-122B-A10B-FP8 on disk (DOMAIN 1)
SHARDS = 39                   # 39-53 safetensors files (DOMAIN 1)

# (phase, low s, high s, how, source)
INPUTS = [
    ("model_sync: 119 GB head -> worker",
     MODEL_BYTES / (4.0 * GB), MODEL_BYTES / (1.6 * GB),
     "tcp transport, 4 sendfile streams, SHA-256 on both ends overlapped with the sending: bound by the slower "
     "of the disks (4-6 GB/s read) and 4 threads per end hashing with the Armv8 SHA-2 instructions (~0.4-1 GB/s "
     "each on a GB10 core, kept from the BLAKE2b estimate; assumed, not measured); the operators' single rsync "
     "stream did 0.64 GB/s = 186 s",
     "DOMAIN 1 (640 MB/s, 119 GB), DOMAIN 6 (disks 4-6 GB/s, link ~23.7 GB/s)"),
    ("page-cache drop of the synced files", 1, 5,
     "posix_fadvise DONTNEED per file on both nodes (model_sync_drop_cache), so the loader does not fight a full "
     "page cache for the GPU's memory", "DOMAIN 6"),
    ("ray_cluster: Ray on both nodes, objects moved both ways", 10, 30,
     "two container starts and a probe", "lab: the ray_cluster phase in bench/RESULTS.md (B6)"),
    ("vllm_serve: engine init and placement", 10, 20, "Ray placement of 2 bundles, NCCL init over the CX7 twins",
     "DOMAIN 6: 2-node GB10 restart measured at 122 s in all"),
    ("weights: 119 GB, each rank its half", 40, 70,
     "eager (non-mmap) load from a cold page cache: 10x or more faster than the 18 s/shard mmap path "
     "(11.7 min / 10 = 70 s); ~60 GB per node at 4-6 GB/s is 10-15 s of disk, the rest CPU and GPU copies",
     "DOMAIN 6 (18 s/shard, 10x), DOMAIN 9 (0.17.x: --safetensors-load-strategy eager)"),
    ("profile run and KV cache", 5, 15, "one dummy forward pass", "DOMAIN 6 (restart 122 s in all)"),
    ("CUDA graph capture / torch.compile", 20, 130,
     "20 s with the compile caches kept on the host (vllm_serve_cache_dir mounted at /root/.cache), up to 130 s "
     "when they are empty (first run, or --rm without the volume)", "DOMAIN 6 (20-130 s), DOMAIN 9 (caches lost "
     "with --rm unless mounted)"),
    ("API up and first completion", 2, 5, "healthcheck's one-token completion", "lab"),
]
LAUNCH = {"vllm_serve: engine init and placement", "weights: 119 GB, each rank its half", "profile run and KV cache",
          "CUDA graph capture / torch.compile", "API up and first completion"}


def rows():
    out = []
    for name, low, high, how, src in INPUTS:
        out.append({"phase": name, "low_s": round(low), "high_s": round(high), "how": how, "source": src})
    return out


def main():
    r = rows()
    launch_low = sum(x["low_s"] for x in r if x["phase"] in LAUNCH)
    launch_high = sum(x["high_s"] for x in r if x["phase"] in LAUNCH)
    first_low = sum(x["low_s"] for x in r)
    first_high = sum(x["high_s"] for x in r)
    if "--json" in sys.argv:
        print(json.dumps({"rows": r, "launch": [launch_low, launch_high], "first": [first_low, first_high]}))
        return
    for x in r:
        print("%-55s %4d-%4d s  %s [%s]" % (x["phase"], x["low_s"], x["high_s"], x["how"], x["source"]))
    print("launch-to-ready (vllm serve started -> API answers): %d-%d s (%.1f-%.1f min); target <= 4 min"
          % (launch_low, launch_high, launch_low / 60.0, launch_high / 60.0))
    print("first deploy from model on the head to serving (sync + cluster + launch): %d-%d s (%.1f-%.1f min)"
          % (first_low, first_high, first_low / 60.0, first_high / 60.0))
    print("BENCH-JSON " + json.dumps({"bench": "B7", "rows": r, "launch": [launch_low, launch_high],
                                      "first": [first_low, first_high]}))


if __name__ == "__main__":
    main()
