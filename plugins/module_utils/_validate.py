# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Validation of the serving settings: one check per variable, shared by the preflight filter
(serving_errors) and the vllm_serve_args filter, and vLLM's reading of `vllm serve` flags.

Private to the collection, pure functions, no I/O. A check never raises: it returns
(normalised value, None) or (None, problem), the problem saying what is wrong and how to fix it.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import posixpath
import re

from ansible_collections.sparkfleet.vllm.plugins.module_utils._image import parse_version
from ansible_collections.sparkfleet.vllm.plugins.module_utils._paths import SYSTEM_DIRS, model_path_problem

# `vllm serve` long flags of vLLM 0.17.1 (EngineArgs, FrontendArgs and the serve subcommand), without "--".
VLLM_SERVE_FLAGS = frozenset((
    "additional-config", "aggregate-engine-logging", "all2all-backend", "allow-credentials",
    "allow-deprecated-quantization", "allowed-headers", "allowed-local-media-path", "allowed-media-domains",
    "allowed-methods", "allowed-origins", "api-key", "api-server-count", "async-scheduling", "attention-backend",
    "attention-config", "block-size", "calculate-kv-scales", "chat-template", "chat-template-content-format",
    "code-revision", "collect-detailed-traces", "compilation-config", "config", "config-format", "convert",
    "cp-kv-cache-interleave-size", "cpu-offload-gb", "cpu-offload-params", "cudagraph-capture-sizes",
    "cudagraph-metrics", "data-parallel-address", "data-parallel-backend", "data-parallel-external-lb",
    "data-parallel-hybrid-lb", "data-parallel-rank", "data-parallel-rpc-port", "data-parallel-size",
    "data-parallel-size-local", "data-parallel-start-rank", "dbo-decode-token-threshold",
    "dbo-prefill-token-threshold", "dcp-kv-cache-interleave-size", "decode-context-parallel-size",
    "default-chat-template-kwargs", "default-mm-loras", "disable-access-log-for-endpoints", "disable-cascade-attn",
    "disable-chunked-mm-input", "disable-custom-all-reduce", "disable-fastapi-docs",
    "disable-frontend-multiprocessing", "disable-hybrid-kv-cache-manager", "disable-log-stats",
    "disable-nccl-for-dp-synchronization", "disable-sliding-window", "disable-uvicorn-access-log",
    "distributed-executor-backend", "download-dir", "dtype", "ec-transfer-config", "enable-auto-tool-choice",
    "enable-chunked-prefill", "enable-dbo", "enable-elastic-ep", "enable-eplb", "enable-expert-parallel",
    "enable-flashinfer-autotune", "enable-force-include-usage", "enable-layerwise-nvtx-tracing", "enable-log-deltas",
    "enable-log-outputs", "enable-log-requests", "enable-logging-iteration-details", "enable-lora",
    "enable-mfu-metrics", "enable-mm-embeds", "enable-offline-docs", "enable-prefix-caching", "enable-prompt-embeds",
    "enable-prompt-tokens-details", "enable-request-id-headers", "enable-return-routed-experts",
    "enable-server-load-tracking", "enable-sleep-mode", "enable-ssl-refresh", "enable-tokenizer-info-endpoint",
    "enable-tower-connector-lora", "enforce-eager", "eplb-config", "exclude-tools-when-tool-choice-none",
    "expert-placement-strategy", "fail-on-environ-validation", "fully-sharded-loras", "generation-config",
    "gpu-memory-utilization", "h11-max-header-count", "h11-max-incomplete-event-size", "headless", "hf-config-path",
    "hf-overrides", "hf-token", "host", "ignore-patterns", "interleave-mm-strings", "io-processor-plugin",
    "kernel-config", "kv-cache-dtype", "kv-cache-memory-bytes", "kv-cache-metrics", "kv-cache-metrics-sample",
    "kv-events-config", "kv-offloading-backend", "kv-offloading-size", "kv-sharing-fast-prefill",
    "kv-transfer-config", "language-model-only", "limit-mm-per-prompt", "load-format", "log-config-file",
    "log-error-stack", "logits-processors", "logprobs-mode", "long-prefill-token-threshold", "lora-dtype",
    "lora-modules", "mamba-block-size", "mamba-cache-dtype", "mamba-cache-mode", "mamba-ssm-cache-dtype",
    "master-addr", "master-port", "max-cpu-loras", "max-cudagraph-capture-size", "max-log-len", "max-logprobs",
    "max-long-partial-prefills", "max-lora-rank", "max-loras", "max-model-len", "max-num-batched-tokens",
    "max-num-partial-prefills", "max-num-seqs", "max-parallel-loading-workers", "media-io-kwargs", "middleware",
    "mm-encoder-attn-backend", "mm-encoder-only", "mm-encoder-tp-mode", "mm-processor-cache-gb",
    "mm-processor-cache-type", "mm-processor-kwargs", "mm-shm-cache-max-object-size-mb", "model", "model-impl",
    "model-loader-extra-config", "moe-backend", "nnodes", "node-rank", "num-gpu-blocks-override", "offload-backend",
    "offload-group-size", "offload-num-in-group", "offload-params", "offload-prefetch-step", "optimization-level",
    "otlp-traces-endpoint", "override-attention-dtype", "override-generation-config", "performance-mode",
    "pipeline-parallel-size", "pooler-config", "port", "prefill-context-parallel-size", "prefix-caching-hash-algo",
    "profiler-config", "pt-load-map-location", "quantization", "ray-workers-use-nsight", "reasoning-parser",
    "reasoning-parser-plugin", "response-role", "return-tokens-as-token-ids", "revision", "root-path", "runner",
    "safetensors-load-strategy", "scheduler-cls", "scheduling-policy", "seed", "served-model-name",
    "show-hidden-metrics-for-version", "skip-mm-profiling", "skip-tokenizer-init", "specialize-active-lora",
    "speculative-config", "ssl-ca-certs", "ssl-cert-reqs", "ssl-certfile", "ssl-ciphers", "ssl-keyfile",
    "stream-interval", "structured-outputs-config", "swap-space", "tensor-parallel-size", "tokenizer",
    "tokenizer-mode", "tokenizer-revision", "tokens-only", "tool-call-parser", "tool-parser-plugin", "tool-server",
    "trust-remote-code", "trust-request-chat-template", "ubatch-size", "uds", "use-gpu-for-pooling-score",
    "use-tqdm-on-load", "uvicorn-log-level", "video-pruning-rate", "weight-transfer-config", "worker-cls",
    "worker-extension-cls",
))
# Boolean flags (argparse.BooleanOptionalAction): each also has a --no-<flag> spelling.
VLLM_BOOLEAN_FLAGS = frozenset((
    "aggregate-engine-logging", "allow-credentials", "allow-deprecated-quantization", "async-scheduling",
    "calculate-kv-scales", "cudagraph-metrics", "data-parallel-external-lb", "data-parallel-hybrid-lb",
    "disable-cascade-attn", "disable-chunked-mm-input", "disable-custom-all-reduce", "disable-fastapi-docs",
    "disable-frontend-multiprocessing", "disable-hybrid-kv-cache-manager", "disable-log-stats",
    "disable-nccl-for-dp-synchronization", "disable-sliding-window", "disable-uvicorn-access-log",
    "enable-auto-tool-choice", "enable-chunked-prefill", "enable-dbo", "enable-elastic-ep", "enable-eplb",
    "enable-expert-parallel", "enable-flashinfer-autotune", "enable-force-include-usage",
    "enable-layerwise-nvtx-tracing", "enable-log-deltas", "enable-log-outputs", "enable-log-requests",
    "enable-logging-iteration-details", "enable-lora", "enable-mfu-metrics", "enable-mm-embeds",
    "enable-offline-docs", "enable-prefix-caching", "enable-prompt-embeds", "enable-prompt-tokens-details",
    "enable-request-id-headers", "enable-return-routed-experts", "enable-server-load-tracking", "enable-sleep-mode",
    "enable-ssl-refresh", "enable-tokenizer-info-endpoint", "enable-tower-connector-lora", "enforce-eager",
    "exclude-tools-when-tool-choice-none", "fail-on-environ-validation", "fully-sharded-loras",
    "interleave-mm-strings", "kv-cache-metrics", "kv-sharing-fast-prefill", "language-model-only", "log-error-stack",
    "mm-encoder-only", "ray-workers-use-nsight", "return-tokens-as-token-ids", "skip-mm-profiling",
    "skip-tokenizer-init", "specialize-active-lora", "tokens-only", "trust-remote-code",
    "trust-request-chat-template", "use-gpu-for-pooling-score", "use-tqdm-on-load",
))
# Short spellings vLLM registers next to the long flags.
VLLM_SHORT_ALIASES = {
    "-tp": "tensor-parallel-size", "-pp": "pipeline-parallel-size", "-dp": "data-parallel-size",
    "-dpn": "data-parallel-rank", "-dpr": "data-parallel-start-rank", "-dpl": "data-parallel-size-local",
    "-dpa": "data-parallel-address", "-dpp": "data-parallel-rpc-port", "-dpb": "data-parallel-backend",
    "-dph": "data-parallel-hybrid-lb", "-dpe": "data-parallel-external-lb", "-dcp": "decode-context-parallel-size",
    "-pcp": "prefill-context-parallel-size", "-ep": "enable-expert-parallel", "-n": "nnodes", "-r": "node-rank",
    "-q": "quantization", "-cc": "compilation-config", "-ac": "attention-config", "-asc": "api-server-count",
    "-h": "help",
}

