# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Argument checks shared by the collection's filters (controller side).

Every check takes ``where`` (the filter's name) and raises ``AnsibleFilterError("<where>: <problem>")``,
naming the argument, the value and what it must be, so every filter refuses bad input the same way.
Whole numbers are read by ``plugin_utils._validate.check_int``, the rule preflight applies to the same
role variables, so a value preflight accepts is never refused later by a filter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.collections import is_string

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate import check_int

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def fail(where, problem):
    """Raise the error a filter gives for bad input: ``<where>: <problem>``."""
    raise AnsibleFilterError("%s: %s" % (where, problem))


def whole_number(where, name, value, low=None, high=None):
    """``value`` as an int (``6``, ``"6"``, ``6.0``) within [low, high], or fail naming ``name``."""
    number, problem = check_int(value, low, high, strict=False)
    if problem:
        fail(where, "%s %s, got %r" % (name, problem, value))
    return number


def port_number(where, name, value):
    """A TCP/UDP port number, 1-65535, read like ``whole_number``."""
    number, problem = check_int(value, strict=False)
    if problem:
        fail(where, "%s must be a whole number from 1 to 65535; %r is not a port number" % (name, value))
    if not 1 <= number <= 65535:
        fail(where, "%s %d is out of range (1-65535)" % (name, number))
    return number


def number(where, name, value, kinds=(int, float)):
    """``value`` itself when it is already a number of ``kinds`` (never a boolean or a string)."""
    if isinstance(value, bool) or not isinstance(value, kinds):
        fail(where, "%s must be a number, got %r" % (name, value))
    return value


def host_list(where, hosts, name="hosts"):
    """A list of inventory host names (any iterable but a string or a mapping, which would be read as names)."""
    if is_string(hosts) or isinstance(hosts, Mapping) or not hasattr(hosts, "__iter__"):
        fail(where, "%s must be a list of inventory names, got %s %r" % (name, type(hosts).__name__, hosts))
    return list(hosts)


def hostvar(where, hostvars, host, var):
    """``hostvars[host][var]`` (None when unset), failing when ``host`` is not an inventory host."""
    try:
        if isinstance(hostvars, (str, bytes)):
            raise TypeError(hostvars)
        values = hostvars[host]
    except (KeyError, TypeError, AttributeError, IndexError):
        fail(where, "%s is not in hostvars (not a host of this inventory)" % (host,))
    try:
        return values.get(var)
    except AttributeError:
        fail(where, "hostvars[%r] is not a mapping of variables" % (host,))


def env_name(key, where="environment"):
    """An environment variable name (letters, digits, underscore; not starting with a digit)."""
    if not is_string(key) or not ENV_NAME_RE.match(key):
        fail(where, "%r is not a valid variable name (letters, digits, underscore; not starting with a digit)"
             % (key,))
    return str(key)


def env_value(key, value, where="environment"):
    """``value`` as a one-line environment string, or fail naming ``key`` and the fix."""
    if isinstance(value, bool):
        fail(where, "%s is a boolean; write the string the program expects, e.g. '1', '0', 'true'" % key)
    if isinstance(value, (int, float)):
        value = str(value)
    if not is_string(value):
        fail(where, "%s must be a string or number, got %s" % (key, type(value).__name__))
    value = str(value)
    for bad, what in (("\n", "a newline"), ("\r", "a carriage return"), ("\0", "a NUL byte")):
        if bad in value:
            fail(where, "%s contains %s; environment values must be one line" % (key, what))
    return value
