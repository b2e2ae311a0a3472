# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sparkfleet.vllm.vllm_wait (documented in plugins/modules/vllm_wait.py): with wait_polls, the wait
for vLLM polls itself, a line per poll (plugins/plugin_utils/_poll.py), until the server is ready or has failed."""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._poll import PollingAction


class ActionModule(PollingAction):
    MODULE = "sparkfleet.vllm.vllm_wait"

    def done(self, result):
        return bool(result.get("ready")) or bool(result.get("failed"))
