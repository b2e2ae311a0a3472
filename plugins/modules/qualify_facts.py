#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: qualify_facts
short_description: Find which measuring tools a node and its serving containers have
version_added: 0.3.0
description:
  - "Looks for the tools a qualification run prefers, on the node and inside the running container O(container) (the
    serving image with the node's fabric environment): C(iperf3), perftest's C(ib_write_bw) and C(ib_write_lat),
    C(ibv_devinfo), nccl-tests' C(all_reduce_perf) and C(mpirun)."
  - Asks the container's Python for torch, whether it sees a CUDA GPU and its NCCL version (what decides between an
    NCCL and a gloo all-reduce).
  - With O(bench_container), asks that container (the vLLM API server) whether its C(vllm) has C(bench serve).
  - "Reads the RoCE ports with C(ibv_devinfo) where it exists (node first, else container): state, active and
    maximum MTU per RDMA device."
  - Changes nothing.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  container:
    description: Running container whose tools and torch to probe (C(docker exec)); unset, only the node is probed.
    type: str
  bench_container:
    description: Running container of the vLLM API server, asked for C(vllm bench serve).
    type: str
  timeout:
    description: Seconds each probe may take.
    type: int
    default: 120
notes:
  - Check mode is supported and behaves exactly like a normal run.
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
- name: Which tools can measure here
  sparkfleet.vllm.qualify_facts:
    container: sparkfleet-ray
    bench_container: "{{ 'sparkfleet-vllm' if inventory_hostname in groups['spark_head'] else omit }}"
  register: tools
"""

RETURN = r"""
node_tools:
  description: Tool -> its path on the node, null when missing.
  returned: always
  type: dict
  sample: {iperf3: /usr/bin/iperf3, ib_write_bw: null, ib_write_lat: null, ibv_devinfo: null}
container_tools:
  description: Tool -> its path in O(container), null when missing (empty without O(container)).
  returned: always
  type: dict
container_running:
  description: Whether O(container) runs (null without O(container)).
  returned: always
  type: bool
torch:
  description: What the container's torch reports (C(version), C(cuda), C(gpus), C(nccl)); C(error) when it cannot.
  returned: always
  type: dict
  sample: {version: 2.13.0+cpu, cuda: false, gpus: 0, nccl: null}
vllm_bench:
  description: Whether O(bench_container)'s C(vllm) has C(bench serve) (null without O(bench_container)).
  returned: always
  type: bool
rdma_ports:
  description: RDMA device -> C(state), C(active_mtu), C(max_mtu), C(link_layer) from C(ibv_devinfo); empty without it.
  returned: always
  type: dict
  sample: {rocep1s0f1: {port: 1, state: PORT_ACTIVE, active_mtu: 4096, max_mtu: 4096, link_layer: Ethernet}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json
from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric._fabric_bench import parse_ibv_devinfo

TOOLS = ("iperf3", "ib_write_bw", "ib_write_lat", "ibv_devinfo", "all_reduce_perf", "mpirun", "python3", "timeout")
TORCH_PROBE = ("import json\ntry:\n    import torch\nexcept Exception as e:\n    print(json.dumps({'error': str(e)}))\n"
               "else:\n    cuda = bool(torch.cuda.is_available())\n"
               "    nccl = torch.cuda.nccl.version() if cuda else None\n"
               "    print(json.dumps({'version': torch.__version__, 'cuda': cuda,\n"
               "                      'gpus': torch.cuda.device_count() if cuda else 0,\n"
               "                      'nccl': '.'.join(map(str, nccl)) if isinstance(nccl, tuple) else nccl}))\n")
LOOKUP = 'for t in "$@"; do p=$(command -v "$t" 2>/dev/null) && echo "$t=$p"; done; exit 0'


def parse_lookup(text):
    """`tool=path` lines -> {tool: path or None} for every tool asked."""
    found = dict(line.split("=", 1) for line in (text or "").splitlines() if "=" in line)
    return {t: found.get(t) or None for t in TOOLS}


def parse_torch(text):
    """The probe's last JSON line, or an error naming what it printed."""
    for line in reversed((text or "").strip().splitlines()):
        try:
            got = _json.loads(line, "the torch probe's line")
        except ValueError:
            continue
        if isinstance(got, dict):
            return got
    return {"error": "the torch probe printed no result: %s" % (text or "").strip()[-300:]}


def _running(runner, docker, container):
    res = runner.run([docker, "inspect", "-f", "{{.State.Running}}", container])
    return res.ok and res.stdout.strip() == "true"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            container=dict(type="str"),
            bench_container=dict(type="str"),
            timeout=dict(type="int", default=120),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["timeout"] < 5:
        module.fail_json(msg="timeout=%d is below 5 seconds" % p["timeout"])
    runner = Runner(module)
    node = {t: runner.bin(t, required=False) for t in TOOLS}
    out = {"node_tools": node, "container_tools": {}, "container_running": None, "torch": {}, "vllm_bench": None,
           "rdma_ports": {}}
    docker = runner.bin("docker") if p["container"] or p["bench_container"] else None
    devinfo_text = None
    if node["ibv_devinfo"]:
        res = runner.run([node["ibv_devinfo"]], timeout=p["timeout"])
        devinfo_text = res.stdout if res.ok else None
    if p["container"]:
        out["container_running"] = _running(runner, docker, p["container"])
        if not out["container_running"]:
            module.fail_json(msg="container %s is not running on this node: qualify measures a deployed cluster"
                             % p["container"], hint="run site.yml first (playbooks/status.yml shows what is down)",
                             **out)
        exec_ = [docker, "exec", p["container"]]
        res = runner.run(exec_ + ["sh", "-c", LOOKUP, "sh"] + list(TOOLS), timeout=p["timeout"], kill_after=5)
        if not res.ok:
            runner.fail(res, "looking for tools in container %s failed" % p["container"])
        out["container_tools"] = parse_lookup(res.stdout)
        python = out["container_tools"]["python3"]
        if python:
            res = runner.run(exec_ + [python, "-c", TORCH_PROBE], timeout=p["timeout"], kill_after=5)
            out["torch"] = parse_torch(res.stdout) if res.ok else {"error": res.why("the torch probe failed")}
        else:
            out["torch"] = {"error": "no python3 in container %s" % p["container"]}
        if devinfo_text is None and out["container_tools"]["ibv_devinfo"]:
            res = runner.run(exec_ + ["ibv_devinfo"], timeout=p["timeout"], kill_after=5)
            devinfo_text = res.stdout if res.ok else None
    if devinfo_text:
        out["rdma_ports"] = parse_ibv_devinfo(devinfo_text)
    if p["bench_container"]:
        if not _running(runner, docker, p["bench_container"]):
            module.fail_json(msg="container %s is not running on this node: qualify measures a deployed cluster"
                             % p["bench_container"], hint="run site.yml first", **out)
        res = runner.run([docker, "exec", p["bench_container"], "vllm", "bench", "serve", "--help"],
                         timeout=p["timeout"], kill_after=5)
        # `vllm bench serve --help` lists --max-concurrency where the subcommand exists (vLLM >= 0.10)
        out["vllm_bench"] = res.ok and "--max-concurrency" in (res.stdout or "")
    module.exit_json(changed=False, **out)


if __name__ == "__main__":
    main()
