#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: container_mount
short_description: Tell whether a running container still sees a host directory it bind-mounts
version_added: 0.2.0
description:
  - docker binds a directory's inode when a container starts. A directory deleted and created again on the host
    (a re-download, a re-sync after C(rm -r)) is a new inode, and a running container keeps the old one, empty or
    removed; a process inside it finds nothing there until the container is restarted.
  - Compares the inode of O(path) on the host with what C(stat) says about the same path inside the running
    O(container) (C(docker exec)), and reports RV(state) and whether the container is RV(stale), that is, must be
    restarted to see the host's directory.
  - Read-only; it never restarts anything and always reports C(changed=false). The C(ray_cluster) role restarts
    Ray when the model directory's mount is stale.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  path:
    description:
      - The host directory (an absolute path), bound at the same path inside the container.
    type: path
    required: true
  container:
    description:
      - Name or ID of the container (docker's rule for names; never a word that starts with C(-)).
    type: str
    required: true
notes:
  - Needs C(docker) on the node (without it no container runs, and the state is C(not_running)) and C(stat)
    inside the container. Each docker call is bounded to 30 seconds; a daemon that does not answer fails the task.
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
- name: Check that a running Ray container still sees this node's model directory
  sparkfleet.vllm.container_mount:
    path: /models
    container: sparkfleet-ray
  register: model_mount
  changed_when: model_mount.stale
  notify: Restart ray
"""

RETURN = r"""
state:
  description:
    - C(absent) (no such directory on the host), C(not_running) (the container does not run, or there is no
      docker), C(same) (the container sees the host's directory), C(not_visible) (the path cannot be read inside
      the container), C(removed) (the container holds a directory removed on the host since it started) or
      C(other_inode) (the container's path is another directory than the host's).
  returned: always
  type: str
  sample: removed
stale:
  description: Whether the container must be restarted to see the host's directory (C(not_visible), C(removed), C(other_inode)).
  returned: always
  type: bool
  sample: true
msg:
  description: One sentence naming the path, the container and what was found.
  returned: always
  type: str
  sample: /models was removed after sparkfleet-ray started (the container still holds the old directory)
host_inode:
  description: The inode of O(path) on the host, null when it does not exist.
  returned: always
  type: int
  sample: 1835010
container_inode:
  description: The inode of O(path) inside the container, null when it was not read.
  returned: always
  type: int
  sample: 1835009
container_links:
  description: The link count of O(path) inside the container (0 when the directory was removed), null when not read.
  returned: always
  type: int
  sample: 0
"""

import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils.image._mounts import read_bind


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            container=dict(type="str", required=True),
        ),
        supports_check_mode=True,
    )
    path, container = module.params["path"], module.params["container"]
    # docker's own rule for names (IDs fit it too): never a word docker would read as an option such as --help
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", container):
        module.fail_json(msg="container must be a container name or ID (a letter or digit, then letters, digits, '_',"
                             " '.', '-'), got %r" % container)
    if not path.startswith("/"):
        module.fail_json(msg="path must be the absolute path of the host directory, got %r" % path)
    module.exit_json(changed=False, **read_bind(Runner(module), path, container))


if __name__ == "__main__":
    main()