# Flags the deployment owns: extra args may never set them, in any spelling (value: how to fix it).
ALWAYS_PINNED = {
    "model": "set vllm_serve_model (sparkfleet_model_dir) instead",
    "served-model-name": "set vllm_serve_served_model_name instead",
    "tensor-parallel-size": "set vllm_serve_tensor_parallel_size instead",
    "pipeline-parallel-size": "set vllm_serve_pipeline_parallel_size instead",
    "distributed-executor-backend": "remove it: this deployment always runs vLLM on Ray across the nodes",
    "host": "set sparkfleet_api_host instead",
    "port": "set sparkfleet_api_port instead",
    "api-key": "set vllm_serve_api_key instead (it goes to the server's environment, never onto its command line)",
    "config": "remove it and put the flags in vllm_serve_extra_args (a config file could set the pinned flags)",
    "help": "remove it (vllm serve --help prints the help and exits)",
}
# Flags a role variable sets; pinned whenever the vllm_serve_args input carries the key.
KEY_FLAGS = {
    "gpu_memory_utilization": "gpu-memory-utilization", "max_model_len": "max-model-len",
    "load_format": "load-format", "safetensors_load_strategy": "safetensors-load-strategy",
    "enforce_eager": "enforce-eager", "trust_remote_code": "trust-remote-code",
}


