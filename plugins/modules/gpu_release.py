#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: gpu_release
short_description: Stop whatever holds the NVIDIA GPU of a node, except ours, and verify it is free
version_added: 0.1.0
description:
  - Finds holders exactly as M(sparkfleet.vllm.gpu_holders) does and stops every stale holder. A holder is stale
    when it runs in a stale unit or container (O(stale_units), O(stale_containers)) or its process name or command
    line matches O(stale_commands) (vLLM, Ray, SGLang, whatever started them).
  - Any other holder that is neither ours (O(ours)) nor protected (O(protect)), for example a colleague's job, is
    left running and the module fails before it changes anything, naming each (pid, command, user, unit or
    container, memory). O(stop_foreign=true) stops those too.
  - A holder owned by a system unit is stopped with C(systemctl stop) and disabled with
    C(systemctl disable) (masked too with O(mask)) so that it does not come back after reboot.
  - A holder in a docker container gets C(docker update --restart=no), then
    C(docker stop -t <grace>) (and C(docker rm) with O(remove_containers)).
  - A holder outside any unit or container gets SIGTERM, together with its descendants, then SIGKILL for whatever still
    runs after O(grace) seconds. A holder that is a child of another holder is stopped with its
    parent. Processes are identified by PID and start time, so a reused PID is never signalled.
  - Stale units (named like O(stale_units)) are stopped and disabled even when they do not hold the GPU now.
    Stale containers are stopped and lose their restart policy (C(always) and C(unless-stopped) alike) whether
    or not they hold the GPU now. Those are the containers a stale unit starts, whatever their names (read from the
    unit's C(ExecStart*) commands, from a shell script those run, and from a C(docker run) running in the unit now),
    and the containers named like O(stale_containers) or O(stale_units).
  - A unit that starts a container being stopped is stopped and disabled too, or it would start the container
    again (C(Restart=always) on a foreground C(docker run), or a oneshot C(docker run -d) at the next boot).
  - Restart policies are removed first, then the units' stops are queued (all in one C(systemctl stop --no-block)),
    then containers are stopped (all in one C(docker stop), which stops them in parallel, so n containers whose main
    process ignores SIGTERM cost one O(grace), not n) while the units stop, then the units' stops are waited for,
    then processes signalled. A container whose foreground C(docker run) passes the unit's SIGTERM on would otherwise
    be restarted by docker; systemd does not restart a unit whose stop is queued.
  - When a combined stop fails, each unit or container is stopped again alone, so the result names the one that
    failed.
  - Nothing is deleted. Unit files, images and stopped containers stay (unless O(remove_containers)).
  - Then it polls, up to O(timeout) seconds, until no foreign holder is left and, on GPUs that
    report memory, the memory not held by ours or protected processes is at most O(max_used_mib).
    It fails naming every remaining holder otherwise.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  grace:
    description:
      - Seconds a process gets between SIGTERM and SIGKILL; also the C(docker stop) timeout.
    type: int
    default: 10
  timeout:
    description:
      - Seconds to wait, after stopping, for the GPU to be free before failing.
    type: int
    default: 60
  settle:
    description:
      - Seconds the GPU must stay free, scanned again and again, before it counts as free. A
        holder restarted by a supervisor (a unit with C(Restart=always), a shell loop) shows up
        again within this time and makes the module fail naming it, instead of passing on one
        lucky scan. Set it above the restart latency of what you stop (a CUDA process needs
        seconds to start). Not waited when nothing had to be stopped.
    type: int
    default: 5
  max_used_mib:
    description:
      - On GPUs that report memory, the most memory (MiB) that may stay in use, not counting
        ours and protected processes, for the GPU to count as free. Ignored on GB10, which
        reports none.
    type: int
    default: 1024
  mask:
    description:
      - Also C(systemctl mask) stopped units, so nothing can start them again.
    type: bool
    default: false
  remove_containers:
    description:
      - Also C(docker rm) stopped containers.
    type: bool
    default: false
  record:
    description:
      - A file in which to keep the stale units and containers the plan knows (JSON, keys C(units) and C(containers),
        each a sorted list), whether stopped now or by an earlier run, so that what starts our units can stop them first when
        they come back at boot. Written atomically, and only when its content changes (that counts as a change).
      - Not written in check mode.
    type: path
notes:
  - Supports check mode (reports exactly what would be stopped, disabled or signalled) and diff
    mode (holders before and after).
  - Needs root (C(become)) to signal other users' processes and to see their open files.
  - M(sparkfleet.vllm.gpu_holders) with O(sparkfleet.vllm.gpu_holders#module:ports) shows the same plan beforehand
    and names what this module would leave running on those ports.
seealso:
  - module: sparkfleet.vllm.gpu_holders
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.gpu_holders
  - sparkfleet.vllm.setting_names
attributes:
  check_mode:
    support: full
  diff_mode:
    support: partial
    details:
      - The diff lists the GPU holders before and after. Stale units and containers that are disabled
        or stopped without holding the GPU show in RV(actions) only.
  platform:
    platforms: posix
'''

EXAMPLES = r'''
- name: Free the GPU for our vLLM units
  sparkfleet.vllm.gpu_release:
    ours: [vllm-head, vllm-worker]
    grace: 15
    timeout: 120
  become: true
  register: _released

- name: Only show what would be stopped
  sparkfleet.vllm.gpu_release:
    ours: [vllm-head, vllm-worker]
  check_mode: true
  diff: true
'''

RETURN = r'''
actions:
  description: What was done (or, in check mode, would be done), in order.
  returned: always
  type: list
  elements: dict
  contains:
    action:
      description: C(stop_unit), C(stop_container) or C(signal).
      type: str
    target:
      description: Unit name, container name or id, or C(pid N name).
      type: str
    pids:
      description: GPU-holding PIDs this action covers (a signal action also signals descendants).
      type: list
      elements: int
    reason:
      description: C(holder) (it holds the GPU) or C(stale) (it would bring a holder back).
      type: str
    why:
      description: Why it is stopped, for example C(started by vllm-cluster.service) or C(named in stale_units).
      type: str
    text:
      description: The action in one line, as a person reads it.
      type: str
    result:
      description: C(planned) in check mode; C(stopped), C(terminated) (exited after SIGTERM),
        C(killed) (needed SIGKILL), or C(failed).
      type: str
    elapsed_s:
      description: Seconds the action took (for signals, the one shared SIGTERM/SIGKILL round).
      type: float
    signalled:
      description: For C(signal), every PID signalled (holders and their descendants).
      type: list
      elements: int
    killed:
      description: For C(signal), PIDs that ignored SIGTERM for O(grace) seconds and got SIGKILL.
      type: list
      elements: int
    exit_s:
      description: For C(signal), seconds from SIGTERM until each PID (as a string key) was gone.
      type: dict
  sample:
    - action: signal
      target: pid 4242 python3
      pids: [4242, 4250]
      reason: holder
      result: killed
      elapsed_s: 10.21
holders_before:
  description: Holders found first, as M(sparkfleet.vllm.gpu_holders) returns them.
  returned: always
  type: list
  elements: dict
holders_after:
  description: Holders found once the GPU was free (ours and protected only); equal to
    RV(holders_before) in check mode.
  returned: always
  type: list
  elements: dict
gpu:
  description: GPU summary after release (see M(sparkfleet.vllm.gpu_holders)).
  returned: always
  type: dict
stale_record:
  description: What O(record) holds (C(units), C(containers), each sorted), or null without O(record).
  returned: always
  type: dict
  sample: {units: [vllm-cluster.service, vllm-proxy.service], containers: [vllm_node]}
elapsed_s:
  description: Seconds from the first stop until the GPU was seen free (the O(settle) time
    spent confirming it is not counted).
  returned: always
  type: float
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu._gpu import COMMON_ARGSPEC, GpuScanner
from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu._gpu_release import release
from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import check_setting_names, setting_names_option


def main():
    argument_spec = dict(COMMON_ARGSPEC)
    argument_spec.update(
        grace=dict(type='int', default=10),
        timeout=dict(type='int', default=60),
        settle=dict(type='int', default=5),
        max_used_mib=dict(type='int', default=1024),
        mask=dict(type='bool', default=False),
        remove_containers=dict(type='bool', default=False),
        record=dict(type='path'),
        **setting_names_option()
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    check_setting_names(module)
    result, failure = release(module, GpuScanner(module))
    diff = result.pop('diff', None)
    if failure:
        module.fail_json(msg=failure['msg'], hint=failure['hint'], **dict(result, **({'diff': diff} if diff else {})))
    module.exit_json(diff=diff, **result)


if __name__ == '__main__':
    main()
