# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.fabric_mtu_mismatches (documented in fabric_mtu_mismatches.yml)."""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric._rdma import mtu_mismatches
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._checks import host_list, hostvar

_WHERE = "fabric_mtu_mismatches"


def fabric_mtu_mismatches(hostvars, hosts):
    """Messages naming both ends of every fabric link whose MTUs differ ([] when all agree)."""
    nodes = []
    for name in host_list(_WHERE, hosts):
        fabric = hostvar(_WHERE, hostvars, name, "sparkfleet_fabric")
        if not fabric or not isinstance(fabric, dict):
            # rdma_facts did not run there (tag skipped, host failed): nothing to compare.
            continue
        nodes.append({"name": name, "interface": fabric.get("interface"), "mtu": fabric.get("mtu"),
                      "subnet": fabric.get("subnet")})
    return mtu_mismatches(nodes)


class FilterModule:
    """Cross-node fabric checks."""

    def filters(self):
        return {"fabric_mtu_mismatches": fabric_mtu_mismatches}
