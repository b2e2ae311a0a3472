# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The model_sync role's variables: what each may be.

Every option of roles/model_sync/meta/argument_specs.yml has its check here (CHECKS: variable -> check, None where
_validate.settings_errors checks it with its context); tests/unit/plugins/plugin_utils/test_validate_specs.py holds
the two together. Private to the collection, pure functions, no I/O.
"""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_transports import CHAINS
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate_values import (
    check_bool,
    check_calendar,
    check_choice,
    check_image,
    check_known_hosts,
    check_model_dir,
    check_model_id,
    check_optional_secret,
    check_seconds,
    check_user,
    check_whole,
    check_written_file,
)


CHECKS = {
    "model_sync_src": check_model_dir,
    "model_sync_dest": check_model_dir,
    "model_sync_user": check_user,
    "model_sync_key": check_written_file,
    "model_sync_known_hosts": check_known_hosts,
    "model_sync_forced_command": check_written_file,
    "model_sync_allowed_commands": check_written_file,
    "model_sync_streams": check_whole(1, "a number of parallel streams", 64),
    # The transport choices are the registry's (module_utils/sync/_sync_transports.py), as model_sync's own spec.
    "model_sync_transport": check_choice(*CHAINS),
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
}
