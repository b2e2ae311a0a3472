# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: vaulted_inventory
short_description: The inventory files that are encrypted with ansible-vault
version_added: 0.3.0
description:
  - Returns the files among the given inventory sources (a file, or the files of a directory and its sub-directories)
    whose content starts with an ansible-vault header (C($ANSIBLE_VAULT;)).
  - The inventory check uses it to tell an inventory that Ansible could not open, because no vault password was given
    or not the right one, from one that is missing its groups.
  - Reads only the first bytes of each file, never decrypts, and runs on the controller. Sources that are not paths
    (a host list such as V(a,b,)) and hidden files are left out.
options:
  _terms:
    description: The inventory sources, as C(ansible_inventory_sources) holds them.
    type: list
    elements: str
    required: true
author:
  - sparkfleet.vllm contributors (@sparkfleet)
"""

EXAMPLES = r"""
- name: Name the vaulted inventory files
  ansible.builtin.debug:
    msg: "{{ query('sparkfleet.vllm.vaulted_inventory', *ansible_inventory_sources) }}"
"""

RETURN = r"""
_raw:
  description: The paths of the vault-encrypted files, sorted.
  type: list
  elements: str
"""

import os

from ansible.plugins.lookup import LookupBase

_HEADER = b"$ANSIBLE_VAULT;"
# An inventory directory is small; a source that is a large tree (a home directory given by mistake) stops here.
_MAX_FILES = 2000


def _vaulted(path):
    try:
        with open(path, "rb") as f:
            return f.read(len(_HEADER)) == _HEADER
    except OSError:
        return False


def vaulted_files(sources):
    """The vault-encrypted files of the inventory sources (files or directories), sorted."""
    found, seen = set(), 0
    for source in sources or []:
        if not isinstance(source, str) or not source or "," in source and not os.path.exists(source):
            continue
        if os.path.isfile(source):
            if _vaulted(source):
                found.add(source)
            continue
        for dirpath, dirs, files in os.walk(source):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                seen += 1
                if seen > _MAX_FILES:
                    return sorted(found)
                if not name.startswith(".") and _vaulted(os.path.join(dirpath, name)):
                    found.add(os.path.join(dirpath, name))
    return sorted(found)


class LookupModule(LookupBase):
    """Name the vault-encrypted files of the inventory sources."""

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        return vaulted_files([str(t) for t in terms])
