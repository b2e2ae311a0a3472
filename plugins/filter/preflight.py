# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.inventory_errors."""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.module_utils._inventory import inventory_errors


class FilterModule:
    """Inventory validation for the preflight play."""

    def filters(self):
        return {"inventory_errors": inventory_errors}
