# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.vllm_serve_args (documented in vllm_serve_args.yml)."""

from __future__ import annotations

import difflib
import json
import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.collections import is_string

_WHERE = "vllm_serve_args"
BACKENDS = ("ray", "mp", "uni", "external_launcher")
# systemd rewrites these inside ExecStart even when quoted ($VAR, %specifier, C escapes);
# newline/NUL break any command line.
_UNSAFE = (("\n", "a newline"), ("\r", "a carriage return"), ("\0", "a NUL byte"),
           ("$", "'$'"), ("%", "'%'"), ("\\", "a backslash"))
_FLAG_RE = re.compile(r"^(--)?[A-Za-z0-9][A-Za-z0-9_.-]*$")
_MAX_LEN_RE = re.compile(r"^\d+(\.\d+)?[kKmMgG]?$")

# key -> kind; each becomes --key-with-dashes except model (positional) and api_key (never in argv).
KEYS = {
    "model": "str",
    "served_model_name": "names",
    "tensor_parallel_size": "posint",
    "pipeline_parallel_size": "posint",
    "distributed_executor_backend": "backend",
    "gpu_memory_utilization": "fraction",
    "max_model_len": "max_len",
    "host": "str",
    "port": "port",
    "api_key": "secret",
    "load_format": "str",
    "safetensors_load_strategy": "str",
    "enforce_eager": "bool",
    "trust_remote_code": "bool",
    "extra_args": "extra",
}
ORDER = [k for k in KEYS if k not in ("model", "api_key", "extra_args")]


def _fail(msg):
    raise AnsibleFilterError("%s: %s" % (_WHERE, msg))


def _safe(key, text):
    for bad, name in _UNSAFE:
        if bad in text:
            _fail("%s contains %s, which systemd's ExecStart would rewrite or split; remove it "
                  "(pass the value through an environment variable or a config file instead)" % (key, name))
    return text


def _int(key, value):
    if isinstance(value, bool):
        _fail("%s must be an integer, got a boolean" % key)
    if is_string(value) and re.match(r"^\s*\d+\s*$", value):
        return int(value)
    if not isinstance(value, int):
        _fail("%s must be an integer, got %r" % (key, value))
    return value


def _str(key, value):
    if not is_string(value) or not value.strip():
        _fail("%s must be a non-empty string, got %r" % (key, value))
    return _safe(key, str(value))


def _convert(key, kind, value):
    """Return the list of argv words for one known key (without the flag)."""
    if kind == "str":
        return [_str(key, value)]
    if kind == "names":
        names = [value] if is_string(value) else value
        if not isinstance(names, list) or not names:
            _fail("served_model_name must be a string or a non-empty list of strings, got %r" % (value,))
        return [_str(key, n) for n in names]
    if kind == "posint":
        n = _int(key, value)
        if n < 1:
            _fail("%s must be at least 1, got %d (1 means no parallelism of that kind)" % (key, n))
        return [str(n)]
    if kind == "port":
        n = _int(key, value)
        if not 1 <= n <= 65535:
            _fail("port must be between 1 and 65535, got %d" % n)
        return [str(n)]
    if kind == "backend":
        if value not in BACKENDS:
            _fail("distributed_executor_backend must be one of %s, got %r (use ray across nodes)"
                  % (", ".join(BACKENDS), value))
        return [value]
    if kind == "fraction":
        if isinstance(value, bool):
            _fail("gpu_memory_utilization must be a number, got a boolean")
        try:
            f = float(value)
        except (TypeError, ValueError):
            _fail("gpu_memory_utilization must be a number, got %r" % (value,))
        if not 0 < f <= 1:
            _fail("gpu_memory_utilization must be in (0, 1], got %r (it is a fraction: 0.85 means 85%%)" % (value,))
        return [repr(f)]
    if kind == "max_len":
        if isinstance(value, bool):
            _fail("max_model_len must be a positive integer or a size like '32k', got a boolean")
        if isinstance(value, int):
            if value < 1:
                _fail("max_model_len must be positive, got %d" % value)
            return [str(value)]
        if is_string(value) and _MAX_LEN_RE.match(value.strip()):
            return [value.strip()]
        _fail("max_model_len must be a positive integer or a size like '32k', got %r" % (value,))
    if kind == "bool":
        if not isinstance(value, bool):
            _fail("%s must be true or false, got %r" % (key, value))
        return [] if value else None
    raise AssertionError(kind)


