#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: api_key_vault
short_description: Keep the API key in an ansible-vault file on the controller, made once with a random key
version_added: 0.3.0
description:
  - Runs on the controller (an action plugin; no node is contacted). Makes sure the ansible-vault file O(path) holds the
    variable O(name) with a non-empty API key, encrypted with this run's vault password (C(--ask-vault-pass) or
    C(--vault-password-file)).
  - When O(path) does not exist, a random key (O(length) random bytes, URL-safe base64) is generated and the file is
    written encrypted, mode 0600. When it exists and holds O(name), nothing changes. When it is a vault without
    O(name), the variable is added and the file encrypted again with the same password.
  - The key is never returned, logged or shown; the file is never written in clear. A file that is not a vault, or that
    this run's vault password cannot open, is refused with the fix.
  - C(playbooks/prepare.yml) uses it for C(vllm_serve_api_key) (C(prepare_api_key_vault_file)); the inventory then
    reads C(vllm_serve_api_key) from C(vault_vllm_serve_api_key).
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  path:
    description:
      - The vault file on the controller, for example C(inventories/sparks/group_vars/spark/vault.yml) (loaded for every
        node of the group C(spark)). A relative path is taken from the directory C(ansible-playbook) runs in. Its
        directory must exist.
    type: path
    required: true
  name:
    description: The variable the file holds the key in.
    type: str
    default: vault_vllm_serve_api_key
  length:
    description: Random bytes in a generated key (at least 16; the key is their URL-safe base64, without padding).
    type: int
    default: 32
notes:
  - Needs a vault password for the run (C(-J) or C(--vault-password-file)); with several vault IDs the first is used
    to encrypt.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: The API key in a vault file next to the inventory (made once)
  sparkfleet.vllm.api_key_vault:
    path: "{{ inventory_dir }}/group_vars/spark/vault.yml"
  run_once: true
"""

RETURN = r"""
path:
  description: The vault file (absolute).
  returned: always
  type: str
  sample: /home/op/sparkfleet.vllm/inventories/sparks/group_vars/spark/vault.yml
name:
  description: The variable that holds the key.
  returned: always
  type: str
  sample: vault_vllm_serve_api_key
created:
  description: Whether the file was made (or, in check mode, would be).
  returned: always
  type: bool
added:
  description: Whether the variable was added to a vault file that existed without it (or, in check mode, would be).
  returned: always
  type: bool
"""
