#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_sync
short_description: Move a container image from this node to others over the fabric (docker save | ssh docker load)
version_added: 0.2.0
description:
  - Runs on the node that has the image (the head) and streams it to every destination that does not hold the same
    image, as C(docker save IMAGE | ssh USER@IP LOAD_COMMAND), over the fabric addresses.
  - Made for nodes without a route to any registry (DGX Spark workers have no management address); only the
    head pulls.
  - Idempotent by content - a destination whose image has the same content identity as this node's (see
    M(sparkfleet.vllm.image_identity)) is left alone, so a second run changes nothing, also where the
    destination's daemon gave the loaded image another local ID (Docker's containerd image store, moby issue 44833).
  - Where this node's Docker daemon takes it (API 1.48, Docker 28, and later), C(docker save) names the image's
    platform (C(--platform os/arch[/variant])), so a multi-platform image pulled here is saved as the one
    platform that runs here, not as an index whose other platforms are missing.
  - Reports bytes, seconds and MB/s per destination; with O(progress_file), the transfer's progress can be
    followed while it runs (run it with C(async) and poll M(sparkfleet.vllm.transfer_progress)).
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  image:
    description:
      - The image (tag) to move; it must be on this node. Saved by tag, so the destinations get the same tag.
    type: str
    required: true
  destinations:
    description:
      - The nodes to move it to.
    type: list
    elements: dict
    required: true
    suboptions:
      ip:
        description:
          - Fabric address of the node.
        type: str
        required: true
      name:
        description:
          - Name of the node in messages (its inventory name).
        type: str
      content:
        description:
          - The content identity of the image that node holds now (M(sparkfleet.vllm.image_identity) run there
            with O(image) and this node's content); empty when it lacks it.
        type: str
        default: ""
  ssh_user:
    description:
      - User on the destinations whose C(authorized_keys) holds O(ssh_key)'s public key.
    type: str
    required: true
  ssh_key:
    description:
      - Private key on this node.
    type: path
    required: true
  ssh_opts:
    description:
      - Extra C(ssh) options (for example the known-hosts file).
    type: list
    elements: str
    default: []
  load_command:
    description:
      - The command run on the destination, reading the image on stdin. With a C(command=) restriction on the
        key the destination runs its own command and this one is ignored.
    type: list
    elements: str
    default: [docker, load]
  timeout:
    description:
      - Seconds for each ssh connection attempt (C(ConnectTimeout)), at least 1; the transfer itself is not limited.
    type: int
    default: 30
  progress_file:
    description:
      - While a destination receives the image, its name and the image's size, then the bytes sent so far
        (C(dd status=progress), about once a second) are written here; M(sparkfleet.vllm.transfer_progress) reads
        it while this module runs with C(async). Removed when the module ends.
      - Unset, nothing is written.
    type: path
notes:
  - Needs C(docker), C(bash) and C(ssh) on this node (and C(dd) from coreutils >= 8.24 with O(progress_file));
    C(docker) on the destinations.
  - Check mode is supported and reports which destinations would get the image.
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
- name: Move the runtime image from the head to the workers
  sparkfleet.vllm.image_sync:
    image: hellohal2064/vllm-qwen3.5-gb10:latest
    destinations:
      - {name: spark-2, ip: 192.168.200.13, content: ""}
    ssh_user: nvidia
    ssh_key: /etc/sparkfleet/image-sync_ed25519
    load_command: [sudo, -n, /usr/local/sbin/sparkfleet-image-load, --name, "hellohal2064/vllm-qwen3.5-gb10:latest",
                   --content, "{{ head_image.content }}"]

- name: The same in the background, its progress shown on each poll
  sparkfleet.vllm.image_sync:
    image: hellohal2064/vllm-qwen3.5-gb10:latest
    destinations: "{{ workers }}"
    ssh_user: nvidia
    ssh_key: /etc/sparkfleet/image-sync_ed25519
    progress_file: /run/sparkfleet/image-sync.progress
  async: 3600
  poll: 0
  register: sync_job
"""

RETURN = r"""
image_id:
  description: The image's ID on this node (a destination may give it another ID; see RV(content)).
  returned: always
  type: str
content:
  description: The image's content identity, the same on every destination after the run.
  returned: always
  type: str
save_args:
  description: The arguments C(docker save) was given before the image (C(--platform ...) where the daemon takes it).
  returned: always
  type: list
  elements: str
results:
  description: One entry per destination.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The destination's name (its IP when no name was given).
      type: str
    ip:
      description: Its fabric address.
      type: str
    changed:
      description: Whether the image was (or, in check mode, would be) moved there.
      type: bool
    bytes:
      description: Bytes sent (the image's size; 0 when unchanged).
      type: int
    seconds:
      description: Seconds the transfer took.
      type: float
    mb_per_s:
      description: Throughput in MB/s.
      type: float
    loaded:
      description: What C(docker load) reported (tags and IDs).
      type: dict
bytes_transferred:
  description: Sum of bytes over every destination.
  returned: always
  type: int
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils.image._image import (
    api_version, image_summary, parse_docker_load, parse_inspect, progress_header, save_platform_args)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_shell import ssh_host_problem, ssh_user_problem

# docker save's stdout straight into ssh; pipefail makes a failing save fail the transfer. $SAVE_PLATFORM is empty
# or `--platform os/arch[/variant]` (no spaces inside, so the unquoted expansion gives the two words or nothing).
_PIPE = 'image=$1; shift; "$DOCKER" save $SAVE_PLATFORM "$image" | "$@"'
# The same through dd, which counts the bytes and appends its progress to $PROGRESS about once a second.
_PIPE_PROGRESS = ('image=$1; shift; "$DOCKER" save $SAVE_PLATFORM "$image" | dd bs=1M status=progress 2>>"$PROGRESS"'
                  ' | "$@"')


def _start_progress(path, header):
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory, 0o700)
    with open(path, "w") as handle:
        handle.write(header)


def _end_progress(path):
    if path and os.path.exists(path):
        os.unlink(path)


def _inspect(runner, docker, image):
    res = runner.run([docker, "image", "inspect", image])
    if not res.ok:
        runner.fail(res, "image %s is not on this node" % image,
                    hint="pull it on this node first, or load it (docker load)")
    try:
        entry = parse_inspect(res.stdout)[0]
        return image_summary(entry), int(entry.get("Size") or 0)
    except (ValueError, IndexError) as exc:
        runner.fail(res, "cannot read image %s on this node: %s" % (image, exc))


def _save_args(runner, docker, platform):
    res = runner.run([docker, "version", "--format", "{{.Server.APIVersion}}"])
    return save_platform_args(api_version(res.stdout) if res.ok else None, platform)


def _report(entry):
    if entry["bytes"]:
        return "%s %.0f MB in %.1f s (%.0f MB/s)" % (
            entry["name"], entry["bytes"] / 1e6, entry["seconds"], entry["mb_per_s"])
    return "%s %s" % (entry["name"], "would get it" if entry["changed"] else "up to date")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            destinations=dict(type="list", elements="dict", required=True, options=dict(
                ip=dict(type="str", required=True),
                name=dict(type="str"),
                content=dict(type="str", default=""),
            )),
            ssh_user=dict(type="str", required=True),
            ssh_key=dict(type="path", required=True),
            ssh_opts=dict(type="list", elements="str", default=[]),
            load_command=dict(type="list", elements="str", default=["docker", "load"]),
            timeout=dict(type="int", default=30),
            progress_file=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["timeout"] < 1:
        module.fail_json(msg="timeout must be 1 or more seconds (ssh's ConnectTimeout), got %d" % p["timeout"])
    # Neither a destination nor the user may reach ssh as an option (-oProxyCommand=...): refused, and `--` below.
    bad = [w for w in [ssh_user_problem(p["ssh_user"])] + [ssh_host_problem(d["ip"], "destination ip")
                                                           for d in p["destinations"]] if w]
    if bad:
        module.fail_json(msg="; ".join(bad) + "; nothing was sent", hint="Give fabric IPs and a plain user name.")
    runner = Runner(module)
    docker = runner.bin("docker")
    bash = runner.bin("bash")
    ssh = runner.bin("ssh")
    head, size = _inspect(runner, docker, p["image"])
    image_id, content = head["id"], head["content"]
    save_args = _save_args(runner, docker, head["platform"])
    progress = p["progress_file"] if not module.check_mode else None
    pipe, env = _PIPE, dict(DOCKER=docker, SAVE_PLATFORM=" ".join(save_args))
    if progress:
        pipe, env = _PIPE_PROGRESS, dict(env, PROGRESS=progress)
        _end_progress(progress)  # a file left by a killed run would show its stale bytes

    todo = [d for d in p["destinations"] if d["content"].strip() != content]
    results = []
    for dest in p["destinations"]:
        name = dest["name"] or dest["ip"]
        entry = dict(name=name, ip=dest["ip"], changed=dest["content"].strip() != content, bytes=0, seconds=0.0,
                     mb_per_s=0.0, loaded={})
        results.append(entry)
        if not entry["changed"] or module.check_mode:
            continue
        ssh_argv = [ssh, "-i", p["ssh_key"], "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                    "-o", "ConnectTimeout=%d" % p["timeout"], "-o", "ServerAliveInterval=15"] + p["ssh_opts"] + [
                        "--", "%s@%s" % (p["ssh_user"], dest["ip"])] + p["load_command"]
        if progress:
            _start_progress(progress, progress_header(name, dest["ip"], size, todo.index(dest) + 1, len(todo)))
        t0 = time.monotonic()
        res = runner.run([bash, "-o", "pipefail", "-c", pipe, "image-sync", p["image"]] + ssh_argv, env=env)
        seconds = time.monotonic() - t0
        if not res.ok:
            _end_progress(progress)
            hint = ("check that this node reaches %s@%s over ssh with %s, and that %s can run `%s` there (docker group "
                    "or passwordless sudo)" % (p["ssh_user"], dest["ip"], p["ssh_key"], p["ssh_user"],
                                               " ".join(p["load_command"])))
            runner.fail(res, "moving %s to %s (%s) failed" % (p["image"], name, dest["ip"]), image_id=image_id,
                        content=content, results=results, hint=hint)
        entry.update(bytes=size, seconds=round(seconds, 1), mb_per_s=round(size / 1e6 / max(seconds, 1e-3), 1),
                     loaded=parse_docker_load(res.stdout))
    _end_progress(progress)
    changed = any(r["changed"] for r in results)
    total = sum(r["bytes"] for r in results)
    module.exit_json(changed=changed, image_id=image_id, content=content, save_args=save_args, results=results,
                     bytes_transferred=total,
                     msg="%s: %s" % (p["image"], ", ".join(_report(r) for r in results) or "no destinations"))


if __name__ == "__main__":
    main()