def pinned_flags(keys=()):
    """Flag name -> fix, for the always-pinned flags and those of the given vllm_serve_args keys."""
    pinned = dict(ALWAYS_PINNED)
    for key in keys:
        if key in KEY_FLAGS:
            pinned[KEY_FLAGS[key]] = "set vllm_serve_%s instead" % key
    return pinned


_HUMAN_INT_RE = re.compile(r"^(\d+(?:\.\d+)?)([kmgtKMGT])$")
_DECIMAL = {"k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9, "t": 10 ** 12}
_BINARY = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
_NEGATIVE_NUMBER_RE = re.compile(r"^-\d+$|^-\d*\.\d+$")
_KEY_RE = re.compile(r"^-{0,2}[A-Za-z0-9][A-Za-z0-9_.+-]*$")
# systemd rewrites these inside ExecStart even when quoted ($VAR, %specifier, C escapes); newline/NUL break any line.
UNSAFE = (("\n", "a newline"), ("\r", "a carriage return"), ("\0", "a NUL byte"),
          ("$", "'$'"), ("%", "'%'"), ("\\", "a backslash"))


def is_string(value):
    return isinstance(value, str)


def unsafe_problem(text):
    """The reason systemd's ExecStart would mangle text, or None."""
    for bad, name in UNSAFE:
        if bad in text:
            return ("contains %s, which systemd's ExecStart would rewrite or split; remove it (pass the value"
                    " through an environment variable or a config file instead)" % name)
    return None


def check_int(value, low=None, high=None, what="a whole number"):
    """An integer (or a decimal string of one, ASCII digits and blanks only) within [low, high]."""
    if isinstance(value, bool):
        return None, "must be %s, not a boolean" % what
    # ASCII: Unicode's \s takes characters int() refuses (U+001F), its \d digits no one means here.
    if is_string(value) and re.fullmatch(r"\s*[+-]?\d+\s*", value, re.ASCII):
        value = int(value)
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        return None, "must be %s" % what
    if low is not None and value < low or high is not None and value > high:
        if high is None:
            return None, "must be at least %d" % low
        return None, "must be between %d and %d" % (low, high)
    return value, None


def check_parallel_size(value):
    n, problem = check_int(value, 1)
    if problem and n is None and "at least" in problem:
        problem += " (1 means no parallelism of that kind)"
    return n, problem


def check_port(value):
    return check_int(value, 1, 65535, "a TCP port number")


def check_seconds(value):
    return check_int(value, 1, None, "a whole number of seconds")


def check_count(value):
    return check_int(value, 1, None, "a whole number")


def check_fraction(value):
    """gpu_memory_utilization: a number in (0, 1]."""
    if isinstance(value, bool):
        return None, "must be a number, not a boolean"
    try:
        f = float(value.strip() if is_string(value) else value)
    except (TypeError, ValueError, OverflowError):
        return None, "must be a number in (0, 1], e.g. 0.85"
    if not 0 < f <= 1:
        return None, "must be in (0, 1] (it is a fraction: 0.85 means 85%)"
    return f, None


def parse_human_int(value):
    """vLLM's reading of sizes: 8192, 32k (x1000), 32K (x1024); decimals only with decimal suffixes."""
    s = value.strip()
    m = _HUMAN_INT_RE.match(s)
    if m:
        number, suffix = m.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise ValueError("decimals with a binary suffix")
        return int(number) * _BINARY[suffix]
    if not re.match(r"^\d+$", s):
        raise ValueError(s)
    return int(s)


def check_max_model_len(value):
    """A positive number of tokens: 32768, or vLLM's 32k (32000) / 32K (32768)."""
    if isinstance(value, bool):
        return None, "must be a positive integer or a size like '32k', not a boolean"
    if isinstance(value, int):
        n = value
    elif is_string(value):
        try:
            n = parse_human_int(value)
        except ValueError:
            return None, "must be a positive integer or a size like '32k' (32000) or '32K' (32768)"
        value = value.strip()
    else:
        return None, "must be a positive integer or a size like '32k'"
    if n < 1:
        return None, "must be positive"
    return value, None


def check_string(value):
    if not is_string(value) or not value.strip():
        return None, "must be a non-empty string"
    problem = unsafe_problem(value)
    return (None, problem) if problem else (value, None)


def check_optional_string(value):
    return (None, None) if value is None or value == "" else check_string(value)


def check_names(value):
    """served_model_name: a string or a non-empty list of strings."""
    names = [value] if is_string(value) else value
    if not isinstance(names, list) or not names:
        return None, "must be a string or a non-empty list of strings"
    for name in names:
        problem = check_string(name)[1]
        if problem:
            return None, problem
    return names, None


def check_model_dir(value):
    """The model directory: an absolute path (same on every node), not a system directory."""
    if not is_string(value) or not value.strip():
        return None, ("must be the absolute path of the model directory (the same on every node); set"
                      " sparkfleet_model_dir")
    problem = unsafe_problem(value)
    if problem:
        return None, problem
    if not value.startswith("/"):
        return None, "must be an absolute path (it is mounted into the container at the same path)"
    if ":" in value or "," in value:
        return None, "must not contain ':' or ',' (docker -v splits on them)"
    if value != value.strip() or any(c.isspace() for c in value):
        return None, "must not contain whitespace"
    # The same guard model_sync applies before it creates, chowns or syncs anything.
    problem = model_path_problem(value, "path")
    if problem:
        return None, "%s; use the model's own directory, e.g. /models/<name>" % problem.replace("the path %r " % value, "")
    norm = posixpath.normpath(value)
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    return norm, None


def check_host(value):
    """The listen address: an IP address or a host name."""
    if not is_string(value) or not value.strip():
        return None, "must be the address vLLM listens on (an IP address)"
    if any(c.isspace() for c in value) or unsafe_problem(value):
        return None, "must be an IP address or a host name (no whitespace, '$', '%' or backslash)"
    return value, None


def is_loopback(host):
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_api_key(value):
    """The API key: empty (open API) or a string without whitespace."""
    if value is None:
        return "", None
    if not is_string(value):
        return None, "must be a string (keep it in a vault)"
    if any(c.isspace() for c in value):
        return None, ("contains whitespace (a stray newline or space from a file or vault?); clients send the key"
                      " without it, so strip it")
    return value, None


def check_bool(value):
    if not isinstance(value, bool):
        return None, "must be true or false"
    return value, None


def check_min_mtu(value):
    """sparkfleet_fabric_min_mtu: unset (rdma_facts' 9000) or an interface MTU, 68 to 65535."""
    if value is None or value == "":
        return 9000, None
    return check_int(value, 68, 65535, "an MTU (9000 for jumbo frames)")


def check_env(value):
    if value is None:
        return {}, None
    if not isinstance(value, dict):
        return None, "must be a dict of NAME: value"
    for name in value:
        if not is_string(name) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            return None, "has %r, which is not an environment variable name" % (name,)
    return value, None


_UNIT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@:-]*$")
_CONTAINER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]+$")
# NCCL_DEBUG's levels (NCCL reads them without regard to case); empty turns NCCL's log off.
NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")


