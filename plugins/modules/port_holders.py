#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: port_holders
short_description: Name whatever already listens on the ports a deployment needs
version_added: 0.2.0
description:
  - Lists the processes listening on TCP O(ports) on this node, with the systemd unit and the container each
    belongs to, read from C(/proc) (no C(ss) or C(netstat) needed).
  - A holder whose container or unit carries one of the O(ours) names is ours (a re-run finds its own API and
    Ray there); any other holder is foreign. With O(fail_on_foreign=true) the task fails naming each foreign
    holder (pid, command, unit, container) and the port, before anything is stopped or started, so a port
    taken by something else is never reported later as a crashing engine.
  - Read-only; in check mode it does the same.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  ports:
    description:
      - TCP ports to check, for example the API port and Ray's GCS port.
    type: list
    elements: int
    required: true
  ours:
    description:
      - Container or systemd unit names (without C(.service)) whose listeners are ours.
    type: list
    elements: str
    default: []
  fail_on_foreign:
    description:
      - Fail when a port is held by anything that is not ours.
    type: bool
    default: true
notes:
  - Run as root; the sockets of other users' processes are otherwise reported without their process.
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
- name: The API and Ray ports are free or ours
  sparkfleet.vllm.port_holders:
    ports: [30000, 6379]
    ours: [sparkfleet-vllm, sparkfleet-ray]
"""

RETURN = r"""
holders:
  description: Every listener on the ports, ours or not.
  returned: always
  type: list
  elements: dict
  sample:
    - {port: 30000, address: 0.0.0.0, pid: 5123, name: python3, cmdline: "python3 -m http.server 30000",
       unit: legacy-api.service, container_id: null, container_name: null, ours: false}
foreign:
  description: One line per foreign holder (port, pid, command, container, unit).
  returned: always
  type: list
  elements: str
  sample: ["port 30000 (0.0.0.0): pid 5123 python3 of unit legacy-api.service [python3 -m http.server 30000]"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu._gpu import parse_docker_inspect
from ansible_collections.sparkfleet.vllm.plugins.module_utils.host._ports import describe, is_ours, listeners


def main():
    module = AnsibleModule(
        argument_spec=dict(
            ports=dict(type="list", elements="int", required=True),
            ours=dict(type="list", elements="str", default=[]),
            fail_on_foreign=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    bad = [p for p in module.params["ports"] if not 1 <= p <= 65535]
    if bad or not module.params["ports"]:
        module.fail_json(msg="ports must be 1-65535 and not empty, got %s" % (bad or "[]"))
    found = listeners(module.params["ports"])
    ids = sorted(set(h["container_id"] for h in found if h["container_id"]))
    names = {}
    runner = Runner(module)
    docker = runner.bin("docker", required=False)
    if ids and docker:
        res = runner.run([docker, "inspect"] + ids)
        names = dict((c["id"], c["name"]) for c in parse_docker_inspect(res.stdout or "[]") if c["id"])
    for holder in found:
        holder["container_name"] = names.get(holder["container_id"]) if holder["container_id"] else None
        holder["ours"] = is_ours(holder, module.params["ours"])
    foreign = [describe(h) for h in found if not h["ours"]]
    result = dict(changed=False, holders=found, foreign=foreign)
    if foreign and module.params["fail_on_foreign"]:
        module.fail_json(msg="port(s) already taken by something that is not ours: %s" % "; ".join(foreign),
                         hint="Stop that service (and disable it, or it returns after a reboot), or move ours to "
                              "another port; nothing was changed.", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
