# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_cleanup role's variables: what each may be.

Every option of roles/gpu_cleanup/meta/argument_specs.yml has its check here (CHECKS: variable -> check, None where
_validate.settings_errors checks it with its context); tests/unit/plugins/plugin_utils/test_validate_specs.py holds
the two together. Private to the collection, pure functions, no I/O.
"""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate_values import (
    check_bool,
    check_choice,
    check_command_globs,
    check_device_glob,
    check_globs,
    check_seconds,
    check_whole,
    check_written_file,
)


CHECKS = {
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
}