def check_unit_name(value):
    """A systemd service name without its .service suffix (the roles append it)."""
    if not is_string(value) or not _UNIT_RE.match(value):
        return None, "must be a systemd unit name (letters, digits, '_', '.', '@', ':', '-'), e.g. sparkfleet-vllm"
    if value.endswith(".service"):
        return None, "must be given without '.service' (the roles add it): %s" % value[:-len(".service")]
    return value, None


def check_unit_and_container_name(value):
    """Our units run a container of the same name (sparkfleet_ray_unit, sparkfleet_vllm_unit): both rules apply."""
    problems = [p for p in (check_unit_name(value)[1], check_container_name(value)[1]) if p]
    return (None, " and ".join(problems)) if problems else (value, None)


def check_container_name(value):
    """A Docker container name (docker's own rule: [a-zA-Z0-9][a-zA-Z0-9_.-]+)."""
    if not is_string(value) or not _CONTAINER_RE.match(value):
        return None, "must be a Docker container name: a letter or digit, then letters, digits, '_', '.', '-'"
    return value, None


def _host_path_problem(value, what):
    """A host path the roles write and mount: absolute, and nothing systemd or docker -v would mangle."""
    if not is_string(value) or not value.strip():
        return "must be an absolute path (the %s)" % what
    problem = unsafe_problem(value)
    if problem:
        return problem
    if not value.startswith("/"):
        return "must be an absolute path (the %s)" % what
    if ":" in value or "," in value or any(c.isspace() for c in value):
        return "must not contain ':', ',' or whitespace (docker -v splits on them)"
    return None


