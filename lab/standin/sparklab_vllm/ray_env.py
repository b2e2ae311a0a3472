"""Which driver variables reach the Ray workers: the rule of vLLM 0.17's vllm/ray/ray_env.py.

Every variable of the driver (the API server's EngineCore) whose name starts with one of vLLM's prefixes is copied
to every Ray worker and overrides the worker's own value, except the worker-specific ones and any listed in
$VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json. A per-node NCCL_SOCKET_IFNAME in the driver therefore lands on
every other node: that is the leak the lab must punish.
"""

from __future__ import annotations

import json
import os

from .formats import Logger

PREFIXES = ("VLLM_", "LMCACHE_", "NCCL_", "UCX_", "HF_", "HUGGING_FACE_")
EXTRA = {"PYTHONHASHSEED"}
# vllm/executor/ray_distributed_executor.py keeps these per worker.
WORKER_SPECIFIC = {"VLLM_HOST_IP", "VLLM_HOST_PORT", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                   "ROCR_VISIBLE_DEVICES"}


def config_root(environ):
    """VLLM_CONFIG_ROOT, else $XDG_CONFIG_HOME/vllm, else ~/.config/vllm (vllm/envs.py)."""
    if environ.get("VLLM_CONFIG_ROOT"):
        return os.path.expanduser(environ["VLLM_CONFIG_ROOT"])
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "vllm")


def non_carry_over(environ, log=None):
    path = os.path.join(config_root(environ), "ray_non_carry_over_env_vars.json")
    if not os.path.exists(path):
        return set(), path
    try:
        with open(path) as f:
            return set(json.load(f)), path
    except ValueError:
        if log:
            log.warning(33, "Failed to parse %s. Using an empty set for non-carry-over env vars.", path)
        return set(), path


def vars_to_copy(environ, log=None):
    """The driver's variables (name -> value) a Ray worker receives."""
    skip, path = non_carry_over(environ, log)
    names = {k for k in environ if k.startswith(PREFIXES) or k in EXTRA}
    names -= WORKER_SPECIFIC
    names -= skip
    if log:
        log.info(62, "RAY_NON_CARRY_OVER_ENV_VARS from config: %s", skip or "set()")
        log.info(70, "Copying the following environment variables to workers: %s", sorted(names))
        log.info(74, "If certain env vars should NOT be copied, add them to %s file", path)
    return {k: environ[k] for k in sorted(names)}


def default_logger():
    return Logger("ray_env.py")
