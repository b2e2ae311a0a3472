# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters: sparkfleet.vllm.settings_errors and sparkfleet.vllm.node_paths (documented in their .yml files)."""

from __future__ import annotations

import re

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate as v
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._checks import fail
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._inventory import NODE_VARS


# What a user sets: every role variable the validator checks, and the node variables the inventory check reads.
USER_SETTINGS = frozenset(v.SERVING_CHECKS) | frozenset(v.ROLE_CHECKS) | frozenset(NODE_VARS)
_UNDEFINED_RE = re.compile(r"^'([A-Za-z_][A-Za-z0-9_]*)' is undefined")


def _default_fix(name, reason, sources):
    """The fix for a default that cannot be templated: the variable it misses, when the user can set that one; else
    the user's variables it is made of (a derived fact such as sparkfleet_head_fabric_ip or a role's _internal is
    nothing the user can set)."""
    missing = _UNDEFINED_RE.match(reason)
    if missing is None or missing.group(1) in USER_SETTINGS:
        return "%s (in its default value): set that variable, or set %s itself, in the inventory" % (reason, name)
    made_of = sorted(s for s in sources if s in USER_SETTINGS and s != name)
    return "%s (in its default value, through %s, which the roles derive%s): %sset %s itself in the inventory" % (
        reason, missing.group(1), " from %s" % ", ".join(made_of) if made_of else "",
        "check %s, or " % ", ".join(made_of) if made_of else "", name)


def _split(data, where):
    """(values, errors) from the role_settings lookup's result, or a plain dict of values."""
    if isinstance(data, dict) and isinstance(data.get("values"), dict):
        errors = dict(data.get("errors")) if isinstance(data.get("errors"), dict) else {}
        defaulted = data.get("defaulted") if isinstance(data.get("defaulted"), list) else []
        sources = data.get("sources") if isinstance(data.get("sources"), dict) else {}
        for name in errors:
            if name in defaulted:
                # the expression is the role's default: what is missing is the variable it reads
                made_of = sources.get(name) if isinstance(sources.get(name), list) else []
                errors[name] = _default_fix(name, str(errors[name]), made_of)
        return data["values"], errors
    if isinstance(data, dict):
        return data, {}
    fail(where, "input must be the result of the sparkfleet.vllm.role_settings lookup (a dict), got %s"
         % type(data).__name__)
    return None, None


def _flag(where, name, value):
    if not isinstance(value, bool):
        fail(where, "%s must be true or false, got %r" % (name, value))
    return value


def settings_errors(data, host="head", head=True, gpus=None):
    """Every problem with every role's variables on one host (empty when none)."""
    values, errors = _split(data, "settings_errors")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int)):
        fail("settings_errors", "gpus must be a whole number, got %r" % (gpus,))
    sources = data.get("sources") if isinstance(data, dict) and isinstance(data.get("sources"), dict) else {}
    return v.settings_errors(values, str(host), errors, _flag("settings_errors", "head", head), gpus, sources)


def node_paths(data, head=True, worker=False):
    """The paths the roles write on one node, for the path_guard module."""
    values, _errors = _split(data, "node_paths")
    return v.node_paths(values, _flag("node_paths", "head", head), _flag("node_paths", "worker", worker))


class FilterModule:
    """Validation of every role's variables for the preflight play."""

    def filters(self):
        return {"settings_errors": settings_errors, "node_paths": node_paths}