def check_data_dir(value):
    """A directory the roles create (root, 0755) and mount read-write into the containers: not the system's."""
    problem = _host_path_problem(value, "directory the containers write to")
    if problem:
        return None, problem
    problem = model_path_problem(value, "directory")
    if problem:
        return None, "%s; use a directory of its own, e.g. /var/cache/sparkfleet/vllm" % problem.replace(
            "the directory %r " % value, "")
    return posixpath.normpath(value), None


def check_config_dir(value):
    """The directory of our env files (/etc/sparkfleet): a directory of its own, not a system directory."""
    problem = _host_path_problem(value, "directory of the env files, e.g. /etc/sparkfleet")
    if problem:
        return None, problem
    norm = posixpath.normpath(value)
    if norm in SYSTEM_DIRS and norm != "/etc/sparkfleet":
        return None, "is the system directory %s; use a directory of its own, e.g. /etc/sparkfleet" % norm
    return norm, None


def check_state_file(value):
    """model_sync's state file on the head (read, and copied next to itself as <file>.served)."""
    problem = _host_path_problem(value, "file model_sync records the model state in")
    if problem:
        return None, problem
    norm = posixpath.normpath(value)
    if value.endswith("/") or norm in SYSTEM_DIRS or norm.startswith("//") or norm == "/":
        return None, "must be a file path, e.g. /etc/sparkfleet/model.state"
    return norm, None


def check_nccl_debug(value):
    """NCCL_DEBUG for every rank: empty (off) or one of NCCL's levels."""
    if value is None or value == "":
        return "", None
    if not is_string(value) or value.strip().upper() not in NCCL_DEBUG_LEVELS:
        return None, "must be empty (off) or one of NCCL's levels %s (INFO shows the transport the healthcheck" \
                     " proves)" % "/".join(NCCL_DEBUG_LEVELS)
    return value.strip().upper(), None


def check_min_version(value):
    """A minimum image version (image_check compares it): unset, or a version such as "0.17.1"."""
    if value is None or value == "":
        return None, None
    if isinstance(value, bool) or isinstance(value, float):
        return None, ("must be a quoted version string such as \"0.17.1\" (YAML reads an unquoted 0.10 as the"
                      " number 0.1)")
    if isinstance(value, int):
        value = str(value)
    if not is_string(value) or parse_version(value) is None or unsafe_problem(value):
        return None, "must be a version such as \"0.17.1\" (numbers separated by dots), or null for no minimum"
    return value.strip(), None


def check_argv_words(value):
    """Extra docker run words (the GPU arguments): a list of non-empty strings systemd passes unchanged."""
    if not isinstance(value, list):
        return None, "must be a list of docker run arguments, e.g. ['--gpus', 'all']"
    for word in value:
        if not is_string(word) or not word:
            return None, "must hold only non-empty strings, got %r" % (word,)
        problem = unsafe_problem(word)
        if problem:
            return None, "%r %s" % (word, problem)
    return value, None


