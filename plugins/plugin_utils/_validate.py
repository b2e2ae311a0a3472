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
import re
import unicodedata

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _rdma
from ansible_collections.sparkfleet.vllm.plugins.module_utils._image import parse_version
from ansible_collections.sparkfleet.vllm.plugins.module_utils._paths import (
    normal_path,
    written_path_problem,
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


_HUMAN_INT_RE = re.compile(r"^(\d+(?:\.\d+)?)([kmgtKMGT])\Z")
_DECIMAL = {"k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9, "t": 10 ** 12}
_BINARY = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
_NEGATIVE_NUMBER_RE = re.compile(r"^-\d+\Z|^-\d*\.\d+\Z")
_KEY_RE = re.compile(r"^-{0,2}[A-Za-z0-9][A-Za-z0-9_.+-]*\Z")
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


# The largest number a consumer of ours carries whatever it is (a C int in ssh and systemd's parsers, bash's arithmetic
# after a x1000, Python): 2^31 - 1. Time settings stop at a year (systemd time spans, `date +%s` + it in bash, a Python
# deadline), counts at a million.
INT_CARRIED_MAX = 2 ** 31 - 1
SECONDS_MAX = 365 * 86400
COUNT_MAX = 10 ** 6
INCIDENTS_MAX = 64        # incident directories kept on the head (vllm_serve_incidents_keep)
# The one spelling of a whole number that bash ($((...)): a leading 0 is octal), systemd, argparse and int() all read
# alike: digits without blanks, sign or leading zeros (a minus for the checks that take negatives).
_CAPS = {INT_CARRIED_MAX: "2^31 - 1, the largest number every consumer carries",
         SECONDS_MAX: "a year: systemd's time spans, bash's arithmetic and the scripts' deadlines carry it",
         COUNT_MAX: "a million"}
_CANONICAL_INT_RE = re.compile(r"0|-?[1-9][0-9]*", re.ASCII)


def check_int(value, low=None, high=None, what="a whole number", strict=True):
    """An integer (or its plain decimal string: digits only, no blanks, sign or leading zeros) within [low, high].

    The value returned is an int: the normalised value every consumer must read. A float, even 30.0, is refused: a
    template would write it as "30.0", which bash's arithmetic and argparse's int refuse. Without a high bound the
    number stops at INT_CARRIED_MAX.

    strict=False is the filters' reading of values Jinja computed (6.0, " 6 "): every value the strict check accepts
    it reads alike, and it sets no upper bound of its own.
    """
    if isinstance(value, bool):
        return None, "must be %s, not a boolean" % what
    if not strict:
        return _loose_int(value, low, high, what)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e18:
            return None, ("must be %s written without a decimal point (%d, not %r): the scripts that read it take"
                          " whole numbers only" % (what, int(value), value))
        return None, "must be %s, not %r" % (what, value)
    if is_string(value):
        if not _CANONICAL_INT_RE.fullmatch(value):
            if re.fullmatch(r"\s*[+-]?\d+\s*", value, re.ASCII):
                return None, ("must be %s written as plain digits (%s, not %r): blanks, a '+' or leading zeros are"
                              " read differently by systemd, bash (a leading 0 is octal) and the scripts"
                              % (what, int(value), value))
            if len(value) > 40:
                return None, "must be %s (got a string of %d characters)" % (what, len(value))
            return None, "must be %s, not %r" % (what, value)
        if len(value) > 20:
            return None, "must be %s of at most 20 digits" % what
        value = int(value)
    if not isinstance(value, int):
        return None, "must be %s" % what
    cap = _CAPS.get(INT_CARRIED_MAX if high is None else high)
    high = INT_CARRIED_MAX if high is None else high
    if low is not None and value < low or value > high:
        if cap is None and low is not None:
            return None, "must be between %d and %d" % (low, high)
        if value > high:
            return None, "must be at most %d (%s)" % (high, cap or "its upper bound")
        return None, "must be at least %d" % low
    return value, None


def _loose_int(value, low, high, what):
    # ASCII: Unicode's \s takes characters int() refuses (U+001F), its \d digits no one means here.
    if is_string(value) and re.fullmatch(r"\s*[+-]?\d+\s*", value, re.ASCII) and len(value.strip()) <= 40:
        value = int(value)
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        return None, "must be %s" % what
    if low is not None and value < low or high is not None and value > high:
        if high is None:
            return None, "must be at least %d" % low
        if low is None:
            return None, "must be at most %d" % high
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
    return check_int(value, 1, SECONDS_MAX, "a whole number of seconds")


def check_count(value):
    return check_int(value, 1, COUNT_MAX, "a whole number")


def _number(value, what):
    """(float, None) or (None, why): a number, or a decimal string of one; never a boolean."""
    if isinstance(value, bool):
        return None, "must be a number, not a boolean"
    try:
        return float(value.strip() if is_string(value) else value), None
    except (TypeError, ValueError, OverflowError):
        return None, "must be a number in %s" % what


def check_fraction(value):
    """gpu_memory_utilization: a number in (0, 1]."""
    f, problem = _number(value, "(0, 1], e.g. 0.80")
    if problem is None and not 0 < f <= 1:
        return None, "must be in (0, 1] (it is a fraction: 0.85 means 85%)"
    return (None, problem) if problem else (f, None)


def check_share(high):
    """A share of a node's memory in [0, high] (the memory gate's margin and tolerance)."""
    def check(value):
        f, problem = _number(value, "[0, %g], a share of each node's memory (0.05 means 5%%)" % high)
        if problem is None and not 0 <= f <= high:
            return None, "must be in [0, %g] (a share of each node's memory: 0.05 means 5%%)" % high
        return (None, problem) if problem else (f, None)
    return check


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
    if not re.match(r"^\d+\Z", s):
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
    if n > INT_CARRIED_MAX:
        return None, "must be at most %d tokens (2^31 - 1, the largest number every consumer carries)" % INT_CARRIED_MAX
    return value, None


def check_string(value):
    if not is_string(value) or not value.strip():
        return None, "must be a non-empty string"
    problem = unsafe_problem(value)
    return (None, problem) if problem else (value, None)


def check_null_or_string(value, what):
    """null (vLLM's default) or a non-empty string: the vllm_serve_args filter refuses '' (it would write the flag
    with an empty value), so preflight does too."""
    if value == "":
        return None, "must be null (vLLM's default) or %s, not ''" % what
    return check_optional_string(value)


def check_optional_string(value):
    return (None, None) if value is None or value == "" else check_string(value)


def value_word_problem(word):
    """Why one element of a list-valued option (a value, never a flag) is refused, or None.

    vLLM's multi-value options (nargs='+') stop at the first word that starts with '-' and read it as a flag, so
    `served_model_name: [qwen, --host=0.0.0.0]` would re-set a pinned flag; a value word never starts with '-'.
    """
    problem = check_string(word)[1]
    if problem:
        return problem
    if word.startswith("-"):
        return ("has the element %r, which starts with '-': vllm serve would read it as a flag, not as a value;"
                " remove it" % word)
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in word):
        return "has the element %r, which holds a control character" % word
    return None


def check_names(value):
    """served_model_name: a string or a non-empty list of strings, each a value (never a flag)."""
    names = [value] if is_string(value) else value
    if not isinstance(names, list) or not names:
        return None, "must be a string or a non-empty list of strings"
    for name in names:
        problem = value_word_problem(name) if is_string(name) else "must hold only strings, got %r" % (name,)
        if problem:
            return None, problem
    return names, None


def check_model_dir(value):
    """The model directory: an absolute path (same on every node), in no system or home dot-directory."""
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
    # The rule every path the roles write follows (preflight runs it again on each node, through its links).
    problem = written_path_problem(value, "model directory")
    if problem:
        return None, "%s; use the model's own directory, e.g. /models/<name>" % problem
    return normal_path(value), None


_HOSTNAME_RE = re.compile(r"^(?=.{1,253}\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                          r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?\Z")


def is_host_name(value):
    """An IP address or a DNS host name (RFC 1123 labels): nothing a shell, ssh or a URL would read otherwise."""
    if not is_string(value):
        return False
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return bool(_HOSTNAME_RE.match(value)) and not value.replace(".", "").isdigit()


def check_host(value):
    """The listen address: an IP address or a host name."""
    if not is_string(value) or not value.strip():
        return None, "must be the address vLLM listens on (an IP address)"
    if not is_host_name(value):
        return None, ("must be an IP address or a host name (letters, digits, '-' and '.'), e.g. 10.1.230.180 or"
                      " 0.0.0.0")
    return value, None


def is_loopback(host):
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def secret_problem(value):
    """Why a key or token (sent in an HTTP header, written to an env file) is refused, or None. Never shows it."""
    if any(c.isspace() for c in value):
        return ("contains whitespace (a stray newline or space from a file or vault?); clients send the key"
                " without it, so strip it")
    bad = [c for c in value if not 0x21 <= ord(c) <= 0x7e]
    if bad:
        return ("contains %d character(s) outside printable ASCII (a control character or a non-ASCII letter);"
                " HTTP headers carry ASCII only, so use letters, digits and punctuation" % len(bad))
    return None


def check_api_key(value):
    """The API key: empty (open API) or printable ASCII without whitespace."""
    if value is None:
        return "", None
    if not is_string(value):
        return None, "must be a string (keep it in a vault)"
    problem = secret_problem(value)
    return (None, problem) if problem else (value, None)


def check_bool(value):
    if not isinstance(value, bool):
        if isinstance(value, str):  # `-e name=false` on the command line gives the string "false"
            meant = "true" if value.strip().lower() in ("true", "yes", "on", "1") else "false"
            return None, ("must be true or false, not the string %r (on the command line give it as JSON:"
                          " -e '{\"<name>\": %s}')" % (value, meant))
        return None, "must be true or false"
    return value, None


def check_min_mtu(value):
    """sparkfleet_fabric_min_mtu: unset (rdma_facts' 9000) or an interface MTU, 68 to 65535."""
    if value is None or value == "":
        return 9000, None
    return check_int(value, 68, 65535, "an MTU (9000 for jumbo frames)")


# Environment the collection sets itself, per node or from a role variable: an env dict may not override it (name ->
# what to set instead). The fabric variables come from rdma_facts on each node.
FABRIC_ENV = tuple(name for name in _rdma.FABRIC_ENV_KEYS if name != "VLLM_HOST_IP")  # VLLM_HOST_IP: its own hint
OWNED_ENV = dict(
    [(name, "rdma_facts sets it on each node from the fabric it finds (set sparkfleet_fabric_interface or fix the"
            " fabric instead)") for name in FABRIC_ENV],
    VLLM_API_KEY="set vllm_serve_api_key (in a vault) instead",
    VLLM_HOST_IP="set sparkfleet_fabric_ip instead (each node keeps its own)",
    VLLM_CONFIG_ROOT="remove it (it holds the variables vLLM must not copy onto the workers)",
    VLLM_ENGINE_READY_TIMEOUT_S="set vllm_serve_engine_ready_timeout instead",
    NCCL_DEBUG="set vllm_serve_nccl_debug instead",
    RAY_ADDRESS="remove it (every node joins the head's fabric IP and sparkfleet_ray_port)",
    RAY_USAGE_STATS_ENABLED="remove it (usage stats stay off)",
    RAY_memory_monitor_refresh_ms="set ray_cluster_memory_monitor instead",
    RAY_memory_usage_threshold="set ray_cluster_memory_usage_threshold instead",
)
OWNED_ENV_PREFIXES = (("RAY_AUTH_", "set ray_cluster_auth / ray_cluster_auth_token instead (Ray's token"
                                    " authentication is the collection's)"),)
# Variables that open the server or the workers to more than serving (dev endpoints, pickle between processes,
# adapters loaded from any path by API call, profiler endpoints): refused unless named in sparkfleet_allow_unsafe_env.
UNSAFE_ENV = {
    "VLLM_SERVER_DEV_MODE": "it opens vLLM's development endpoints (reset, sleep, collective RPC) to API clients",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "it lets vLLM's processes exchange pickles (code) over the network",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "it lets API clients load adapters from any path or repository",
    "VLLM_TORCH_PROFILER_DIR": "it opens the profiler endpoints to API clients, which write traces on the node",
}


def env_problems(value, allow_unsafe=()):
    """Every problem of an env dict (vllm_serve_env, ray_cluster_env): names, one-line values, no override of what
    the collection owns, no security-weakening variable unless opted in. Never raises."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return ["must be a dict of NAME: value"]
    allowed = set(n for n in allow_unsafe if is_string(n)) if isinstance(allow_unsafe, (list, tuple, set)) else set()
    problems = []
    for name in sorted(value, key=str):
        if not is_string(name) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", name):
            problems.append("has %r, which is not an environment variable name" % (name,))
            continue
        fix = OWNED_ENV.get(name) or next((f for p, f in OWNED_ENV_PREFIXES if name.startswith(p)), None)
        if fix:
            problems.append("may not set %s: the collection owns it; %s" % (name, fix))
            continue
        if name in UNSAFE_ENV and name not in allowed:
            problems.append("may not set %s: %s; list it in sparkfleet_allow_unsafe_env to accept that"
                            % (name, UNSAFE_ENV[name]))
            continue
        item = value[name]
        if item is None:
            continue
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            problems.append("%s must be a string or a number, got %s" % (name, type(item).__name__))
            continue
        if any(c in str(item) for c in "\n\r\0"):
            problems.append("%s must be one line (no newline, carriage return or NUL)" % name)
    return problems


def check_env_names(value):
    """A list of environment variable names (sparkfleet_allow_unsafe_env)."""
    if not isinstance(value, list) or not all(is_string(n) and n in UNSAFE_ENV for n in value):
        return None, ("must be a list of the variables it allows, each one of %s (an opt-in: see the README's"
                      " security section)" % ", ".join(sorted(UNSAFE_ENV)))
    return value, None


def check_env(value, allow_unsafe=()):
    problems = env_problems(value, allow_unsafe)
    if problems:
        return None, "; ".join(problems)
    return ({} if value is None else value), None


_UNIT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@:-]*\Z")
_CONTAINER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]+\Z")
# NCCL_DEBUG's levels (NCCL reads them without regard to case); empty turns NCCL's log off.
NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")


# systemd refuses a unit name over 255 characters; the longest name we make of one is <name>-watchdog.service.
UNIT_NAME_MAX = 255 - len("-watchdog.service")


def check_unit_name(value):
    """A systemd service name without its .service suffix (the roles append it)."""
    if not is_string(value) or not _UNIT_RE.match(value):
        return None, "must be a systemd unit name (letters, digits, '_', '.', '@', ':', '-'), e.g. sparkfleet-vllm"
    if len(value) > UNIT_NAME_MAX:
        return None, ("is %d characters long; systemd refuses unit names over 255 characters and the roles add"
                      " '-watchdog.service' to it: use at most %d" % (len(value), UNIT_NAME_MAX))
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


def _written(value, what, kind, example):
    """A path the roles create, chown, chmod or overwrite: the host-path rule, then the written-path rule."""
    problem = _host_path_problem(value, what)
    if problem:
        return None, problem
    problem = written_path_problem(value, kind)
    if problem:
        return None, "%s; use %s" % (problem, example)
    return normal_path(value), None


def check_data_dir(value):
    """A directory the roles create (root) and mount read-write into the containers: never the system's."""
    return _written(value, "directory the containers write to", "directory",
                    "a directory of its own, e.g. /var/cache/sparkfleet/vllm")


def check_config_dir(value):
    """The directory of our env files and keys (/etc/sparkfleet, chmod 0750 root): a directory of its own."""
    return _written(value, "directory of the env files, e.g. /etc/sparkfleet", "directory",
                    "a directory of its own, e.g. /etc/sparkfleet")


def check_state_file(value):
    """model_sync's state file on the head (written, and copied next to itself as <file>.served)."""
    return _written(value, "file model_sync records the model state in", "file",
                    "a file in a directory of its own, e.g. /etc/sparkfleet/model.state")


def check_written_file(value):
    """A file a role writes (a key, a token, a progress file, a forced command)."""
    return _written(value, "file a role writes", "file", "a file in a directory of its own, e.g. under /etc/sparkfleet")


def check_known_hosts(value):
    """An ssh known-hosts file: under the sync user's ~/.ssh (ssh expands ~ on each hop) or a written file."""
    if is_string(value) and value.startswith("~/"):
        rest = value[2:]
        if not re.match(r"^\.ssh/[A-Za-z0-9._+@-]+\Z", rest) or rest in SSH_OWN_FILES:
            return None, ("must be ~/.ssh/<file of its own> (e.g. ~/.ssh/sparkfleet_known_hosts) or an absolute path;"
                          " never ssh's own files (%s)" % ", ".join(sorted(SSH_OWN_FILES)))
        name = rest.split("/", 1)[1]
        if name.startswith("id_") or name.endswith(".pub"):
            return None, "must not be a key file of ~/.ssh (%s)" % value
        return value, None
    return check_written_file(value)


# Files of ~/.ssh that ssh itself reads: never a known-hosts file of ours.
SSH_OWN_FILES = frozenset((".ssh/authorized_keys", ".ssh/authorized_keys2", ".ssh/config", ".ssh/rc",
                           ".ssh/environment"))


# Controller trees the failure logs never go into (the controller's homes, /root included, are fine: the default is
# the directory ansible-playbook runs from).
CONTROLLER_SYSTEM_TREES = ("/proc", "/sys", "/dev", "/boot", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32",
                           "/lib64", "/var/lib", "/var/log", "/run")


def check_controller_dir(value):
    """A directory the roles write on the controller (the failure logs): absolute, no system tree, no dot-directory
    of a home."""
    problem = check_string(value)[1]
    if problem:
        return None, problem
    if not value.startswith("/"):
        return None, "must be an absolute path on the controller"
    norm = normal_path(value)
    for tree in CONTROLLER_SYSTEM_TREES:
        if norm == tree or norm.startswith(tree + "/"):
            return None, "lies under the system directory %s of the controller; use e.g. ./sparkfleet-logs" % tree
    parts = norm.strip("/").split("/")
    dot = parts[2] if parts[0] == "home" and len(parts) > 2 else parts[1] if parts[0] == "root" and len(parts) > 1 else ""
    if dot.startswith("."):
        return None, "lies in a home's dot-directory (%s); use e.g. ./sparkfleet-logs" % dot
    return norm, None


def check_read_path(value):
    """A path the roles only read (a tool, a sysfs root, a device directory): absolute and unmangled."""
    problem = _host_path_problem(value, "path")
    if problem:
        return None, problem
    return normal_path(value), None


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
    """Extra docker run words: a list of non-empty strings systemd passes unchanged."""
    if not isinstance(value, list):
        return None, "must be a list of docker run arguments, e.g. ['--gpus', 'all']"
    for word in value:
        if not is_string(word) or not word:
            return None, "must hold only non-empty strings, got %r" % (word,)
        problem = unsafe_problem(word)
        if problem:
            return None, "%r %s" % (word, problem)
    return value, None


# The docker run flags that give a container its GPU; every other flag (name, network, mounts, env, privileges,
# capabilities, user) is the roles' own. -e/--env only for the NVIDIA container runtime's variables.
GPU_ARG_FLAGS = ("--gpus", "--runtime", "--device", "--device-cgroup-rule", "--group-add", "--ulimit", "-e", "--env")
GPU_DEVICE_PREFIXES = ("/dev/nvidia", "/dev/dri/", "/dev/infiniband/")


def check_gpu_args(value):
    """The docker run words that give a container the GPU (e.g. [--gpus, all] or [--device, /dev/nvidia0])."""
    words, problem = check_argv_words(value)
    if problem:
        return None, problem
    i = 0
    while i < len(words):
        flag, eq, arg = words[i].partition("=")
        if not flag.startswith("-"):
            return None, "has %r without a flag before it; write e.g. ['--gpus', 'all']" % words[i]
        if flag not in GPU_ARG_FLAGS:
            return None, ("has %r, which is not a docker run argument for the GPU (accepted: %s); the roles set the"
                          " container's name, network, mounts, environment and privileges themselves"
                          % (words[i], ", ".join(GPU_ARG_FLAGS)))
        if not eq:
            i += 1
            if i >= len(words) or words[i].startswith("-"):
                return None, "%s needs a value after it" % flag
            arg = words[i]
        if flag in ("-e", "--env") and not re.match(r"^NVIDIA_[A-Z0-9_]+=", arg):
            return None, ("%s %s: only the NVIDIA runtime's variables (NVIDIA_...=value) may be set here; the"
                          " containers' environment is vllm_serve_env / ray_cluster_env" % (flag, arg.split("=")[0]))
        if flag == "--device" and not arg.startswith(GPU_DEVICE_PREFIXES):
            return None, ("--device %s is not a GPU or RDMA device (accepted: %s...)"
                          % (arg, "..., ".join(GPU_DEVICE_PREFIXES)))
        i += 1
    return words, None


# ---------------------------------------------------------------- `ray start` arguments

# Flags of `ray start` the collection sets itself (flag -> what to set instead); the extra args may never set them.
RAY_PINNED = {
    "--node-ip-address": "set sparkfleet_fabric_ip (Ray registers every node on its fabric IP)",
    "--address": "remove it (every worker joins the head's fabric IP at sparkfleet_ray_port)",
    "--port": "set sparkfleet_ray_port instead",
    "--head": "remove it (the spark_head group decides the head)",
    "--block": "remove it (the unit runs Ray in the foreground already)",
    "--num-gpus": "set ray_cluster_num_gpus instead",
    "--num-cpus": "set ray_cluster_num_cpus instead",
    "--temp-dir": "set sparkfleet_ray_tmp_dir instead",
    "--disable-usage-stats": "remove it (usage stats are always off)",
    "--gcs-server-port": "set sparkfleet_ray_port instead",
    "--worker-port-list": "set ray_cluster_min_worker_port / ray_cluster_max_worker_port instead",
}
# Port flags: pinned by the ray_cluster_*_port variables, which the node firewall names.
RAY_PORT_FLAGS = {
    "--node-manager-port": "ray_cluster_node_manager_port", "--object-manager-port": "ray_cluster_object_manager_port",
    "--runtime-env-agent-port": "ray_cluster_runtime_env_agent_port",
    "--dashboard-agent-grpc-port": "ray_cluster_dashboard_agent_grpc_port",
    "--dashboard-agent-listen-port": "ray_cluster_dashboard_agent_listen_port",
    "--metrics-export-port": "ray_cluster_metrics_export_port", "--min-worker-port": "ray_cluster_min_worker_port",
    "--max-worker-port": "ray_cluster_max_worker_port", "--ray-client-server-port": "ray_cluster_client_server_port",
    "--dashboard-port": "ray_cluster_dashboard_port",
}
RAY_PINNED.update((f, "set %s instead (the node firewall names it)" % var) for f, var in RAY_PORT_FLAGS.items())
# Flags that expose Ray beyond the fabric: refused unless sparkfleet_allow_ray_exposure is true.
RAY_EXPOSING = {
    "--dashboard-host": "the dashboard runs code for anyone who reaches it (set ray_cluster_dashboard: true for"
                        " 127.0.0.1)",
    "--include-dashboard": "set ray_cluster_dashboard instead (the dashboard listens on 127.0.0.1 only)",
    "--ray-debugger-external": "it binds Ray's debugger to every interface",
}


def ray_extra_args_problems(value, allow_exposure=False):
    """Every problem of ray_cluster_extra_args (a list of `ray start` words). Never raises."""
    if value is None:
        return []
    if not isinstance(value, list):
        return ["must be a list of `ray start` arguments, e.g. ['--object-store-memory', '10000000000']"]
    problems = []
    for word in value:
        if isinstance(word, bool) or not isinstance(word, (str, int, float)) or (is_string(word) and not word):
            problems.append("must hold only non-empty strings or numbers, got %r" % (word,))
            continue
        word = str(word)
        problem = unsafe_problem(word)
        if problem:
            problems.append("%r %s" % (word, problem))
            continue
        if not word.startswith("-"):
            continue
        flag = word.split("=", 1)[0]
        # click reads only the exact long names; '_' spellings are not Ray's, so they are refused as unknown to it
        norm = flag.replace("_", "-")
        if norm in RAY_PINNED:
            problems.append("%s is pinned by this deployment; %s" % (flag, RAY_PINNED[norm]))
        elif norm in RAY_EXPOSING and not allow_exposure:
            problems.append("%s would expose Ray beyond the fabric: %s; or set sparkfleet_allow_ray_exposure: true"
                            " to accept that" % (flag, RAY_EXPOSING[norm]))
        elif flag != norm:
            problems.append("%s is not a ray start flag (ray spells its flags with '-': %s)" % (flag, norm))
    return problems


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


def check_optional_count(value):
    return (None, None) if value is None or value == "" else check_int(value, 1, COUNT_MAX, "a whole number")


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
    "vllm_serve_load_format": lambda v: check_null_or_string(v, "a load format such as safetensors"),
    "vllm_serve_safetensors_load_strategy": lambda v: check_null_or_string(v, "a strategy such as lazy"),
    # the serving recipe (each item is also proven against the image before use: image_check's recipe)
    "vllm_serve_prefix_caching": check_bool,
    "vllm_serve_kv_cache_dtype": lambda v: check_optional_string(v) if v is None or is_string(v) else (
        None, "must be a KV cache dtype such as fp8 (null: vLLM's default), not %s" % type(v).__name__),
    "vllm_serve_mtp_tokens": lambda v: check_int(v, 0, MTP_TOKENS_MAX, "a whole number of draft tokens (0: no MTP)"),
    "vllm_serve_fast_loader": check_bool,
    "vllm_serve_max_num_seqs": check_optional_count,
    "vllm_serve_extra_args": None,  # checked with the pinned flags below
    "vllm_serve_engine_ready_timeout": check_seconds,
    "vllm_serve_env": check_env,
    "sparkfleet_allow_unsafe_env": check_env_names,
    "vllm_serve_ready_timeout": check_seconds,
    "vllm_serve_stall_timeout": check_seconds,
    "vllm_serve_poll_interval": check_seconds,
    "vllm_serve_restart_sec": lambda v: check_int(v, 0, SECONDS_MAX, "a whole number of seconds"),
    "vllm_serve_restart_max_delay": check_seconds,
    "vllm_serve_liveness": check_bool,
    "vllm_serve_liveness_interval": check_seconds,
    "vllm_serve_liveness_timeout": check_seconds,
    "vllm_serve_liveness_failures": check_count,
    "vllm_serve_liveness_start_grace": check_seconds,
    "vllm_serve_incidents_keep": lambda v: check_int(v, 0, INCIDENTS_MAX, "a whole number of incidents"),
    "vllm_serve_incident_wait": check_seconds,
    "vllm_serve_memory_gate": check_bool,
    "vllm_serve_memory_gate_timeout": check_seconds,
    "vllm_serve_memory_margin": check_share(0.2),
    "vllm_serve_memory_tolerance": check_share(0.5),
    "vllm_serve_escalate_after": check_count,
    "vllm_serve_escalate_window": check_seconds,
    "vllm_serve_escalation_notify": check_optional_string,
    "sparkfleet_fabric_min_mtu": check_min_mtu,
    "vllm_serve_gpu_args": check_gpu_args,
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
    "vllm_serve_failure_logs_dir": check_controller_dir,
    "vllm_serve_failure_log_bytes": lambda v: check_int(v, 65536, None, "a number of bytes"),
    "vllm_serve_failure_log_files": check_count,
}
# MTP draft tokens per step: Qwen3.5 checkpoints carry one MTP layer; vLLM reuses it for more draft tokens, each with a
# falling acceptance rate (the published gains are at 1-3).
MTP_TOKENS_MAX = 8
# The role variables the role passes to vllm_serve_args as keys (so extra args may not set their flags).
SERVING_PINNED = pinned_flags(("gpu_memory_utilization", "max_model_len", "load_format", "safetensors_load_strategy"))


