"""The EngineCore process: joins Ray, places one GPU bundle per rank, starts the ranks, loads, serves steps.

Runs as a child of the API server (like vLLM V1's EngineCore_DP0) and talks to it over a pipe.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback

from . import __version__
from .formats import PG_WAIT_TIMEOUT, Logger, PrefixedStream, log_line, process_prefix, ray_oom_message



def _log_exception(fileinfo, lineno, message):
    text = message + "\n" + traceback.format_exc().rstrip("\n")
    sys.stdout.write(log_line("ERROR", fileinfo, lineno, text) + "\n")
    sys.stdout.flush()


def _open_port():
    s = socket.socket()
    s.bind(("", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _env_float(name, default):
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def _config_line(a, max_model_len):
    return (
        "Initializing a V1 LLM engine (v%s) with config: model='%s', speculative_config=%s, tokenizer='%s', "
        "skip_tokenizer_init=False, tokenizer_mode=%s, revision=None, tokenizer_revision=None, trust_remote_code=%s, "
        "dtype=torch.bfloat16, max_seq_len=%d, download_dir=None, load_format=%s, tensor_parallel_size=%d, "
        "pipeline_parallel_size=%d, data_parallel_size=1, disable_custom_all_reduce=%s, quantization=None, "
        "enforce_eager=%s, kv_cache_dtype=%s, device_config=cuda, seed=0, served_model_name=%s, "
        "enable_prefix_caching=%s, enable_chunked_prefill=True, pooler_config=None"
        % (__version__, a["model"], _speculative_shown(a.get("speculative_config")),
           a["tokenizer"] or a["model"], a["tokenizer_mode"], bool(a["trust_remote_code"]),
           max_model_len, a["load_format"], a["tensor_parallel_size"], a["pipeline_parallel_size"],
           bool(a["disable_custom_all_reduce"]), bool(a["enforce_eager"]), a["kv_cache_dtype"],
           a["served_model_name"][0], a["enable_prefix_caching"] is not False))


def _speculative_shown(spec):
    """How vLLM's engine config line shows the speculative config (None, or its method and token count)."""
    if not spec:
        return "None"
    return "SpeculativeConfig(method=%r, model=None, num_spec_tokens=%s)" % (
        spec.get("method"), spec.get("num_speculative_tokens"))


