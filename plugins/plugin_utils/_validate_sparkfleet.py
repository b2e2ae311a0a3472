# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The floor role's settings (roles/sparkfleet, entry point settings): what each may be.

Every option of roles/sparkfleet/meta/argument_specs.yml has its check here (CHECKS: variable -> check, None where
_validate.settings_errors checks it with its context); tests/unit/plugins/plugin_utils/test_validate_specs.py holds
the two together. Private to the collection, pure functions, no I/O.
"""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate_values import (
    bounded,
    check_bool,
    check_config_dir,
    check_count,
    check_data_dir,
    check_env_names,
    check_gpu_args,
    check_host,
    check_image,
    check_int,
    check_model_dir,
    check_model_id,
    check_port,
    check_read_path,
    check_state_file,
    check_unit_and_container_name,
)


def check_min_mtu(value):
    """sparkfleet_fabric_min_mtu: unset (rdma_facts' 9000) or an interface MTU, 68 to 65535."""
    if value is None or value == "":
        return 9000, None
    return check_int(value, 68, 65535, "an MTU (9000 for jumbo frames)")


bounded(check_min_mtu, 68, 65535)


CHECKS = {
    "sparkfleet_api_host": check_host,
    "sparkfleet_api_port": check_port,
    "sparkfleet_ray_port": check_port,
    "sparkfleet_allow_unsafe_env": check_env_names,
    "sparkfleet_fabric_min_mtu": check_min_mtu,
    "sparkfleet_vllm_unit": check_unit_and_container_name,
    "sparkfleet_ray_unit": check_unit_and_container_name,
    "sparkfleet_ray_tmp_dir": check_data_dir,
    "sparkfleet_config_dir": check_config_dir,
    "sparkfleet_cache_dir": check_data_dir,
    "sparkfleet_model_state_file": check_state_file,
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
    "sparkfleet_monitoring": check_bool,
}
# The floor settings the serving check reads with vllm_serve's own (vllm_serve_args builds flags from them).
SERVING_FLOOR = ("sparkfleet_api_host", "sparkfleet_api_port", "sparkfleet_ray_port", "sparkfleet_allow_unsafe_env",
                 "sparkfleet_fabric_min_mtu", "sparkfleet_vllm_unit", "sparkfleet_ray_unit", "sparkfleet_ray_tmp_dir",
                 "sparkfleet_config_dir", "sparkfleet_cache_dir", "sparkfleet_model_state_file")
