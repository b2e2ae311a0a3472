# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.vllm_serve_args (documented in vllm_serve_args.yml)."""

from __future__ import annotations

import difflib

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate as v
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._checks import fail

_WHERE = "vllm_serve_args"
BACKENDS = ("ray", "mp", "uni", "external_launcher")

# key -> check (the same one preflight runs on the role variable); each becomes --key-with-dashes except model
# (positional) and api_key (never in argv).
KEYS = {
    "model": v.check_string,
    "served_model_name": v.check_names,
    "tensor_parallel_size": v.check_parallel_size,
    "pipeline_parallel_size": v.check_parallel_size,
    "distributed_executor_backend": None,
    "gpu_memory_utilization": v.check_fraction,
    "max_model_len": v.check_max_model_len,
    "host": v.check_host,
    "port": v.check_port,
    "api_key": v.check_api_key,
    "load_format": v.check_string,
    "safetensors_load_strategy": v.check_string,
    "enforce_eager": v.check_bool,
    "trust_remote_code": v.check_bool,
    "extra_args": None,
}
ORDER = [k for k in KEYS if k not in ("model", "api_key", "extra_args")]


def _convert(key, value):
    """Return the list of argv words for one known key (without the flag), None for a false boolean."""
    if key == "distributed_executor_backend":
        if value not in BACKENDS:
            fail(_WHERE, "distributed_executor_backend %r must be one of %s (use ray across nodes)"
                 % (value, ", ".join(BACKENDS)))
        return [value]
    normal, problem = KEYS[key](value)
    if problem:
        fail(_WHERE, "%s %s %s" % (key, "(hidden)" if key == "api_key" else repr(value), problem))
    if isinstance(normal, bool):
        return [] if normal else None
    if isinstance(normal, list):
        return [str(n) for n in normal]
    if isinstance(normal, float):
        return [repr(normal)]
    return [str(normal)]


def vllm_serve_args(cfg):
    """Build the arguments after `vllm serve` from a dict; api_key is never put in argv."""
    if not isinstance(cfg, dict):
        fail(_WHERE, "input must be a dict of vllm serve settings, got %s" % type(cfg).__name__)
    unknown = sorted(str(k) for k in cfg if k not in KEYS)
    if unknown:
        hints = []
        for k in unknown:
            close = difflib.get_close_matches(k, list(KEYS), n=1)
            hints.append("%s (did you mean %s?)" % (k, close[0]) if close else k)
        fail(_WHERE, "unknown key(s) %s; known keys: %s; put any other vllm flag in extra_args"
             % (", ".join(hints), ", ".join(sorted(KEYS))))
    if cfg.get("model") is None:
        fail(_WHERE, "model is required (a Hugging Face id or a local path)")

    argv = _convert("model", cfg["model"])
    for key in ORDER:
        value = cfg.get(key)
        if value is None:
            continue
        words = _convert(key, value)
        if words is None:
            continue
        argv.append("--" + key.replace("_", "-"))
        argv.extend(words)

    extra = cfg.get("extra_args")
    if extra is not None and not isinstance(extra, (dict, list)):
        fail(_WHERE, "extra_args must be a list of argv words or a dict of flag: value, got %s" % type(extra).__name__)
    words, problems = v.extra_args_argv(extra, v.pinned_flags(k for k in cfg if k in KEYS))
    if problems:
        fail(_WHERE, "extra_args: " + "; ".join(problems))
    return argv + words


class FilterModule:
    """Build vllm serve command lines."""

    def filters(self):
        return {"vllm_serve_args": vllm_serve_args}
