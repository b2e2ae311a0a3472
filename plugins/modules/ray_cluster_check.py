#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ray_cluster_check
short_description: Prove that a Ray cluster is pinned to the fabric and moves objects both ways
version_added: 0.1.0
description:
  - Runs on the Ray head node. Connects a short-lived Ray driver to the live cluster (the head's GCS),
    reads every registered node and compares its registered IP with the fabric IP the inventory expects.
    Mismatched, missing and extra nodes are reported with the host, the registered IP and the expected IP.
  - Counting nodes is not enough. When the head registers its management IP (C(ray start) without
    C(--node-ip-address)), C(ray status) shows every node and pinned tasks run, but fetching an object
    from a worker hangs. With O(probe=true) the module moves an object of O(object_size_mb) in both
    directions between the head and every alive worker, each wait bounded by O(timeout), so that trap
    becomes a clear failure that names the host and both IPs.
  - The driver is a Python program sent on stdin to the Python that has Ray, either a local interpreter
    (O(python)) or C(python3) inside a container (O(container), run with C(docker exec -i)). The whole
    run is bounded twice, by a watchdog inside the program and by C(timeout) around the command.
  - Read-only; it never changes the cluster and always reports C(changed=false). The C(ray_cluster) role
    acts on what it reports. It also runs in check mode, since it changes nothing.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  address:
    description:
      - Address of the Ray head's GCS, C(host:port), or C(auto) to find the cluster running on this host.
      - When not set, C(<ip of the head in expected>:6379), or C(auto) when O(expected) is empty.
    type: str
  expected:
    description:
      - The nodes the inventory expects, each with its fabric IP.
      - The entry with O(expected[].head=true) is the Ray head; when none is flagged the first entry is.
      - When empty, only the registered nodes and the probes are checked.
    type: list
    elements: dict
    default: []
    suboptions:
      host:
        description: Inventory name of the node, used in every message.
        type: str
        required: true
      ip:
        description: The fabric IP the node must register with Ray (its C(--node-ip-address)).
        type: str
        required: true
      head:
        description: Whether this node is the Ray head.
        type: bool
        default: false
  python:
    description:
      - Python interpreter that can C(import ray).
      - Without O(container), a path or a name looked up on E(PATH) on the head, for example a venv's
        C(bin/python).
      - With O(container), the interpreter inside the container.
    type: str
    default: python3
  container:
    description:
      - Name of the running container that holds Ray (on DGX Spark the vLLM container). The probe runs
        as C(docker exec -i <container> <python> -).
      - When not set, O(python) runs directly on the host.
    type: str
  probe:
    description:
      - Whether to move objects between the head and every worker. When false, only the registration
        of nodes is compared.
    type: bool
    default: true
  probe_if_complete:
    description:
      - With O(probe=false), move the objects anyway when the cluster is whole (exactly the O(expected) nodes alive),
        in the same run. A wait that polls without probing (a cluster still forming can hang a probe) so ends with the
        proof when the cluster is complete at once, as on a re-run. RV(probed) says whether it did.
    type: bool
    default: false
  object_size_mb:
    description:
      - Size in MiB of the object moved in each direction. Objects above 100 KiB go through Ray's
        object stores and their raylets, the path vLLM depends on.
    type: float
    default: 16
  timeout:
    description:
      - Seconds each wait may take, connecting to Ray included (with or without O(address)), then each wait of a probe
        (task start, object fetch in each direction). Must be positive.
      - The whole run is bounded by C(timeout + workers * (4 * timeout + 10) + 15) seconds.
    type: float
    default: 20
  reverse_from:
    description:
      - How the reverse direction (a worker fetching an object that lives on the head) is proven.
      - C(task) runs a task pinned to the worker (node affinity, not soft) that itself C(ray.get)s an
        object the head's driver put into the head's object store. It is the same fetch a driver or a
        vLLM rank on the worker makes, so one driver on the head proves both directions.
      - C(none) skips the reverse direction.
    type: str
    choices: [task, none]
    default: task
  fail_on_mismatch:
    description:
      - Whether any problem (mismatched, missing or extra node, a failed probe, no cluster reachable)
        fails the task.
      - When false the module returns C(ok=false) with the same details, for a role that repairs the
        cluster from them.
    type: bool
    default: true
notes:
  - Needs Ray's Python on the head (Ray 2.x); the probe uses only Ray and the standard library.
  - A probe schedules tasks with C(num_cpus=0), so it also runs while vLLM holds every CPU slot.
seealso:
  - name: Ray start options
    description: C(ray start --node-ip-address) pins the address each node registers.
    link: https://docs.ray.io/en/latest/cluster/cli.html#ray-start
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.setting_names
  - sparkfleet.vllm.wait_polls
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Prove the Ray cluster inside the vLLM container (head first)
  sparkfleet.vllm.ray_cluster_check:
    container: vllm
    expected:
      - host: spark-1
        ip: 192.168.200.12
      - host: spark-2
        ip: 192.168.200.13

- name: Check registration only, from a venv, and let the role decide
  sparkfleet.vllm.ray_cluster_check:
    python: /opt/ray/bin/python
    address: auto
    probe: false
    fail_on_mismatch: false
    expected:
      - host: spark-1
        ip: "{{ hostvars['spark-1'].sparkfleet_fabric_ip }}"
        head: true
      - host: spark-2
        ip: "{{ hostvars['spark-2'].sparkfleet_fabric_ip }}"
  register: ray_check
"""

RETURN = r"""
ok:
  description: Whether every expected node is registered on its fabric IP, nothing else is, and every probe passed.
  returned: always
  type: bool
  sample: false
probed:
  description: Whether objects were moved in this run (O(probe), or O(probe_if_complete) with the cluster whole).
  returned: always
  type: bool
  sample: true
summary:
  description: One line for a person.
  returned: always
  type: str
  sample: "2 alive Ray node(s) with 2 GPU(s), 2/2 expected on their fabric IP; 16 MiB object round trips ok for 1/1 worker(s) (spark-2: to 0.21 s, from 0.18 s)"
address:
  description: The GCS address the driver connected to.
  returned: always
  type: str
  sample: 10.99.1.11:6379
ray_version:
  description: Version of Ray the driver ran with.
  returned: when Ray could be imported
  type: str
  sample: 2.53.0
nodes:
  description: Every node Ray has registered, alive or dead.
  returned: always
  type: list
  elements: dict
  contains:
    node_id: {description: Ray node id (hex)., type: str}
    ip: {description: The registered IP (C(NodeManagerAddress))., type: str}
    hostname: {description: Hostname the raylet reported., type: str}
    host: {description: "The inventory host it was matched to, or null.", type: str}
    alive: {description: Whether the node is alive., type: bool}
    head: {description: Whether it is the Ray head., type: bool}
    gpus: {description: GPUs the node offers to Ray., type: float}
    cpus: {description: CPUs the node offers to Ray., type: float}
    resources: {description: "All resources of the node, as Ray reports them.", type: dict}
  sample:
    - {node_id: bd41e912dd6a..., ip: 10.99.1.11, hostname: spark-1, host: spark-1, alive: true, head: true,
       gpus: 1.0, cpus: 2.0, resources: {CPU: 2.0, GPU: 1.0, "node:10.99.1.11": 1.0}}
expected:
  description: The expected nodes, with the head flag resolved.
  returned: always
  type: list
  elements: dict
  sample: [{host: spark-1, ip: 10.99.1.11, head: true}, {host: spark-2, ip: 10.99.1.12, head: false}]
mismatched:
  description: Expected hosts registered with another IP.
  returned: always
  type: list
  elements: dict
  sample: [{host: spark-1, registered_ip: 10.99.0.11, expected_ip: 10.99.1.11, node_id: bd41e912dd6a...}]
missing:
  description: Expected hosts with no alive node.
  returned: always
  type: list
  elements: dict
  sample: [{host: spark-2, expected_ip: 10.99.1.12, reason: not registered}]
extra:
  description: Alive nodes that match no expected host (always empty when O(expected) is empty).
  returned: always
  type: list
  elements: dict
  sample: [{node_id: bf7951a76acf..., ip: 172.17.0.2, hostname: 3f2c1d0e9a8b}]
dead:
  description: Nodes Ray still lists as dead (informational; a dead entry next to a live one is history).
  returned: always
  type: list
  elements: dict
  sample: []
probes:
  description: One entry per alive worker (every node but the driver's); times in seconds.
  returned: always
  type: list
  elements: dict
  contains:
    host: {description: Inventory host (or the hostname when unmatched)., type: str}
    ip: {description: The worker's registered IP., type: str}
    schedule_s: {description: Time for a pinned task to run and answer., type: float}
    to_worker_s: {description: Time the worker took to fetch the head's object., type: float}
    from_worker_s: {description: Time the head took to fetch the worker's object., type: float}
    ok: {description: Whether both directions worked., type: bool}
    error: {description: "What failed, naming the host and its registered IP.", type: str}
  sample:
    - {host: spark-2, ip: 10.99.1.12, schedule_s: 1.9, to_worker_s: 0.21, from_worker_s: 0.18, ok: true, error: null}
problems:
  description: Every problem found, one sentence each.
  returned: always
  type: list
  elements: str
  sample: ["spark-1 registered with Ray as 10.99.0.11, expected its fabric IP 10.99.1.11"]
hint:
  description: The fix for the first kind of problem found, naming the settings to change as I(setting_names) says.
  returned: when a problem was found
  type: str
  sample: "start Ray on spark-1 with --node-ip-address 10.99.1.11 (sparkfleet_fabric_ip), then restart ..."
error:
  description: Why the driver could not finish (no Ray, no cluster, deadline), or null.
  returned: always
  type: str
  sample: null
"""

import math

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils.ray._ray import (
    FIX_PIN,
    PROBE_PROGRAM,
    compare,
    hint_for,
    normalize_expected,
    normalize_nodes,
    parse_probe_output,
    probe_config,
    probe_reports,
    problems_of,
    summary_of,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import check_setting_names, render_text, setting_names_option

# Grace for `timeout` after the program's own watchdog, then SIGKILL after KILL_AFTER.
GRACE = 15
KILL_AFTER = 10


def _advice_once(text):
    """Keep the generic pinning advice only at its last occurrence in a joined message."""
    parts = text.split("; " + FIX_PIN)
    if len(parts) <= 2:
        return text
    return "".join(parts[:-1]) + "; " + FIX_PIN + parts[-1]


def build_command(runner, params, cfg_json):
    if params["container"]:
        return [runner.bin("docker"), "exec", "-i", params["container"], params["python"], "-", cfg_json]
    python = params["python"]
    if "/" not in python:
        python = runner.bin(python)
    return [python, "-", cfg_json]


def connect_error_text(err, address):
    phase, detail = err.get("phase"), err.get("detail")
    if err.get("kind") == "import":
        return "Ray cannot be imported by the probe's Python: %s" % detail
    if phase == "connect":
        return "could not connect a Ray driver to %s: %s" % (address, detail)
    if err.get("kind") == "deadline":
        return "the probe hit its hard deadline while in phase '%s': %s" % (phase, detail)
    return "the probe failed in phase '%s': %s" % (phase, detail)


def connect_hint(err, params, address):
    if err.get("kind") == "import":
        where = "container %s" % params["container"] if params["container"] else "this host"
        return "set python (or container) to an interpreter with Ray installed on %s" % where
    if err.get("phase") == "connect":
        port = address.rsplit(":", 1)[1] if ":" in address else "6379"
        return ("start the Ray head with ray start --head --node-ip-address <fabric ip> --port %s" % port
                + render_text(" ({ray_cluster})", params["setting_names"])
                + ", or set address to the head's GCS (%s was tried)" % address)
    return "raise timeout, or look for the node named in the last probe"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            address=dict(type="str"),
            expected=dict(type="list", elements="dict", default=[], options=dict(
                host=dict(type="str", required=True),
                ip=dict(type="str", required=True),
                head=dict(type="bool", default=False),
            )),
            python=dict(type="str", default="python3"),
            container=dict(type="str"),
            probe=dict(type="bool", default=True),
            probe_if_complete=dict(type="bool", default=False),
            object_size_mb=dict(type="float", default=16),
            timeout=dict(type="float", default=20),
            reverse_from=dict(type="str", choices=["task", "none"], default="task"),
            fail_on_mismatch=dict(type="bool", default=True),
            wait_polls=dict(type="int"),  # read by the action plugin (plugins/action/ray_cluster_check.py)
            wait_delay=dict(type="float", default=0),
            **setting_names_option()
        ),
        supports_check_mode=True,
    )
    p = module.params
    check_setting_names(module)
    if not (math.isfinite(p["timeout"]) and math.isfinite(p["object_size_mb"])) \
            or p["timeout"] <= 0 or p["object_size_mb"] <= 0:
        module.fail_json(msg="timeout and object_size_mb must be positive",
                         hint="timeout is seconds per probe wait, object_size_mb the object size in MiB")

    expected = normalize_expected(p["expected"])
    address = p["address"]
    if not address:
        heads = [e for e in expected if e["head"]]
        address = "%s:6379" % heads[0]["ip"] if heads else "auto"
    workers = max(len(expected) - 1, 1)
    cfg_json, deadline = probe_config(address, probe=p["probe"], object_size_mb=p["object_size_mb"],
                                      timeout=p["timeout"], reverse_from=p["reverse_from"],
                                      workers=workers, probe_if_ips=[e["ip"] for e in expected]
                                      if p["probe_if_complete"] else None)
    runner = Runner(module, env=dict(RAY_USAGE_STATS_ENABLED="0"))
    res = runner.run(build_command(runner, p, cfg_json), data=PROBE_PROGRAM, timeout=int(deadline + GRACE),
                     kill_after=KILL_AFTER)
    doc = parse_probe_output(res.stdout)
    if doc is None:
        if res.timed_out:
            what = ("the Ray probe did not finish within %d s and was killed; its watchdog did not fire either "
                    "(a hung docker exec or interpreter)" % (deadline + GRACE))
        else:
            what = "the Ray probe printed no result"
        runner.fail(res, what, cmd=res.argv[:-1] + ["<config>"],
                    hint="run the same command by hand on the head; check python/container")

    nodes = normalize_nodes(doc.get("nodes"))
    comparison = compare(nodes, expected)
    for n in nodes:
        n["host"] = comparison["host_of"].get(n["node_id"])
    driver = [n for n in nodes if n["node_id"] == doc.get("driver_node_id")]
    head_name = (driver[0]["host"] or driver[0]["hostname"]) if driver else "head"
    head_ip = driver[0]["ip"] if driver else None
    probes = probe_reports(doc.get("probes"), comparison["host_of"], head_name, head_ip,
                           p["timeout"], p["reverse_from"] == "task")

    # a probe program from before "probed" existed probed whenever it was asked to and connected
    probed = bool(doc.get("probed", p["probe"] and doc.get("connected")))
    error = None
    problems = []
    hint = None
    if doc.get("error"):
        error = connect_error_text(doc["error"], address)
        hint = connect_hint(doc["error"], p, address)
        problems.append(error)
    if doc.get("connected"):
        problems.extend(problems_of(comparison, nodes, expected, probes))
        hint = hint or hint_for(comparison, probes, names=p["setting_names"], address=address)
    ok = not problems
    if ok:
        summary = summary_of(nodes, expected, comparison, probes, p["object_size_mb"], probed)
    else:
        summary = "Ray cluster check failed: " + _advice_once("; ".join(problems))

    result = dict(
        changed=False, ok=ok, summary=summary, address=address, ray_version=doc.get("ray_version"),
        nodes=nodes, expected=expected, probed=probed,
        mismatched=comparison["mismatched"], missing=comparison["missing"], extra=comparison["extra"],
        dead=comparison["dead"], probes=probes, problems=problems, error=error,
    )
    if not ok and p["fail_on_mismatch"]:
        module.fail_json(msg=summary, hint=hint, **result)
    if hint:
        result["hint"] = hint
    module.exit_json(**result)


if __name__ == "__main__":
    main()
