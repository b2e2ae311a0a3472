# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.model_sync_commands (documented in model_sync_commands.yml)."""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_transports import destination_commands


def model_sync_commands(dest):
    """The fixed commands model_sync runs on a destination for dest, sorted (the sync key's allow-list)."""
    return sorted(destination_commands(str(dest)).values())


class FilterModule:
    """model_sync helpers."""

    def filters(self):
        return {"model_sync_commands": model_sync_commands}
