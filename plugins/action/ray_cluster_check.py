# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sparkfleet.vllm.ray_cluster_check (documented in plugins/modules/ray_cluster_check.py): with
wait_polls, the wait for every node to join Ray polls itself, a line per poll (plugins/plugin_utils/_poll.py)."""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._poll import PollingAction


def joined(result):
    """Whether the wait ends: every node joined (a failed try - Ray's container restarting, a driver that could not
    connect - has no `missing` and is tried again), a node registered the wrong IP, or the cluster was probed."""
    whole = not result.get("missing") and result.get("error") is None and not result.get("failed")
    return whole or bool(result.get("mismatched")) or bool(result.get("probed"))


class ActionModule(PollingAction):
    MODULE = "sparkfleet.vllm.ray_cluster_check"

    def done(self, result):
        return joined(result)

    def summary(self, result, n):
        if result.get("failed") and not result.get("summary"):
            return "not answering yet: %s" % " ".join(str(result.get("msg") or "no message").split())[:200]
        return result.get("summary")
