# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The setting_names option of the modules whose hints name settings to change (module_utils/_settings.py)."""

    DOCUMENTATION = r"""
options:
  setting_names:
    description:
      - 'How hints name the settings they tell to change, keyed by setting, for example
        C({"gpu_memory_utilization": "vllm_serve_gpu_memory_utilization"}) so a hint names the caller''s variable.
        A setting not given is named by its vLLM flag, environment variable, option or action (C(--gpu-memory-utilization)).'
      - 'The settings: C(allow_tcp_fallback), C(api_key), C(cleanup_commands), C(cleanup_containers), C(cleanup_foreign), C(cleanup_protect),
        C(cleanup_system), C(cleanup_units), C(container_rdma), C(engine_ready_timeout), C(fabric_interface), C(fabric_ip),
        C(fabric_mtu), C(gpu_cleanup), C(gpu_memory_utilization), C(gpus_per_node), C(image), C(images),
        C(max_model_len), C(max_num_seqs), C(model), C(model_dir), C(model_sync), C(model_sync_checksum),
        C(model_sync_verify), C(nccl_debug), C(pipeline_parallel_size), C(port), C(ray_auth_token),
        C(ray_cluster), C(ray_head_address), C(ray_memory_monitor), C(ray_memory_usage_threshold),
        C(ray_node_ip), C(ray_tmp_dir), C(served_model_name), C(server), C(stale_units), C(stall_timeout),
        C(tensor_parallel_size), C(trust_remote_code).'
      - The collection's roles pass C(sparkfleet_setting_names), their variables.
      - An unknown setting or an empty name fails the task.
    type: dict
    default: {}
"""
