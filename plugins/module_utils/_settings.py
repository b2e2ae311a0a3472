# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The settings a hint may tell the operator to change, and how a hint names them (private to sparkfleet.vllm).

module_utils knows no role. A hint names a *setting* as ``{fabric_ip}``; ``render_text()`` fills each field
with the name the caller passed for it (the ``setting_names`` option of vllm_wait, nccl_transport and
ray_cluster_check, which the roles set to ``sparkfleet_setting_names``, their variables) or with the generic
name in ``SETTINGS`` (the vLLM flag, the environment variable or the action itself).

To add a setting: add it here with its generic name, to ``sparkfleet_setting_names`` in
roles/sparkfleet/vars/main.yml with the variable a user sets, and to the list in
plugins/doc_fragments/setting_names.py (unit tests hold the three to one another).
"""

from __future__ import annotations

import string

SETTINGS = {
    "allow_tcp_fallback": "allow_tcp_fallback",
    "api_key": "VLLM_API_KEY",
    "cleanup_commands": "stale_commands",
    "cleanup_containers": "stale_containers",
    "cleanup_foreign": "stop_foreign=true",
    "cleanup_protect": "protect",
    "cleanup_system": "system",
    "cleanup_units": "stale_units",
    "container_rdma": "--device /dev/infiniband/uverbsN for each device and --ulimit memlock=-1 on the container",
    "engine_ready_timeout": "VLLM_ENGINE_READY_TIMEOUT_S",
    "fabric_interface": "the fabric interface",
    "fabric_ip": "the node's fabric IP",
    "fabric_mtu": "9000",
    "gpu_cleanup": "a GPU cleanup",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "gpus_per_node": "ray start --num-gpus on each node",
    "image": "the server's image",
    "images": "the server's and every Ray node's image",
    "max_model_len": "--max-model-len",
    "max_num_seqs": "--max-num-seqs N",
    "model": "the served model",
    "model_dir": "the model directory",
    "model_sync": "from one good copy",
    "model_sync_checksum": "sha256sum on both ends",
    "model_sync_verify": "a size check of every file against model.safetensors.index.json",
    "nccl_debug": "NCCL_DEBUG=INFO",
    "pipeline_parallel_size": "--pipeline-parallel-size",
    "port": "--port",
    "ray_auth_token": "RAY_AUTH_TOKEN, the head's token, on every node and in the server's environment",
    "ray_cluster": "ray start on every node",
    "ray_head_address": "the head's fabric IP and Ray port, 6379 by default",
    "ray_memory_monitor": "RAY_memory_monitor_refresh_ms=0 on every Ray node",
    "ray_memory_usage_threshold": "RAY_memory_usage_threshold",
    "ray_node_ip": "ray start --node-ip-address",
    "ray_tmp_dir": "ray start --temp-dir",
    "served_model_name": "the name /v1/models lists",
    "server": "unit / container",
    "stale_units": "systemctl stop UNIT, docker rm -f NAME",
    "stall_timeout": "raise stall_timeout when the startup is only slow",
    "tensor_parallel_size": "--tensor-parallel-size",
    "trust_remote_code": "--trust-remote-code",
}


def fields(text):
    """The settings ``text`` names as ``{setting}``, in order."""
    return tuple(field for _text, field, _spec, _conv in string.Formatter().parse(text) if field)


def unknown_settings(names):
    """The keys of ``names`` that are not settings (sorted)."""
    return sorted(k for k in (names or {}) if k not in SETTINGS)


def render_text(text, names=None):
    """``text`` with each ``{setting}`` named as ``names`` says, else by its generic name."""
    names = names or {}
    return text.format(**dict((k, names.get(k) or SETTINGS[k]) for k in fields(text)))


def setting_names_option():
    """The setting_names option of the modules that give hints, as an argument spec entry; the
    sparkfleet.vllm.setting_names doc fragment documents it (each module extends it)."""
    return {"setting_names": {"type": "dict", "default": {}}}


def check_setting_names(module):
    """Fail the module, with the fix, when its setting_names option cannot be used."""
    problem = setting_names_problem(module.params["setting_names"])
    if problem:
        module.fail_json(msg=problem[0], hint=problem[1])


def setting_names_problem(names):
    """(msg, hint) when a caller's ``setting_names`` cannot be used, else None."""
    unknown = unknown_settings(names)
    if unknown:
        return ("setting_names has unknown setting(s) %s" % ", ".join(unknown),
                "Name only the settings listed in the option's documentation (ansible-doc -t module on this "
                "module), e.g. {gpu_memory_utilization: my_gpu_fraction}.")
    bad = sorted(k for k, v in (names or {}).items() if not isinstance(v, str) or not v.strip())
    if bad:
        return ("setting_names values must be non-empty strings (%s)" % ", ".join(bad),
                "Give the name a hint should show for each setting, e.g. a role variable.")
    return None