# ---------------------------------------------------------------- vLLM's reading of `vllm serve` flags

def _option_strings(flags, booleans, aliases):
    out = {}
    for name in flags:
        out["--" + name] = name
    for name in booleans:
        out["--no-" + name] = name
    for short, name in aliases.items():
        out[short] = name
    return out


def resolve_flag(word, flags=None, booleans=None, aliases=None):
    """How vLLM's FlexibleArgumentParser (argparse underneath) reads an option word.

    Returns (spelling, name, how): spelling is the word's option part after vLLM's rewrite (`--a_b=1` -> `--a-b`),
    the idempotent normal form; name is the long flag (without "--") it resolves to, or None; how is
    "exact", "alias", "negated", "abbreviation" (argparse accepts unique prefixes), "ambiguous" or "unknown".
    flags/booleans/aliases default to vLLM 0.17.1's; pass the image's own to check against another vLLM.
    """
    flags = VLLM_SERVE_FLAGS if flags is None else frozenset(flags)
    booleans = VLLM_BOOLEAN_FLAGS if booleans is None else frozenset(booleans)
    aliases = VLLM_SHORT_ALIASES if aliases is None else dict(aliases)
    word = str(word)
    if word.startswith("--"):
        key = word.split("=", 1)[0]
        head, dot, rest = key[2:].partition(".")
        spelling = "--" + head.replace("_", "-") + dot + rest
        if head == "help" or word.startswith("--help="):
            return spelling, "help", "exact"
        long_key = "--" + head.replace("_", "-")
    elif word.startswith("-O") and word != "-O" and word[2] != ".":
        return "--optimization-level", "optimization-level", "alias"
    else:
        key = word.split("=", 1)[0]
        head, dot, rest = key.partition(".")
        spelling = head + dot + rest
        long_key = head
    table = _option_strings(flags, booleans, aliases)
    if long_key == "-O":
        return spelling, "optimization-level", "alias"
    if long_key in table:
        name = table[long_key]
        how = "exact" if long_key == "--" + name else "negated" if long_key.startswith("--no-") else "alias"
        return spelling, name, how
    if long_key.startswith("--"):
        matches = {table[o] for o in table if o.startswith("--") and o.startswith(long_key) and len(long_key) > 2}
    else:
        # argparse: a single-dash word is its own prefix, or a one-letter option with its value attached (-n2).
        matches = {table[o] for o in table if not o.startswith("--")
                   and (o.startswith(long_key) or o == long_key[:2] and len(o) == 2)}
    if len(matches) == 1:
        return spelling, matches.pop(), "abbreviation"
    if matches:
        return spelling, None, "ambiguous"
    return spelling, None, "unknown"


def normalize_flag(word, flags=None, booleans=None, aliases=None):
    """The normal form of an option word: its long flag when vLLM would read it as one, else vLLM's rewrite."""
    spelling, name, how = resolve_flag(word, flags, booleans, aliases)
    if name is not None and how in ("exact", "alias", "negated", "abbreviation"):
        return ("--no-" + name) if how == "negated" else "--" + name
    return spelling


def _suggest(spelling, flags):
    head = spelling.lstrip("-").split(".")[0]
    if head.startswith("no-"):
        head = head[3:]
    close = difflib.get_close_matches(head, sorted(flags), n=1, cutoff=0.75)
    return " (did you mean --%s?)" % close[0] if close else ""


def flag_problem(word, pinned, flags=None, booleans=None, aliases=None):
    """Why the option word may not be passed to vllm serve (pinned or not a vLLM flag), or None."""
    spelling, name, how = resolve_flag(word, flags, booleans, aliases)
    if name is not None and name in pinned:
        read_as = "" if how == "exact" else " (vLLM reads %s as --%s)" % (word.split("=", 1)[0], name)
        return "%s is pinned by this deployment%s; %s" % (spelling, read_as, pinned[name])
    if how == "abbreviation":
        return "%s is an abbreviation of --%s; spell the flag out" % (spelling, name)
    if how == "ambiguous":
        return "%s is ambiguous (vLLM matches several flags); spell the flag out%s" % (
            spelling, _suggest(spelling, VLLM_SERVE_FLAGS if flags is None else flags))
    if how == "unknown":
        known = VLLM_SERVE_FLAGS if flags is None else flags
        return "%s is not a vllm serve flag%s" % (spelling, _suggest(spelling, known))
    return None


