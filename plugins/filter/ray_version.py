# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.ray_version (documented in ray_version.yml)."""

from __future__ import annotations

import re

# `ray --version` prints "ray, version 2.53.0" (a dev build: "ray, version 3.0.0.dev0").
_RAY_VERSION_RE = re.compile(r"\bray,\s+version\s+(\d+(?:\.\d+){1,3}(?:[.+\w-]*)?)")


def ray_version(text):
    """The Ray version in `ray --version` output, or None when the output holds none."""
    if not isinstance(text, str):
        return None
    m = _RAY_VERSION_RE.search(text)
    return m.group(1) if m else None


class FilterModule:
    """Read Ray's version."""

    def filters(self):
        return {"ray_version": ray_version}