# Secrets: their value never appears in a message.
SECRET_NAMES = frozenset(("vllm_serve_api_key", "healthcheck_api_key", "ray_cluster_auth_token", "model_sync_hf_token",
                          "monitoring_webhook_url"))


def _shown(name, value):
    """The value as a message shows it: never a secret, and an env dict by its names only (values may be tokens)."""
    if name in SECRET_NAMES:
        return "(hidden)"
    if name.endswith("_env") and isinstance(value, dict):
        return "{%s}" % ", ".join("%s: ..." % (k,) for k in sorted(value, key=str))
    return repr(value)


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
        reason = str(failed[name]).strip()
        errors.append("%s: %s cannot be templated: %s%s" % (
            host, name, reason, "" if "in the inventory" in reason else "; fix the expression in the inventory"))
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
        if name == "vllm_serve_env":
            normal, problem = check_env(value, settings.get("sparkfleet_allow_unsafe_env"))
        else:
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


# ---------------------------------------------------------------- every role's variables (preflight)

def check_whole(low, what="a whole number", high=None):
    return lambda v: check_int(v, low, high, what)


def check_choice(*choices):
    def check(value):
        if not is_string(value) or value not in choices:
            return None, "must be one of %s" % ", ".join(choices)
        return value, None
    return check


# A systemd OnCalendar= expression (weekly, Sun *-*-* 03:00:00, *-*-01 04:00): what its grammar may hold, no more.
_CALENDAR_RE = re.compile(r"^[A-Za-z0-9*:,./~ -]{1,120}\Z")
# Its words, in systemd's order (systemd.time(7)): a shortcut alone, or [weekdays] [date] [time] [UTC], one at least.
# A word systemd cannot parse drops OnCalendar= (the timer then refuses to load: the scrub would never run).
_CALENDAR_SHORTCUTS = ("minutely", "hourly", "daily", "weekly", "monthly", "yearly", "annually", "quarterly",
                       "semiannually")
_WEEKDAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*"
_CALENDAR_PARTS = (re.compile(r"%s(?:(?:,|\.\.)%s)*\Z" % (_WEEKDAY, _WEEKDAY)),
                   re.compile(r"[0-9*][0-9*,./~]*(?:-[0-9*][0-9*,./~]*){1,2}\Z"),
                   re.compile(r"[0-9*][0-9*,./]*(?::[0-9*][0-9*,./]*){1,2}\Z"),
                   re.compile(r"UTC\Z"))


def _calendar_words_ok(text):
    words = text.split()
    if len(words) == 1 and words[0].lower() in _CALENDAR_SHORTCUTS:
        return True
    part = 0
    for word in words:
        while part < len(_CALENDAR_PARTS) and not _CALENDAR_PARTS[part].match(word):
            part += 1
        if part == len(_CALENDAR_PARTS):
            return False
        part += 1
    return bool(words) and words != ["UTC"]


def check_calendar(value):
    """'' (off) or a systemd calendar expression for a timer's OnCalendar=."""
    if value is None or value == "":
        return "", None
    if is_string(value) and value.strip() and value != value.strip():
        # the timer's unit is written with the value as given: a newline there ends OnCalendar= early
        return None, "must not begin or end with a blank or a newline (%r)" % value.strip()
    if (not is_string(value) or not _CALENDAR_RE.match(value.strip()) or not value.strip()
            or not _calendar_words_ok(value.strip())):
        return None, ("must be '' (off) or a systemd calendar expression such as weekly, daily or 'Sun *-*-* 03:00:00'"
                      " (letters, digits, spaces and * : , . / ~ - only); `systemd-analyze calendar` checks one")
    return value.strip(), None


_IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}\Z")
_USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}\Z")
_MODEL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?\Z")
_GLOB_RE = re.compile(r"^[A-Za-z0-9_.@:*?\[\]-]+\Z")
_TABLE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}\Z")
_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
_LOAD_COMMAND_RE = re.compile(r"^[A-Za-z0-9/][A-Za-z0-9 ._/=-]*\Z")   # a program by name or by its path


def check_image(value):
    """A container image reference (name[:tag][@digest]): one word docker reads as an image, never as a flag."""
    if not is_string(value) or not _IMAGE_RE.match(value):
        return None, ("must be an image reference such as nvcr.io/nvidia/vllm:26.03-py3 (letters, digits and . _ / : @"
                      " + -, not starting with '-')")
    return value, None


def check_user(value):
    """A user name on the nodes (ssh's user, the owner of the model directory): never read as an ssh option."""
    if not is_string(value) or not _USER_RE.match(value):
        return None, "must be a user name on the nodes (letters, digits, '_', '.', '-', not starting with '-')"
    return value, None


def check_model_id(value):
    """A Hugging Face model id (org/name), as the download and the API use it."""
    if not is_string(value) or not _MODEL_ID_RE.match(value):
        return None, "must be a model id such as Qwen/Qwen3.5-122B-A10B-FP8 (letters, digits, '.', '_', '-', one '/')"
    return value, None


