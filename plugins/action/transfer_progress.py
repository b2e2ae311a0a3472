# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sparkfleet.vllm.transfer_progress (documented in plugins/modules/transfer_progress.py): with
wait_polls, it follows the background transfer to its end, a line per poll (plugins/plugin_utils/_poll.py)."""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._poll import PollingAction


class ActionModule(PollingAction):
    MODULE = "sparkfleet.vllm.transfer_progress"

    def done(self, result):
        return bool(result.get("finished")) or bool(result.get("failed"))
