# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vllm_serve role's variables, and vLLM's reading of `vllm serve` flags (vllm_serve_extra_args).

Every option of roles/vllm_serve/meta/argument_specs.yml has its check here (CHECKS: variable -> check, None where
_validate.settings_errors checks it with its context); tests/unit/plugins/plugin_utils/test_validate_specs.py holds
the two together. Private to the collection, pure functions, no I/O.
"""

from __future__ import annotations

import difflib
import json
import math
import re

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate_values import (
    INCIDENTS_MAX,
    SECONDS_MAX,
    check_api_key,
    check_bool,
    check_controller_dir,
    check_count,
    check_env,
    check_fraction,
    check_gpu_args,
    check_whole,
    check_max_model_len,
    check_min_version,
    check_model_dir,
    check_names,
    check_nccl_debug,
    check_optional_count,
    check_null_or_string,
    check_optional_string,
    check_parallel_size,
    check_seconds,
    check_share,
    check_string,
    is_string,
    unsafe_problem,
)


# `vllm serve` long flags of vLLM 0.17.1 (EngineArgs, FrontendArgs and the serve subcommand), without "--". Used to
# resolve spellings (pinned flags, abbreviations, --no-X) before the image is known; a flag not in it is left to the
# image's own vLLM (image_check reads the flags of its `vllm serve`), so a newer image can take a newer flag.
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


_NEGATIVE_NUMBER_RE = re.compile(r"^-\d+\Z|^-\d*\.\d+\Z")
_KEY_RE = re.compile(r"^-{0,2}[A-Za-z0-9][A-Za-z0-9_.+-]*\Z")


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
        if flags is None:
            # Not one of 0.17.1's flags, which is all this list knows: a newer image's vLLM may take it. The image's
            # own vLLM judges it (image_check reads its `vllm serve` parser, naming a typo with the flag meant) before
            # the engine or any unit is touched.
            return None
        return "%s is not a vllm serve flag%s" % (spelling, _suggest(spelling, flags))
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


# MTP draft tokens per step: Qwen3.5 checkpoints carry one MTP layer; vLLM reuses it for more draft tokens, each with a
# falling acceptance rate (the published gains are at 1-3).
MTP_TOKENS_MAX = 8
CHECKS = {
    "vllm_serve_image": check_string,
    "vllm_serve_model": check_model_dir,
    "vllm_serve_served_model_name": check_names,
    "vllm_serve_tensor_parallel_size": check_parallel_size,
    "vllm_serve_pipeline_parallel_size": check_parallel_size,
    "vllm_serve_gpu_memory_utilization": check_fraction,
    "vllm_serve_max_model_len": check_max_model_len,
    "vllm_serve_api_key": check_api_key,
    "vllm_serve_allow_open_api": check_bool,
    "vllm_serve_load_format": lambda v: check_null_or_string(v, "a load format such as safetensors"),
    "vllm_serve_safetensors_load_strategy": lambda v: check_null_or_string(v, "a strategy such as lazy"),
    # the serving recipe (each item is also proven against the image before use: image_check's recipe)
    "vllm_serve_prefix_caching": check_bool,
    "vllm_serve_kv_cache_dtype": lambda v: check_optional_string(v) if v is None or is_string(v) else (
        None, "must be a KV cache dtype such as fp8 (null: vLLM's default), not %s" % type(v).__name__),
    "vllm_serve_mtp_tokens": check_whole(0, "a whole number of draft tokens (0: no MTP)", MTP_TOKENS_MAX),
    "vllm_serve_fast_loader": check_bool,
    "vllm_serve_max_num_seqs": check_optional_count,
    "vllm_serve_extra_args": None,  # checked with the pinned flags below
    "vllm_serve_engine_ready_timeout": check_seconds,
    "vllm_serve_env": check_env,
    "vllm_serve_ready_timeout": check_seconds,
    "vllm_serve_stall_timeout": check_seconds,
    "vllm_serve_poll_interval": check_seconds,
    "vllm_serve_restart_sec": check_whole(0, "a whole number of seconds", SECONDS_MAX),
    "vllm_serve_restart_max_delay": check_seconds,
    "vllm_serve_liveness": check_bool,
    "vllm_serve_liveness_interval": check_seconds,
    "vllm_serve_liveness_timeout": check_seconds,
    "vllm_serve_liveness_failures": check_count,
    "vllm_serve_liveness_start_grace": check_seconds,
    "vllm_serve_incidents_keep": check_whole(0, "a whole number of incidents", INCIDENTS_MAX),
    "vllm_serve_incident_wait": check_seconds,
    "vllm_serve_memory_gate": check_bool,
    "vllm_serve_memory_gate_timeout": check_seconds,
    "vllm_serve_memory_margin": check_share(0.2),
    "vllm_serve_memory_tolerance": check_share(0.5),
    "vllm_serve_escalate_after": check_count,
    "vllm_serve_escalate_window": check_seconds,
    "vllm_serve_escalation_notify": check_optional_string,
    "vllm_serve_gpu_args": check_gpu_args,
    "vllm_serve_nccl_debug": check_nccl_debug,
    "vllm_serve_cluster_wait_timeout": check_seconds,
    "vllm_serve_image_min_vllm_version": check_min_version,
    "vllm_serve_image_min_ray_version": check_min_version,
    "vllm_serve_failure_logs_dir": check_controller_dir,
    "vllm_serve_failure_log_bytes": check_whole(65536, "a number of bytes"),
    "vllm_serve_failure_log_files": check_count,
}
# The role variables the role passes to vllm_serve_args as keys (so extra args may not set their flags).
SERVING_PINNED = pinned_flags(("gpu_memory_utilization", "max_model_len", "load_format", "safetensors_load_strategy"))