def check_optional_secret(value):
    """A token (vault): empty, or printable ASCII without whitespace."""
    if value is None or value == "":
        return "", None
    if not is_string(value):
        return None, "must be a string (keep it in a vault)"
    problem = secret_problem(value)
    return (None, problem) if problem else (value, None)


def check_globs(value):
    """Unit or container names and globs (gpu_cleanup's lists)."""
    if not isinstance(value, list):
        return None, "must be a list of unit or container names (globs allowed), e.g. [vllm-cluster, 'sglang*']"
    for item in value:
        if not is_string(item) or not _GLOB_RE.match(item) or item.startswith("-"):
            return None, ("has %r, which is not a unit or container name or glob (letters, digits, '_', '.', '@',"
                          " ':', '-', '*', '?', '[', ']')" % (item,))
    return value, None


def check_command_globs(value):
    """Process names and command-line patterns (gpu_cleanup_stale_commands): shell patterns matched, never run."""
    if not isinstance(value, list):
        return None, "must be a list of process names or command-line patterns, e.g. ['VLLM::*', '*vllm serve*']"
    for item in value:
        if not is_string(item) or not item.strip() or not item.isprintable() or item.strip('*?') == '':
            return None, ("has %r, which is not a process name or command-line pattern (printable text with more than"
                          " '*' and '?': a pattern of wildcards alone would make every GPU holder stale)" % (item,))
    return value, None


def check_text(value):
    """A free text (a prompt): a non-empty string without NUL."""
    if not is_string(value) or not value.strip() or "\0" in value:
        return None, "must be a non-empty string"
    return value, None


# The characters RFC 3986 allows in a URL's path, query and fragment (percent-encode any other): no quote, backslash,
# blank or brace, which a YAML or JSON string we write the URL into (alertmanager.yml) would end or unescape.
_URL_REST_RE = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]*\Z")


