#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_check
short_description: Tell whether a model directory on this node is complete (every shard of its index, with its size)
version_added: 0.2.0
description:
  - Reads a model directory and says whether it is complete, the same check M(sparkfleet.vllm.model_sync) makes on
    the source before it sends a byte. C(config.json) parses; every shard named in C(model.safetensors.index.json)
    (or, without an index, every C(*.safetensors) file) is present and non-empty, its safetensors header parses, its
    data offsets cover the file exactly (so the file has the size its header promises; a half-downloaded shard is
    incomplete) and it holds the tensors the index puts there. A symlink out of the directory (other than a Hugging
    Face snapshot's links into its C(blobs)) makes it incomplete too.
  - Reads only the headers, never the weights. Changes nothing; a missing directory is reported as incomplete, not
    as a failure.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  path:
    description:
      - The model directory.
    type: path
    required: true
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
- name: Is the model complete on the head?
  sparkfleet.vllm.model_check:
    path: /models/Qwen3.5-122B-A10B-FP8
  register: model

- name: Download it when it is not
  ansible.builtin.debug:
    msg: "{{ model.problems }}"
  when: not model.complete
"""

RETURN = r"""
complete:
  description: Whether the directory holds the whole model.
  returned: always
  type: bool
problems:
  description: What is missing or wrong, one sentence each (empty when complete).
  returned: always
  type: list
  elements: str
  sample: ["model-00007-of-00039.safetensors: truncated: the header promises 4001378816 bytes, the file has 1073741824"]
files:
  description: Files in the directory (symlinks within it followed).
  returned: always
  type: int
  sample: 47
bytes:
  description: Their total size in bytes.
  returned: always
  type: int
  sample: 119000000000
weight_files:
  description: The weight files the index (or the directory) names.
  returned: always
  type: int
  sample: 39
msg:
  description: One line for a person.
  returned: always
  type: str
  sample: "/models/m is complete: 47 files, 119.0 GB, 39 weight files"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import model_completeness


def main():
    module = AnsibleModule(argument_spec=dict(path=dict(type="path", required=True)), supports_check_mode=True)
    module.exit_json(changed=False, **model_completeness(module.params["path"]))


if __name__ == "__main__":
    main()
