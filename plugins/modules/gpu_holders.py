#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: gpu_holders
short_description: List every process that holds the NVIDIA GPU of a node
version_added: 0.1.0
description:
  - Finds every holder of the GPU, merging by PID two sources, because neither is complete
    alone. C(nvidia-smi --query-compute-apps) lists CUDA processes with their memory (GB10
    lists per-process usage although it reports no GPU memory totals). Open file descriptors on
    per-GPU device files (O(device_glob)) also catch processes that nvidia-smi does not list,
    such as processes in another PID namespace or graphics clients.
  - C(/dev/nvidiactl) and C(/dev/nvidia-uvm) are not scanned by default. Every NVML client
    (nvidia-smi, DCGM, monitoring agents) opens them without holding GPU memory, so they would
    only add false holders; a CUDA process always holds a per-GPU device file as well.
  - For each holder it reports the process, its user and parent, its memory, the systemd unit
    or docker container that owns it (from C(/proc/PID/cgroup), v1 and v2) and whether it is
    ours (left alone, O(ours)), protected (never touched; O(protect), or a DGX OS system service of O(system) that
    O(stale_units) and O(stale_containers) do not name) or foreign. RV(left) names each protected GPU holder with why it
    is left running.
  - Also lists the stale units and containers (see O(stale_units), O(stale_containers)) even when they do not
    hold the GPU now, because an enabled unit or a container with a restart policy comes back after reboot.
  - Returns the plan M(sparkfleet.vllm.gpu_release) would carry out with the same options in RV(plan), one line per
    action in RV(will_stop), that is every unit, container and process it would stop, with the GPU holders and the
    listeners of O(ports) each one covers.
  - With O(ports), classifies every process listening on those TCP ports as ours, stale (the plan stops it) or
    foreign (nothing stops it). A foreign listener, and a GPU holder gpu_release could not stop (another PID
    namespace, the process chain running the task), is named in RV(blocking) with what would make it stale;
    O(fail_on_foreign) fails the task on them, before anything is changed.
  - Reads only; never changes anything. Run as root to see other users' processes.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  ports:
    description:
      - TCP ports a deployment needs on this node, each with the setting that chose it (named in messages, so
        a refusal can say which variable moves ours).
    type: list
    elements: dict
    default: []
    suboptions:
      port:
        description: The TCP port.
        type: int
        required: true
      setting:
        description: The name of the setting that chose this port, for example C(sparkfleet_ray_port).
        type: str
  fail_on_foreign:
    description:
      - Fail when M(sparkfleet.vllm.gpu_release) would leave a listener of O(ports) or a GPU holder running. The
        message names each (port, pid, process, container, unit) and the setting that would make it stale.
    type: bool
    default: false
notes:
  - Supports check mode; the module never changes anything.
  - On GB10 (DGX Spark) RV(gpu.memory_used_mib) and RV(gpu.memory_total_mib) are null and
    RV(gpu.unified_memory) is true; RV(gpu.mem_total_mib) and RV(gpu.mem_available_mib) from
    C(/proc/meminfo) describe the shared pool instead.
seealso:
  - module: sparkfleet.vllm.gpu_release
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.gpu_holders
  - sparkfleet.vllm.setting_names
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
'''

EXAMPLES = r'''
- name: Find what holds the GPU
  sparkfleet.vllm.gpu_holders:
    ours: [vllm-head, vllm-worker]
  register: _gpu

- name: Show foreign holders
  ansible.builtin.debug:
    msg: "{{ _gpu.holders | selectattr('status', 'equalto', 'foreign') | map(attribute='pid') | list }}"

- name: Plan the cleanup; refuse what it would leave on the API and Ray ports, before anything changes
  sparkfleet.vllm.gpu_holders:
    ours: [sparkfleet-ray, sparkfleet-vllm]
    stale_containers: [vllm_node, old_api]
    ports:
      - {port: 6379, setting: sparkfleet_ray_port}
      - {port: 30000, setting: sparkfleet_api_port}
    fail_on_foreign: true
  register: _plan
'''

RETURN = r'''
gpu:
  description: The GPU and the memory picture of the node.
  returned: always
  type: dict
  contains:
    nvidia_smi:
      description: Path of nvidia-smi, or null when it was not used.
      type: str
    name:
      description: Name of the first GPU, for example C(NVIDIA GB10).
      type: str
    uuid:
      description: UUID of the first GPU.
      type: str
    driver_version:
      description: Driver version.
      type: str
    memory_used_mib:
      description: GPU memory in use (first GPU), null where the GPU reports none (GB10).
      type: int
    memory_total_mib:
      description: GPU memory size (first GPU), null where the GPU reports none (GB10).
      type: int
    unified_memory:
      description: True when no GPU reports its own memory (GB10 unified memory).
      type: bool
    mem_total_mib:
      description: MemTotal from /proc/meminfo in MiB.
      type: int
    mem_available_mib:
      description: MemAvailable from /proc/meminfo in MiB.
      type: int
    gpus:
      description: Every GPU with index, name, uuid, driver_version, memory_used_mib, memory_total_mib.
      type: list
      elements: dict
  sample:
    name: NVIDIA GB10
    driver_version: "580.126.09"
    memory_used_mib: null
    memory_total_mib: null
    unified_memory: true
    mem_total_mib: 124610
    mem_available_mib: 98211