def check_url(value):
    """An http(s) URL whose host is an IP address ([v6] bracketed) or a host name, the rest in RFC 3986's characters."""
    m = re.match(r"^https?://(\[[0-9A-Fa-f:.]+\]|[^/:?#\[\]]+)(:\d{1,5})?(/[^\s]*)?\Z", value) if is_string(value) else None
    host = m.group(1).strip("[]") if m else None
    if not m or not is_host_name(host) or (m.group(2) and not 1 <= int(m.group(2)[1:]) <= 65535):
        return None, "must be an http:// or https:// URL such as http://10.1.230.180:30000"
    if m.group(3) and not _URL_REST_RE.match(m.group(3)):
        return None, ("holds a character a URL carries only percent-encoded (a quote, a backslash, a brace, a blank or"
                      " a non-ASCII letter); encode it (%22 for \", %5C for \\)")
    return value, None


def check_device_glob(value):
    problem = _host_path_problem(value, "device files, e.g. /dev/nvidia[0-9]*")
    if problem:
        return None, problem
    if not value.startswith("/dev/"):
        return None, "must be a glob of device files under /dev, e.g. /dev/nvidia[0-9]*"
    return value, None


def check_nft_table(value):
    if not is_string(value) or not _TABLE_RE.match(value):
        return None, "must be an nftables table name (a letter, then letters, digits, '_', '-'; 32 at most)"
    return value, None


def check_port_range(value):
    """ray_cluster_firewall_ephemeral_range: "LOW-HIGH" (ports), or empty for the node's own range."""
    if value == "":
        return value, None
    low, _sep, high = value.partition("-") if is_string(value) else ("", "", "")
    if not (low.isdigit() and high.isdigit() and 1 <= int(low) <= int(high) <= 65535):
        return None, "must be LOW-HIGH (ports, LOW <= HIGH), e.g. 32768-60999, or empty for the node's own range"
    return value, None


def check_load_command(value):
    """The command the image key runs on a worker (in authorized_keys' command="..."): plain words only."""
    if not is_string(value) or not _LOAD_COMMAND_RE.match(value):
        return None, ("must be a plain command such as 'sudo -n /usr/bin/python3 /usr/local/sbin/sparkfleet-image-load'"
                      " (letters, digits, spaces and . _ / = -): it is written into the key's command=\"...\"")
    return value, None


def check_cidr_list(value):
    """Source networks (CIDR) for the node firewall."""
    if not isinstance(value, list) or not value:
        return None, "must be a non-empty list of networks (CIDR), e.g. ['192.168.200.0/24']"
    nets = []
    for item in value:
        try:
            nets.append(ipaddress.ip_network(str(item), strict=False))
        except ValueError:
            return None, "has %r, which is not a network in CIDR form such as 192.168.200.0/24" % (item,)
    return nets, None


def check_ansible_version(value):
    if not is_string(value) or parse_version(value) is None:
        return None, "must be a version string such as \"2.19.0\""
    return value, None


_PLAIN_VERSION_RE = re.compile(r"(0|[1-9][0-9]{0,5})(\.(0|[1-9][0-9]{0,5})){0,3}\Z")


def check_plain_version(value, example):
    """A version the roles compare with Ansible's `version` test: dotted whole numbers only. That test compares a
    blank, a letter or a suffix ('2.52.0rc1', '1e3') otherwise than a person reads it, or fails with a Python error."""
    if not is_string(value) or not _PLAIN_VERSION_RE.match(value):
        return None, "must be a version of dotted whole numbers such as \"%s\" (quoted, no blank, letter or suffix)" % example
    return value, None


ROLE_CHECKS = {
    # roles/sparkfleet (the serving ones are in SERVING_CHECKS)
    "sparkfleet_gpus_per_node": check_count,
    "sparkfleet_container_gpu_args": check_gpu_args,
    "sparkfleet_image_pull": check_bool,
    "sparkfleet_rdma_sysfs_root": check_read_path,
    "sparkfleet_rdma_dev_dir": check_read_path,
    "sparkfleet_allow_tcp_fallback": check_bool,
    "sparkfleet_recheck": check_bool,
    "sparkfleet_allow_ray_exposure": check_bool,
    "sparkfleet_manage_host_firewall": check_bool,
    "sparkfleet_image": check_image,
    "sparkfleet_model_id": check_model_id,
    "sparkfleet_model_dir": check_model_dir,
    # roles/preflight
    "preflight_min_ansible_version": check_ansible_version,
    "preflight_ping_timeout": check_seconds,
    "preflight_fabric_timeout": check_seconds,
    "preflight_min_free_mb": lambda v: check_int(v, 0, None, "a whole number of MiB"),
    # roles/gpu_cleanup
    "gpu_cleanup_stale_units": check_globs,
    "gpu_cleanup_protect": check_globs,
    "gpu_cleanup_system_services": check_globs,
    "gpu_cleanup_ours": check_globs,
    "gpu_cleanup_stale_containers": check_globs,
    "gpu_cleanup_stale_commands": check_command_globs,
    "gpu_cleanup_stop_foreign": check_bool,
    "gpu_cleanup_record": check_written_file,
    "gpu_cleanup_grace": check_seconds,
    "gpu_cleanup_timeout": check_seconds,
    "gpu_cleanup_mask": check_bool,
    "gpu_cleanup_remove_containers": check_bool,
    "gpu_cleanup_nvidia_smi": check_choice("auto", "required", "skip"),
    "gpu_cleanup_device_glob": check_device_glob,
    "gpu_cleanup_max_used_mib": check_whole(0, "a number of MiB"),
    # roles/model_sync
    "model_sync_src": check_model_dir,
    "model_sync_dest": check_model_dir,
    "model_sync_user": check_user,
    "model_sync_key": check_written_file,
    "model_sync_known_hosts": check_known_hosts,
    "model_sync_forced_command": check_written_file,
    "model_sync_allowed_commands": check_written_file,
    "model_sync_streams": lambda v: check_int(v, 1, 64, "a number of parallel streams"),
    "model_sync_transport": check_choice("auto", "tcp", "ssh"),
    "model_sync_bwlimit": check_whole(0, "a bandwidth in KiB/s (0 = no limit)"),
    "model_sync_checksum": check_bool,
    "model_sync_verify": check_bool,
    "model_sync_drop_cache": check_bool,
    "model_sync_delete": check_bool,
    "model_sync_download": check_bool,
    "model_sync_download_timeout": check_seconds,
    "model_sync_download_poll": check_seconds,
    "model_sync_hf_token": check_optional_secret,
    "model_sync_model_id": check_model_id,
    "model_sync_image": check_image,
    "model_sync_timeout": check_seconds,
    "model_sync_verify_content": check_bool,
    "model_sync_scrub_interval": check_calendar,
    # roles/runtime_image
    "runtime_image_name": check_image,
    "runtime_image_pull": check_bool,
    "runtime_image_pull_timeout": check_seconds,
    "runtime_image_sync_user": check_user,
    "runtime_image_sync_key": check_written_file,
    "runtime_image_known_hosts": check_written_file,
    "runtime_image_loader": check_written_file,
    "runtime_image_load_command": check_load_command,
    "runtime_image_ssh_timeout": check_seconds,
    "runtime_image_sync_timeout": check_seconds,
    "runtime_image_progress_interval": check_seconds,
    "runtime_image_progress_file": check_written_file,
    "runtime_image_wait": check_bool,
    # roles/ray_cluster (extra args, env and the firewall's networks are checked with their context below)
    "ray_cluster_image": check_image,
    "ray_cluster_gpu_args": check_gpu_args,
    "ray_cluster_num_gpus": check_whole(0, "a whole number of GPUs"),
    "ray_cluster_num_cpus": check_optional_count,
    "ray_cluster_dashboard": check_bool,
    "ray_cluster_memory_monitor": check_bool,
    "ray_cluster_memory_usage_threshold": check_fraction,
    "ray_cluster_auth": check_bool,
    "ray_cluster_auth_token_path": check_written_file,
    "ray_cluster_auth_token": check_optional_secret,
    "ray_cluster_auth_min_ray_version": lambda v: check_plain_version(v, "2.52.0"),
    "ray_cluster_rdma": check_bool,
    "ray_cluster_env": None,
    "ray_cluster_extra_args": None,
    "ray_cluster_join_timeout": check_seconds,
    "ray_cluster_probe_object_mb": check_count,
    "ray_cluster_probe_timeout": check_seconds,
    "ray_cluster_restart_sec": check_whole(0, "a whole number of seconds", SECONDS_MAX),
    "ray_cluster_restart_max_delay": check_seconds,
    "ray_cluster_gcs_wait_timeout": check_seconds,
    "ray_cluster_watchdog": check_bool,
    "ray_cluster_watchdog_interval": check_seconds,
    "ray_cluster_watchdog_grace": check_whole(0, "a whole number of seconds", SECONDS_MAX),
    "ray_cluster_watchdog_checks": check_count,
    "ray_cluster_watchdog_pg_stuck": check_whole(0, "a whole number of seconds (0: off)", SECONDS_MAX),
    "ray_cluster_watchdog_pg_stuck_leak": check_whole(0, "a whole number of seconds (0: off)", SECONDS_MAX),
    "ray_cluster_firewall": check_bool,
    "ray_cluster_firewall_allow": None,
    "ray_cluster_firewall_table": check_nft_table,
    "ray_cluster_firewall_ephemeral_range": check_port_range,
    "ray_cluster_firewall_foreign_listeners": check_choice("warn", "fail"),
    "ray_cluster_firewall_ephemeral": check_bool,
    "ray_cluster_firewall_nft": check_read_path,
    # roles/healthcheck
    "healthcheck_url": check_url,
    "healthcheck_api_key": check_api_key,
    "healthcheck_model": check_string,
    "healthcheck_prompt": check_text,
    "healthcheck_max_tokens": check_count,
    "healthcheck_timeout": check_seconds,
    "healthcheck_status_timeout": check_seconds,
    "healthcheck_incidents_dir": check_controller_dir,
    "healthcheck_throughput_tokens": check_whole(0, "a number of tokens (0 turns the probe off)", COUNT_MAX),
    "healthcheck_ray_object_mb": check_count,
    "healthcheck_allow_tcp_fallback": check_bool,
    "healthcheck_tool_call": check_bool,
    "healthcheck_tool_call_max_tokens": check_count,
}
ROLE_CHECKS.update((var, check_port) for var in RAY_PORT_FLAGS.values())


