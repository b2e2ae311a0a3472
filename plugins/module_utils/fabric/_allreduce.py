# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An all-reduce across the nodes in the serving image (private to sparkfleet.vllm).

Every node runs SCRIPT in its Ray container at the same time (rank = the node's place in the cluster's node list, the
head first and the rendezvous there); each prints one ``MARK`` JSON line per message size and one at the end. The
figures follow nccl-tests' definitions (its doc/PERFORMANCE.md): algorithm bandwidth = bytes / time per operation,
bus bandwidth = algorithm bandwidth x 2(n-1)/n for an all-reduce over n ranks, so they compare with all_reduce_perf's
``busbw`` column. nccl-tests itself needs MPI to span nodes (one process per rank started by mpirun over ssh), which a
deployed cluster does not have; torch.distributed's NCCL backend calls the same ncclAllReduce.
"""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json

MARK = "SPARKFLEET_ALLREDUCE "

# Runs inside the container: argv = backend sizes(comma) iterations warmup timeout gloo_max_bytes (gloo runs the
# sizes up to it only); env MASTER_ADDR, MASTER_PORT,
# RANK, WORLD_SIZE. Values are zeros (the time does not depend on them); one small all-reduce checks the sum.
SCRIPT = r'''
import datetime, json, os, sys, time
MARK = "SPARKFLEET_ALLREDUCE "
def say(**kw):
    sys.stdout.write(MARK + json.dumps(kw) + "\n")
    sys.stdout.flush()
backend, sizes, iters, warmup, timeout = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
gloo_max = int(sys.argv[6])
try:
    import torch
    import torch.distributed as dist
except Exception as e:
    say(error="torch is not importable in the image: %s" % e)
    sys.exit(3)
cuda = torch.cuda.is_available()
if backend == "auto":
    backend = "nccl" if cuda else "gloo"
if backend == "nccl" and not cuda:
    say(error="backend nccl needs a CUDA GPU, and the image's torch sees none (torch %s)" % torch.__version__)
    sys.exit(3)
if backend == "gloo":
    sizes = sorted(set([s for s in sizes if s < gloo_max] + [gloo_max]))
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
url = "tcp://%s:%s" % (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
t0 = time.time()
dist.init_process_group(backend, init_method=url, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout))
device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
if backend == "nccl":
    torch.cuda.set_device(device)
def sync():
    if backend == "nccl":
        torch.cuda.synchronize()
say(init=True, backend=backend, rank=rank, world=world, init_s=round(time.time() - t0, 3), torch=torch.__version__,
    socket_ifname=os.environ.get("NCCL_SOCKET_IFNAME" if backend == "nccl" else "GLOO_SOCKET_IFNAME"))
for size in sizes:
    x = torch.zeros(max(size // 4, 1), dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(x)
    sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    sync()
    sec = (time.perf_counter() - start) / iters
    say(bytes=x.numel() * 4, seconds=sec)
    del x
y = torch.full((1024,), float(rank + 1), dtype=torch.float32, device=device)
dist.all_reduce(y)
sync()
say(done=True, correct=bool((y == world * (world + 1) / 2.0).all().item()))
dist.destroy_process_group()
'''


def sizes(min_bytes, max_bytes, factor):
    """Message sizes from min_bytes to max_bytes (both kept), each factor times the last; multiples of 4 bytes."""
    out = []
    size = max(int(min_bytes), 4)
    while size <= max_bytes:
        out.append(size - size % 4)
        size *= factor
    if not out or out[-1] != max_bytes - max_bytes % 4:
        out.append(max_bytes - max_bytes % 4)
    return sorted(set(out))


def bus_factor(world):
    """nccl-tests' all-reduce bus bandwidth factor 2(n-1)/n."""
    return 2.0 * (world - 1) / world if world > 0 else 0.0


def parse(text):
    """The script's MARK lines -> {backend, world, rank, init_s, socket_ifname, results: [{bytes, seconds, algbw_gbs,
    busbw_gbs}], correct, error}. GB/s are 10^9 bytes per second, as nccl-tests prints them."""
    out = {"backend": None, "world": None, "rank": None, "init_s": None, "torch": None, "socket_ifname": None,
           "results": [], "correct": None, "error": None, "done": False}
    for line in (text or "").splitlines():
        at = line.find(MARK)
        if at < 0:
            continue
        try:
            got = _json.loads(line[at + len(MARK):], "an all-reduce line")
        except ValueError:
            continue
        if not isinstance(got, dict):
            continue
        if got.get("error"):
            out["error"] = got["error"]
        elif got.get("init"):
            for key in ("backend", "world", "rank", "init_s", "torch", "socket_ifname"):
                out[key] = got.get(key)
        elif got.get("done"):
            out["done"] = True
            out["correct"] = got.get("correct")
        elif "bytes" in got and got.get("seconds"):
            alg = got["bytes"] / got["seconds"] / 1e9
            out["results"].append({"bytes": got["bytes"], "seconds": got["seconds"], "algbw_gbs": round(alg, 4),
                                   "busbw_gbs": round(alg * bus_factor(out["world"] or 0), 4)})
    return out
