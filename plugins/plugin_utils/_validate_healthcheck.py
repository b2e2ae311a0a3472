# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The healthcheck role's variables: what each may be.

Every option of roles/healthcheck/meta/argument_specs.yml has its check here (CHECKS: variable -> check, None where
_validate.settings_errors checks it with its context); tests/unit/plugins/plugin_utils/test_validate_specs.py holds
the two together. Private to the collection, pure functions, no I/O.
"""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate_values import (
    COUNT_MAX,
    check_api_key,
    check_bool,
    check_controller_dir,
    check_count,
    check_seconds,
    check_string,
    check_text,
    check_url,
    check_whole,
)


CHECKS = {
    "healthcheck_url": check_url,
    "healthcheck_api_key": check_api_key,
    "healthcheck_model": check_string,
    "healthcheck_prompt": check_text,
    "healthcheck_max_tokens": check_count,
    "healthcheck_timeout": check_seconds,
    "healthcheck_status_timeout": check_seconds,
    "healthcheck_incidents_dir": check_controller_dir,
    "healthcheck_throughput_tokens": check_whole(0, "a number of tokens (0 turns the probe off)", COUNT_MAX),
    "healthcheck_ray_object_mb": check_count,
    "healthcheck_allow_tcp_fallback": check_bool,
    "healthcheck_tool_call": check_bool,
    "healthcheck_tool_call_max_tokens": check_count,
}