def check_optional_url(value):
    """Empty, or an http(s) URL (monitoring_webhook_url)."""
    if value == "":
        return value, None
    return check_url(value)


def check_number_between(low, high, what):
    def check(value):
        f, problem = _number(value, "[%g, %g], %s" % (low, high, what))
        if problem is None and not low <= f <= high:
            return None, "must be between %g and %g (%s)" % (low, high, what)
        return (None, problem) if problem else (f, None)
    return check


def check_cidr_list_or_empty(value):
    """Extra source networks (CIDR); an empty list is fine."""
    if value == []:
        return [], None
    nets, problem = check_cidr_list(value)
    if problem is None and any(n.prefixlen == 0 for n in nets):
        return None, "opens the port to every address; list the networks that need it"
    return nets, problem


ROLE_CHECKS.update({
    # roles/monitoring
    "sparkfleet_monitoring": check_bool,
    "monitoring_exporters_only": check_bool,
    "monitoring_prometheus_port": check_port,
    "monitoring_alertmanager_port": check_port,
    "monitoring_node_exporter_port": check_port,
    "monitoring_allow": check_cidr_list_or_empty,
    "monitoring_firewall_table": check_nft_table,
    "monitoring_scrape_interval": check_whole(1, "a whole number of seconds", 300),
    "monitoring_retention_days": check_whole(1, "a whole number of days", 90),
    "monitoring_retention_size_mb": check_whole(64, "a whole number of MiB", 65536),
    "monitoring_webhook_url": check_optional_url,
    "monitoring_alert_memory_above_baseline_mb": check_whole(1, "a whole number of MiB", 1 << 20),
    "monitoring_alert_page_cache_fraction": check_number_between(0, 1, "a share of a node's memory"),
    "monitoring_alert_kv_cache_fraction": check_number_between(0, 1, "a share of the KV cache"),
    "monitoring_alert_queue_time_seconds": check_number_between(0, SECONDS_MAX, "seconds"),
    "monitoring_alert_disk_free_fraction": check_number_between(0, 1, "a share of the filesystem"),
    "monitoring_textfile_interval": check_whole(5, "a whole number of seconds", 300),
})
# The variables checked on the head only (the API, the engine, the model state and the checks of the served API are
# the head's).
HEAD_ONLY_PREFIXES = ("vllm_serve_", "healthcheck_", "sparkfleet_api_", "sparkfleet_model_state_file")


def _ports_problems(good):
    """Two of Ray's ports (or the API's) on one number, and a worker range upside down."""
    problems = []
    names = (["sparkfleet_ray_port", "sparkfleet_api_port"] + sorted(RAY_PORT_FLAGS.values())
             + ["monitoring_prometheus_port", "monitoring_alertmanager_port", "monitoring_node_exporter_port"])
    seen = {}
    lo, hi = good.get("ray_cluster_min_worker_port"), good.get("ray_cluster_max_worker_port")
    for name in names:
        port = good.get(name)
        if port is None:
            continue
        if port in seen:
            problems.append("%s and %s are both %d; give each its own port" % (seen[port], name, port))
        seen.setdefault(port, name)
        if lo is not None and hi is not None and lo <= port <= hi and name not in (
                "ray_cluster_min_worker_port", "ray_cluster_max_worker_port"):
            problems.append("%s %d lies in Ray's worker port range %d-%d (ray_cluster_min_worker_port /"
                            " ray_cluster_max_worker_port); move one of them" % (name, port, lo, hi))
    if lo is not None and hi is not None and lo > hi:
        problems.append("ray_cluster_min_worker_port %d is above ray_cluster_max_worker_port %d" % (lo, hi))
    return problems