def _flag(name):
    if not is_string(name) or not _FLAG_RE.match(name):
        _fail("extra_args key %r is not a flag name (letters, digits, '-', '_', '.')" % (name,))
    name = str(name)
    if name.startswith("--"):
        return name
    return "--" + name.replace("_", "-")


def _extra_value(flag, value):
    if isinstance(value, bool):
        return [] if value else None
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return [str(value)]
    if is_string(value):
        return [_safe(flag, str(value))]
    if isinstance(value, dict):
        # vLLM takes JSON for config-valued flags (--compilation-config, --limit-mm-per-prompt ...).
        return [_safe(flag, json.dumps(value, sort_keys=True, separators=(",", ":")))]
    if isinstance(value, list):
        words = []
        for v in value:
            if isinstance(v, (bool, dict, list)) or v is None:
                _fail("extra_args %s: list items must be strings or numbers, got %r" % (flag, v))
            words.append(_safe(flag, str(v)))
        return words
    _fail("extra_args %s: unsupported value %r" % (flag, value))


def vllm_serve_args(cfg):
    """Build the arguments after `vllm serve` from a dict; api_key is never put in argv."""
    if not isinstance(cfg, dict):
        _fail("input must be a dict of vllm serve settings, got %s" % type(cfg).__name__)
    unknown = sorted(str(k) for k in cfg if k not in KEYS)
    if unknown:
        hints = []
        for k in unknown:
            close = difflib.get_close_matches(k, list(KEYS), n=1)
            hints.append("%s (did you mean %s?)" % (k, close[0]) if close else k)
        _fail("unknown key(s) %s; known keys: %s; put any other vllm flag in extra_args"
              % (", ".join(hints), ", ".join(sorted(KEYS))))
    if cfg.get("model") is None:
        _fail("model is required (a Hugging Face id or a local path)")

    argv = _convert("model", "str", cfg["model"])
    own_flags = set()
    for key in ORDER:
        flag = "--" + key.replace("_", "-")
        own_flags.add(flag)
        value = cfg.get(key)
        if value is None:
            continue
        words = _convert(key, KEYS[key], value)
        if words is None:
            continue
        argv.append(flag)
        argv.extend(words)

    extra = cfg.get("extra_args")
    if extra is None:
        extra = []
    if isinstance(extra, dict):
        for name in sorted(extra, key=str):
            flag = _flag(name)
            if flag in own_flags or flag in ("--model", "--api-key"):
                _fail("extra_args %s duplicates a key this filter owns; set %s instead"
                      % (flag, flag[2:].replace("-", "_")))
            words = _extra_value(flag, extra[name])
            if words is None:
                continue
            argv.append(flag)
            argv.extend(words)
    elif isinstance(extra, list):
        for item in extra:
            if isinstance(item, bool) or not isinstance(item, (int, float)) and not is_string(item):
                _fail("extra_args list items must be strings or numbers, got %r" % (item,))
            word = _safe("extra_args", str(item))
            head = word.split("=", 1)[0]
            if head in own_flags or head in ("--model", "--api-key"):
                _fail("extra_args %s duplicates a key this filter owns; set %s instead"
                      % (head, head[2:].replace("-", "_")))
            argv.append(word)
    else:
        _fail("extra_args must be a list of argv words or a dict of flag: value, got %s"
              % type(extra).__name__)
    return argv


class FilterModule:
    """Build vllm serve command lines."""

    def filters(self):
        return {"vllm_serve_args": vllm_serve_args}
