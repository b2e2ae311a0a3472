#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: allreduce_bench
short_description: Measure an all-reduce across the cluster's nodes in the serving image (one rank per node)
version_added: 0.3.0
description:
  - "Runs one rank of a torch.distributed all-reduce inside the running container O(container) (the serving image with
    the node's fabric environment: C(NCCL_SOCKET_IFNAME), C(NCCL_IB_HCA), C(GLOO_SOCKET_IFNAME), its RDMA devices and
    locked-memory limit). One task runs it on every node at the same time; the rank is the node's place in O(nodes)
    and the first node holds the rendezvous on O(port) of its fabric address."
  - "O(backend=auto): NCCL on a CUDA GPU (what vLLM's tensor parallelism uses), else gloo on the CPU (e.g. an image
    with a CPU-only torch): then the figures are a gloo all-reduce over TCP and say so (C(backend))."
  - Reports, per message size, the time per operation, the algorithm bandwidth and the bus bandwidth as nccl-tests
    defines them (busbw = algbw x 2(n-1)/n), and, from C(NCCL_DEBUG=INFO), the transport NCCL chose on this node
    (C(IB) for RoCE, C(Socket) for a TCP fallback).
  - nccl-tests' C(all_reduce_perf) spans nodes only under MPI (mpirun starting every rank over ssh), which a deployed
    cluster does not have; torch's NCCL backend calls the same C(ncclAllReduce).
  - The process runs under C(timeout) inside the container and is gone when the module returns. Changes nothing.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  container:
    description: The running container to run the rank in (the node's Ray container).
    type: str
    required: true
  nodes:
    description: The cluster's nodes in rank order, each a dict with C(host) and fabric C(ip) (the head first).
    type: list
    elements: dict
    required: true
  ip:
    description: This node's fabric IP (one of O(nodes)).
    type: str
    required: true
  port:
    description: Rendezvous port on the first node's fabric IP.
    type: int
    default: 29640
  backend:
    description: C(auto) (NCCL with a CUDA GPU, else gloo), C(nccl) or C(gloo).
    type: str
    default: auto
    choices: [auto, nccl, gloo]
  min_bytes:
    description: Smallest message in bytes.
    type: int
    default: 1048576
  max_bytes:
    description: Largest message in bytes (NCCL). Two copies of it live in GPU memory beside the serving engine.
    type: int
    default: 1073741824
  gloo_max_bytes:
    description: Largest message in bytes when the all-reduce runs on gloo (a CPU all-reduce of a GiB takes minutes).
    type: int
    default: 16777216
  factor:
    description: Each message size is this many times the last.
    type: int
    default: 4
  iterations:
    description: Timed all-reduces per size (after O(warmup) untimed ones).
    type: int
    default: 10
  warmup:
    description: Untimed all-reduces per size.
    type: int
    default: 3
  timeout:
    description: Seconds the rank may take in all (rendezvous included).
    type: int
    default: 300
notes:
  - Check mode is supported and behaves exactly like a normal run (a measurement changes nothing).
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
- name: All-reduce across the nodes (every node at once)
  sparkfleet.vllm.allreduce_bench:
    container: sparkfleet-ray
    nodes: "{{ sparkfleet_cluster_nodes }}"
    ip: "{{ sparkfleet_fabric_ip }}"
"""

RETURN = r"""
backend:
  description: C(nccl) or C(gloo), as run.
  returned: always
  type: str
rank:
  description: This node's rank.
  returned: always
  type: int
world:
  description: Ranks (nodes) in the all-reduce.
  returned: always
  type: int
results:
  description: Per message size C(bytes), C(seconds) per operation, C(algbw_gbs) and C(busbw_gbs) (10^9 bytes/s).
  returned: always
  type: list
  elements: dict
busbw_gbs:
  description: Bus bandwidth at the largest size, GB/s.
  returned: always
  type: float
transport:
  description: C(IB) or C(Socket) as NCCL chose on this node (null for gloo, or without NCCL INFO lines).
  returned: always
  type: str
nccl:
  description: What NCCL's INFO lines say about this node's process (interface, network, channels, RDMA devices).
  returned: always
  type: list
  elements: dict
socket_ifname:
  description: The interface the backend's sockets used (C(NCCL_SOCKET_IFNAME) or C(GLOO_SOCKET_IFNAME) of the image).
  returned: always
  type: str
correct:
  description: Whether a check all-reduce returned the right sum on this rank.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric import _allreduce
from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric._fabric_bench import in_subnet
from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric._nccl import parse as parse_nccl


def main():
    module = AnsibleModule(
        argument_spec=dict(
            container=dict(type="str", required=True),
            nodes=dict(type="list", elements="dict", required=True),
            ip=dict(type="str", required=True),
            port=dict(type="int", default=29640),
            backend=dict(type="str", default="auto", choices=["auto", "nccl", "gloo"]),
            min_bytes=dict(type="int", default=1 << 20),
            max_bytes=dict(type="int", default=1 << 30),
            gloo_max_bytes=dict(type="int", default=16 << 20),
            factor=dict(type="int", default=4),
            iterations=dict(type="int", default=10),
            warmup=dict(type="int", default=3),
            timeout=dict(type="int", default=300),
        ),
        supports_check_mode=True,
    )
    p = module.params
    ips = []
    for node in p["nodes"]:
        if not isinstance(node, dict) or not node.get("ip") or not in_subnet(str(node["ip"]), "0.0.0.0/0"):
            module.fail_json(msg="every entry of nodes needs a fabric ip, got %r" % (node,),
                             hint="pass sparkfleet_cluster_nodes (the cluster_nodes filter's output)")
        ips.append(str(node["ip"]))
    if len(ips) < 2:
        module.fail_json(msg="an all-reduce across nodes needs at least 2 nodes, got %d" % len(ips))
    if p["ip"] not in ips:
        module.fail_json(msg="ip %s is not among the nodes' fabric IPs %s" % (p["ip"], ", ".join(ips)))
    for name, low in (("min_bytes", 4), ("factor", 2), ("iterations", 1), ("warmup", 0), ("timeout", 10)):
        if p[name] < low:
            module.fail_json(msg="%s=%d is below %d" % (name, p[name], low))
    if p["max_bytes"] < p["min_bytes"] or p["gloo_max_bytes"] < p["min_bytes"]:
        module.fail_json(msg="max_bytes and gloo_max_bytes must be at least min_bytes (%d)" % p["min_bytes"])
    if not 1 <= p["port"] <= 65535:
        module.fail_json(msg="port=%d is not a TCP port (1-65535)" % p["port"])
    rank = ips.index(p["ip"])
    runner = Runner(module)
    docker = runner.bin("docker")
    res = runner.run([docker, "exec", p["container"], "sh", "-c", "command -v python3"], timeout=60)
    if not res.ok or not res.stdout.strip():
        runner.fail(res, "no python3 in container %s (is it running? qualify measures a deployed cluster)"
                    % p["container"], hint="run site.yml first; playbooks/status.yml shows what is down")
    python = res.stdout.strip().splitlines()[-1]
    backend = p["backend"]
    env = {"MASTER_ADDR": ips[0], "MASTER_PORT": str(p["port"]), "RANK": str(rank), "WORLD_SIZE": str(len(ips)),
           "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    envargs = [a for k in sorted(env) for a in ("-e", "%s=%s" % (k, env[k]))]
    sizes = _allreduce.sizes(p["min_bytes"], p["gloo_max_bytes"] if backend == "gloo" else p["max_bytes"], p["factor"])
    gloo_max = p["gloo_max_bytes"] - p["gloo_max_bytes"] % 4
    argv = ([docker, "exec"] + envargs + [p["container"], "timeout", "-k", "5", str(p["timeout"]), python, "-c",
                                          _allreduce.SCRIPT, backend, ",".join(str(s) for s in sizes),
                                          str(p["iterations"]), str(p["warmup"]), str(p["timeout"]),
                                          str(gloo_max)])
    res = runner.run(argv, timeout=p["timeout"] + 15, kill_after=5)
    got = _allreduce.parse(res.stdout)
    procs = parse_nccl((res.stdout or "") + "\n" + (res.stderr or ""))
    transport = procs[0]["transport"] if procs and (got["backend"] or backend) == "nccl" else None
    out = dict(backend=got["backend"] or backend, rank=rank, world=len(ips), results=got["results"],
               busbw_gbs=got["results"][-1]["busbw_gbs"] if got["results"] else None, transport=transport,
               nccl=procs, socket_ifname=got["socket_ifname"], correct=got["correct"], init_s=got["init_s"],
               torch=got["torch"])
    if not res.ok or not got["done"]:
        why = got["error"] or (
            "no answer from the other ranks within %d s (a node did not start its rank, or the rendezvous port %d on "
            "%s is blocked)" % (p["timeout"], p["port"], ips[0]) if res.timed_out else None)
        what = "the %s all-reduce (rank %d of %d) failed%s" % (backend, rank, len(ips), ": " + why if why else "")
        runner.fail(res, what, hint="every node runs its rank at the same time: a rank that waits alone points at a "
                                    "node that failed before it (see its line), or at a firewall on the rendezvous "
                                    "port %d of %s" % (p["port"], ips[0]), **out)
    if got["correct"] is False:
        module.fail_json(msg="the %s all-reduce returned a wrong sum on rank %d: the fabric corrupts data" %
                         (backend, rank), **out)
    module.exit_json(changed=False, **out)


if __name__ == "__main__":
    main()