class EngineCore:
    def __init__(self, a, max_model_len):
        self.a = a
        self.max_model_len = max_model_len
        self.fault = os.environ.get("SPARKLAB_FAULT", "")
        self.workers = []
        self.local = None
        self.pg = None

    # ------------------------------------------------------------ Ray placement (vllm/v1/executor/ray_utils.py)
    def init_ray_cluster(self, world):
        import ray
        from ray.util.placement_group import placement_group
        log = Logger("ray_utils.py")
        local_gpus = 1 if os.path.exists(os.environ.get("SPARKLAB_GPU_DEVICE", "/dev/nvidia0")) else 0
        if world > 1 and world > local_gpus:  # benign on one-GPU-per-node clusters
            log.warning(478, "Total GPU requirement (world_size=%d) exceeds locally visible GPUs (%d). For multi-node "
                        "Ray clusters, this may be expected if the total cluster has enough GPUs. If running "
                        "single-node, consider reducing tensor_parallel_size (%d) or pipeline_parallel_size (%d).",
                        world, local_gpus, self.a["tensor_parallel_size"], self.a["pipeline_parallel_size"])
        ray.init(address="auto", logging_level="ERROR")
        log.info(540, "No current placement group found. Creating a new placement group.")
        if world > ray.cluster_resources().get("GPU", 0):
            log.warning(548, "The number of required GPUs exceeds the total number of available GPUs in the "
                        "placement group.")
        specs = [{"GPU": 1.0} for _rank in range(world)]
        current_ip = os.environ.get("VLLM_HOST_IP") or ray.util.get_node_ip_address()
        node_id = ray.get_runtime_context().get_node_id()
        avail = {}
        for n in ray.nodes():
            if n.get("NodeID") == node_id:
                avail = dict(n.get("Resources", {}))
        if avail.get("GPU", 0) < 1:
            raise ValueError(
                "Current node has no GPU available. current_node_resource=%r. vLLM engine cannot start without "
                "GPU. Make sure you have at least 1 GPU available in a node current_node_id=%r current_ip=%r."
                % (avail, node_id, current_ip))
        specs[0]["node:%s" % current_ip] = 0.001
        self.pg = placement_group(specs, strategy="PACK")
        self._wait_until_pg_ready(log)
        self._verify_bundles(log)
        return current_ip

    def _wait_until_pg_ready(self, log):
        import ray
        timeout = _env_float("SPARKLAB_PG_TIMEOUT_S", PG_WAIT_TIMEOUT)
        specs = self.pg.bundle_specs
        s = time.time()
        ref = self.pg.ready()
        wait_interval = 10
        while time.time() - s < timeout:
            ready, _pending = ray.wait([ref], timeout=min(wait_interval, max(timeout - (time.time() - s), 0.1)))
            if ready:
                break
            wait_interval *= 2
            log.info(285, "Waiting for creating a placement group of specs for %d seconds. specs=%s. Check `ray "
                     "status` and `ray list nodes` to see if you have enough resources, and make sure the IP "
                     "addresses used by ray cluster are the same as VLLM_HOST_IP environment variable specified in "
                     "each node if you are running on a multi-node.", int(time.time() - s), specs)
        try:
            ray.get(ref, timeout=0)
        except ray.exceptions.GetTimeoutError:
            gpus = sum(spec.get("GPU", 0) for spec in specs)
            shown = int(timeout) if timeout == int(timeout) else timeout
            if gpus > 1:
                raise ValueError(
                    "Cannot provide a placement group requiring %s GPUs (placement_group_specs=%s) within %s "
                    "seconds.\nTensor parallel size may exceed available GPUs in your cluster. Check resources with "
                    "`ray status` and `ray list nodes`.\nIf running on K8s with limited GPUs, consider reducing "
                    "--tensor-parallel-size to match available GPU resources." % (gpus, specs, shown)) from None
            raise ValueError(
                "Cannot provide a placement group of placement_group_specs=%s within %s seconds. See `ray status` "
                "and `ray list nodes` to make sure the cluster has enough resources." % (specs, shown)) from None

    def _verify_bundles(self, log):
        from ray.util import placement_group_table
        table = placement_group_table(self.pg)
        per_node = {}
        for idx, node in table.get("bundles_to_node_id", {}).items():
            per_node.setdefault(node, []).append(idx)
        tp = self.a["tensor_parallel_size"]
        for node, bundles in per_node.items():
            if len(bundles) < tp:
                log.warning(262, "tensor_parallel_size=%d is bigger than a reserved number of GPUs (%d GPUs) in a "
                            "node %s. Tensor parallel workers can be spread out to 2+ nodes which can degrade the "
                            "performance unless you have fast interconnect across nodes, like Infiniband. To "
                            "resolve this issue, make sure you have more than %d GPUs available at each node.",
                            tp, len(bundles), node, tp)

    # ------------------------------------------------------------ workers
    def start_workers(self, world, driver_ip):
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        from .worker import RayWorkerWrapper
        from .ray_env import default_logger, vars_to_copy
        # vLLM copies NCCL_*, UCX_*, VLLM_*, HF_* ... of the driver onto every worker (vllm/ray/ray_env.py)
        env = vars_to_copy(os.environ, default_logger())
        env.update({k: v for k, v in os.environ.items() if k.startswith("SPARKLAB_")})
        cls = ray.remote(num_cpus=0, num_gpus=1)(RayWorkerWrapper)
        actors = []
        for i in range(world):
            strat = PlacementGroupSchedulingStrategy(placement_group=self.pg, placement_group_bundle_index=i,
                                                     placement_group_capture_child_tasks=True)
            actors.append(cls.options(scheduling_strategy=strat).remote(env))
        infos = ray.get([w.execute_method.remote("node_info") for w in actors])
        # vLLM sorts workers so the driver's node comes first, then by IP
        order = sorted(range(world), key=lambda i: (infos[i]["ip"] != driver_ip, infos[i]["ip"], i))
        self.workers = [actors[i] for i in order]
        self.infos = [infos[i] for i in order]
        return self.workers

    def start_local_worker(self):
        """vLLM's uniproc executor (TP x PP = 1 without --distributed-executor-backend ray): no Ray at all."""
        from .worker import RayWorkerWrapper
        self.local = RayWorkerWrapper()
        self.workers = [self.local]
        return os.environ.get("VLLM_HOST_IP") or "127.0.0.1"

    def run_all(self, method, *args, timeout=None):
        return self.rank_args(method, lambda _r: args, timeout=timeout)

    def rank_args(self, method, per_rank, timeout=None):
        if self.local is not None:
            return [self.local.execute_method(method, *per_rank(0))]
        import ray
        refs = [w.execute_method.remote(method, *per_rank(r)) for r, w in enumerate(self.workers)]
        return ray.get(refs, timeout=timeout)

    # ------------------------------------------------------------ boot
    def boot(self):
        a = self.a
        t0 = time.time()
        tp, pp = a["tensor_parallel_size"], a["pipeline_parallel_size"]
        world = tp * pp
        backend = a["distributed_executor_backend"] or ("ray" if world > 1 else "uni")
        if backend == "ray" or world > 1:
            driver_ip = self.init_ray_cluster(world)
            self.start_workers(world, driver_ip)
        else:
            driver_ip = self.start_local_worker()
        init_method = "tcp://%s:%d" % (driver_ip, _open_port())
        self.rank_args("init_device", lambda r: (r, world, tp, init_method, a["gpu_memory_utilization"]))
        shards = self._num_shards()
        fault_shard = int(os.environ.get("SPARKLAB_FAULT_SHARD", max(shards // 2, 0)))
        bar_all = os.environ.get("SPARKLAB_BAR_RANKS", "all") == "all"
        self.run_all("load_model", a["model"], self.fault, fault_shard, bar_all, a.get("load_format") or "auto")
        t_init = time.time()
        kv = min(self.run_all("determine_available_memory", a["gpu_memory_utilization"]))
        block = a["block_size"] or 16
        per_token = 2 * 48 * 4 * 128 * 2  # 2 (K,V) x layers x kv heads x head dim x bytes
        blocks = max(int(kv // (per_token * block)), 1)
        tokens = blocks * block
        kvlog = Logger("kv_cache_utils.py")
        kvlog.info(1291, "GPU KV cache size: %s tokens", "{:,}".format(tokens))
        kvlog.info(1296, "Maximum concurrency for %s tokens per request: %.2fx", "{:,}".format(self.max_model_len),
                   tokens / self.max_model_len)
        results = self.run_all("capture_graphs", bool(a["enforce_eager"]), a["gpu_memory_utilization"], self.fault)
        for r in results:
            if "oom" in r:
                self._oom(r["oom"])
        Logger("core.py").info(259, "init engine (profile, create kv cache, warmup model) took %.2f seconds",
                               time.time() - t_init)
        self.boot_seconds = time.time() - t0
        return tokens

    def _num_shards(self):
        from .safetensors_io import list_shards
        try:
            return len(list_shards(self.a["model"]))
        except OSError:
            return 0

    def _oom(self, info):
        import ray
        if self.local is not None:  # uniproc: Ray's memory monitor only watches Ray workers
            return
        for w in self.workers:
            ray.kill(w)
        top = [(info["pid"], round(info["used_gb"] * 0.93, 2), "ray::RayWorkerWrapper.execute_method"),
               (os.getpid(), 0.61, "VLLM::EngineCore"), (os.getppid(), 0.42, "/opt/venv/bin/python3 /opt/venv/bin/vllm")]
        msg = ray_oom_message(info["ip"], info["node_id"], info["actor_id"], info["pid"], info["worker_id"],
                              info["used_gb"], info["total_gb"], info["threshold"], top)
        raise ray.exceptions.OutOfMemoryError(msg)

    # ------------------------------------------------------------ serving
    def step(self, prompt, count):
        timeout = _env_float("SPARKLAB_STEP_TIMEOUT_S", 30)
        from . import hang
        if hang.armed():
            # `labctl break collective-hang`: this step hangs in the ranks (which consume the flags); a real engine
            # waits for it for ever (no step timeout in vLLM's Ray executor), so /health keeps answering
            timeout = None
        results = self.run_all("step", prompt, count, timeout=timeout)
        return results[0]

    def release(self):
        """Clean shutdown: the ranks free their memory and leak files before the engine exits."""
        try:
            self.run_all("release", timeout=_env_float("SPARKLAB_RELEASE_TIMEOUT_S", 5))
        except BaseException:  # a rank already gone: nothing of it to release here
            pass


def engine_main(a, max_model_len, conn):
    """Entry point of the EngineCore_DP0 process."""
    sys.stdout = PrefixedStream(sys.__stdout__, process_prefix("EngineCore_DP0", os.getpid()))
    sys.stderr = PrefixedStream(sys.__stderr__, process_prefix("EngineCore_DP0", os.getpid()))
    try:
        import setproctitle  # noqa: F401  (not in the image; vLLM sets VLLM::EngineCore when it can)
    except ImportError:
        pass
    parent = os.getppid()

    def _watch_parent():
        # vLLM's kill_itself_when_parent_died: never keep loading (and holding the GPU) for a dead API server
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)

    import threading
    threading.Thread(target=_watch_parent, daemon=True).start()
    Logger("core.py").info(93, "%s", _config_line(a, max_model_len))
    core = EngineCore(a, max_model_len)
    try:
        tokens = core.boot()
    except BaseException:
        _log_exception("core.py", 866, "EngineCore failed to start.")
        sys.stdout.flush()
        conn.send(("failed", None))
        os._exit(1)
    conn.send(("ready", {"kv_tokens": tokens}))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            os._exit(0)
        if msg[0] == "shutdown":
            core.release()
            sys.stdout.flush()
            os._exit(0)
        if msg[0] == "generate":
            try:
                conn.send(("ok", core.step(msg[1], msg[2])))
            except BaseException:
                _log_exception("core.py", 907, "EngineCore encountered a fatal error.")
                conn.send(("dead", None))
                sys.stdout.flush()
                os._exit(1)
