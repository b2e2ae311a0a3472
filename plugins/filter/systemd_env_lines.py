# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.systemd_env_lines (documented in systemd_env_lines.yml)."""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.collections import is_string

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Values made only of these need no quoting in a systemd EnvironmentFile.
_PLAIN_RE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
# Inside double quotes systemd's EnvironmentFile parser treats a backslash before these as an escape.
_DQ_ESCAPE = ('\\', '"', '`', '$')
STYLES = ("systemd", "docker")


def env_value(key, value, where="environment"):
    """Return `value` as an environment string, or raise naming `key` and the fix."""
    if isinstance(value, bool):
        raise AnsibleFilterError(
            "%s: %s is a boolean; write the string the program expects, e.g. '1', '0', 'true'"
            % (where, key))
    if isinstance(value, (int, float)):
        value = str(value)
    if not is_string(value):
        raise AnsibleFilterError(
            "%s: %s must be a string or number, got %s" % (where, key, type(value).__name__))
    value = str(value)
    for bad, name in (("\n", "a newline"), ("\r", "a carriage return"), ("\0", "a NUL byte")):
        if bad in value:
            raise AnsibleFilterError(
                "%s: %s contains %s; environment values must be one line" % (where, key, name))
    return value


def env_name(key, where="environment"):
    if not is_string(key) or not ENV_NAME_RE.match(key):
        raise AnsibleFilterError(
            "%s: %r is not a valid variable name (letters, digits, underscore; not starting with a digit)"
            % (where, key))
    return str(key)


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
        raise AnsibleFilterError("systemd_env_lines: input must be a dict, got %s" % type(env).__name__)
    if style not in STYLES:
        raise AnsibleFilterError("systemd_env_lines: style must be one of %s, got %r" % (", ".join(STYLES), style))
    where = "systemd_env_lines"
    lines = []
    for key in sorted(env, key=str):
        name = env_name(key, where)
        value = env_value(name, env[key], where)
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