def firewall_allow_problems(nets, subnet, allow_exposure):
    """Networks of ray_cluster_firewall_allow that reach beyond the fabric subnet (refused without the opt-in)."""
    if allow_exposure is True:
        return []
    try:
        fabric = ipaddress.ip_network(str(subnet), strict=False)
    except ValueError:
        return []  # the inventory check names a bad subnet
    wide = [str(n) for n in nets if n.version != fabric.version or not n.subnet_of(fabric)]
    if not wide:
        return []
    return ["ray_cluster_firewall_allow %s reaches beyond the fabric subnet %s: anyone there could run code through"
            " Ray's ports (CVE-2023-48022); list only the fabric subnet (or parts of it), or set"
            " sparkfleet_allow_ray_exposure: true to accept that" % (", ".join(wide), fabric)]


def settings_errors(settings, host="head", template_errors=None, head=True, gpus=None, sources=None):
    """Every problem with every role's variables on one host, each naming host, variable, value and fix.

    settings: variable -> value as the roles would read it (sparkfleet.vllm.role_settings); template_errors:
    variable -> templating error; head: whether host is the head (vllm_serve_* and healthcheck_* are checked
    there only); sources: for a variable whose value is its role's default, the variables that default is made of
    (a problem of a source is named once, not again in each value made from it). Never raises. The serving variables
    go through serving_errors (the rule vllm_serve applies).
    """
    if not isinstance(settings, dict):
        return ["%s: the settings must be a dict of variables, got %s" % (host, type(settings).__name__)]
    failed = dict(template_errors) if isinstance(template_errors, dict) else {}
    scope = [n for n in list(settings) + list(failed) if is_string(n)
             and (head or not n.startswith(HEAD_ONLY_PREFIXES))]
    errors = []
    if head:
        serving = dict((n, settings[n]) for n in settings if n in SERVING_CHECKS)
        errors += serving_errors(serving, host, dict((n, e) for n, e in failed.items() if n in SERVING_CHECKS), gpus)
    good = {}
    for name in sorted(set(scope)):
        if name in SERVING_CHECKS and head:
            continue
        if name in failed:
            reason = str(failed[name]).strip()
            errors.append("%s: %s cannot be templated: %s%s" % (
                host, name, reason, "" if "in the inventory" in reason else "; fix the expression in the inventory"))
            continue
        value = settings[name]
        check = ROLE_CHECKS.get(name) or SERVING_CHECKS.get(name)
        if check is None:
            continue
        normal, problem = check(value)
        if problem:
            errors.append("%s: %s %s %s" % (host, name, _shown(name, value), problem))
        else:
            good[name] = normal
    for name in ("sparkfleet_ray_port", "sparkfleet_api_port") if head else ("sparkfleet_ray_port",):
        if name not in good and name in settings and check_port(settings[name])[1] is None:
            good[name] = check_port(settings[name])[0]
    errors += ["%s: %s" % (host, p) for p in _ports_problems(good)]
    exposure = settings.get("sparkfleet_allow_ray_exposure") is True
    if "ray_cluster_env" in settings and "ray_cluster_env" not in failed:
        errors += ["%s: ray_cluster_env %s" % (host, p)
                   for p in env_problems(settings["ray_cluster_env"], settings.get("sparkfleet_allow_unsafe_env"))]
    if "ray_cluster_extra_args" in settings and "ray_cluster_extra_args" not in failed:
        errors += ["%s: ray_cluster_extra_args: %s" % (host, p)
                   for p in ray_extra_args_problems(settings["ray_cluster_extra_args"], exposure)]
    if "ray_cluster_firewall_allow" in settings and "ray_cluster_firewall_allow" not in failed:
        nets, problem = check_cidr_list(settings["ray_cluster_firewall_allow"])
        if problem:
            errors.append("%s: ray_cluster_firewall_allow %r %s" % (host, settings["ray_cluster_firewall_allow"],
                                                                    problem))
        else:
            errors += ["%s: %s" % (host, p) for p in firewall_allow_problems(
                nets, settings.get("sparkfleet_fabric_subnet"), exposure)]
    if settings.get("ray_cluster_firewall") is False and not exposure:
        errors.append("%s: ray_cluster_firewall is false, which leaves Ray's ports (they run code for anyone who reaches"
                      " them) open to every network the nodes are on; keep it true, or set sparkfleet_allow_ray_exposure:"
                      " true as well to accept that" % host)
    if settings.get("ray_cluster_dashboard") is True and settings.get("ray_cluster_auth") is False and not exposure:
        errors.append("%s: ray_cluster_dashboard is true while ray_cluster_auth is false: the dashboard (which runs"
                      " code) would answer anyone on the node without a token; turn auth on, or set"
                      " sparkfleet_allow_ray_exposure: true to accept that" % host)
    named = set(e.split(" ", 2)[1].rstrip(":") for e in errors if e.startswith(host + ": ") and " " in e[len(host) + 2:])
    sources = sources if isinstance(sources, dict) else {}
    seen, unique = set(), []
    for e in errors:
        name = e[len(host) + 2:].split(" ", 1)[0].rstrip(":")
        derived_from = sources.get(name) if isinstance(sources.get(name), list) else []
        if e in seen or any(src in named for src in derived_from if src != name):
            continue
        seen.add(e)
        unique.append(e)
    return unique


# Every path variable the roles write on a node: name -> (kind, where: "all" | "head" | "workers", ssh user var).
# The node module (path_guard) resolves each on the node: symbolic links, existing files, the node's homes.
WRITTEN_PATHS = {
    "sparkfleet_config_dir": ("directory", "all", None),
    "sparkfleet_ray_tmp_dir": ("directory", "all", None),
    "sparkfleet_cache_dir": ("directory", "all", None),
    "sparkfleet_model_state_file": ("state file", "head", None),
    "sparkfleet_model_dir": ("model directory", "all", None),
    "vllm_serve_model": ("model directory", "head", None),
    "model_sync_src": ("model directory", "head", None),
    "model_sync_dest": ("model directory", "workers", None),
    "model_sync_key": ("key file", "head", None),
    "model_sync_known_hosts": ("ssh file", "all", "model_sync_user"),
    "model_sync_forced_command": ("file", "workers", None),
    "model_sync_allowed_commands": ("file", "workers", None),
    "ray_cluster_auth_token_path": ("file", "head", None),
    "runtime_image_sync_key": ("key file", "head", None),
    "runtime_image_known_hosts": ("file", "head", None),
    "runtime_image_loader": ("file", "workers", None),
    "runtime_image_progress_file": ("file", "head", None),
}


def node_paths(settings, head=True, worker=False):
    """The written paths of one node for the path_guard module: [{name, path, kind, user}], only values that are
    strings (the controller's checks report the others)."""
    out = []
    if not isinstance(settings, dict):
        return out
    for name in sorted(WRITTEN_PATHS):
        kind, where, user_var = WRITTEN_PATHS[name]
        if where == "head" and not head or where == "workers" and not worker:
            continue
        value = settings.get(name)
        if not is_string(value) or not value:
            continue
        user = settings.get(user_var) if user_var else None
        if kind == "ssh file" and not value.startswith("~/"):
            kind = "file"
        out.append(dict(name=name, path=value, kind=kind, user=user if is_string(user) else None))
    return out
