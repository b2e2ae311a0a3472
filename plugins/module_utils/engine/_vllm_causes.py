# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The failure classes of a vLLM startup: one ``Cause`` per class (private to sparkfleet.vllm).

Everything that differs between classes lives in its entry: the log patterns, the priority, the hint and
the text the module documentation shows. ``FAILURE_CLASSES``, ``PRIORITY``, ``HINTS`` and ``doc_note()``
are derived from ``CAUSES``; a unit test holds vllm_wait's DOCUMENTATION to ``doc_note()``.

Hints name *settings* (``{gpu_memory_utilization}``), never a caller's variables: ``render_hint()`` fills
them with the names the caller passes (vllm_wait's ``setting_names``, which the roles set to their
variables) or with the generic ones in ``_settings.SETTINGS``.

To add a class: add a ``Cause`` (its place in ``CAUSES`` is the order patterns are tried on one line; its
``priority`` decides between lines), name the settings its hint needs (adding any new one as ``_settings.py`` says),
add two captured logs under tests/unit/plugins/modules/fixtures/vllm_wait, and paste ``doc_note()`` into
vllm_wait's notes.
"""

from __future__ import annotations

import re

from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import fields, render_text


def _compiled(pattern):
    if pattern is None or hasattr(pattern, "search"):
        return pattern
    return re.compile(pattern)


class Cause(object):
    """One failure class.

    ``strong``: a line matching it ends the startup by itself. ``weak``: a line matching it ends the startup
    only when nothing progresses after it (vLLM tolerates some errors). Classes with neither are decided
    from something other than one line's text (a traceback, the process, the clock, the caller).
    ``priority``: lower wins when several classes show in one failed startup. ``hint``: what to change,
    naming settings as ``{setting}``. ``doc``: a few words for the module documentation, when the name alone
    does not say it.
    """

    __slots__ = ("name", "priority", "strong", "weak", "hint", "doc", "settings")

    def __init__(self, name, priority, strong=None, weak=None, hint="", doc=None):
        self.name = name
        self.priority = priority
        self.strong = _compiled(strong)
        self.weak = _compiled(weak)
        self.hint = hint
        self.doc = doc
        self.settings = fields(hint)

    def __repr__(self):
        return "Cause(%r, %d)" % (self.name, self.priority)


# Tried in this order on each line (the first that matches names the line).
CAUSES = [
    # Our own word (roles/sparkfleet/files/sparkfleet_watchdog.py's memory gate, an ExecStartPre of the vLLM unit): the
    # engine never started, and supervision will not start it again by itself.
    Cause(
        "supervision_escalated", 5,
        strong=re.compile(r"sparkfleet-watchdog: supervision of \S+ ESCALATED"),
        weak=None,
        hint=(
            "The memory gate (the unit's ExecStartPre) stopped starting the engine: on GB10 the GPU's memory is the"
            " host's, and a start into memory that is not there wedges the node. Do the human step its line names (each"
            " node short or silent and what holds its memory), then run site.yml, which lifts the escalation."),
        doc="the unified memory of a node short or silent; nothing restarts the engine"),
    Cause(
        "ray_oom_killed", 10,
        strong=re.compile(
            r"ray\.exceptions\.OutOfMemoryError|node running low on memory|"
            r"Ray killed this worker|memory usage threshold of|"
            r"Workers \(tasks / actors\) killed due to memory pressure|killed due to memory pressure \(OOM\)|"
            r"NODE_OUT_OF_MEMORY|Killing worker with task .{0,400}?[Mm]emory|"
            r"Memory on the node .{0,400}? exceeds the (?:memory usage )?threshold"),
        weak=None,
        hint=(
            "Ray's memory monitor killed a worker: on GB10 unified memory it trips during CUDA graph capture. Turn it"
            " off ({ray_memory_monitor}) or raise {ray_memory_usage_threshold}, and lower {gpu_memory_utilization} "
            "(the default 0.80 leaves room for graph capture).")),
    Cause(
        "cuda_oom", 20,
        strong=re.compile(
            r"CUDA out of memory|torch\.OutOfMemoryError|torch\.cuda\.OutOfMemoryError|OutOfMemoryError: CUDA|"
            r"CUDA error: out of memory|CUDA driver error: out of memory|cudaErrorMemoryAllocation|"
            r"CUBLAS_STATUS_ALLOC_FAILED|HIP out of memory|out of memory on device|"
            r"cudaMalloc.{0,400}?out of memory|CUDA_ERROR_OUT_OF_MEMORY|"
            r"Failed to allocate memory for (?:the )?(?:KV cache|CUDA graph)"),
        weak=None,
        hint=(
            "The GPU ran out of memory. Lower {gpu_memory_utilization} or {max_model_len} (or {max_num_seqs}), and "
            "make sure {gpu_cleanup} freed stale holders (nvidia-smi --query-compute-apps) on every node.")),
    # Kernels missing for this GPU, reported by torch, NCCL ("Cuda failure 'invalid device function'"),
    # the CUDA runtime or Triton's ptxas. Before nccl_error: NCCL wraps them as "unhandled cuda error".
    Cause(
        "gpu_arch_unsupported", 22,
        strong=re.compile(
            r"no kernel image is available for execution|invalid device function|"
            r"cudaErrorNoKernelImageForDevice|cudaErrorInvalidDeviceFunction|CUDA_ERROR_NO_BINARY_FOR_GPU|"
            r"CUDA_ERROR_INVALID_SOURCE|no binary for GPU|"
            r"ptxas fatal\s{0,4}: Value 'sm_\w{1,8}' is not defined for option"),
        weak=re.compile(r"with CUDA capability sm_\w{1,8} is not compatible with the current PyTorch installation|"
                        r"[Uu]nsupported (?:GPU|CUDA) architecture|CUDA arch(?:itecture)? .{0,80}? not supported"),
        hint=(
            "The image's CUDA kernels (PyTorch, vLLM, NCCL or Triton) were not built for this GPU: GB10 is compute "
            "capability 12.1 (sm_121) on aarch64. Use an image built for it ({images}), the same one on every node."),
        doc="the image has no kernels for this GPU"),
    Cause(
        "insufficient_memory", 25,
        strong=re.compile(
            r"Free memory on device .{0,400}?less than desired GPU memory utilization|"
            r"No available memory for the cache blocks|"
            r"larger than the available KV cache memory|"
            r"Available KV cache memory: -|"
            r"is larger than the maximum number of tokens that can be stored in KV cache|"
            r"Insufficient memory for|Not enough memory to|Error in memory profiling|"
            r"\[Errno 12\] Cannot allocate memory|DefaultCPUAllocator: can't allocate memory"),
        weak=re.compile(r"[Ii]nsufficient memory|[Nn]ot enough memory|Cannot allocate memory"),
        hint=(
            "Not enough free memory for weights plus KV cache. Free the GPU first ({gpu_cleanup} stops stale "
            "units/containers), then adjust {gpu_memory_utilization} (lower it when free memory is short at startup, "
            "raise it when no KV cache blocks fit) or reduce {max_model_len}.")),
    Cause(
        "ray_object_store_full", 27,
        strong=re.compile(r"OutOfDiskError|ObjectStoreFullError|"
                          r"object cannot be created because the local object store is full|Local disk is full"),
        weak=None,
        hint=(
            "Ray's object store was full and it could not spill to disk: the disk of Ray's directory ({ray_tmp_dir}) "
            "is (over 95%) full, or the container's /dev/shm is too small. Free space there or point it at a larger "
            "disk, and give the containers a larger /dev/shm (docker --shm-size)."),
        doc="Ray could neither store nor spill an object"),
    Cause(
        "placement_group", 70,
        strong=re.compile(
            r"Cannot provide a placement group|No available node types can fulfill resource request|"
            r"placement group .{0,400}?(?:infeasible|cannot be scheduled)|"
            r"does not have enough GPUs|Ray does not allocate any GPUs on the driver node|"
            r"The number of required GPUs exceeds the total number of available GPUs|"
            r"Current node has no GPU available|The current placement group .{0,400}? does not have"),
        weak=None,
        hint=(
            "Ray could not place the workers. Check `ray status` shows every node and GPU, and that VLLM_HOST_IP "
            "equals each node's Ray IP ({ray_node_ip}); {tensor_parallel_size} x {pipeline_parallel_size} must equal "
            "the cluster's GPUs, and no stale engine may hold a GPU.")),
    # NCCL's bootstrap and collectives, named before the generic rendezvous and NCCL classes: when one rank fails
    # there, the others report a broken store or a generic NCCL error, and the specific cause must win.
    Cause(
        "nccl_duplicate_gpu", 56,
        strong=re.compile(r"Duplicate GPU detected"),
        weak=None,
        hint=(
            "Two ranks of the engine landed on one GPU, which NCCL refuses. Each node must give Ray exactly its own "
            "GPUs ({gpus_per_node}), {tensor_parallel_size} x {pipeline_parallel_size} must equal the cluster's GPUs, "
            "and no stale engine or second Ray node may run on a node ({gpu_cleanup})."),
        doc="two ranks on one GPU"),
    Cause(
        "nccl_no_interface", 57,
        strong=re.compile(r"no socket interface found|NET/Socket : no interface found|"
                          r"NCCL_SOCKET_IFNAME.{0,200}?(?:no|not) (?:usable |matching )?interface"),
        weak=None,
        hint=(
            "NCCL found no network interface it may use (NCCL_SOCKET_IFNAME names one the container does not have), "
            "so its bootstrap cannot start. It must name the fabric interface ({fabric_interface}) as `ip -o link` "
            "shows it inside the container (which runs with --network host), on every node."),
        doc="NCCL_SOCKET_IFNAME names no interface"),
    Cause(
        "nccl_net_unavailable", 58,
        strong=re.compile(r"Failed to initialize any NET plugin|[Nn]etwork (?:IB|IBext\w{0,20}|Socket) not found|"
                          r"NCCL_IB_HCA.{0,200}?(?:no|not) (?:device|HCA)"),
        weak=None,
        hint=(
            "NCCL was made to use a network it cannot open: RDMA forced (NCCL_NET=IB, or NCCL_IB_HCA naming devices "
            "that are not there) without a usable RDMA device in the container. Give the container the devices "
            "({container_rdma}) with NCCL_IB_HCA following {fabric_interface}'s devices, or allow the TCP path "
            "({allow_tcp_fallback})."),
        doc="RDMA forced without a usable device"),
    Cause(
        "collective_failed", 59,
        strong=re.compile(
            r"Watchdog caught collective operation timeout|watchdog thread terminated with exception|"
            r"detected by watchdog at work|Timeout at NCCL work|watchdog got stuck|"
            r"failure detected by watchdog|Some NCCL operations have failed or timed out|"
            r"NCCL communicator was aborted|[Cc]ollective operation timeout|"
            r"Cuda failure (?:\d{1,4} )?'|remote process exited or there was a network error|ncclRemoteError|"
            r"NET/IB : Got completion from peer .{0,200}? with (?:error|status)"),
        weak=None,
        hint=(
            "A collective (all-reduce) did not finish on every rank and torch's NCCL watchdog stopped the engine. "
            "Usually one rank died or hangs (find the first error in every node's log: an OOM kill, a GPU fault "
            "shown as a CUDA error), or the fabric drops large packets ({fabric_mtu} on every port and switch); "
            "rerun with {nccl_debug} for NCCL's view."),
        doc="a collective stopped by the NCCL watchdog or a GPU fault"),
    Cause(
        "rendezvous_failed", 60,
        strong=re.compile(
            r"client socket has failed to connect to any network address|connectFullMesh failed|DistNetworkError|"
            r"DistStoreError|Timed out after \d+ seconds waiting for clients|"
            r"TCPStore.{0,400}?(?:timed out|failed|Broken pipe|Connection reset)|TCP client failed to connect|"
            r"Gloo connectFullMesh|gloo/transport/tcp/pair\.cc|"
            r"RendezvousConnectionError|RendezvousTimeoutError|"
            r"init_process_group.{0,400}?(?:timed out|failed)|connect\(\) timed out\. Original timeout|"
            # Gloo (torch.distributed's CPU group) when GLOO_SOCKET_IFNAME names no interface of the container
            r"Unable to find address for: "),
        weak=re.compile(r"client socket has failed to connect|Network is unreachable|"
                        r"Connection refused.{0,400}?(?:store|rendezvous|c10d)"),
        hint=(
            "torch.distributed could not connect the ranks: some address points off the fabric. Pin ray start "
            "--node-ip-address, VLLM_HOST_IP and GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to {fabric_ip} / "
            "{fabric_interface} on every node.")),
    Cause(
        "nccl_error", 65,
        strong=re.compile(
            r"NCCL [Ee]rror|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|ncclInvalidUsage|"
            r"ncclRemoteError|ncclInvalidArgument|unhandled system error|unhandled cuda error|"
            r"DistBackendError|ProcessGroupNCCL.{0,400}?(?:[Ww]atchdog caught|timed? ?out|error)|"
            r"NCCL communicator was aborted|Failed to initialize NCCL|NCCL_CHECK|"
            r"ncclCommInitRank failed|pynccl.{0,400}?(?:error|failed)"),
        weak=re.compile(r"NCCL WARN|Call to ibv_\w+ failed|NET/IB : .{0,400}?(?:failed|error)"),
        hint=(
            "NCCL failed to initialise or communicate. Check NCCL_SOCKET_IFNAME / NCCL_IB_HCA follow "
            "{fabric_interface} on each node, MTU {fabric_mtu} on both ends, and /dev/shm size in the container; "
            "rerun with {nccl_debug} for detail.")),
    # Ray refusing the caller's token, checked before ray_unreachable: the driver then also "fails to connect".
    Cause(
        "ray_auth_failed", 52,
        strong=re.compile(r"InvalidAuthToken|Authentication token is missing or incorrect|"
                          r"ray\.exceptions\.AuthenticationError"),
        weak=None,
        hint=(
            "Ray refused the token: the cluster runs with token authentication and this process's RAY_AUTH_TOKEN is "
            "missing or differs from the head's. Use one token on every node and in the server ({ray_auth_token}), "
            "then restart the Ray cluster ({ray_cluster}) and the server."),
        doc="the Ray token is missing or wrong"),
    Cause(
        "raylet_died", 54,
        # Weak: the driver also relays the death of a raylet whose node was already marked dead (a fabric that came
        # back: the GCS tells that raylet to exit, its unit starts a new one, and the placement group lands on it).
        # Progress after the line clears it; an engine that dies or stalls after it is still explained by it.
        strong=None,
        weak=re.compile(r"Raylet is terminated|[Rr]aylet (?:process )?(?:has )?(?:died|exited unexpectedly)"),
        hint=(
            "A node's Ray (its raylet) died while the engine ran, and the ranks on that node with it. Find why on that "
            "node (the Ray unit's journal, the kernel log for the OOM killer: lower {gpu_memory_utilization} if memory "
            "ran out), then restart the Ray cluster ({ray_cluster}) and the server."),
        doc="the Ray of a node died under the engine"),
    Cause(
        "ray_unreachable", 55,
        strong=re.compile(
            r"Could not find any running Ray instance|Could not read 'node_ip_address'|"
            r"Failed to connect to GCS within|"
            r"Failed to get the system config from raylet|RaySystemError|"
            r"GCS (?:server )?(?:is not|could not be) (?:reachable|reached)|"
            r"Failed to connect to the Ray cluster|Failed to register worker.{0,400}? to Raylet|"
            r"ray\.init\(\) .{0,400}?failed|Can't find a `node_ip_address\.json`|"
            r"ray client connection timeout"),
        weak=re.compile(r"Unable to connect to GCS|Failed to connect to GCS"),
        hint=(
            "vLLM found no running Ray cluster. Start it first ({ray_cluster}) and make sure the head address "
            "({ray_head_address}) is reachable from the serving node, with the same Ray version ({images}).")),
    Cause(
        "model_unsupported", 40,
        strong=re.compile(
            r"Model architectures? \[.{0,400}?\] (?:are|is) not supported|are not supported for now|"
            r"is not supported for now|Unrecognized model in|but Transformers does not recognize this architecture|"
            r"does not recognize this architecture|The checkpoint you are trying to load has model type|"
            r"No model architectures are specified|Cannot find model module|failed to be inspected|"
            r"Unrecognized configuration class|contains custom code which must be executed|"
            r"is not supported by the current vLLM|not supported on this GPU|"
            r"Unsupported (?:model|architecture)|Unknown quantization method|"
            r"quantization (?:method )?.{0,400}? is not supported|compute capability .{0,400}? not supported|"
            r"requires (?:a )?(?:GPU|compute capability) |only supported on GPUs with compute capability"),
        weak=None,
        hint=(
            "This vLLM build does not support the model's architecture. Use a newer vLLM image ({image}) or a model "
            "supported by it ({model}); a model that ships custom code needs {trust_remote_code}.")),
    Cause(
        "weights_corrupt", 50,
        strong=re.compile(
            r"SafetensorError|safetensors_rust|Error while deserializing header|"
            r"HeaderTooLarge|MetadataIncompleteBuffer|InvalidHeaderDeserialization|"
            r"incomplete metadata, file not fully covered|"
            r"Cannot find any model weights|No such file or directory: .{0,400}?\.(?:safetensors|bin|pt)\b|"
            r"PytorchStreamReader failed|invalid load key|storage has wrong size|"
            r"size mismatch for|not found in checkpoint|"
            r"does not appear to have a file named|No such file or directory: .{0,400}?config\.json|"
            r"\.safetensors\b.{0,400}?(?:not found|does not exist|missing|truncated)"),
        weak=re.compile(r"unexpected EOF|KeyError: '[\w.]+\.(?:weight|bias|scale|weight_scale|qweight)\w*'|"
                        r"Repository Not Found|RepositoryNotFoundError|LocalEntryNotFoundError|"
                        r"is not a local folder and is not a valid model identifier|GatedRepoError|"
                        r"gated repo"),
        hint=(
            "The weight files are missing, incomplete or corrupted. Copy the model again ({model_sync}) with "
            "{model_sync_verify} (and {model_sync_checksum} to compare hashes) so every node holds identical, "
            "complete files in {model_dir}.")),
    Cause(
        "port_in_use", 30,
        strong=re.compile(
            r"\[Errno 98\]|Address already in use|address already in use|EADDRINUSE|"
            r"port \d+ is (?:already )?in use|port is already in use|port is already allocated"),
        weak=None,
        hint=(
            "The API port is already taken, usually by an old vLLM. Stop the stale unit/container ({stale_units}) or "
            "change {port}.")),
    Cause(
        "dependency_missing", 35,
        strong=re.compile(
            r"(?:vllm|ray|python3?): (?:command )?not found|executable file not found in \$PATH|"
            r"CUDA driver version is insufficient|NVIDIA driver on your system is too old|"
            r"could not select device driver .{0,400}? with capabilities"),
        weak=re.compile(
            r"ModuleNotFoundError|No module named|ImportError: |cannot import name|"
            r"undefined symbol|libcuda\.so.{0,400}?(?:not found|cannot open)|"
            r"lib[\w.+-]+\.so[.\d]*: cannot open shared object file|"
            r"requires the [`']?[\w-]+[`']? (?:package|library)|Please install [\w-]+|"
            r"pip install [\w\[\]-]+ to|Failed to find C compiler|Python\.h: No such file"),
        hint=(
            "Something the server needs is missing or too old (a Python module, a library, the driver or the "
            "container GPU runtime). Use a vLLM image that ships it ({image}), or install the named package there.")),
    # A worker whose Python packages differ from the driver's: Ray says so, or the worker cannot import or
    # unpickle what the driver sent. Import errors raised inside a Ray worker are moved here from
    # dependency_missing (see VllmLogParser._failure_checks).
    Cause(
        "worker_env_mismatch", 37,
        strong=re.compile(
            r"Version mismatch: The cluster was started with|failed to import on the worker|"
            r"library dependencies are not installed in the worker environment|"
            r"Can't get attribute '\w{1,80}' on <module '(?:vllm|ray|torch)|"
            r"(?:vllm|ray|torch) version mismatch between (?:the )?driver and (?:the )?workers?"),
        weak=None,
        hint=(
            "A Ray worker runs other Python packages (vLLM, Ray, torch, Python itself) than the driver on the head "
            "node, so the engine breaks even when the API answers. Run one image on every node ({images}; pin it by "
            "digest) and restart the Ray cluster ({ray_cluster}) so the workers use it."),
        doc="a Ray worker runs other packages than the driver"),
    Cause(
        "tokenizer_error", 45,
        strong=None,
        weak=re.compile(
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
            r"tokenizer_class.{0,200}?(?:does not match|mismatch|is not the same)"),
        hint=(
            "The tokenizer could not be loaded. Check {model_dir} holds tokenizer files (tokenizer.json / "
            "tokenizer_config.json) and that the transformers version in the image supports this model; consider "
            "{trust_remote_code}.")),
    Cause(
        "worker_died", 80,
        strong=re.compile(
            r"RayActorError|ActorDiedError|actor died unexpectedly|The actor died|NodeDiedError|"
            r"died unexpectedly|Worker proc .{0,400}? died|WorkerProc hit an exception|"
            r"Engine core proc .{0,400}? died|EngineDeadError|worker process .{0,400}? (?:died|exited)|"
            r"A worker died or was killed|Worker .{0,400}? exited unexpectedly|Actor .{0,400}? is dead|"
            r"exited with code -9"),
        # A node marked dead by the GCS (relayed by the driver) may come back and take the placement: see raylet_died.
        weak=re.compile(r"has been marked dead"),
        hint=(
            "A vLLM worker or engine process died. Look at the evidence and the worker node's log (journalctl/docker "
            "logs on that node) for the first error; a Ray OOM kill or NCCL fault is the usual cause.")),
    Cause(
        "stalled", 85,
        hint=(
            "No progress for stall_timeout seconds ({stall_timeout}). A placement-group wait means Ray lacks a node "
            "or GPU (check `ray status`, VLLM_HOST_IP = {ray_node_ip}); a silent hang after distributed init is "
            "usually NCCL on the wrong interface ({fabric_interface})."),
        doc="no progress for I(stall_timeout)"),
    Cause(
        "engine_exited", 90,
        hint=(
            "The vLLM process stopped without printing a known failure. Check the unit or container ({server}: "
            "systemctl status, docker inspect), the kernel log for the OOM killer, and the full log."),
        doc="process or unit gone without a failure in the log"),
    Cause(
        "engine_init_failed", 100,
        hint=(
            "The engine failed to start; the evidence shows the first error vLLM printed. If it took about 600 s, "
            "raise {engine_ready_timeout}."),
        doc="generic, only when nothing more specific is in the log"),
    Cause(
        "log_missing", 110,
        hint=(
            "The log file does not exist. Check log_file names the file the server writes (its unit's StandardOutput="
            " or the shell redirect) and that the server was started; or follow the unit or container instead (unit /"
            " container)."),
        doc="I(log_file) does not exist"),
]

CAUSE = dict((c.name, c) for c in CAUSES)
FAILURE_CLASSES = tuple(c.name for c in CAUSES)
# The causes a log line can show, in the order they are tried.
LINE_CAUSES = tuple(c for c in CAUSES if c.strong is not None or c.weak is not None)
PRIORITY = dict((c.name, c.priority) for c in CAUSES)


def render_hint(cls, names=None):
    """The hint of class ``cls`` with every setting named as ``names`` says, else by its generic name."""
    names = names or {}
    return render_text(CAUSE[cls].hint, names)


# Every hint with the generic names: what a caller that passes no names sees.
HINTS = dict((c.name, render_hint(c.name)) for c in CAUSES)


def doc_note():
    """The sentence vllm_wait's notes must hold: every class, the most specific (winning) first."""
    parts = []
    for c in sorted(CAUSES, key=lambda c: c.priority):
        parts.append("C(%s)%s" % (c.name, " (%s)" % c.doc if c.doc else ""))
    return ("Failure classes, from the one that wins when several show in a log to the most generic: %s and %s."
            % (", ".join(parts[:-1]), parts[-1]))
