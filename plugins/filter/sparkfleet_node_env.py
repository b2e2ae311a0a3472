# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.sparkfleet_node_env (documented in sparkfleet_node_env.yml)."""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._checks import env_name, env_value, fail, number

_WHERE = "sparkfleet_node_env"


def sparkfleet_node_env(fabric, overrides=None, ray_memory_monitor=None, ray_memory_usage_threshold=None,
                        engine_ready_timeout_s=None):
    """Fabric env from rdma_facts, then policy flags, then per-node overrides (None removes a key)."""
    if fabric is None:
        fabric = {}
    if not isinstance(fabric, dict):
        fail(_WHERE, "input must be the sparkfleet_fabric fact (or its env dict), got %s" % type(fabric).__name__)
    base = fabric.get("env") if isinstance(fabric.get("env"), dict) else fabric
    env = {}
    for key, value in base.items():
        name = env_name(key, _WHERE)
        env[name] = env_value(name, value, _WHERE)

    if ray_memory_monitor is not None:
        if not isinstance(ray_memory_monitor, bool):
            fail(_WHERE, "ray_memory_monitor must be true or false, got %r" % (ray_memory_monitor,))
        if ray_memory_monitor:
            env.pop("RAY_memory_monitor_refresh_ms", None)
        else:
            # Ray's monitor kills the engine on GB10 unified memory during CUDA graph capture.
            env["RAY_memory_monitor_refresh_ms"] = "0"
    if ray_memory_usage_threshold is not None:
        value = number(_WHERE, "ray_memory_usage_threshold", ray_memory_usage_threshold)
        if not 0 < value <= 1:
            fail(_WHERE, "ray_memory_usage_threshold must be in (0, 1], got %r; Ray's default is 0.95" % (value,))
        env["RAY_memory_usage_threshold"] = repr(float(value))
    if engine_ready_timeout_s is not None:
        value = number(_WHERE, "engine_ready_timeout_s", engine_ready_timeout_s, int)
        if value < 1:
            fail(_WHERE, "engine_ready_timeout_s must be positive seconds, got %r" % (value,))
        env["VLLM_ENGINE_READY_TIMEOUT_S"] = str(value)

    if overrides is not None:
        if not isinstance(overrides, dict):
            fail(_WHERE, "overrides must be a dict of NAME: value, got %s" % type(overrides).__name__)
        for key, value in overrides.items():
            name = env_name(key, _WHERE)
            if value is None:
                env.pop(name, None)
            else:
                env[name] = env_value(name, value, _WHERE)
    return dict(sorted(env.items()))


class FilterModule:
    """Per-node environment for Ray and vLLM."""

    def filters(self):
        return {"sparkfleet_node_env": sparkfleet_node_env}
