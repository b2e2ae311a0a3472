#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_transport
short_description: Prove which transport NCCL chose (NET/IB or NET/Socket) on every node
version_added: 0.2.0
description:
  - Reads the C(NCCL_DEBUG=INFO) lines of a running vLLM server from its container's log (Ray forwards every
    worker's lines to the API container, prefixed with the worker node's IP) and reports, per NCCL process and per
    node, the interface and the transport NCCL uses (C(IB) for RoCE/InfiniBand, including plugins such as
    C(IBext_v11); C(Socket) for TCP; C(local) for P2P/SHM inside one node).
  - Fails, naming the node and the fix, when a node that has RDMA devices (O(nodes)) runs NCCL over C(NET/Socket);
    NCCL falls back to TCP silently when the container lacks C(/dev/infiniband) or an unlimited locked-memory
    limit, and serving then runs at a fraction of the fabric's bandwidth.
  - With O(allow_tcp_fallback) the same finding is a warning.
  - Warns when the log holds no NCCL INFO lines (C(NCCL_DEBUG) not C(INFO), or serving on one GPU).
  - Changes nothing.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  container:
    description: The Docker container of the vLLM API server (the Ray driver), read with C(docker logs).
    type: str
    required: true
  nodes:
    description:
      - The cluster's nodes, each a dict with its inventory C(host) and fabric C(ip) (the output of the
        C(sparkfleet.vllm.cluster_nodes) filter; other keys are ignored).
      - NCCL processes whose IP is not listed are reported under their host name and never fail the check.
    type: list
    elements: dict
    default: []
  rdma_devices:
    description:
      - Inventory host -> its RDMA character devices (the C(rdma_char_devices) list of C(sparkfleet.vllm.rdma_facts)).
      - A node with devices must not run NCCL over C(NET/Socket); a node missing here is not judged.
    type: dict
    default: {}
  allow_tcp_fallback:
    description: Report NET/Socket on an RDMA node as a warning instead of failing.
    type: bool
    default: false
notes:
  - Check mode is supported and behaves exactly like a normal run.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.setting_names
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Prove NCCL runs over RDMA on every node
  sparkfleet.vllm.nccl_transport:
    container: sparkfleet-vllm
    nodes: "{{ hostvars | sparkfleet.vllm.cluster_nodes(groups['spark'], groups['spark_head'][0]) }}"
    rdma_devices:
      spark-a1: [/dev/infiniband/uverbs0, /dev/infiniband/uverbs1]
      spark-b2: [/dev/infiniband/uverbs0, /dev/infiniband/uverbs1]
"""

RETURN = r"""
transports:
  description: The transport per node (inventory host when the IP is in O(nodes), else NCCL's host name).
  returned: always
  type: dict
  sample: {spark-a1: IB, spark-b2: IB}
processes:
  description: Every NCCL process found in the log.
  returned: always
  type: list
  elements: dict
  contains:
    host:
      description: Host name NCCL printed.
      type: str
    pid:
      description: Process ID NCCL printed.
      type: int
    ip:
      description: The node's IP (Ray's prefix, or NCCL's bootstrap address).
      type: str
    interface:
      description: The socket interface NCCL bootstrapped on.
      type: str
    network:
      description: The network NCCL announced (C(IB), C(IBext_v11), C(Socket)).
      type: str
    channels:
      description: The distinct C(via) paths of its channels (C(NET/IB/0), C(NET/Socket/0), C(P2P/CUMEM)).
      type: list
      elements: str
    ib_devices:
      description: RDMA devices NET/IB uses.
      type: list
      elements: str
    transport:
      description: C(IB), C(Socket) or C(local).
      type: str
    warnings:
      description: NCCL WARN lines of that process.
      type: list
      elements: str
problems:
  description: On failure, one message per node on NET/Socket despite RDMA devices.
  returned: failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric._nccl import judge, parse, summary
from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import check_setting_names, setting_names_option


def main():
    module = AnsibleModule(
        argument_spec=dict(
            container=dict(type="str", required=True),
            nodes=dict(type="list", elements="dict", default=[]),
            rdma_devices=dict(type="dict", default={}),
            allow_tcp_fallback=dict(type="bool", default=False),
            **setting_names_option()
        ),
        supports_check_mode=True,
    )
    p = module.params
    check_setting_names(module)
    nodes = {}
    for node in p["nodes"]:
        if not node.get("host") or not node.get("ip"):
            module.fail_json(msg="every entry of nodes needs host and ip, got %r" % (node,),
                             hint="pass hostvars | sparkfleet.vllm.cluster_nodes(groups['spark'], head)")
        devices = p["rdma_devices"].get(node["host"]) or []
        if not isinstance(devices, list):
            module.fail_json(msg="rdma_devices[%s] must be a list of device paths, got %r" % (node["host"], devices),
                             hint="pass the rdma_char_devices list of rdma_facts")
        nodes[str(node["ip"])] = {"name": node["host"], "rdma_devices": devices}
    runner = Runner(module)
    res = runner.run([runner.bin("docker"), "logs", p["container"]])
    if not res.ok:
        runner.fail(res, "cannot read the log of container %s" % p["container"],
                    hint="is vLLM running? `systemctl status sparkfleet-vllm`")
    procs = parse(res.stdout + "\n" + res.stderr)
    problems, warnings = judge(procs, nodes, p["allow_tcp_fallback"], p["setting_names"])
    for w in warnings:
        module.warn(w)
    result = dict(changed=False, transports=summary(procs, nodes), processes=procs)
    if problems:
        module.fail_json(msg="; ".join(problems), problems=problems, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
