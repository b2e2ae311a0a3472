# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight role's variables: what each may be.

Every option of roles/preflight/meta/argument_specs.yml has its check here (CHECKS: variable -> check, None where
_validate.settings_errors checks it with its context); tests/unit/plugins/plugin_utils/test_validate_specs.py holds
the two together. Private to the collection, pure functions, no I/O.
"""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate_values import (
    check_ansible_version,
    check_whole,
    check_seconds,
)


CHECKS = {
    "preflight_min_ansible_version": check_ansible_version,
    "preflight_ping_timeout": check_seconds,
    "preflight_fabric_timeout": check_seconds,
    "preflight_min_free_mb": check_whole(0, "a whole number of MiB"),
}
