# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.systemd_env_lines (documented in systemd_env_lines.yml)."""

from __future__ import annotations

import re

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._checks import env_name, env_value, fail

_WHERE = "systemd_env_lines"
# Values made only of these need no quoting in a systemd EnvironmentFile.
_PLAIN_RE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
# Inside double quotes systemd's EnvironmentFile parser treats a backslash before these as an escape.
_DQ_ESCAPE = ('\\', '"', '`', '$')
STYLES = ("systemd", "docker")


def _quote_systemd(value):
    if _PLAIN_RE.match(value):
        return value
    out = []
    for ch in value:
        if ch in _DQ_ESCAPE:
            out.append("\\")
        out.append(ch)
    return '"%s"' % "".join(out)


def systemd_env_lines(env, style="systemd"):
    """Render a dict as KEY=value lines (sorted by key), quoted for systemd or raw for docker."""
    if not isinstance(env, dict):
        fail(_WHERE, "input must be a dict, got %s" % type(env).__name__)
    if style not in STYLES:
        fail(_WHERE, "style must be one of %s, got %r" % (", ".join(STYLES), style))
    lines = []
    for key in sorted(env, key=str):
        name = env_name(key, _WHERE)
        value = env_value(name, env[key], _WHERE)
        if style == "docker":
            # docker --env-file takes everything after '=' literally; leading blanks of a line are dropped.
            lines.append("%s=%s" % (name, value))
        else:
            lines.append("%s=%s" % (name, _quote_systemd(value)))
    return "".join(line + "\n" for line in lines)


class FilterModule:
    """Render environment files."""

    def filters(self):
        return {"systemd_env_lines": systemd_env_lines}
