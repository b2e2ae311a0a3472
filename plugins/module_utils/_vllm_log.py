# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure, incremental parser for vLLM startup logs (private to sparkfleet.vllm).

Feed text with ``VllmLogParser.feed()`` as it arrives (any chunking), call ``finish()`` when
no more text will come, and read ``snapshot()``. No I/O happens here.
"""

from __future__ import annotations

import calendar
import re
import time

PHASES = (
    "starting",
    "engine_init",
    "placement",
    "loading_weights",
    "profiling",
    "cuda_graphs",
    "api_starting",
    "ready",
)
PHASE_INDEX = dict((p, i) for i, p in enumerate(PHASES))

FAILURE_CLASSES = (
    "ray_oom_killed",
    "cuda_oom",
    "gpu_arch_unsupported",
    "insufficient_memory",
    "placement_group",
    "rendezvous_failed",
    "nccl_error",
    "worker_died",
    "ray_unreachable",
    "model_unsupported",
    "weights_corrupt",
    "port_in_use",
    "dependency_missing",
    "worker_env_mismatch",
    "tokenizer_error",
    "engine_init_failed",
    "engine_exited",
    "stalled",
    "log_missing",
)
# Classes the caller decides (no log line can show them).
CALLER_CLASSES = ("log_missing",)

# Lower number wins when several causes show up in one failed startup.
_PRIORITY = {
    "ray_oom_killed": 10,
    "cuda_oom": 20,
    "gpu_arch_unsupported": 22,
    "insufficient_memory": 25,
    "port_in_use": 30,
    "dependency_missing": 35,
    "worker_env_mismatch": 37,
    "model_unsupported": 40,
    "tokenizer_error": 45,
    "weights_corrupt": 50,
    "ray_unreachable": 55,
    "rendezvous_failed": 60,
    "nccl_error": 65,
    "placement_group": 70,
    "worker_died": 80,
    "stalled": 85,
    "engine_exited": 90,
    "engine_init_failed": 100,
    "log_missing": 110,
}

HINTS = {
    "ray_oom_killed": (
        "Ray's memory monitor killed a worker: on GB10 unified memory it trips during CUDA graph "
        "capture. Turn it off (ray_cluster_memory_monitor: false, i.e. RAY_memory_monitor_refresh_ms=0) "
        "or raise ray_cluster_memory_usage_threshold, and lower vllm_serve_gpu_memory_utilization "
        "(e.g. 0.85)."
    ),
    "cuda_oom": (
        "The GPU ran out of memory. Lower vllm_serve_gpu_memory_utilization or "
        "vllm_serve_max_model_len (or vllm_serve_extra_args: {max-num-seqs: N}), and make sure "
        "gpu_cleanup freed stale holders (nvidia-smi --query-compute-apps) on every node."
    ),
    "gpu_arch_unsupported": (
        "The image's CUDA kernels (PyTorch, vLLM, NCCL or Triton) were not built for this GPU: GB10 is "
        "compute capability 12.1 (sm_121) on aarch64. Use an image built for it in vllm_serve_image and "
        "ray_cluster_image (both default to sparkfleet_image), the same one on every node."
    ),
    "insufficient_memory": (
        "Not enough free memory for weights plus KV cache. Free the GPU first (gpu_cleanup stops "
        "stale units/containers), then adjust vllm_serve_gpu_memory_utilization (lower it when "
        "free memory is short at startup, raise it when no KV cache blocks fit) or reduce "
        "vllm_serve_max_model_len."
    ),
    "placement_group": (
        "Ray could not place the workers. Check `ray status` shows every node and GPU, and that "
        "VLLM_HOST_IP equals each node's Ray IP (ray_cluster_node_ip, default sparkfleet_fabric_ip); "
        "vllm_serve_tensor_parallel_size x vllm_serve_pipeline_parallel_size must equal the "
        "cluster's GPUs, and no stale engine may hold a GPU."
    ),
    "rendezvous_failed": (
        "torch.distributed could not connect the ranks: some address points off the fabric. Pin "
        "ray start --node-ip-address, VLLM_HOST_IP and GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to "
        "sparkfleet_fabric_ip / sparkfleet_fabric_interface on every node."
    ),
    "nccl_error": (
        "NCCL failed to initialise or communicate. Check NCCL_SOCKET_IFNAME / NCCL_IB_HCA follow "
        "sparkfleet_fabric_interface on each node, MTU sparkfleet_fabric_min_mtu on both ends, "
        "and /dev/shm size in the container; rerun with vllm_serve_env: {NCCL_DEBUG: INFO} for detail."
    ),
    "worker_died": (
        "A vLLM worker or engine process died. Look at the evidence and the worker node's log "
        "(journalctl/docker logs on that node) for the first error; a Ray OOM kill or NCCL fault "
        "is the usual cause."
    ),
    "ray_unreachable": (
        "vLLM found no running Ray cluster. Run the ray_cluster role first and make sure the head "
        "address (ray_cluster_head_host's sparkfleet_fabric_ip, ray_cluster_port) is reachable "
        "from the serving node, with the same Ray version (ray_cluster_image / vllm_serve_image)."
    ),
    "model_unsupported": (
        "This vLLM build does not support the model's architecture. Use a newer vLLM image "
        "(vllm_serve_image) or a model supported by it (sparkfleet_model_id); a model that ships "
        "custom code needs vllm_serve_extra_args: {trust-remote-code: true}."
    ),
    "weights_corrupt": (
        "The weight files are missing, incomplete or corrupted. Re-run the model_sync role with "
        "model_sync_verify: true (and model_sync_checksum: true to compare hashes) so every node "
        "holds identical, complete files in sparkfleet_model_dir."
    ),
    "port_in_use": (
        "The API port is already taken, usually by an old vLLM. Stop the stale unit/container "
        "(gpu_cleanup, gpu_cleanup_stale_units) or change vllm_serve_port."
    ),
    "dependency_missing": (
        "Something the server needs is missing or too old (a Python module, a library, the "
        "driver or the container GPU runtime). Use a vLLM image that ships it (vllm_serve_image), "
        "or install the named package there."
    ),
    "worker_env_mismatch": (
        "A Ray worker runs other Python packages (vLLM, Ray, torch, Python itself) than the driver on the "
        "head node, so the engine breaks even when the API answers. Run one image on every node "
        "(vllm_serve_image and ray_cluster_image, both default to sparkfleet_image; pin it by digest) and "
        "restart the Ray cluster (ray_cluster role) so the workers use it."
    ),
    "tokenizer_error": (
        "The tokenizer could not be loaded. Check sparkfleet_model_dir holds tokenizer files "
        "(tokenizer.json / tokenizer_config.json) and that the transformers version in the image "
        "supports this model; consider vllm_serve_extra_args: {trust-remote-code: true}."
    ),
    "engine_init_failed": (
        "The engine failed to start; the evidence shows the first error vLLM printed. If it took "
        "about 600 s, raise vllm_serve_engine_ready_timeout (VLLM_ENGINE_READY_TIMEOUT_S)."
    ),
    "engine_exited": (
        "The vLLM process stopped without printing a known failure. Check the unit or container "
        "(vllm_serve_unit / vllm_serve_container_name: systemctl status, docker inspect), the "
        "kernel log for the OOM killer, and the full log."
    ),
    "log_missing": (
        "The log file does not exist. Check log_file names the file the server writes (its unit's "
        "StandardOutput= or the shell redirect) and that the server was started; or follow the unit or "
        "container instead (unit / container)."
    ),
    "stalled": (
        "No progress for stall_timeout seconds (vllm_serve_stall_timeout). A placement-group wait "
        "means Ray lacks a node or GPU (check `ray status`, VLLM_HOST_IP = ray_cluster_node_ip); a "
        "silent hang after distributed init is usually NCCL on the wrong interface "
        "(sparkfleet_fabric_interface)."
    ),
}

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")
# One process prefix: "(APIServer pid=1) ", "(RayWorkerWrapper pid=860, ip=192.168.200.13) ",
# "(EngineCore_DP0 pid=12)", "(VllmWorker rank=1 pid=9)", "(raylet, ip=10.0.0.2)".
# Every part is bounded so a line of thousands of "(a=b, " costs linear time.
_PREFIX_RE = re.compile(
    r"\s{0,8}\((?P<body>[A-Za-z_][\w.:\-]{0,80}(?:[ ,]{1,4}[A-Za-z_]{1,40}=[^()\s,]{1,80}){0,8}|"
    r"[A-Za-z_]{1,40}=[^()\s,]{1,80}(?:[ ,]{1,4}[A-Za-z_]{1,40}=[^()\s,]{1,80}){0,8})\)\s?"
)
# At most this many nested process prefixes are taken off one line.
_MAX_PREFIXES = 8
# torch.distributed's "[rank0]: " and "[W1120 10:00:42.311 socket.cpp:755] "-style glog prefixes.
_RANK_PREFIX_RE = re.compile(r"^\[rank\d+\]:\s?")
# Ray's C++ log header: "[2025-08-20 10:14:40,020 E 402 402] (raylet) ".
_GLOG_RE = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,.]+ [DIWEF] \d+ \d+\] (?:\(\w+\) )?")
_BARE_ANSI_RE = re.compile(r"\[(?:\d{1,3};)*\d{1,3}m")
_KV_RE = re.compile(r"(?<![A-Za-z_])([A-Za-z_]{1,40})=([^()\s,]{1,80})")
_REPEATED_RE = re.compile(r"\[repeated \d{1,9}x across cluster\]\s{0,8}$")
# Outer line prefixes added by log collectors.
_DOCKER_TS_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s")
_SYSLOG_RE = re.compile(
    r"^(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>\d+) "
    r"(?P<time>\d\d:\d\d:\d\d)(?:\.\d+)? \S+ [^\s:\[]+(?:\[\d+\])?: ?"
)
_COLLECTOR_RE = re.compile(r"^(?:[\w.-]+\s+\| |\[pod/[^\]\s]+\] )")
_HOST_PROC_RE = re.compile(r"^[\w.-]+ [\w.@/-]+\[\d+\]: ?")
_ISO_PREFIX_RE = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?[ \t|]+")
# vLLM's own header: "INFO 05-07 00:37:03 [core.py:1136] msg" (0.8+) or "INFO 10-10 12:00:00 core.py:99] msg".
_VLLM_HDR_RE = re.compile(
    r"^(?P<lvl>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(?:(?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.\d+)?\s+)?"
    r"\[[\w./<>-]+(?::\d+)?\]\s?|"
    r"^(?P<lvl0>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(?P<md0>\d\d-\d\d) (?P<hms0>\d\d:\d\d:\d\d)(?:\.\d+)?\s+"
    r"[\w./<>-]+(?::\d+)?\]\s?"
)
# Ray's own header: "2026-11-29 10:55:51,123\tINFO worker.py:1821 -- msg".
_RAY_HDR_RE = re.compile(r"^(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+[\w./-]+:\d+\s+--\s")
# uvicorn: "INFO:     Application startup complete."
_UVICORN_RE = re.compile(r"^(?P<lvl>INFO|WARNING|ERROR|CRITICAL):\s+")

PLACEMENT_STALL_S = 300
# Longest physical line kept (characters). Longer lines are cut before any pattern sees them, so the work
# per line is bounded whatever arrives (a 1 MB line, /dev/zero); tqdm redraws joined by carriage returns
# keep their first segment (the rank prefix) and their newest ones.
MAX_LINE_CHARS = 16384
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def scrub(text):
    """Text that is valid UTF-8 whatever came in: bytes are decoded with replacement characters, and lone
    surrogates (what ``surrogateescape`` makes of invalid bytes) become U+FFFD, so a result always serialises."""
    if text is None:
        return ""
    if isinstance(text, bytes):
        return text.decode("utf-8", "replace")
    if not isinstance(text, str):
        text = str(text)
    return _SURROGATE_RE.sub("\ufffd", text)


def cap_line(line, limit=MAX_LINE_CHARS):
    """``line`` cut to at most ``limit`` characters (see MAX_LINE_CHARS)."""
    if len(line) <= limit:
        return line
    if "\r" in line:
        head = line.split("\r", 1)[0][:limit // 4]
        tail = line[-(limit // 2):]
        at = tail.find("\r")
        if at >= 0:
            return head + tail[at:]
        return head
    return line[:limit]


_YEAR = 2000
_MONTHS = dict((m, i + 1) for i, m in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]))

# "Loading safetensors checkpoint shards:  44% Completed | 17/39 [05:06<06:40, 18.20s/it]"
# Found from the ": NN% ... |" head (one start per colon, bounded after it), the description is the text
# before that colon: linear on any line (a description group searched from every position is not).
_SHARD_HEAD_RE = re.compile(r":[ \t]{0,8}(?P<pct>\d{1,3})%[ \t]{0,8}(?P<completed>Completed[ \t]{0,8})?\|")
_SHARD_TAIL_RE = re.compile(
    r"[^\[\]\r]{0,200}?(?P<n>\d{1,9})/(?P<total>\d{1,9})[ \t]{0,8}"
    r"\[(?P<elapsed>[\d:]{1,16})<(?P<remaining>[\d:?]{1,16})(?:,[ \t]{0,8}(?P<rate>[^\]]{0,80}))?\]"
)
_SHARD_DESC_RE = re.compile(r"(?:checkpoint shards|[Ss]hards?|weights?)[ \t]*$")
# "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 45%|####5| 30/67 [00:02<00:03, 12.1it/s]"
_GRAPH_BAR_RE = re.compile(
    r"Capturing (?:CUDA|cuda) ?graph[^:]{0,200}:\s{0,8}(?P<pct>\d{1,3})%\s{0,8}(?:Completed\s{0,8})?\|[^|]{0,200}\|?"
    r"\s{0,8}(?P<n>\d{1,9})/(?P<total>\d{1,9})"
)
_PG_WAIT_RE = re.compile(r"Waiting for creating a placement group of specs for (\d+) seconds")

# (phase, regex) checked in order; the phase only moves forward.
_PHASE_MARKERS = [
    ("ready", re.compile(r"Application startup complete|Uvicorn running on")),
    ("api_starting", re.compile(
        r"Starting vLLM (?:API )?server|Available routes are|Started server process|"
        r"Waiting for application startup|init engine \(profile, create kv cache|init engine took|"
        r"Graph capturing finished|Capturing CUDA graphs? (?:took|finished)|"
        r"vLLM to use .{0,400}? as (?:the )?API|Supported_tasks|Supported tasks")),
    ("cuda_graphs", re.compile(
        r"Capturing (?:CUDA|cuda) ?graph|Capturing cudagraph|Capturing the model for CUDA graphs|"
        r"CUDA graphs can take additional")),
    ("profiling", re.compile(
        r"Loading weights took|Model loading took|Loading model weights took|Memory profiling takes|"
        r"Available KV cache memory|GPU KV cache size|# GPU blocks|# cpu blocks|# CPU blocks|"
        r"Maximum concurrency for|torch\.compile takes|Dynamo bytecode transform time|"
        r"Compiling a graph for|Directly load the compiled graph|Cache the graph of|"
        r"Estimated CUDA graph memory|"
        r"Free memory on device .{0,400}? usable")),
    ("loading_weights", re.compile(
        r"Starting to load model|Loading model from|checkpoint shards|Loading weights with|"
        r"Using model weights format|Loading safetensors|Loading pt checkpoint|"
        r"Prefetching checkpoint files|Loading model from scratch")),
    ("placement", re.compile(
        r"Waiting for creating a placement group|Connecting to existing Ray cluster|"
        r"Connected to Ray cluster|Started a local Ray instance|placement group|"
        r"world_size=\d+ rank=\d+|distributed_init_method=|"
        r"vLLM is using nccl|NCCL version|Using Ray for multi|use_ray=True")),
    ("engine_init", re.compile(
        r"Initializing (?:a V\d |an )?LLM engine|Initializing a V1 LLM engine|"
        r"Waiting for init message from front-end|EngineCore_\w* pid=|Resolved architecture|"
        r"This model supports multiple tasks|Using max model len|Chunked prefill is enabled")),
]

_ANY_PHASE_RE = re.compile("|".join("(?:%s)" % rx.pattern for _p, rx in _PHASE_MARKERS))
_VERSION_RE = re.compile(r"vLLM API server version ([\w.+-]+)|LLM engine \(v([\w.+-]+)\)")
_API_ADDR_RE = re.compile(r"(?:Starting vLLM (?:API )?server(?: \d+)? on|Uvicorn running on) (https?://\S+)")
# After "startup complete" only these lines are looked at: a late bind failure, a new run, or an engine
# that is up but broken (a worker that cannot import or run what the driver sends it).
_ENGINE_BROKEN_RE = re.compile(
    r"EngineDeadError|EngineCore encountered a fatal error|Engine core proc .{0,200}? died|RayTaskError|"
    r"RayActorError|ActorDiedError|failed to import on the worker|Version mismatch: The cluster|"
    r"Can't get attribute '")
_AFTER_READY_CAUSE_RE = re.compile(_ENGINE_BROKEN_RE.pattern + r"|ModuleNotFoundError|No module named|ImportError|"
                                   r"invalid device function|no kernel image|out of memory|OutOfMemoryError")
_AFTER_READY_RE = re.compile(r"rrno|in use|vLLM API server version|non-default args|args: Namespace|"
                             + _AFTER_READY_CAUSE_RE.pattern)
_NEW_RUN_RE = re.compile(r"vLLM API server version|non-default args:|^args: Namespace\(")

# Lines that look alarming but are expected on one-GPU-per-node Ray clusters and elsewhere.
_BENIGN_RE = re.compile(
    r"Tensor parallel size \(\d+\) exceeds available GPUs|"
    r"is bigger than a reserved number of GPUs|"
    r"exceeds available GPUs \(\d+\)|"
    r"Failed to import from vllm\._C|"
    r"No module named 'vllm\._version'|"
    r"Exception ignored in:|"
    r"errno: 97 - Address family not supported|"
    r"DeprecationWarning|FutureWarning|UserWarning|"
    r"(?<!\d)0 Workers \(tasks / actors\) killed due to memory pressure|"
    r"ERROR\s+\d\d-\d\d \d\d:\d\d:\d\d.{0,400}?\bWARNING\b"
)

# Root causes: (class, strong regex, weak regex). A strong line ends the startup by itself; a weak
# one only when nothing progresses after it (it may be a tolerated error).
_CAUSES = [
    ("ray_oom_killed", re.compile(
        r"ray\.exceptions\.OutOfMemoryError|node running low on memory|"
        r"Ray killed this worker|memory usage threshold of|"
        r"Workers \(tasks / actors\) killed due to memory pressure|killed due to memory pressure \(OOM\)|"
        r"NODE_OUT_OF_MEMORY|Killing worker with task .{0,400}?[Mm]emory|"
        r"Memory on the node .{0,400}? exceeds the (?:memory usage )?threshold"), None),
    ("cuda_oom", re.compile(
        r"CUDA out of memory|torch\.OutOfMemoryError|torch\.cuda\.OutOfMemoryError|OutOfMemoryError: CUDA|"
        r"CUDA error: out of memory|CUDA driver error: out of memory|cudaErrorMemoryAllocation|"
        r"CUBLAS_STATUS_ALLOC_FAILED|HIP out of memory|out of memory on device|"
        r"cudaMalloc.{0,400}?out of memory|CUDA_ERROR_OUT_OF_MEMORY|"
        r"Failed to allocate memory for (?:the )?(?:KV cache|CUDA graph)"), None),
    # Kernels missing for this GPU, reported by torch, NCCL ("Cuda failure 'invalid device function'"),
    # the CUDA runtime or Triton's ptxas. Before nccl_error: NCCL wraps them as "unhandled cuda error".
    ("gpu_arch_unsupported", re.compile(
        r"no kernel image is available for execution|invalid device function|"
        r"cudaErrorNoKernelImageForDevice|cudaErrorInvalidDeviceFunction|CUDA_ERROR_NO_BINARY_FOR_GPU|"
        r"CUDA_ERROR_INVALID_SOURCE|no binary for GPU|"
        r"ptxas fatal\s{0,4}: Value 'sm_\w{1,8}' is not defined for option"),
        re.compile(r"with CUDA capability sm_\w{1,8} is not compatible with the current PyTorch installation|"
                   r"[Uu]nsupported (?:GPU|CUDA) architecture|CUDA arch(?:itecture)? .{0,80}? not supported")),
    ("insufficient_memory", re.compile(
        r"Free memory on device .{0,400}?less than desired GPU memory utilization|"
        r"No available memory for the cache blocks|"
        r"larger than the available KV cache memory|"
        r"Available KV cache memory: -|"
        r"is larger than the maximum number of tokens that can be stored in KV cache|"
        r"Insufficient memory for|Not enough memory to|Error in memory profiling|"
        r"\[Errno 12\] Cannot allocate memory|DefaultCPUAllocator: can't allocate memory"),
        re.compile(r"[Ii]nsufficient memory|[Nn]ot enough memory|Cannot allocate memory")),
    ("placement_group", re.compile(
        r"Cannot provide a placement group|No available node types can fulfill resource request|"
        r"placement group .{0,400}?(?:infeasible|cannot be scheduled)|"
        r"does not have enough GPUs|Ray does not allocate any GPUs on the driver node|"
        r"The number of required GPUs exceeds the total number of available GPUs|"
        r"Current node has no GPU available|The current placement group .{0,400}? does not have"), None),
    ("rendezvous_failed", re.compile(
        r"client socket has failed to connect to any network address|connectFullMesh failed|DistNetworkError|"
        r"DistStoreError|Timed out after \d+ seconds waiting for clients|"
        r"TCPStore.{0,400}?(?:timed out|failed|Broken pipe|Connection reset)|TCP client failed to connect|"
        r"Gloo connectFullMesh|gloo/transport/tcp/pair\.cc|"
        r"RendezvousConnectionError|RendezvousTimeoutError|"
        r"init_process_group.{0,400}?(?:timed out|failed)|connect\(\) timed out\. Original timeout"),
        # torch warns "[c10d] The client socket has failed to connect to [host]:port" while it retries.
        re.compile(r"client socket has failed to connect|Network is unreachable|"
                   r"Connection refused.{0,400}?(?:store|rendezvous|c10d)")),
    ("nccl_error", re.compile(
        r"NCCL [Ee]rror|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|ncclInvalidUsage|"
        r"ncclRemoteError|ncclInvalidArgument|unhandled system error|unhandled cuda error|"
        r"DistBackendError|ProcessGroupNCCL.{0,400}?(?:[Ww]atchdog caught|timed? ?out|error)|"
        r"NCCL communicator was aborted|Failed to initialize NCCL|NCCL_CHECK|"
        r"ncclCommInitRank failed|pynccl.{0,400}?(?:error|failed)"),
        re.compile(r"NCCL WARN|Call to ibv_\w+ failed|NET/IB : .{0,400}?(?:failed|error)")),
    ("ray_unreachable", re.compile(
        r"Could not find any running Ray instance|Could not read 'node_ip_address'|"
        r"Failed to connect to GCS within|"
        r"Failed to get the system config from raylet|RaySystemError|"
        r"GCS (?:server )?(?:is not|could not be) (?:reachable|reached)|"
        r"Failed to connect to the Ray cluster|Raylet is terminated|Failed to register worker.{0,400}? to Raylet|"
        r"ray\.init\(\) .{0,400}?failed|Can't find a `node_ip_address\.json`|"
        r"ray client connection timeout"),
        re.compile(r"Unable to connect to GCS|Failed to connect to GCS")),
    ("model_unsupported", re.compile(
        r"Model architectures? \[.{0,400}?\] (?:are|is) not supported|are not supported for now|"
        r"is not supported for now|Unrecognized model in|but Transformers does not recognize this architecture|"
        r"does not recognize this architecture|The checkpoint you are trying to load has model type|"
        r"No model architectures are specified|Cannot find model module|failed to be inspected|"
        r"Unrecognized configuration class|contains custom code which must be executed|"
        r"is not supported by the current vLLM|not supported on this GPU|"
        r"Unsupported (?:model|architecture)|Unknown quantization method|"
        r"quantization (?:method )?.{0,400}? is not supported|compute capability .{0,400}? not supported|"
        r"requires (?:a )?(?:GPU|compute capability) |only supported on GPUs with compute capability"), None),
    ("weights_corrupt", re.compile(
        r"SafetensorError|safetensors_rust|Error while deserializing header|"
        r"HeaderTooLarge|MetadataIncompleteBuffer|InvalidHeaderDeserialization|"
        r"incomplete metadata, file not fully covered|"
        r"Cannot find any model weights|No such file or directory: .{0,400}?\.(?:safetensors|bin|pt)\b|"
        r"PytorchStreamReader failed|invalid load key|storage has wrong size|"
        r"size mismatch for|not found in checkpoint|"
        r"does not appear to have a file named|No such file or directory: .{0,400}?config\.json|"
        r"\.safetensors\b.{0,400}?(?:not found|does not exist|missing|truncated)"),
        re.compile(r"unexpected EOF|KeyError: '[\w.]+\.(?:weight|bias|scale|weight_scale|qweight)\w*'|"
                   r"Repository Not Found|RepositoryNotFoundError|LocalEntryNotFoundError|"
                   r"is not a local folder and is not a valid model identifier|GatedRepoError|"
                   r"gated repo")),
    ("port_in_use", re.compile(
        r"\[Errno 98\]|Address already in use|address already in use|EADDRINUSE|"
        r"port \d+ is (?:already )?in use|port is already in use|port is already allocated"), None),
    ("dependency_missing", re.compile(
        r"(?:vllm|ray|python3?): (?:command )?not found|executable file not found in \$PATH|"
        r"CUDA driver version is insufficient|NVIDIA driver on your system is too old|"
        r"could not select device driver .{0,400}? with capabilities"), re.compile(
        r"ModuleNotFoundError|No module named|ImportError: |cannot import name|"
        r"undefined symbol|libcuda\.so.{0,400}?(?:not found|cannot open)|"
        r"lib[\w.+-]+\.so[.\d]*: cannot open shared object file|"
        r"requires the [`']?[\w-]+[`']? (?:package|library)|Please install [\w-]+|"
        r"pip install [\w\[\]-]+ to|Failed to find C compiler|Python\.h: No such file")),
    # A worker whose Python packages differ from the driver's: Ray says so, or the worker cannot import or
    # unpickle what the driver sent. Import errors raised inside a Ray worker are moved here from
    # dependency_missing (see _failure_checks).
    ("worker_env_mismatch", re.compile(
        r"Version mismatch: The cluster was started with|failed to import on the worker|"
        r"library dependencies are not installed in the worker environment|"
        r"Can't get attribute '\w{1,80}' on <module '(?:vllm|ray|torch)|"
        r"(?:vllm|ray|torch) version mismatch between (?:the )?driver and (?:the )?workers?"), None),
    ("tokenizer_error", None, re.compile(
        r"[Tt]okenizer[\w.]{0,80}(?: class)? .{0,400}?(?:does not exist|not found|could not be loaded|"
        r"failed to load|is not currently imported)|"
        r"Can't load tokenizer|Failed to load the tokenizer|Error loading tokenizer|No tokenizer file found|"
        r"TokenizerError|untagged enum ModelWrapper|sentencepiece.{0,400}?(?:[Ee]rror|failed)|"
        r"tiktoken.{0,400}?(?:error|Error)|Couldn't instantiate the backend tokenizer|"
        r"Tokenizer class .{0,400}? does not exist|tokenizer_config\.json.{0,400}?(?:not found|does not exist)|"
        # transformers warns about a tokenizer_class that differs from the class it builds; the error that
        # follows ("TypeError: not a string", an AttributeError) names no tokenizer.
        r"tokenizer class you load from this checkpoint is not the same type|"
        r"tokenizer class you load from this checkpoint is '|"
        r"tokenizer_class.{0,200}?(?:does not match|mismatch|is not the same)")),
    ("worker_died", re.compile(
        r"RayActorError|ActorDiedError|actor died unexpectedly|The actor died|NodeDiedError|"
        r"has been marked dead|died unexpectedly|Worker proc .{0,400}? died|WorkerProc hit an exception|"
        r"Engine core proc .{0,400}? died|EngineDeadError|worker process .{0,400}? (?:died|exited)|"
        r"A worker died or was killed|Worker .{0,400}? exited unexpectedly|Actor .{0,400}? is dead|"
        r"exited with code -9"), None),
]
_RAY_OOM_RE = dict((c[0], c[1]) for c in _CAUSES)["ray_oom_killed"]
# Warnings that are weak evidence of a cause (vLLM logs tolerated problems at WARNING, but these explain
# the error that follows them).
_WARNING_EVIDENCE_RE = re.compile(
    _RAY_OOM_RE.pattern + r"|tokenizer class you load from this checkpoint|"
    r"is not compatible with the current PyTorch installation")
# Import errors raised inside a Ray worker (its prefix carries ip=, or Ray wraps the task's error).
_RAY_WORKER_ERROR_RE = re.compile(r"ray::\w|RayTaskError\(|RayWorker\w{0,40}\.")
# Traceback frames inside tokenizer loading: the exception that ends such a traceback is the tokenizer's.
_TOKENIZER_FRAME_RE = re.compile(
    r"tokenization_\w{1,60}\.py|transformers_utils/tokenizers?\b|/tokenizers?/|sentencepiece|tiktoken|"
    r", in (?:get_tokenizer|cached_get_tokenizer|init_tokenizer_from_configs|cached_tokenizer_from_config)\b")
# Traceback frames tell the phase when a log is only a traceback: function name -> phase.
_FRAME_FUNC_RE = re.compile(r'^File ".*", line \d+, in (?P<func>[\w<>.]+)')
_FRAME_PHASE = {
    "init_device": "placement", "init_worker_distributed_environment": "placement",
    "ensure_model_parallel_initialized": "placement", "initialize_model_parallel": "placement",
    "init_distributed_environment": "placement", "initialize_ray_cluster": "placement",
    "_init_workers_ray": "placement", "_wait_until_pg_ready": "placement", "ncclCommInitRank": "placement",
    "init_process_group": "placement",
    "load_model": "loading_weights", "load_weights": "loading_weights", "get_model": "loading_weights",
    "safetensors_weights_iterator": "loading_weights", "_prepare_weights": "loading_weights",
    "download_weights_from_hf": "loading_weights",
    "profile_run": "profiling", "determine_num_available_blocks": "profiling",
    "determine_available_memory": "profiling", "_initialize_kv_caches": "profiling",
    "initialize_kv_cache": "profiling", "_check_enough_kv_cache_memory": "profiling",
    "check_enough_kv_cache_memory": "profiling", "raise_if_cache_size_invalid": "profiling",
    "capture_model": "cuda_graphs", "compile_or_warm_up_model": "cuda_graphs",
}
_PORT_IN_USE_RE = dict((c[0], c[1]) for c in _CAUSES)["port_in_use"]
_EXC_IGNORE = ("StopIteration", "KeyboardInterrupt", "SystemExit", "GeneratorExit")

# Generic fatal markers: the startup is over, root cause is earlier (or later in the traceback).
_FATAL_GENERIC_RE = re.compile(
    r"EngineCore failed to start|Engine core initialization failed|Engine process failed to start|"
    r"Engine core proc .{0,400}? failed|Failed core proc|WorkerProc failed to start|"
    r"Worker failed with error|Exception in worker VllmWorkerProcess|"
    r"EngineCore encountered a fatal error|EngineCore hit an exception|Engine core encountered an issue|"
    r"Got fatal signal from worker processes|WorkerProc initialization failed|"
    r"^docker: Error response from daemon|"
    r"^[\w./ -]+: error: (?:unrecognized arguments|argument |the following arguments are required)"
)
# systemd talking about the unit in `journalctl -u`: the process is gone.
_SYSTEMD_EXIT_RE = re.compile(
    r"Main process exited, code=(?:exited|killed|dumped)|Failed with result '|"
    r"\.service: Scheduled restart job|Control process exited|"
    r"^Killed$|^Killed |Segmentation fault|core dumped|^Aborted|Fatal Python error|"
    r"exited with code \d+|Container .{0,400}? exited|terminate called after throwing an instance of"
)
# Python's last traceback line: "ValueError: ...", "torch.OutOfMemoryError: ...", "KeyError".
_EXC_LINE_RE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*(?P<name>(?:[A-Z]\w*)?(?:Error|Exception|Exit|Interrupt|Failure|Failed))"
    r"(?:\([\w.]+\))?(?::|$)"
)
_FRAME_RE = re.compile(r'^(?:File "|Traceback \(|During handling|The above exception|\^+$|raise |return |\w+ = )')
# Lines that repeat while nothing moves: they do not count as progress.
_NO_PROGRESS_RE = re.compile(
    r"Waiting for creating a placement group|No available shared memory broadcast block|"
    r"Waiting for engine core|still waiting|Waiting for .{0,400}? to be ready|"
    r"Avg prompt throughput: 0\.0 tokens/s, Avg generation throughput: 0\.0"
)


def _parse_hms(text):
    parts = [int(p) for p in text.split(":") if p.isdigit()]
    if not parts or "?" in text:
        return None
    total = 0
    for part in parts:
        total = total * 60 + part
    return total


def _parse_rate(rate):
    """tqdm rate string -> seconds per item, or None."""
    if not rate:
        return None
    m = re.search(r"([\d.]+)\s*s/it", rate)
    if m:
        try:
            return float(m.group(1))
        except ValueError:
            return None
    m = re.search(r"([\d.]+)\s*it/s", rate)
    if m:
        try:
            val = float(m.group(1))
        except ValueError:
            return None
        return 1.0 / val if val > 0 else None
    return None


def _shard_bar(text):
    """A weight-loading tqdm bar in ``text`` as a dict of its fields, or None (linear time)."""
    for head in _SHARD_HEAD_RE.finditer(text):
        tail = _SHARD_TAIL_RE.match(text, head.end())
        if not tail:
            continue
        before = text[:head.start()]
        desc = before[max(before.rfind(":"), before.rfind("|"), before.rfind("\r")) + 1:]
        if "safetensors" not in desc and not _SHARD_DESC_RE.search(desc):
            # vLLM's own bars all read "Loading ...: NN% Completed | n/total [...]".
            at = desc.find("Loading")
            if at < 0 or not head.group("completed"):
                continue
            desc = desc[at:]
        fields = tail.groupdict()
        fields["desc"] = desc
        fields["pct"] = head.group("pct")
        return fields
    return None


def _norm(line):
    """Evidence line without prefixes and headers, to drop the same message printed twice."""
    text = line or ""
    for _i in range(_MAX_PREFIXES):
        m = _PREFIX_RE.match(text)
        if not m:
            break
        text = text[m.end():]
    m = _VLLM_HDR_RE.match(text) or _GLOG_RE.match(text)
    if m:
        text = text[m.end():]
    return text.strip()[:200]


class Line(object):
    """One logical log line after the wrappers are taken off."""

    __slots__ = ("raw", "text", "level", "ts", "prefixes")

    def __init__(self, raw, text, level, ts, prefixes):
        self.raw = raw
        self.text = text
        self.level = level
        self.ts = ts
        self.prefixes = prefixes


def _rank_key(prefixes):
    """Key a rank by its Ray ip/pid prefix; local processes by their innermost name and pid."""
    for body in prefixes:
        kv = dict(_KV_RE.findall(body))
        if "ip" in kv:
            return "%s pid=%s" % (kv["ip"], kv["pid"]) if "pid" in kv else kv["ip"]
    if prefixes:
        body = prefixes[-1]
        kv = dict(_KV_RE.findall(body))
        name = re.split(r"[ ,]", body, 1)[0]
        if "=" in name:  # "(pid=412)": no process name
            return "pid=%s" % kv.get("pid")
        return "%s pid=%s" % (name, kv["pid"]) if "pid" in kv else name
    return "local"


class VllmLogParser(object):
    """Incremental vLLM startup-log state machine.

    Wall-clock decisions (stall, process gone) belong to the caller: it reports them with
    ``mark_stalled()`` / ``mark_exited()``. Timestamps found in lines drive ``phase_times()``.
    """

    def __init__(self, stall_timeout=0, rank_names=None):
        self.stall_timeout = stall_timeout or 0
        # A healthy cluster places at once; vLLM's own limit is 1800 s. Waiting this long is a stall.
        self.placement_stall_s = min(self.stall_timeout, PLACEMENT_STALL_S) if self.stall_timeout else 0
        self.rank_names = dict(rank_names or {})
        self._buf = ""
        self._skip_rest = False  # the unfinished line was cut: drop what follows up to its newline
        self.truncated_lines = 0
        self._pending_prefixes = None
        self._bar_prefixes = None
        self._outer_clock = False
        self._ts_cache = (None, None)
        self._day_base = {}
        self.lines_seen = 0
        self.attempts = 0
        self.previous_failure = None
        self._reset_attempt()

    # ----- state -----
    def _reset_attempt(self):
        self.phase = "starting"
        self.phase_first_ts = {}
        self.last_ts = None
        self.first_ts = None
        self.ranks = {}
        self.graphs = None
        self.candidates = []  # dicts: cls, line, strong, phase, seq
        self.generic = []  # fatal generic marker lines
        self.exit_lines = []
        self.confirmed = False
        self.failure_phase = None
        self.pg_wait_s = 0
        self.pg_wait_line = None
        self.progress_seq = 0  # bumps on every real progress
        self.last_progress_line = 0
        self.last_progress_ts = None
        self.frame_phase = None
        self.frame_cause = None  # a class the frames of the current traceback point to
        self.in_ray_task = False  # the current traceback is a Ray worker's (RayTaskError)
        self.after_ready = False  # looking at engine failures after "startup complete"
        self.version = None
        self.api_address = None
        self.benign = []
        self._seq = 0

    # ----- input -----
    def feed(self, text):
        """Feed raw text (any chunking). Complete lines are parsed now, the rest is kept."""
        if not text:
            return
        text = scrub(text)
        if self._skip_rest:
            nl = text.find("\n")
            if nl < 0:
                return
            self._skip_rest = False
            text = text[nl:]
        if "\n" not in text:
            self._buf += text
            if len(self._buf) > MAX_LINE_CHARS:
                self._cut_unfinished()
            return
        body, rest = text.rsplit("\n", 1)
        first = True
        for physical in body.split("\n"):
            if first:
                physical, first = self._buf + physical, False
            self._physical(physical)
        self._buf = rest
        if len(self._buf) > MAX_LINE_CHARS:
            self._cut_unfinished()

    def _cut_unfinished(self):
        """Keep the unfinished last line within MAX_LINE_CHARS (a line with no end must not grow memory)."""
        self.truncated_lines += 1
        cut = cap_line(self._buf)
        if "\r" not in cut:
            # No tqdm redraws to follow: keep the start, drop the rest of this line as it arrives.
            self._skip_rest = True
        self._buf = cut

    def finish(self):
        """No more text: parse what is left in the buffer."""
        if self._buf:
            rest, self._buf = self._buf, ""
            self._physical(rest)

    def peek_tail(self):
        """Read progress from the unfinished last line (a tqdm bar mid-update) without consuming it."""
        if not self._buf:
            return
        segs = [s for s in self._buf.split("\r") if s.strip()]
        if not segs:
            return
        saved = self._pending_prefixes
        prefixes = self._pending_prefixes or self._bar_prefixes
        for seg in segs:
            line = self._unwrap(seg, prefixes)
            if line.prefixes:
                prefixes = line.prefixes
            self._progress(line)
        self._pending_prefixes = saved

    def _physical(self, physical):
        if len(physical) > MAX_LINE_CHARS:
            self.truncated_lines += 1
            physical = cap_line(physical)
        if self.phase == "ready" and not self.confirmed and not _AFTER_READY_RE.search(physical):
            # Serving traffic after startup: nothing in it changes the answer.
            self.lines_seen += 1
            return
        if "\r" not in physical:
            line = self._unwrap(physical, None)
            self._logical(line)
            return
        segs = physical.split("\r")
        inherited = None
        for seg in segs:
            if not seg.strip() and len(segs) > 1:
                continue
            line = self._unwrap(seg, inherited)
            self._logical(line)
            if line.prefixes:
                inherited = line.prefixes

    def _unwrap(self, seg, inherited):
        raw = seg
        if "#033[" in raw or "^[[" in raw:
            # rsyslog writes ESC as "#033", `cat -v` / less as "^[".
            raw = raw.replace("#033[", "\x1b[").replace("^[[", "\x1b[")
        if "\x1b" in raw:
            raw = _ANSI_RE.sub("", raw)
        if "m" in raw and "[" in raw:
            # Colour codes whose ESC was lost on the way (pasted logs): "[36m(RayWorkerWrapper ...)[0m".
            raw = _BARE_ANSI_RE.sub("", raw)
        text = raw.strip()
        ts = None
        outer = None
        m = _COLLECTOR_RE.match(text)  # "vllm-1  | " (docker compose), "[pod/vllm-0/vllm] " (kubectl)
        if m:
            text = text[m.end():]
        m = _DOCKER_TS_RE.match(text)
        if m:
            outer = self._iso_ts(m.group(1))
            text = text[m.end():]
            m = _HOST_PROC_RE.match(text)  # journalctl -o short-iso
            if m:
                text = text[m.end():]
        m = _SYSLOG_RE.match(text)
        if m:
            outer = self._syslog_ts(m) or outer
            text = text[m.end():]
        prefixes = []
        pos = 0
        for _i in range(_MAX_PREFIXES):
            m = _PREFIX_RE.match(text, pos)
            if not m:
                break
            prefixes.append(m.group("body"))
            pos = m.end()
        text = text[pos:]
        m = _RANK_PREFIX_RE.match(text)
        if m:
            text = text[m.end():]
        if "repeated" in text:
            m = _REPEATED_RE.search(text)
            if m:
                text = text[:m.start()]
        text = text.strip()
        if not prefixes and inherited:
            prefixes = list(inherited)
        level = None
        m = _VLLM_HDR_RE.match(text)
        if m:
            level = m.group("lvl") or m.group("lvl0")
            md, hms = (m.group("md"), m.group("hms")) if m.group("lvl") else (m.group("md0"), m.group("hms0"))
            if md:
                ts = self._vllm_ts(md, hms) or ts
            text = text[m.end():]
        else:
            m = _ISO_PREFIX_RE.match(text)
            if m:
                ts = self._iso_ts(m.group(1)) or ts
                text = text[m.end():]
                m2 = _RAY_HDR_RE.match(text)
                if m2:
                    level = m2.group("lvl")
                    text = text[m2.end():]
                else:
                    m2 = re.match(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b[\s:]*", text)
                    if m2:
                        level = m2.group(1)
                        text = text[m2.end():]
            else:
                m = _UVICORN_RE.match(text)
                if m:
                    level = m.group("lvl")
                    text = text[m.end():]
        if level == "WARN":
            level = "WARNING"
        # One clock per log: the collector's (docker, journal) when present, else vLLM's and Ray's own.
        if outer is not None:
            self._outer_clock = True
            ts = outer
        elif self._outer_clock:
            ts = None
        return Line(raw, text.strip(), level, ts, prefixes)

    # ----- timestamps -----
    def _vllm_ts(self, md, hms):
        if self._ts_cache[0] == (md, hms):
            return self._ts_cache[1]
        val = self._vllm_ts_uncached(md, hms)
        self._ts_cache = ((md, hms), val)
        return val

    def _vllm_ts_uncached(self, md, hms):
        base = self._day_base.get(md)
        if base is None:
            try:
                base = calendar.timegm((_YEAR, int(md[:2]), int(md[3:5]), 0, 0, 0, 0, 0, 0))
            except (ValueError, OverflowError):
                return None
            self._day_base[md] = base
        return base + int(hms[:2]) * 3600 + int(hms[3:5]) * 60 + int(hms[6:8])

    def _iso_ts(self, text):
        # vLLM and syslog stamps carry no year: every clock is put in one fixed (leap) year.
        try:
            t = time.strptime(text.replace("T", " "), "%Y-%m-%d %H:%M:%S")
            return calendar.timegm((_YEAR, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, 0, 0, 0))
        except (ValueError, OverflowError):
            return None

    def _syslog_ts(self, m):
        try:
            h, mi, s = [int(x) for x in m.group("time").split(":")]
            return calendar.timegm((_YEAR, _MONTHS[m.group("mon")], int(m.group("day")), h, mi, s, 0, 0, 0))
        except (ValueError, KeyError, OverflowError):
            return None

    # ----- the machine -----
    def _set_phase(self, phase, ts):
        if PHASE_INDEX[phase] <= PHASE_INDEX[self.phase]:
            return False
        if ts is None:
            ts = self.last_ts  # a tqdm bar carries no stamp: the phase began by the last one seen
        for p in PHASES[PHASE_INDEX[self.phase] + 1:PHASE_INDEX[phase] + 1]:
            self.phase_first_ts.setdefault(p, ts)
        self.phase = phase
        return True

    def _bump(self):
        self.progress_seq += 1
        self._progressed()

    def _progressed(self):
        """Something moved: remember where (line count) and when (in the log's own clock)."""
        self.last_progress_line = self.lines_seen
        self.last_progress_ts = self.last_ts

    def _logical(self, line):
        text = line.text
        if not text:
            # A line holding only a Ray prefix: the next line (a tqdm bar) belongs to it.
            self._pending_prefixes = line.prefixes or None
            return
        pend = self._pending_prefixes
        if pend and len(line.prefixes) < len(pend) and pend[:len(line.prefixes)] == line.prefixes:
            line.prefixes = list(pend)
        self._pending_prefixes = None
        is_bar = "Completed |" in text or "it/s]" in text or "s/it]" in text
        if is_bar and not line.prefixes and self._bar_prefixes:
            # tqdm redraws split onto their own lines keep the rank of the bar they continue.
            line.prefixes = list(self._bar_prefixes)
        self._bar_prefixes = line.prefixes if is_bar else None
        self.lines_seen += 1
        self._seq += 1
        if line.ts is not None:
            if self.first_ts is None:
                self.first_ts = line.ts
                self.phase_first_ts.setdefault(self.phase, line.ts)
            self.last_ts = line.ts

        # A new server run in the same log (restart by systemd or docker).
        if ("args" in text or "version" in text) and _NEW_RUN_RE.search(text) and (self.confirmed or PHASE_INDEX[self.phase] >= PHASE_INDEX["engine_init"]):
            self._new_attempt(line)
            self.phase_first_ts.setdefault("starting", line.ts)
            self.first_ts = line.ts
            self.last_ts = line.ts
        if self.attempts == 0:
            self.attempts = 1

        if self.phase == "ready" and not self.confirmed:
            # Up: only a late bind failure, a new run or a broken engine matter; skip the rest (long
            # serving logs, request errors).
            if "rrno" in text or "in use" in text:
                self._failure_checks(line)
            elif _AFTER_READY_CAUSE_RE.search(text):
                # The API answers but the engine behind it is broken (for example a worker whose packages
                # differ from the driver's fails at the first request).
                self.after_ready = True
                self._failure_checks(line)
                if _ENGINE_BROKEN_RE.search(text):
                    self._confirm()
                else:
                    # A cause on its own after startup (one request's CUDA OOM or import error) is kept as
                    # evidence, but only an engine that is gone ends a completed startup.
                    self.confirmed = False
                    self.failure_phase = None
            return
        if not self.version and ("version" in text or "engine (v" in text):
            m = _VERSION_RE.search(text)
            if m:
                self.version = m.group(1) or m.group(2)
        if "http" in text:
            m = _API_ADDR_RE.search(text)
            if m:
                self.api_address = m.group(1)

        if self.confirmed:
            # After the end, keep collecting causes (the traceback follows the marker).
            self._failure_checks(line)
            return

        if line.level not in ("INFO", "DEBUG") and _BENIGN_RE.search(text):
            self.benign.append(text[:160])
            return

        if ("%" in text and "/" in text) and self._progress(line):
            return
        self._phase_checks(line)
        self._failure_checks(line)

    def _new_attempt(self, line):
        failure = self.failure() if self.confirmed else None
        attempts = self.attempts
        self._reset_attempt()
        self.attempts = attempts + 1
        if failure:
            self.previous_failure = failure

    def _progress(self, line):
        text = line.text
        m = _shard_bar(text)
        if m and "graph" not in m["desc"].lower():
            n, total = int(m["n"]), int(m["total"])
            if total <= 0:
                return False
            key = _rank_key(line.prefixes) if line.prefixes else "local"
            rank = self.ranks.setdefault(key, {"n": 0, "total": total})
            changed = (n, total) != (rank.get("n"), rank.get("total")) or "ts" not in rank
            rank.update({
                "n": n,
                "total": total,
                "percent": int(round(100.0 * n / total)),
                "elapsed_s": _parse_hms(m["elapsed"]),
                "eta_s": _parse_hms(m["remaining"]),
                "s_per_shard": _parse_rate(m["rate"]),
                "desc": m["desc"].strip(),
                "ts": line.ts,
            })
            if changed:
                self._bump()
            if n < total:
                self._set_phase("loading_weights", line.ts)
            else:
                self._set_phase("loading_weights", line.ts)
            return True
        m = _GRAPH_BAR_RE.search(text)
        if m:
            n, total = int(m.group("n")), int(m.group("total"))
            if self.graphs != (n, total):
                self._bump()
            self.graphs = (n, total)
            self._set_phase("cuda_graphs", line.ts)
            return True
        return False

    def _phase_checks(self, line):
        text = line.text
        if line.level in ("ERROR", "CRITICAL") or _FRAME_RE.match(text) or _EXC_LINE_RE.match(text):
            # Traceback frames name functions like load_model: they are not progress.
            return
        m = _PG_WAIT_RE.search(text)
        if m:
            self._set_phase("placement", line.ts)
            self.pg_wait_s = max(self.pg_wait_s, int(m.group(1)))
            self.pg_wait_line = line.raw.strip()
            return
        if not _ANY_PHASE_RE.search(text):
            if not _NO_PROGRESS_RE.search(text) and line.level in ("INFO", "DEBUG"):
                self._progressed()
            return
        for phase, rx in _PHASE_MARKERS:
            if rx.search(text):
                if self._set_phase(phase, line.ts):
                    self._bump()
                    # Progress after a weak cause means that cause did not stop the startup.
                    self.candidates = [c for c in self.candidates if c["strong"]]
                break
        else:
            if not _NO_PROGRESS_RE.search(text) and line.level in ("INFO", "DEBUG"):
                self._progressed()

    def _failure_checks(self, line):
        text = line.text
        if self.phase == "ready" and not self.after_ready and not _PORT_IN_USE_RE.search(text):
            # A completed startup stays completed: later request errors or a stop are not startup
            # failures (uvicorn may still fail to bind after "startup complete").
            return
        if line.level in ("INFO", "DEBUG", "WARNING") and not _SYSTEMD_EXIT_RE.search(text):
            # vLLM logs tolerated problems at WARNING; INFO never ends a startup. Ray's OOM notice
            # is the exception: it arrives as a WARNING from the raylet.
            if not (line.level == "WARNING" and _WARNING_EVIDENCE_RE.search(text)):
                return
        if _BENIGN_RE.search(text):
            return
        if _FRAME_RE.match(text):
            if text.startswith("Traceback ("):
                self.frame_cause = None
                self.in_ray_task = False
            elif _TOKENIZER_FRAME_RE.search(text):
                self.frame_cause = "tokenizer_error"
            m = _FRAME_FUNC_RE.match(text)
            hint = _FRAME_PHASE.get(m.group("func")) if m else None
            if hint and PHASE_INDEX[hint] > PHASE_INDEX.get(self.frame_phase or "starting", 0):
                self.frame_phase = hint
            return
        marker = False
        if _RAY_WORKER_ERROR_RE.search(text):
            self.in_ray_task = True
        if _FATAL_GENERIC_RE.search(text):
            self.generic.append(self._ev(line))
            self._confirm()
            marker = True
        elif _SYSTEMD_EXIT_RE.search(text):
            self.exit_lines.append(self._ev(line))
            self._confirm()
            marker = True
        # A marker line may carry the cause too: "Worker failed with error 'NCCL error: ...'".
        for cls, strong_rx, weak_rx in _CAUSES:
            strong = bool(strong_rx and strong_rx.search(text))
            if strong or (weak_rx and weak_rx.search(text)):
                if cls == "dependency_missing" and not strong and (
                        self.in_ray_task or any("ip=" in p for p in line.prefixes)):
                    # The driver imported it, a Ray worker could not: the worker's packages differ.
                    cls = "worker_env_mismatch"
                self._seq += 1
                self.candidates.append({
                    "cls": cls, "line": self._ev(line), "strong": strong,
                    "phase": self.phase, "seq": self._seq,
                })
                if strong:
                    self._confirm()
                return
        m = _EXC_LINE_RE.match(text)
        if m and not marker and m.group("name") not in _EXC_IGNORE:
            self._seq += 1
            self.candidates.append({
                "cls": self.frame_cause or "engine_init_failed", "line": self._ev(line), "strong": False,
                "phase": self.phase, "seq": self._seq,
            })

    def _ev(self, line):
        return line.raw.strip()[:500]

    def _confirm(self):
        if not self.confirmed:
            self.confirmed = True
            self.failure_phase = self.phase

    # ----- output -----
    def _weak_pending(self):
        return [c for c in self.candidates if not c["strong"]]

    def settle(self, final=False):
        """Decide weak causes: at the end of input (``final``) an unanswered error ends the startup."""
        if self.confirmed or self.phase == "ready":
            return
        if final and self._weak_pending():
            self._confirm()
            self.failure_phase = self._weak_pending()[0]["phase"]
        if self.placement_stall_s and self.pg_wait_s >= self.placement_stall_s and self.phase == "placement":
            self.candidates.append({
                "cls": "stalled", "line": self.pg_wait_line, "strong": True,
                "phase": "placement", "seq": self._seq + 1,
            })
            self._confirm()

    def mark_stalled(self, seconds):
        """The caller saw no progress for ``seconds`` (wall clock)."""
        if self.confirmed:
            return
        ev = self.pg_wait_line or "no new progress for %d s in phase %s" % (seconds, self.phase)
        self.candidates.append({"cls": "stalled", "line": ev, "strong": True, "phase": self.phase, "seq": self._seq + 1})
        self._confirm()

    def mark_missing(self, evidence):
        """The caller could not find the log (a log file that does not exist)."""
        if self.confirmed:
            return
        self.candidates.append({"cls": "log_missing", "line": scrub(evidence), "strong": True, "phase": self.phase,
                                "seq": self._seq + 1})
        self._confirm()

    def mark_exited(self, evidence):
        """The caller saw the process (unit/container) gone."""
        if self.phase == "ready" and not self.confirmed:
            self.exit_lines.append(evidence)
            self._confirm()
            return
        self.exit_lines.append(evidence)
        if self._weak_pending() and not self.confirmed:
            self.failure_phase = self._weak_pending()[0]["phase"]
        self._confirm()

    def quiet_for(self):
        """Seconds of the log's own clock between the last progress and the last line, or None."""
        if self.last_ts is None:
            return None
        since = self.last_progress_ts if self.last_progress_ts is not None else self.first_ts
        if since is None:
            return None
        return max(0, self.last_ts - since)

    @property
    def failed(self):
        return self.confirmed

    def failure(self):
        if not self.confirmed:
            return None
        best = None
        for c in self.candidates:
            if best is None or (_PRIORITY[c["cls"]], c["seq"]) < (_PRIORITY[best["cls"]], best["seq"]):
                best = c
        if best is not None:
            cls = best["cls"]
            evidence = []
            seen = set()
            # Strong lines first (the exception itself), then the weak ones (warnings that led to it).
            for c in sorted(self.candidates, key=lambda c: (not c["strong"], c["seq"])):
                key = _norm(c["line"])
                if c["cls"] == cls and key not in seen:
                    seen.add(key)
                    evidence.append(c["line"])
            evidence = evidence[:6]
            phase = best["phase"]
        elif self.generic:
            cls = "engine_init_failed"
            evidence = []
            phase = self.failure_phase
        else:
            cls = "engine_exited"
            evidence = []
            phase = self.failure_phase
        extra = [ln for ln in self.generic[:2] + self.exit_lines[:2] if ln not in evidence]
        evidence = evidence + extra
        if not evidence:
            evidence = [c["line"] for c in self.candidates][:4]
        phase = phase or self.phase
        if self.frame_phase and PHASE_INDEX[self.frame_phase] > PHASE_INDEX.get(phase, 99):
            phase = self.frame_phase
        if phase == "ready":
            # e.g. uvicorn failing to bind after "startup complete": the API never came up.
            phase = "api_starting"
        return {
            "class": cls,
            "evidence": evidence[:8],
            "hint": HINTS[cls],
            "phase": phase,
        }

    def slowest_rank(self):
        loading = [(k, v) for k, v in self.ranks.items() if v.get("total")]
        if not loading:
            return None, None
        key, val = min(loading, key=lambda kv: (float(kv[1]["n"]) / kv[1]["total"], -(kv[1].get("eta_s") or 0)))
        return key, val

    def rank_label(self, key):
        if key is None:
            return None
        ip = key.split(" ", 1)[0]
        local = None if ip[:1].isdigit() or ":" in ip else self.rank_names.get("local")
        return self.rank_names.get(key) or self.rank_names.get(ip) or local or key

    def phase_times(self):
        out = {}
        seen = [p for p in PHASES if self.phase_first_ts.get(p) is not None]
        for i, p in enumerate(seen):
            start = self.phase_first_ts[p]
            end = self.phase_first_ts[seen[i + 1]] if i + 1 < len(seen) else self.last_ts
            if end is not None and 0 <= end - start < 7 * 86400:
                out[p] = end - start
        return out

    def snapshot(self):
        failure = self.failure()
        if failure is None and self.previous_failure and self.phase != "ready":
            # Restarted after a failure and not up yet: a crash loop until shown otherwise.
            failure = self.previous_failure
        key, slow = self.slowest_rank()
        progress = {}
        if slow:
            progress = {
                "unit": "shards",
                "n": slow["n"],
                "total": slow["total"],
                "percent": slow["percent"],
                "s_per_shard": slow.get("s_per_shard"),
                "eta_s": slow.get("eta_s"),
                "slowest_rank": self.rank_label(key),
            }
        if self.graphs and self.phase == "cuda_graphs":
            progress = {
                "unit": "graphs",
                "n": self.graphs[0],
                "total": self.graphs[1],
                "percent": int(round(100.0 * self.graphs[0] / self.graphs[1])) if self.graphs[1] else 0,
                "s_per_shard": None,
                "eta_s": None,
                "slowest_rank": None,
            }
        ranks = {}
        for k, v in self.ranks.items():
            ranks[k] = dict((f, v.get(f)) for f in ("n", "total", "percent", "s_per_shard", "eta_s"))
            ranks[k]["name"] = self.rank_label(k)
        return {
            "phase": "failed" if failure else self.phase,
            "failed_phase": failure["phase"] if failure else None,
            "failure": dict((k, failure[k]) for k in ("class", "evidence", "hint")) if failure else None,
            "progress": progress,
            "ranks": ranks,
            "phase_times": self.phase_times(),
            "placement_wait_s": self.pg_wait_s,
            "vllm_version": self.version,
            "api_address": self.api_address,
            "attempts": self.attempts,
            "previous_failure": self.previous_failure,
            "benign_warnings": self.benign[:5],
            "lines": self.lines_seen,
        }


def summary(snap):
    """One line a person can read at a glance."""
    phase = snap["phase"]
    if phase == "failed":
        f = snap["failure"]
        first = _norm(f["evidence"][0]) if f["evidence"] else ""
        return "failed in %s: %s%s" % (snap["failed_phase"], f["class"], (" (%s)" % first[:160]) if first else "")
    prog = snap.get("progress") or {}
    parts = [phase]
    if phase == "loading_weights" and prog.get("unit") == "shards":
        s = "%s %d/%d shards (%d%%)" % (phase, prog["n"], prog["total"], prog["percent"])
        if prog.get("s_per_shard"):
            s += ", %.1f s/shard" % prog["s_per_shard"]
        if prog.get("eta_s") is not None:
            s += ", ETA %d s" % prog["eta_s"]
        if prog.get("slowest_rank") and len(snap.get("ranks") or {}) > 1:
            s += "; slowest rank %s" % prog["slowest_rank"]
        return s
    if phase == "cuda_graphs" and prog.get("unit") == "graphs":
        return "cuda_graphs %d/%d graphs (%d%%)" % (prog["n"], prog["total"], prog["percent"])
    times = snap.get("phase_times") or {}
    if phase == "placement" and snap.get("placement_wait_s"):
        parts.append("(waiting %d s for a Ray placement group)" % snap["placement_wait_s"])
    elif phase == "ready" and times:
        parts.append("after %d s" % sum(v for k, v in times.items() if k != "ready"))
    elif times.get(phase) is not None:
        parts.append("(%d s so far)" % times[phase])
    return " ".join(parts)