holders:
  description: Every process holding the GPU, sorted by PID.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Process id.
      type: int
    ppid:
      description: Parent process id.
      type: int
    parent_holder:
      description: PID of the nearest ancestor that is a holder too, else null.
      type: int
    name:
      description: Process name (comm).
      type: str
    cmdline:
      description: Command line joined by spaces.
      type: str
    exe:
      description: Path of the executable, when readable.
      type: str
    uid:
      description: Real user id of the process.
      type: int
    cgroup:
      description: The cgroup path the unit and container were read from.
      type: str
    visible:
      description: False when nvidia-smi lists the PID but /proc does not show it (another PID
        namespace); such a holder can be reported but not signalled.
      type: bool
    user:
      description: Owner of the process.
      type: str
    used_memory_mib:
      description: GPU memory of the process from nvidia-smi, null when not listed or not reported.
      type: int
    compute_app:
      description: Whether nvidia-smi lists it as a compute app.
      type: bool
    devices:
      description: Device files it holds open.
      type: list
      elements: str
    unit:
      description: The system unit that owns it, for example C(vllm-cluster.service).
      type: str
    user_unit:
      description: The user-manager unit or session scope that owns it.
      type: str
    container:
      description: The docker container (id, name, image, restart_policy) that owns it, else null.
      type: dict
    status:
      description: One of C(ours), C(protected), C(foreign).
      type: str
    protected_by:
      description: Why a protected holder is left, C(protect) (O(protect)) or C(system) (a DGX OS system service of
        O(system)); null when not protected.
      type: str
  sample:
    - pid: 4242
      name: python3
      user: root
      used_memory_mib: 19135
      unit: vllm-cluster.service
      container: null
      status: foreign
stale:
  description: The stale units and containers (O(stale_units), the containers they start, O(stale_containers),
    and the units that start a container the plan stops), holding the GPU or not, each with C(why).
  returned: always
  type: list
  elements: dict
  sample:
    - kind: unit
      name: vllm-cluster.service
      enabled: enabled
      active: active
      starts: [vllm_node]
      why: named in stale_units
    - kind: container
      name: vllm_node
      id: 3f2c...
      state: running
      restart_policy: unless-stopped
      why: started by vllm-cluster.service
plan:
  description: What M(sparkfleet.vllm.gpu_release) would do with the same options, in order (as its RV(sparkfleet.vllm.gpu_release#module:actions)).
  returned: always
  type: list
  elements: dict
will_stop:
  description: RV(plan), one line per action, with the GPU holders and listeners of O(ports) it covers.
  returned: always
  type: list
  elements: str
  sample:
    - "container vllm_node (started by vllm-cluster.service; stopped, restart policy unless-stopped removed):
      pid 546 holds the GPU; port 6379 (sparkfleet_ray_port): pid 575 gcs_server in container vllm_node"
left:
  description: Each protected GPU holder, one line with why the cleanup leaves it running (a DGX OS system service of
    O(system) and how to have it stopped, or O(protect)).
  returned: always
  type: list
  elements: str
  sample:
    - "pid 2210 dgx-dashboard (unit dgx-dashboard.service) holds the GPU and is left running: a DGX OS system service
      (system): never stopped unless the inventory names it (add dgx-dashboard to stale_units to stop it)"
port_holders:
  description: Every listener of O(ports), with C(status) (C(ours), C(stale) or C(foreign)) and, when stale, the
    C(action) of RV(plan) that stops it.
  returned: always
  type: list
  elements: dict
blocking:
  description: What the plan would leave holding the GPU or a port of O(ports), each with what would make it stale.
  returned: always
  type: list
  elements: str
  sample:
    - "port 6379 (sparkfleet_ray_port): pid 812 gcs_server in container legacy_ray, which the GPU cleanup will
      not stop: add legacy_ray to stale_containers, or move ours (sparkfleet_ray_port)"
foreign:
  description: PIDs of holders that are neither ours nor protected.
  returned: always
  type: list
  elements: int
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu._gpu import COMMON_ARGSPEC, GpuScanner
from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu._gpu_plan import left_text
from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu._gpu_release import (
    PORTS_SPEC,
    make_plan,
    plan_lines,
    ports_problem,
    stale_report,
    strip,
    survey,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import check_setting_names, render_text, setting_names_option


def main():
    argument_spec = dict(COMMON_ARGSPEC, ports=PORTS_SPEC, fail_on_foreign=dict(type='bool', default=False),
                         **setting_names_option())
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    problem = ports_problem(module.params['ports'])
    if problem:
        module.fail_json(msg=problem)
    check_setting_names(module)
    scanner = GpuScanner(module)
    gpu = scanner.gpu_summary()
    data = survey(scanner, module.params['ports'])
    plan = make_plan(scanner, data)
    will_stop, blocking = plan_lines(plan, module.params['setting_names'])
    for act in plan.actions:
        act.pop('tree', None)
        act['why'] = render_text(act['why'], module.params['setting_names'])
    for warning in scanner.warnings:
        module.warn(warning)
    holders = strip(data['holders'])
    left = [left_text(h, module.params['setting_names']) for h in holders if h['status'] == 'protected']
    result = dict(changed=False, gpu=gpu, holders=holders, stale=stale_report(data, plan, module.params['setting_names']), plan=plan.actions,
                  will_stop=will_stop, left=left, port_holders=plan.ports, blocking=blocking,
                  foreign=[h['pid'] for h in holders if h['status'] == 'foreign'])
    if blocking and module.params['fail_on_foreign']:
        module.fail_json(msg='%s: %s' % (
            'the GPU cleanup would leave these running' if len(blocking) > 1 else 'the GPU cleanup would leave this '
            'running', '; '.join(blocking)), hint='Nothing was changed.', **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