def _is_option(word):
    return word.startswith("-") and len(word) > 1 and not _NEGATIVE_NUMBER_RE.match(word)


def _value_words(flag, value):
    """argv words for one extra_args dict value (None: drop the flag), or a problem."""
    if isinstance(value, bool):
        return ([] if value else None), None
    if value is None:
        return None, None
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return None, "%s: %r is not a finite number" % (flag, value)
        return [str(value)], None
    if is_string(value):
        words = [value]
    elif isinstance(value, dict):
        # vLLM takes JSON for config-valued flags (--compilation-config, --limit-mm-per-prompt ...).
        try:
            words = [json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)]
        except (TypeError, ValueError) as exc:
            return None, "%s: the value is not JSON (%s)" % (flag, exc)
    elif isinstance(value, list):
        words = []
        for v in value:
            if isinstance(v, (bool, dict, list)) or v is None or not isinstance(v, (int, float, str)):
                return None, "%s: list items must be strings or numbers, got %r" % (flag, v)
            words.append(str(v))
    else:
        return None, "%s: unsupported value %r" % (flag, value)
    for w in words:
        problem = unsafe_problem(w)
        if problem:
            return None, "%s %s" % (flag, problem)
        if _is_option(w):
            return None, ("%s: the value %r would be read as a flag by vllm serve; pass it as one word %s=%s"
                          % (flag, w, flag, w))
    return words, None


def extra_args_argv(extra, pinned, flags=None, booleans=None, aliases=None):
    """Normalise vllm_serve_extra_args into argv words: (words, problems). Never raises.

    extra is a dict {flag: value} (true: bare flag, false/null: dropped) or a list of argv words. Every flag is
    read as vLLM would (underscores, --x=y, short aliases, abbreviations, --no-x); a pinned flag (in pinned,
    name -> what to set instead) or a flag vLLM does not have is a problem.
    """
    words, problems = [], []
    if extra is None:
        return words, problems
    if isinstance(extra, dict):
        for key in sorted(extra, key=str):
            if not is_string(key) or not _KEY_RE.match(key):
                problems.append("key %r is not a flag name (letters, digits, '-', '_', '.')" % (key,))
                continue
            word = key if key.startswith("-") else "--" + key
            problem = flag_problem(word, pinned, flags, booleans, aliases)
            if problem:
                problems.append(problem)
                continue
            values, problem = _value_words(word, extra[key])
            if problem:
                problems.append(problem)
            elif values is not None:
                words.append(normalize_flag(word, flags, booleans, aliases) if "." not in word
                             else resolve_flag(word, flags, booleans, aliases)[0])
                words.extend(values)
        return words, problems
    if isinstance(extra, list):
        for item in extra:
            if isinstance(item, bool) or not isinstance(item, (int, float, str)):
                problems.append("list items must be strings or numbers, got %r" % (item,))
                continue
            word = str(item)
            problem = unsafe_problem(word)
            if problem:
                problems.append("%s %s" % (word.split("=", 1)[0], problem))
                continue
            if word == "--":
                problems.append("'--' would end vllm serve's options; remove it")
                continue
            if _is_option(word):
                problem = flag_problem(word, pinned, flags, booleans, aliases)
                if problem:
                    problems.append(problem)
                    continue
                flag, eq, value = word.partition("=")
                if not flag.startswith("-O"):
                    # -O3 / -O=3 stay as vLLM spells them; dotted config keys keep their path.
                    norm = (resolve_flag(flag, flags, booleans, aliases)[0] if "." in flag
                            else normalize_flag(flag, flags, booleans, aliases))
                    word = norm + eq + value
            words.append(word)
        return words, problems
    problems.append("must be a dict of flag: value (or a list of argv words), got %s" % type(extra).__name__)
    return words, problems


# ---------------------------------------------------------------- the vllm_serve role's variables

