# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.model_path_problem (documented in model_path_problem.yml)."""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._paths import model_path_problem


def _model_path_problem(path, what="model directory"):
    """Why path cannot be a model directory (a sentence), or an empty string when it may be one."""
    return model_path_problem(path, what) or ""


class FilterModule:
    """Path guards."""

    def filters(self):
        return {"model_path_problem": _model_path_problem}
