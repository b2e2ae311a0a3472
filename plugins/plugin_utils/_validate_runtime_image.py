# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runtime_image role's variables: what each may be.

Every option of roles/runtime_image/meta/argument_specs.yml has its check here (CHECKS: variable -> check, None where
_validate.settings_errors checks it with its context); tests/unit/plugins/plugin_utils/test_validate_specs.py holds
the two together. Private to the collection, pure functions, no I/O.
"""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate_values import (
    check_bool,
    check_image,
    check_load_command,
    check_seconds,
    check_user,
    check_written_file,
)


CHECKS = {
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
}