SERVING_CHECKS = {
    "vllm_serve_image": check_string,
    "vllm_serve_model": check_model_dir,
    "vllm_serve_served_model_name": check_names,
    "vllm_serve_tensor_parallel_size": check_parallel_size,
    "vllm_serve_pipeline_parallel_size": check_parallel_size,
    "vllm_serve_gpu_memory_utilization": check_fraction,
    "vllm_serve_max_model_len": check_max_model_len,
    "sparkfleet_api_host": check_host,
    "sparkfleet_api_port": check_port,
    "sparkfleet_ray_port": check_port,
    "vllm_serve_api_key": check_api_key,
    "vllm_serve_allow_open_api": check_bool,
    "vllm_serve_load_format": check_optional_string,
    "vllm_serve_safetensors_load_strategy": check_optional_string,
    "vllm_serve_extra_args": None,  # checked with the pinned flags below
    "vllm_serve_engine_ready_timeout": check_seconds,
    "vllm_serve_env": check_env,
    "vllm_serve_ready_timeout": check_seconds,
    "vllm_serve_stall_timeout": check_seconds,
    "vllm_serve_poll_interval": check_seconds,
    "vllm_serve_restart_sec": lambda v: check_int(v, 0, None, "a whole number of seconds"),
    "vllm_serve_restart_burst": check_count,
    "vllm_serve_restart_interval": check_seconds,
    "sparkfleet_fabric_min_mtu": check_min_mtu,
    "vllm_serve_gpu_args": check_argv_words,
    "sparkfleet_vllm_unit": check_unit_and_container_name,
    "sparkfleet_ray_unit": check_unit_and_container_name,
    "sparkfleet_ray_tmp_dir": check_data_dir,
    "sparkfleet_config_dir": check_config_dir,
    "sparkfleet_cache_dir": check_data_dir,
    "sparkfleet_model_state_file": check_state_file,
    "vllm_serve_nccl_debug": check_nccl_debug,
    "vllm_serve_cluster_wait_timeout": check_seconds,
    "vllm_serve_image_min_vllm_version": check_min_version,
    "vllm_serve_image_min_ray_version": check_min_version,
    "vllm_serve_failure_logs_dir": check_string,
    "vllm_serve_failure_log_bytes": lambda v: check_int(v, 65536, None, "a number of bytes"),
    "vllm_serve_failure_log_files": check_count,
}
# The role variables the role passes to vllm_serve_args as keys (so extra args may not set their flags).
SERVING_PINNED = pinned_flags(("gpu_memory_utilization", "max_model_len", "load_format", "safetensors_load_strategy"))


def _shown(name, value):
    return "(hidden)" if name == "vllm_serve_api_key" else repr(value)


def serving_errors(settings, host="head", template_errors=None, gpus=None):
    """Every problem with the vllm_serve variables of one host, each naming host, variable, value and fix.

    settings: variable -> templated value (a missing variable is not checked); template_errors: variable ->
    the templating error (a Jinja error in an inventory value); gpus: the GPUs the inventory declares, which
    tensor x pipeline parallel must equal. Never raises.
    """
    errors = []
    if not isinstance(settings, dict):
        return ["%s: the serving settings must be a dict of variables, got %s" % (host, type(settings).__name__)]
    failed = dict(template_errors or {})
    for name in sorted(failed):
        errors.append("%s: %s cannot be templated: %s; fix the expression in the inventory"
                      % (host, name, str(failed[name]).strip()))
    good = {}
    for name in sorted(settings, key=str):
        if name in failed:
            continue
        value = settings[name]
        if name == "vllm_serve_extra_args":
            words, problems = extra_args_argv(value, SERVING_PINNED)
            errors.extend("%s: vllm_serve_extra_args: %s" % (host, p) for p in problems)
            continue
        check = SERVING_CHECKS.get(name)
        if check is None:
            continue
        normal, problem = check(value)
        if problem:
            errors.append("%s: %s %s %s" % (host, name, _shown(name, value), problem))
        else:
            good[name] = normal
    tp, pp = good.get("vllm_serve_tensor_parallel_size"), good.get("vllm_serve_pipeline_parallel_size")
    if isinstance(gpus, int) and not isinstance(gpus, bool) and tp is not None and pp is not None and tp * pp != gpus:
        errors.append("%s: vllm_serve_tensor_parallel_size (%d) x vllm_serve_pipeline_parallel_size (%d) = %d, but the"
                      " inventory declares %d GPU(s) (sparkfleet_gpus_per_node over the nodes); make them equal"
                      % (host, tp, pp, tp * pp, gpus))
    key, addr = good.get("vllm_serve_api_key"), good.get("sparkfleet_api_host")
    if key == "" and addr is not None and not is_loopback(addr) and good.get("vllm_serve_allow_open_api") is not True:
        errors.append("%s: vllm_serve_api_key is empty, so the API on %s:%s would be open to anyone who reaches it;"
                      " set vllm_serve_api_key (keep it in a vault), or set vllm_serve_allow_open_api: true to serve"
                      " without a key" % (host, addr, good.get("sparkfleet_api_port", "?")))
    return errors
