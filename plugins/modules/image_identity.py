#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_identity
short_description: Find a container image on this node by its content, not its local ID or tag
version_added: 0.3.0
description:
  - Reads C(docker image inspect) and returns the image's local ID, its B(content identity) (a SHA-256 over the
    platform, the layers' diff IDs and the run configuration - user, environment, entrypoint, command, working
    directory, labels, volumes, exposed ports, stop signal), its tags and repo digests.
  - Two Docker daemons hold "the same image" when the content identity (or a repo digest) matches, whatever local
    ID each gives it. The ID does not survive a C(docker save | docker load) between image stores - Docker's
    containerd image store (the default of fresh Docker Engine 29 installs) names an image by its manifest digest,
    the classic store by its config digest (moby issues 44833 and 48401) - and a tag can be moved by anyone who can run
    C(docker tag) or C(docker load).
  - With O(content), an image that O(image) does not name here (an image loaded by ID, untagged, or under another
    tag) is still found among the node's images by its content.
  - Changes nothing.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  image:
    description:
      - The image reference (tag, C(name@sha256:digest) or ID) to read.
    type: str
    required: true
  content:
    description:
      - The content identity wanted (C(sha256:...), as this module returns it on another node).
      - When O(image) is missing here or names other content, every local image is read and the one with this
        content is returned.
    type: str
notes:
  - Needs C(docker) on the node; reads only.
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
- name: The head's image and its content identity
  sparkfleet.vllm.image_identity:
    image: hellohal2064/vllm-qwen3.5-gb10@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
  register: head_image

- name: The same image on a worker, whatever its local ID or tag there
  sparkfleet.vllm.image_identity:
    image: hellohal2064/vllm-qwen3.5-gb10@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    content: "{{ hostvars['spark-1'].head_image.content }}"
"""

RETURN = r"""
found:
  description: Whether the image (or, with O(content), an image with that content) is on this node.
  returned: always
  type: bool
id:
  description: Its local image ID (empty when not found); start containers by this ID, it cannot be retagged.
  returned: always
  type: str
  sample: sha256:9d068d5022ecbee3afb9ccec73a86fa5744db7ff75bd101a06af6106bbac32cb
content:
  description: Its content identity (empty when not found).
  returned: always
  type: str
platform:
  description: C(os/architecture[/variant]) of the image.
  returned: always
  type: str
  sample: linux/arm64
tags:
  description: Its tags on this node.
  returned: always
  type: list
  elements: str
repo_digests:
  description: Its repo digests on this node.
  returned: always
  type: list
  elements: str
by_content:
  description: Whether it was found by O(content) because O(image) does not name it here.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils.image._image import (
    image_summary, parse_inspect, same_image)

_EMPTY = dict(found=False, id="", content="", platform="", tags=[], repo_digests=[], by_content=False)


def _inspect(runner, docker, refs):
    res = runner.run([docker, "image", "inspect"] + refs)
    try:
        return res, parse_inspect(res.stdout) if res.stdout.strip() else []
    except ValueError as exc:
        runner.fail(res, "docker image inspect printed something else than images: %s" % exc)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            content=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    image = p["image"].strip()
    if not image or image.startswith("-"):
        module.fail_json(msg="image must name an image (a tag, name@sha256:digest or ID), got %r" % p["image"])
    wanted = (p["content"] or "").strip()
    if wanted and not wanted.startswith("sha256:"):
        module.fail_json(msg="content must be a content identity as image_identity returns it (sha256:...), "
                             "got %r" % p["content"])
    runner = Runner(module)
    docker = runner.bin("docker")

    res, entries = _inspect(runner, docker, [image])
    if not res.ok and "no such image" not in (res.stderr + res.stdout).lower():
        runner.fail(res, "cannot read image %s" % image, hint="check that docker runs on this node")
    try:
        named = image_summary(entries[0]) if entries else None
    except ValueError as exc:
        module.fail_json(msg="image %s on this node: %s" % (image, exc), hint="remove it and pull or load it again")
    if named and (not wanted or same_image(named, {"content": wanted})):
        module.exit_json(changed=False, by_content=False, found=True, **named)
    if not wanted:
        module.exit_json(changed=False, **_EMPTY)

    listing = runner.run([docker, "image", "ls", "--quiet", "--no-trunc"])
    if not listing.ok:
        runner.fail(listing, "cannot list the images of this node")
    ids = sorted(set(listing.stdout.split()))
    if ids:
        res, entries = _inspect(runner, docker, ids)
        for entry in entries:
            try:
                summary = image_summary(entry)
            except ValueError:
                continue  # an image without layers (a broken pull) cannot be the one
            if summary["content"] == wanted:
                module.exit_json(changed=False, found=True, by_content=True, **summary)
    module.exit_json(changed=False, **_EMPTY)


if __name__ == "__main__":
    main()
