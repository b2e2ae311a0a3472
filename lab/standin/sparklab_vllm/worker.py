"""The rank: a Ray actor named RayWorkerWrapper (so Ray prefixes its output as it does vLLM's workers).

Each rank holds /dev/nvidia0 open while alive, joins torch.distributed over gloo, reads its slice of every
shard, and all-reduces one tensor per request step. On a lab host (unified.py) it also runs vLLM 0.17.1's startup
free-memory check against the host's memory, really holds its weights and KV cache there (about
gpu_memory_utilization x the host's memory), and leaks what `labctl break leak` asks on an unclean exit.
"""

from __future__ import annotations

import datetime
import os
import sys
import time

from .formats import SAFETENSOR_ERRORS, WEIGHTS_BAR_DESC, Logger, ProgressBar
from .safetensors_io import SafetensorError, list_shards, read_slice
from . import unified

GiB = float(1 << 30)
GB10_TOTAL_GIB = 119.70


def _env_float(name, default):
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


class RayWorkerWrapper:
    """vLLM's name for the Ray worker actor; methods are called through execute_method like vLLM does."""

    def __init__(self, driver_env=None):
        # the driver's NCCL_*/UCX_*/VLLM_*/HF_* variables override the worker's own (ray_env.py)
        for k, v in (driver_env or {}).items():
            os.environ[k] = v
        self.rank = None
        self.world = None
        self.gpu_fd = None
        self.weights_bytes = 0
        self.transport = None
        self.pid = os.getpid()
        self.hostmem = None     # (free, total) of the host's pool at the startup check, on a lab host
        self.requested = 0      # vLLM's requested_memory (host bytes)
        self.held = []          # unified.Allocation: weights, KV cache
        self.leak_path = None

    def execute_method(self, method, *args, **kwargs):
        return getattr(self, method)(*args, **kwargs)

    def node_info(self):
        import ray
        if not ray.is_initialized():
            return {"ip": os.environ.get("VLLM_HOST_IP", "127.0.0.1"), "node_id": "", "pid": os.getpid(),
                    "actor_id": "", "worker_id": "", "env": {}}
        ctx = ray.get_runtime_context()
        return {"ip": ray.util.get_node_ip_address(), "node_id": ctx.get_node_id(), "pid": os.getpid(),
                "actor_id": ctx.get_actor_id(), "worker_id": ctx.get_worker_id(),
                "env": {k: v for k, v in os.environ.items() if k.startswith(("RAY_", "GLOO_", "NCCL_", "VLLM_"))}}

    # ---------------------------------------------------------------- device + rendezvous
    def init_device(self, rank, world, tp, init_method, gpu_memory_utilization=None):
        log = Logger("parallel_state.py")
        dev = os.environ.get("SPARKLAB_GPU_DEVICE", "/dev/nvidia0")
        try:
            self.gpu_fd = os.open(dev, os.O_RDWR)  # "holds the GPU" for nvidia-smi's process list
        except OSError:
            raise RuntimeError("No CUDA GPUs are available") from None
        mib = unified.leak_mib()
        if mib:  # the context's mappings, which a GB10 driver keeps after an unclean exit (labctl break leak)
            self.leak_path = unified.create_leak(mib)
        import torch.distributed as dist
        self.rank, self.world = rank, world
        log.info(1203, "world_size=%d rank=%d local_rank=0 distributed_init_method=%s backend=nccl",
                 world, rank, init_method)
        timeout = datetime.timedelta(seconds=_env_float("SPARKLAB_GLOO_TIMEOUT_S", 120))
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world, timeout=timeout)
        # the group every request step all-reduces in while `labctl break collective-hang` is armed (hang.py): its
        # waiting ranks block for as long as NCCL would, not the gloo timeout above (a collective call on every rank)
        from .hang import HANG_TIMEOUT_S
        self.hang_group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=HANG_TIMEOUT_S))
        from .nccl import init_comm
        self.transport = init_comm(rank, world)  # the NCCL communicator: its interface and NET/IB or NET/Socket
        log.info(1411, "rank %d in world size %d is assigned as DP rank 0, PP rank %d, PCP rank 0, TP rank %d, "
                 "EP rank %d", rank, world, rank // tp, rank % tp, rank)
        if gpu_memory_utilization is not None:  # the memory snapshot after NCCL's init, as in vLLM
            self.check_free_memory(gpu_memory_utilization)
        return True

    def check_free_memory(self, gpu_memory_utilization):
        """vLLM 0.17.1 init_device's MemorySnapshot + request_memory, after the distributed init (a lab host only)."""
        self.hostmem = unified.host_memory()
        if self.hostmem is None:
            return None
        free, total = self.hostmem
        self.requested = unified.request_memory(free, total, gpu_memory_utilization)
        return self.requested

    def release(self):
        """The engine's clean shutdown: memory and the leak file go (a SIGKILL or a crash never calls this)."""
        for a in self.held:
            a.close()
        self.held = []
        unified.release_leak(self.leak_path)
        self.leak_path = None
        return True

    # ---------------------------------------------------------------- weights
    def load_model(self, model, fault, fault_shard, bar_all_ranks, load_format="auto"):
        runner = Logger("gpu_model_runner.py")
        t0 = time.time()
        runner.info(3562, "Starting to load model %s...", model)
        if load_format == "fastsafetensors":
            # vLLM 0.17.1 parses --load-format fastsafetensors whatever the image holds; its weight iterator imports
            # the package only here, at load, so an image without it fails minutes into the start
            try:
                __import__("fastsafetensors")
            except ImportError as exc:
                raise ModuleNotFoundError("No module named 'fastsafetensors' (--load-format fastsafetensors needs "
                                          "the fastsafetensors package: %s)" % exc) from None
        shards = list_shards(model)
        if not shards:
            raise RuntimeError("Cannot find any model weights with `%s`" % model)
        per_shard = _env_float("SPARKLAB_SECONDS_PER_SHARD", 1.0)
        faulty = self.rank == self.world - 1
        pbar = ProgressBar(len(shards), WEIGHTS_BAR_DESC, sys.stdout) if (self.rank == 0 or bar_all_ranks) else None
        t_load = time.time()
        for i, path in enumerate(shards):
            start = time.time()
            if faulty and i == fault_shard:
                if fault == "crash_load":
                    sys.stdout.flush()
                    os._exit(1)
                if fault == "hang":
                    while True:
                        time.sleep(3600)
                if fault == "corrupt_shard":
                    raise SafetensorError(SAFETENSOR_ERRORS["incomplete"])
            self.weights_bytes += read_slice(path, self.rank, self.world)
            rest = per_shard - (time.time() - start)
            if rest > 0:
                time.sleep(rest)
            if pbar:
                pbar.update(1)
        if pbar:
            pbar.close()
        shown = self.weights_bytes
        if self.hostmem is not None:  # the weights live in the host's memory
            self.held.append(unified.Allocation(self.weights_bytes))
            shown = unified.to_gb10(self.weights_bytes, self.hostmem[1])
        loaded = time.time() - t_load
        Logger("default_loader.py").info(308, "Loading weights took %.2f seconds", loaded)
        runner.info(3659, "Model loading took %.4f GiB memory and %.6f seconds", shown / GiB,
                    time.time() - t0)
        return self.weights_bytes

    # ---------------------------------------------------------------- memory + graphs
    def determine_available_memory(self, gpu_memory_utilization):
        time.sleep(_env_float("SPARKLAB_PROFILE_SECONDS", 1.5))  # the profile run of a real engine
        if self.hostmem is not None:
            total = self.hostmem[1]
            kv_bytes = unified.kv_cache_bytes(self.requested, self.weights_bytes, total)
            self.held.append(unified.Allocation(kv_bytes))  # the KV cache, really in the host's memory
            kv = unified.to_gb10(kv_bytes, total) / GiB
            Logger("gpu_worker.py").info(375, "Available KV cache memory: %.2f GiB", kv)
            return int(kv * GiB)
        kv = GB10_TOTAL_GIB * gpu_memory_utilization - self.weights_bytes / GiB - 2.35
        kv = max(kv, 0.0)
        Logger("gpu_worker.py").info(375, "Available KV cache memory: %.2f GiB", kv)
        return int(kv * GiB)

    def capture_graphs(self, enforce_eager, gpu_memory_utilization, fault):
        from .formats import oom_would_kill
        oom = None
        in_ray = "ray" in sys.modules and sys.modules["ray"].is_initialized()
        if fault == "ray_oom_graph" and in_ray:  # only Ray's memory monitor kills workers
            kill, used, total, threshold = oom_would_kill(gpu_memory_utilization, os.environ)
            if kill:
                oom = self.node_info()
                oom.update(used_gb=used, total_gb=total, threshold=threshold)
        if enforce_eager:
            return {"oom": oom} if oom else {"secs": 0}
        t0 = time.time()
        seconds = _env_float("SPARKLAB_GRAPH_SECONDS", 2.0)
        for desc in ("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)", "Capturing CUDA graphs (decode, FULL)"):
            pbar = ProgressBar(51, desc, sys.stdout, weights=False) if self.rank == 0 else None
            for k in range(51):
                time.sleep(seconds / 2 / 51)
                if pbar:
                    pbar.update(1)
                if oom and k == 20:
                    # unified memory crosses Ray's threshold mid-capture; the raylet kills this worker
                    sys.stdout.flush()
                    return {"oom": oom}
            if pbar:
                pbar.close()
        secs = int(round(time.time() - t0))
        Logger("gpu_model_runner.py").info(4587, "Graph capturing finished in %d secs, took %.2f GiB", secs, 0.66)
        return {"secs": secs}

    # ---------------------------------------------------------------- serving
    def step(self, prompt, count):
        import torch
        import torch.distributed as dist
        from .formats import seed_ids
        from . import hang
        x = torch.tensor(seed_ids(prompt, self.rank, max(count, 1)), dtype=torch.int64)
        armed = hang.armed() and hang.fire()     # one hang per `labctl break collective-hang`
        if armed == "spin":
            sys.stdout.flush()
            hang.spin_barrier([False] * (self.world - 1))   # never returns: the peers wait in the all-reduce below
        dist.all_reduce(x, group=self.hang_group if armed else None)
        return x.tolist()[:count]
