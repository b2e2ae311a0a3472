# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: role_settings
short_description: Every role's variables as the roles will read them, each templating error kept apart
version_added: 0.3.0
description:
  - Reads the C(defaults/main.yml) of the collection's roles and templates every variable in them the way the
    role would see it when it runs later in the play list. That is the inventory's (or extra vars') value where
    one is set, else the role's default, templated with this host's variables.
  - A variable whose template fails (an undefined name, a Jinja error) does not fail the lookup. Its error is
    returned under C(errors), so that preflight can name every bad variable at once, before anything changes.
  - Runs on the controller only and reads nothing from the nodes.
options:
  _terms:
    description:
      - The roles of this collection to read (for example V(ray_cluster)); all of them when none is given.
    type: list
    elements: str
  names:
    description:
      - Further variables to read from the host's variables (inputs without a default, such as
        V(sparkfleet_image)); one that is not set is reported under C(errors) as not set.
    type: list
    elements: str
    default: []
  only:
    description:
      - Template only these variables (every role's defaults are still read, as the values may refer to each other);
        all when empty.
    type: list
    elements: str
    default: []
  derived:
    description:
      - Also read the roles' C(vars/main.yml), the values each role derives from its settings (its server's flags,
        for example), templated the same way over the same variables, so that a caller outside the role reads them
        as the role derives them and never restates them. They are returned with the settings under C(values)
        (name them in O(only)); they are never counted as C(defaulted).
    type: bool
    default: false
author:
  - sparkfleet.vllm contributors (@sparkfleet)
"""

EXAMPLES = r"""
- name: Show every role's variables on this host
  ansible.builtin.debug:
    msg: "{{ query('sparkfleet.vllm.role_settings', names=['sparkfleet_image'])[0] }}"
"""

RETURN = r"""
_raw:
  description: One dict.
  type: list
  elements: dict
  contains:
    values:
      description: Variable name to the value the role will read.
      type: dict
    errors:
      description: Variable name to the reason it cannot be templated.
      type: dict
    defaulted:
      description: The variables whose value is the role's default (not set in the inventory or extra vars).
      type: list
      elements: str
    sources:
      description:
        - For each defaulted variable whose default is a template, the variables it is made of (through the common
          role's derived values such as C(sparkfleet_api_url)), so that a problem of the source is named once.
      type: dict
"""

import os
import re
from collections import ChainMap

from ansible.errors import AnsibleError, AnsibleLookupError
from ansible.plugins.lookup import LookupBase

# The collection's root: plugins/lookup/ is two levels below it.
ROLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")


def collection_roles():
    """The roles of this collection that have defaults."""
    if not os.path.isdir(ROLES_DIR):
        return []
    return sorted(r for r in os.listdir(ROLES_DIR) if os.path.isfile(os.path.join(ROLES_DIR, r, "defaults", "main.yml")))


_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _names_in(value):
    """The identifiers in a default's text (a template refers to the variables it reads by these)."""
    return set(_NAME_RE.findall(str(value))) if "{{" in str(value) else set()


def _reason(exc):
    """The templating error in one line, without Ansible's wrapping around it."""
    text = " ".join(str(getattr(exc, "message", None) or exc).split())
    marker = "': "
    if text.startswith("Error while resolving value for '") and marker in text:
        text = text.split(marker, 1)[1]
    return text or type(exc).__name__


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        names = self.get_option("names") or []
        only = set(self.get_option("only") or [])
        known = collection_roles()
        roles = [str(t) for t in terms] or known
        unknown = sorted(set(roles) - set(known))
        if unknown:
            raise AnsibleLookupError("role_settings: %s is not a role of this collection (%s)"
                                     % (", ".join(unknown), ", ".join(known)))
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise AnsibleLookupError("role_settings: names must be a list of variable names, got %r" % (names,))
        variables = dict(variables or {})
        defaults, derived_vars = {}, {}
        for role in roles:
            parts = [("defaults", defaults)] + ([("vars", derived_vars)] if self.get_option("derived") else [])
            for part, into in parts:
                path = os.path.join(ROLES_DIR, role, part, "main.yml")
                if part == "vars" and not os.path.isfile(path):
                    continue
                data = self._loader.load_from_file(path, trusted_as_template=True) or {}
                if not isinstance(data, dict):
                    raise AnsibleLookupError("role_settings: %s is not a mapping of variables" % path)
                into.update(data)
        own = dict(defaults, **derived_vars)
        templar = self._templar.copy_with_new_env(
            available_variables=ChainMap(variables, dict((k, v) for k, v in own.items() if k not in variables)))
        values, errors = {}, {}
        for name in list(own) + [n for n in names if n not in own]:
            if only and name not in only:
                continue
            if name not in own and name not in variables:
                errors[name] = "it is not set; set it in the inventory"
                continue
            try:
                values[name] = templar.resolve_variable_expression(name)
            except AnsibleError as exc:
                errors[name] = _reason(exc)
        defaulted = sorted(n for n in defaults if n not in variables)
        derived = dict(defaults)
        common_vars = os.path.join(ROLES_DIR, "sparkfleet", "vars", "main.yml")
        if os.path.isfile(common_vars):
            derived.update(self._loader.load_from_file(common_vars) or {})
        sources = {}
        for name in defaulted:
            found, todo = set(), _names_in(defaults[name])
            for _level in range(3):
                todo = set(n for n in todo if n in derived or n in variables) - found - {name}
                found |= todo
                todo = set().union(*[_names_in(derived.get(n, "")) for n in todo]) if todo else set()
            if found:
                sources[name] = sorted(found)
        return [dict(values=values, errors=errors, defaulted=defaulted, sources=sources)]
