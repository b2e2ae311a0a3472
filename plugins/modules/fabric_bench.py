#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_bench
short_description: Measure bandwidth or latency between two nodes over the fabric (one end per run)
version_added: 0.3.0
description:
  - Runs one end of a bounded fabric test between this node's fabric address O(bind) and a peer's O(peer). One task
    runs it on both nodes at the same time (O(role=server) on one, O(role=client) on the other); the client
    retries until the server listens, both stop at O(timeout). The client's result is the measurement.
  - "O(transport=tcp): with O(tool=python) the collection's own socket test (no tool needed on the node): the server
    listens on O(bind) only, accepts connections from O(peer) only, serves one test and exits; bandwidth is what the
    receiver counted over O(streams) connections for O(seconds), latency the median round trip of O(count) O(size)-byte
    messages (halved: the one-way estimate). With O(tool=iperf3), C(iperf3 -s -1) and C(iperf3 -c) (bandwidth only)."
  - "O(transport=rdma): perftest's C(ib_write_bw) (bandwidth, O(seconds) long) or C(ib_write_lat) (latency) on the RDMA
    device O(device), on the node or, with O(container), inside that running container (C(docker exec); the tool
    stopped by C(timeout) inside the container too). The result also names the RoCE path MTU the queue pair used."
  - Refuses O(bind) or O(peer) outside O(subnet), so that a test only ever runs between cluster nodes on the fabric.
  - Changes nothing; no process outlives the run.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  role:
    description: Which end this node runs.
    type: str
    required: true
    choices: [server, client]
  test:
    description: What to measure.
    type: str
    required: true
    choices: [bandwidth, latency]
  transport:
    description: TCP sockets or RDMA (RoCE) verbs.
    type: str
    default: tcp
    choices: [tcp, rdma]
  tool:
    description:
      - C(python) (TCP, built in), C(iperf3) (TCP bandwidth; both nodes need it) or C(perftest) (RDMA; both need it).
      - Defaults to C(python) for TCP and C(perftest) for RDMA.
    type: str
    choices: [python, iperf3, perftest]
  bind:
    description: This node's fabric IPv4 address (the server listens on it, the client sends from it).
    type: str
    required: true
  peer:
    description: The other node's fabric IPv4 address.
    type: str
    required: true
  port:
    description: TCP port of the test (perftest's out-of-band exchange port for RDMA).
    type: int
    required: true
  subnet:
    description: The fabric subnet (CIDR); O(bind) and O(peer) must lie in it. Unset, the check is skipped.
    type: str
  seconds:
    description: How long a bandwidth test sends.
    type: float
    default: 5
  streams:
    description: Parallel TCP connections of a bandwidth test (C(iperf3 -P)).
    type: int
    default: 1
  count:
    description: Round trips of a latency test (python and perftest).
    type: int
    default: 1000
  size:
    description: Message size in bytes of a latency test (python and perftest).
    type: int
    default: 64
  device:
    description: RDMA device (C(rocep1s0f1)) for O(transport=rdma).
    type: str
  gid_index:
    description: RoCE v2 GID index of O(bind) on O(device) (C(rdma_facts)' C(gid_index)); unset, perftest picks one.
    type: int
  container:
    description: Run the tool inside this running container (the serving image) instead of on the node.
    type: str
  timeout:
    description: Seconds this end may take in all, waiting for the peer included; nothing runs longer.
    type: int
    default: 60
notes:
  - Check mode is supported and behaves exactly like a normal run (a measurement changes nothing).
  - The role C(sparkfleet.vllm.qualify) runs it for every pair of nodes in lock-step, each test on its own port.
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
- name: TCP bandwidth from the head to the worker (one task, both nodes)
  sparkfleet.vllm.fabric_bench:
    role: "{{ 'client' if inventory_hostname == 'spark-a1' else 'server' }}"
    test: bandwidth
    bind: "{{ sparkfleet_fabric_ip }}"
    peer: "{{ '192.168.200.13' if inventory_hostname == 'spark-a1' else '192.168.200.12' }}"
    port: 29650
    subnet: 192.168.200.0/24
    streams: 4
"""

RETURN = r"""
role:
  description: The end this node ran.
  returned: always
  type: str
tool:
  description: The tool that measured (C(python), C(iperf3), C(ib_write_bw), C(ib_write_lat)).
  returned: always
  type: str
  sample: python
gbps:
  description: Bandwidth in Gbit/s (client of a bandwidth test).
  returned: when measured
  type: float
  sample: 37.2
latency_us:
  description: One-way latency in microseconds (client of a latency test; perftest's typical, else average).
  returned: when measured
  type: float
  sample: 1.9
result:
  description: What the tool reported, parsed (bytes, seconds, streams, round trips, path MTU, GID index, ...).
  returned: always
  type: dict
path_mtu:
  description: The RoCE path MTU the RDMA queue pair used (perftest's C(Mtu)), in bytes.
  returned: RDMA tests
  type: int
  sample: 4096
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric import _fabric_bench as fb
from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner

# Tool name per (transport, test) for perftest.
PERFTEST = {"bandwidth": "ib_write_bw", "latency": "ib_write_lat"}


def _check(module):
    p = module.params
    tool = p["tool"] or ("perftest" if p["transport"] == "rdma" else "python")
    if p["transport"] == "rdma" and tool != "perftest":
        module.fail_json(msg="transport=rdma measures with perftest, not %s" % tool, hint="set tool: perftest")
    if p["transport"] == "tcp" and tool == "perftest":
        module.fail_json(msg="perftest measures RDMA, not TCP", hint="set transport: rdma, or tool: python/iperf3")
    if tool == "iperf3" and p["test"] == "latency":
        module.fail_json(msg="iperf3 measures bandwidth only", hint="use tool: python for the TCP latency")
    if p["transport"] == "rdma" and not p["device"]:
        module.fail_json(msg="transport=rdma needs device (the RDMA device, e.g. rocep1s0f1)",
                         hint="pass rdma_facts' hca[0] of this node")
    for name in ("bind", "peer"):
        if not fb.in_subnet(p[name], "0.0.0.0/0"):
            module.fail_json(msg="%s=%r is not an IPv4 address" % (name, p[name]))
        if p["subnet"] and not fb.in_subnet(p[name], p["subnet"]):
            module.fail_json(msg="%s %s is outside the fabric subnet %s: fabric tests run only between cluster nodes on "
                                 "the fabric" % (name, p[name], p["subnet"]),
                             hint="pass each node's fabric IP (sparkfleet_fabric_ip)")
    if p["bind"] == p["peer"]:
        module.fail_json(msg="bind and peer are the same address %s: a node cannot measure the fabric to itself"
                         % p["bind"])
    if not 1 <= p["port"] <= 65535:
        module.fail_json(msg="port=%d is not a TCP port (1-65535)" % p["port"])
    for name, low in (("seconds", 0.5), ("streams", 1), ("count", 1), ("size", 1), ("timeout", 5)):
        if p[name] < low:
            module.fail_json(msg="%s=%s is below %s" % (name, p[name], low))
    if p["streams"] > 64:
        module.fail_json(msg="streams=%d is above 64" % p["streams"])
    if p["test"] == "bandwidth" and p["seconds"] + 5 > p["timeout"]:
        module.fail_json(msg="timeout=%d leaves no room for a %s s test and the wait for the peer" %
                         (p["timeout"], p["seconds"]), hint="raise timeout to at least seconds + 10")
    return tool


def _python(module):
    p = module.params
    try:
        if p["role"] == "server":
            seen = fb.serve(p["bind"], p["port"], p["peer"], p["timeout"])
            return {"tool": "python", "result": seen}
        if p["test"] == "latency":
            got = fb.latency(p["peer"], p["port"], p["bind"], p["timeout"], count=p["count"], size=p["size"])
            return {"tool": "python", "result": got, "latency_us": got["latency_us"]}
        got = fb.bandwidth(p["peer"], p["port"], p["bind"], p["timeout"], seconds=p["seconds"], streams=p["streams"])
        return {"tool": "python", "result": got, "gbps": got["gbps"]}
    except fb.BenchError as e:
        module.fail_json(msg="%s %s test (%s) between %s and %s failed: %s" % (
            p["test"], p["transport"], p["role"], p["bind"], p["peer"], e), tool="python")


def _wrap(runner, module, argv):
    """argv run on the node, or inside the container with `timeout` there too (docker exec's client dying would
    leave the tool running in the container)."""
    p = module.params
    if not p["container"]:
        return argv
    return [runner.bin("docker"), "exec", p["container"], "timeout", "-k", "5", str(p["timeout"])] + argv


def _until(module, runner, argv, refused):
    """Run argv (a client) until it does not fail for want of a listening server, within the timeout."""
    p = module.params
    deadline = time.monotonic() + p["timeout"]
    while True:
        left = int(max(deadline - time.monotonic(), 1))
        res = runner.run(argv, timeout=left, kill_after=5)
        text = (res.stdout or "") + (res.stderr or "")
        if res.timed_out or not refused(text) or deadline - time.monotonic() < 2:
            return res
        time.sleep(0.5)


def _iperf3(module, runner):
    p = module.params
    iperf3 = runner.bin("iperf3") if not p["container"] else "iperf3"
    if p["role"] == "server":
        argv = _wrap(runner, module, [iperf3, "-s", "-1", "-B", p["bind"], "-p", str(p["port"]), "-J"])
        res = runner.run(argv, timeout=p["timeout"], kill_after=5)
        if res.timed_out:
            module.fail_json(msg="iperf3 server on %s:%d: the peer %s never connected within %d s"
                             % (p["bind"], p["port"], p["peer"], p["timeout"]), tool="iperf3", **res.details())
        try:
            return {"tool": "iperf3", "result": fb.parse_iperf3(res.stdout)}
        except fb.BenchError as e:
            module.fail_json(msg="iperf3 server on %s:%d: %s" % (p["bind"], p["port"], e), tool="iperf3",
                             **res.details())
    seconds = max(int(round(p["seconds"])), 1)
    argv = _wrap(runner, module, [iperf3, "-c", p["peer"], "-B", p["bind"], "-p", str(p["port"]), "-t", str(seconds),
                                  "-P", str(p["streams"]), "-J"])
    res = _until(module, runner, argv, fb.iperf3_refused)
    try:
        got = fb.parse_iperf3(res.stdout)
    except fb.BenchError as e:
        module.fail_json(msg="iperf3 from %s to %s:%d: %s" % (p["bind"], p["peer"], p["port"], e), tool="iperf3",
                         **res.details())
    return {"tool": "iperf3", "result": got, "gbps": got["gbps"]}


def _perftest(module, runner):
    p = module.params
    name = PERFTEST[p["test"]]
    tool = runner.bin(name) if not p["container"] else name
    argv = [tool, "-d", p["device"], "-i", "1", "-p", str(p["port"]), "-F"]
    if p["gid_index"] is not None:
        argv += ["-x", str(p["gid_index"])]
    if p["test"] == "bandwidth":
        argv += ["--report_gbits", "-D", str(max(int(round(p["seconds"])), 1))]
    else:
        argv += ["-n", str(p["count"]), "-s", str(p["size"])]
    if p["role"] == "client":
        argv.append(p["peer"])
    argv = _wrap(runner, module, argv)
    if p["role"] == "server":
        res = runner.run(argv, timeout=p["timeout"], kill_after=5)
    else:
        res = _until(module, runner, argv, fb.perftest_refused)
    text = (res.stdout or "") + "\n" + (res.stderr or "")
    where = "%s %s on %s (%s, peer %s)" % (name, p["role"], p["device"], p["bind"], p["peer"])
    if res.timed_out:
        module.fail_json(msg="%s: no result within %d s (the peer's test did not start, or the RDMA path is broken)"
                         % (where, p["timeout"]), tool=name, **res.details())
    try:
        got = fb.parse_perftest_bw(text) if p["test"] == "bandwidth" else fb.parse_perftest_lat(text)
    except fb.BenchError as e:
        module.fail_json(msg="%s: %s" % (where, e), tool=name, **res.details())
    out = {"tool": name, "result": got, "path_mtu": got.get("path_mtu")}
    if p["role"] == "client":
        key = "gbps" if p["test"] == "bandwidth" else "latency_us"
        out[key] = got[key]
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            role=dict(type="str", required=True, choices=["server", "client"]),
            test=dict(type="str", required=True, choices=["bandwidth", "latency"]),
            transport=dict(type="str", default="tcp", choices=["tcp", "rdma"]),
            tool=dict(type="str", choices=["python", "iperf3", "perftest"]),
            bind=dict(type="str", required=True),
            peer=dict(type="str", required=True),
            port=dict(type="int", required=True),
            subnet=dict(type="str"),
            seconds=dict(type="float", default=5),
            streams=dict(type="int", default=1),
            count=dict(type="int", default=1000),
            size=dict(type="int", default=64),
            device=dict(type="str"),
            gid_index=dict(type="int"),
            container=dict(type="str"),
            timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    tool = _check(module)
    if tool == "python":
        out = _python(module)
    elif tool == "iperf3":
        out = _iperf3(module, Runner(module))
    else:
        out = _perftest(module, Runner(module))
    module.exit_json(changed=False, role=module.params["role"], **out)


if __name__ == "__main__":
    main()
