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
    ours (left alone, O(ours)), protected (never touched, O(protect)) or foreign.
  - Also lists units and containers named like O(stale_units) even when they do not hold the GPU
    now, because an enabled unit or a container with a restart policy comes back after reboot.
  - Reads only; never changes anything. Run as root to see other users' processes.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
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
  sample:
    - pid: 4242
      name: python3
      user: root
      used_memory_mib: 19135
      unit: vllm-cluster.service
      container: null
      status: foreign
stale:
  description: Units and containers named like O(stale_units), holding the GPU or not.
  returned: always
  type: list
  elements: dict
  sample:
    - kind: unit
      name: vllm-proxy.service
      enabled: enabled
      active: inactive
    - kind: container
      name: sglang-head
      id: 3f2c...
      state: exited
      restart_policy: unless-stopped
foreign:
  description: PIDs of holders that are neither ours nor protected.
  returned: always
  type: list
  elements: int
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils._gpu import (
    COMMON_ARGSPEC,
    GpuScanner,
)


def main():
    module = AnsibleModule(argument_spec=dict(COMMON_ARGSPEC), supports_check_mode=True)
    scanner = GpuScanner(module)
    gpu = scanner.gpu_summary()
    holders = scanner.holders()
    stale = scanner.stale()
    for holder in holders:
        holder.pop('starttime', None)
    for warning in scanner.warnings:
        module.warn(warning)
    module.exit_json(
        changed=False,
        gpu=gpu,
        holders=holders,
        stale=stale,
        foreign=[h['pid'] for h in holders if h['status'] == 'foreign'],
    )


if __name__ == '__main__':
    main()
