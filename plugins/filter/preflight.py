# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.inventory_errors."""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _inventory
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._checks import fail


def inventory_errors(hostvars, groups, head_group=_inventory.HEAD_GROUP, worker_group=_inventory.WORKER_GROUP,
                     all_group=_inventory.ALL_GROUP):
    """Problems with the inventory's groups and fabric addresses (empty when none)."""
    for name, value in (("head_group", head_group), ("worker_group", worker_group), ("all_group", all_group)):
        if not isinstance(value, str) or not value:
            fail("inventory_errors", "%s must be a group name, got %r" % (name, value))
    return _inventory.inventory_errors(hostvars, groups, head_group, worker_group, all_group)


class FilterModule:
    """Inventory validation for the preflight play."""

    def filters(self):
        return {"inventory_errors": inventory_errors}
