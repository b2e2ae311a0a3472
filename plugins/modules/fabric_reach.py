#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_reach
short_description: Check that this node reaches its peers over the fabric, and say why not
version_added: 0.2.0
description:
  - Run on the head before anything else touches the workers. A worker without a management address is reached
    only through the head over the fabric, so a fabric link that is down shows up in Ansible as a timeout or a
    privilege-escalation prompt. This module names the link instead.
  - For each peer, reads the route to its fabric address (C(ip route get), which sends nothing), the state of the
    interface it leaves through, and opens one TCP connection to O(port) with O(timeout).
  - Fails with one sentence per unreachable peer naming this node, the peer, the interface and the cause (no
    route, a route through a gateway, interface down, no answer, nothing listening).
  - Read-only; does the same in check mode.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  peers:
    description:
      - The peers, each a dict with its fabric address in C(ip) and its inventory name in C(name) or C(host)
        (other keys are ignored, so the output of the P(sparkfleet.vllm.cluster_nodes#filter) filter fits).
    type: list
    elements: dict
    required: true
  port:
    description:
      - TCP port that must answer on each peer (sshd).
    type: int
    default: 22
  timeout:
    description:
      - Seconds to wait for each peer's answer.
    type: float
    default: 3
  interfaces:
    description:
      - This node's fabric interfaces. When given, a route to a peer through any other interface fails.
    type: list
    elements: str
    default: []
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
- name: The head reaches every worker over the fabric
  sparkfleet.vllm.fabric_reach:
    peers: "{{ hostvars | sparkfleet.vllm.cluster_nodes(groups['spark_workers'], groups['spark_head'][0]) | rejectattr('head') }}"
"""

RETURN = r"""
peers:
  description: Per peer, the route, the link and the answer.
  returned: always
  type: list
  elements: dict
  sample:
    - {name: spark-2, ip: 192.168.200.13, dev: enp1s0f1np1, operstate: up, carrier: "1", answer: ok, problem: null}
"""

import errno
import os
import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils._files import read_file
from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric._reach import parse_route_get, verdict


def _answer(ip, port, timeout):
    try:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        return str(exc)
    sock.settimeout(timeout)
    try:
        sock.connect((ip, port))
        return "ok"
    except socket.timeout:
        return "timeout"
    except OSError as exc:
        if exc.errno == errno.ECONNREFUSED:
            return "refused"
        return os.strerror(exc.errno) if exc.errno else str(exc)
    finally:
        sock.close()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            peers=dict(type="list", elements="dict", required=True),
            port=dict(type="int", default=22),
            timeout=dict(type="float", default=3),
            interfaces=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not 1 <= p["port"] <= 65535:
        module.fail_json(msg="port must be 1-65535, got %s" % p["port"])
    if not 0 < p["timeout"] <= 600:
        module.fail_json(msg="timeout must be more than 0 and at most 600 seconds, got %s" % p["timeout"])
    for peer in p["peers"]:
        peer["name"] = str(peer.get("name") or peer.get("host") or peer.get("ip") or "")
        if not peer.get("ip") or not isinstance(peer["ip"], str):
            module.fail_json(msg="peers: every peer needs its fabric address in 'ip', got %r" % (peer,))
    runner = Runner(module)
    ip_bin = runner.bin("ip")
    me = socket.gethostname()
    results, problems = [], []
    for peer in p["peers"]:
        res = runner.run([ip_bin, "-o", "route", "get", peer["ip"]])
        route = parse_route_get(res.stdout) if res.ok else {
            "dev": None, "via": None, "src": None, "kind": (res.stderr or "no route").strip()}
        link = None
        if route.get("dev"):
            base = "/sys/class/net/%s" % route["dev"]
            link = {"operstate": read_file(base + "/operstate", strip=True),
                    "carrier": read_file(base + "/carrier", strip=True)}
        answer = _answer(peer["ip"], p["port"], p["timeout"]) if route.get("dev") and not route.get("via") else None
        problem = verdict(me, peer["name"], peer["ip"], p["port"], route, link, answer, p["timeout"],
                          p["interfaces"])
        results.append(dict(name=peer["name"], ip=peer["ip"], dev=route.get("dev"),
                            operstate=(link or {}).get("operstate"), carrier=(link or {}).get("carrier"),
                            answer=answer, problem=problem))
        if problem:
            problems.append(problem)
    if problems:
        module.fail_json(msg="; ".join(problems), peers=results,
                         hint="Nothing was changed. Fix the fabric link, then run again.")
    module.exit_json(changed=False, peers=results)


if __name__ == "__main__":
    main()
