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
  - Finds holders exactly as M(sparkfleet.vllm.gpu_holders) does and stops every holder that is
    neither ours (O(ours)) nor protected (O(protect)).
  - A holder owned by a system unit is stopped with C(systemctl stop) and disabled with
    C(systemctl disable) (masked too with O(mask)) so that it does not come back after reboot.
  - A holder in a docker container gets C(docker update --restart=no), then
    C(docker stop -t <grace>) (and C(docker rm) with O(remove_containers)).
  - Any other holder gets SIGTERM, together with its descendants, then SIGKILL for whatever still
    runs after O(grace) seconds. A holder that is a child of another holder is stopped with its
    parent. Processes are identified by PID and start time, so a reused PID is never signalled.
  - Units and containers named like O(stale_units) are disabled (units) or lose their restart
    policy and are stopped (containers) even when they do not hold the GPU now.
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
notes:
  - Supports check mode (reports exactly what would be stopped, disabled or signalled) and diff
    mode (holders before and after).
  - Needs root (C(become)) to signal other users' processes and to see their open files.
seealso:
  - module: sparkfleet.vllm.gpu_holders
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.gpu_holders
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
      description: C(holder) or C(stale).
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
elapsed_s:
  description: Seconds from the first stop until the GPU was seen free (the O(settle) time
    spent confirming it is not counted).
  returned: always
  type: float
'''

import os
import signal
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils._gpu import (
    COMMON_ARGSPEC,
    GpuScanner,
    children_map,
    describe,
    descendants,
    parse_stat,
)

_POLL_S = 0.25


def _starttime(pid):
    try:
        with open('/proc/%d/stat' % pid) as handle:
            stat = parse_stat(handle.read())
    except (IOError, OSError):
        return None
    if stat is None or stat['state'] in ('Z', 'X'):
        return None
    return stat['starttime']


class Releaser(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.scanner = GpuScanner(module)
        self.children = None

    # ---- planning ----

    def plan(self, holders, stale):
        """Turn holders and stale entries into an ordered list of actions."""
        targets = [h for h in holders if h['status'] == 'foreign']
        keep_pids = set(h['pid'] for h in holders if h['status'] != 'foreign')
        by_pid = dict((h['pid'], h) for h in targets)
        refused = [h for h in targets if h['pid'] in self.scanner.self_pids or h['pid'] == 1]
        actions = []
        units = {}
        containers = {}
        for holder in targets:
            if holder in refused:
                continue
            if holder['unit']:
                units.setdefault(holder['unit'], []).append(holder['pid'])
            elif holder['container']:
                cont = holder['container']
                key = cont['name'] or cont['id']
                containers.setdefault(key, []).append(holder['pid'])
        for name in sorted(units):
            actions.append({'action': 'stop_unit', 'target': name, 'pids': sorted(units[name]),
                            'reason': 'holder'})
        for name in sorted(containers):
            actions.append({'action': 'stop_container', 'target': name,
                            'pids': sorted(containers[name]), 'reason': 'holder'})
        covered = set(pid for act in actions for pid in act['pids'])
        self.children = children_map()
        for holder in targets:
            pid = holder['pid']
            if holder in refused or pid in covered:
                continue
            parent = holder.get('parent_holder')
            if parent in by_pid and parent not in covered and by_pid[parent] not in refused \
                    and not by_pid[parent]['unit'] and not by_pid[parent]['container']:
                continue  # stopped with its parent's tree
            if not holder['visible']:
                continue  # in another PID namespace: nothing we can signal; verify names it
            tree = [pid] + [d for d in descendants(pid, self.children)
                            if d not in self.scanner.self_pids and d not in keep_pids]
            held = sorted(p for p in tree if p in by_pid)
            actions.append({'action': 'signal', 'target': 'pid %d %s' % (pid, holder['name']),
                            'pids': held, 'tree': tree, 'reason': 'holder'})
        done_units = set(units)
        done_containers = set(containers)
        for entry in stale:
            if entry['kind'] == 'unit' and entry['name'] not in done_units:
                wanted = entry['active'] in ('active', 'activating', 'reloading') or \
                    entry.get('enabled') in ('enabled', 'enabled-runtime', 'linked',
                                             'linked-runtime') or \
                    (self.params['mask'] and entry.get('enabled') != 'masked')
                if wanted:
                    actions.append({'action': 'stop_unit', 'target': entry['name'], 'pids': [],
                                    'reason': 'stale'})
            elif entry['kind'] == 'container' and entry['name'] not in done_containers \
                    and entry['id'] not in done_containers:
                wanted = entry['state'] in ('running', 'restarting', 'paused') or \
                    (entry.get('restart_policy') or 'no') != 'no' or \
                    self.params['remove_containers']
                if wanted:
                    actions.append({'action': 'stop_container', 'target': entry['name'],
                                    'pids': [], 'reason': 'stale'})
        return actions, refused

    # ---- doing ----

    def _cmd(self, cmd, errors):
        res = self.scanner.runner.run(cmd)
        if not res.ok:
            errors.append({'cmd': res.argv, 'rc': res.rc, 'stderr': (res.stderr or res.stdout).strip()})
        return res.rc

    def stop_unit(self, action, errors):
        systemctl = self.scanner.systemctl
        if not systemctl:
            errors.append({'cmd': ['systemctl'], 'rc': None, 'stderr': 'systemctl not found'})
            return False
        rc = self._cmd([systemctl, 'stop', action['target']], errors)
        self._cmd([systemctl, 'disable', action['target']], errors)
        if self.params['mask']:
            self._cmd([systemctl, 'mask', action['target']], errors)
        return rc == 0

    def stop_container(self, action, errors):
        docker = self.scanner.docker
        if not docker:
            errors.append({'cmd': ['docker'], 'rc': None, 'stderr': 'docker not found'})
            return False
        target = action['target']
        self._cmd([docker, 'update', '--restart=no', target], errors)
        rc = self._cmd([docker, 'stop', '-t', str(self.params['grace']), target], errors)
        if self.params['remove_containers']:
            self._cmd([docker, 'rm', target], errors)
        return rc == 0

    def terminate(self, pids):
        """SIGTERM pids, wait grace, SIGKILL survivors.

        Returns (terminated, killed, failed, exit_s) where exit_s maps pid -> seconds from
        SIGTERM until it was gone.
        """
        identity = dict((pid, _starttime(pid)) for pid in pids)
        identity = dict((pid, st) for pid, st in identity.items() if st is not None)
        exit_s = {}
        start = time.time()

        def alive():
            now = round(time.time() - start, 2)
            living = []
            for pid, st in identity.items():
                if _starttime(pid) == st:
                    living.append(pid)
                else:
                    exit_s.setdefault(pid, now)
            return living

        def send(sig, targets):
            for pid in targets:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
                except PermissionError:
                    self.module.fail_json(
                        msg='Not allowed to signal pid %d (%s)' % (pid, sig),
                        hint='Run gpu_release with become: true; it must signal processes '
                             'of other users.')

        send(signal.SIGTERM, alive())
        deadline = start + self.params['grace']
        while alive() and time.time() < deadline:
            time.sleep(_POLL_S / 5)
        survivors = alive()
        if survivors:
            send(signal.SIGKILL, survivors)
            deadline = time.time() + 10
            while alive() and time.time() < deadline:
                time.sleep(_POLL_S / 5)
        failed = alive()
        killed = [p for p in survivors if p not in failed]
        terminated = [p for p in identity if p not in survivors]
        return terminated, killed, failed, exit_s

    def free_state(self):
        """(foreign holders, gpu summary, memory in use not counting ours/protected or None)."""
        gpu = self.scanner.gpu_summary()
        holders = self.scanner.holders()
        foreign = [h for h in holders if h['status'] == 'foreign']
        spare = sum(h['used_memory_mib'] or 0 for h in holders if h['status'] != 'foreign')
        excess = None
        if gpu['memory_used_mib'] is not None:
            used = sum(g['memory_used_mib'] or 0 for g in gpu['gpus'])
            excess = used - spare
        return foreign, gpu, excess, holders


def _strip(holders):
    for holder in holders:
        holder.pop('starttime', None)
    return holders


def main():
    argument_spec = dict(COMMON_ARGSPEC)
    argument_spec.update(
        grace=dict(type='int', default=10),
        timeout=dict(type='int', default=60),
        settle=dict(type='int', default=5),
        max_used_mib=dict(type='int', default=1024),
        mask=dict(type='bool', default=False),
        remove_containers=dict(type='bool', default=False),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    rel = Releaser(module)
    scanner = rel.scanner
    scanner.gpu_summary()  # fails early when nvidia_smi=required and it is broken
    before = scanner.holders()
    stale = scanner.stale()
    actions, refused = rel.plan(before, stale)
    if refused:
        module.fail_json(
            msg='Refusing to stop GPU holders that run this module or init: %s'
                % ', '.join(describe(h) for h in refused),
            hint='Run the module from a process that does not hold the GPU, or list it in ours.',
            holders_before=_strip(before))

    keep = [h for h in before if h['status'] != 'foreign']
    diff = {'before': '\n'.join(describe(h) for h in before) + '\n',
            'after': '\n'.join(describe(h) for h in keep) + '\n'}
    for warning in scanner.warnings:
        module.warn(warning)

    if module.check_mode:
        for act in actions:
            act['result'] = 'planned'
            act.pop('tree', None)
        module.exit_json(changed=bool(actions), actions=actions, holders_before=_strip(before),
                         holders_after=before, gpu=scanner.gpu_summary(), elapsed_s=0.0,
                         diff=diff)

    started = time.time()
    errors = []
    leftovers = []
    for act in actions:
        if act['action'] == 'signal':
            continue
        t0 = time.time()
        if act['action'] == 'stop_unit':
            act['result'] = 'stopped' if rel.stop_unit(act, errors) else 'failed'
        else:
            act['result'] = 'stopped' if rel.stop_container(act, errors) else 'failed'
        leftovers.extend(act['pids'])
        act['elapsed_s'] = round(time.time() - t0, 2)

    # One SIGTERM round for every bare process, so n holders cost one grace, not n.
    # A unit with KillMode=none or a container docker could not stop leaves processes behind.
    still = [pid for pid in leftovers if _starttime(pid) is not None]
    if still:
        actions.append({'action': 'signal', 'target': 'left behind by units/containers',
                        'pids': sorted(still), 'tree': sorted(still), 'reason': 'holder'})
    signal_acts = [act for act in actions if act['action'] == 'signal']
    if signal_acts:
        t0 = time.time()
        everything = sorted(set(pid for act in signal_acts for pid in act['tree']))
        terminated, killed, failed, exit_s = rel.terminate(everything)
        elapsed_sig = round(time.time() - t0, 2)
        for act in signal_acts:
            tree = set(act.pop('tree'))
            act['signalled'] = sorted(tree & set(terminated + killed + failed))
            act['killed'] = sorted(tree & set(killed))
            act['exit_s'] = dict((str(pid), exit_s[pid]) for pid in sorted(tree) if pid in exit_s)
            act['result'] = 'failed' if tree & set(failed) else (
                'killed' if act['killed'] else 'terminated')
            act['elapsed_s'] = elapsed_sig

    deadline = time.time() + module.params['timeout']
    settle = module.params['settle'] if actions else 0
    free_since = None
    while True:
        foreign, gpu, excess, after = rel.free_state()
        mem_ok = excess is None or excess <= module.params['max_used_mib']
        now = time.time()
        if foreign or not mem_ok:
            free_since = None
        elif free_since is None:
            free_since = now
        if free_since is not None and now - free_since >= settle:
            break
        if now >= deadline:
            # Free only for part of the settle time counts as free if nothing came back.
            break
        time.sleep(_POLL_S * 2)
    elapsed = round((free_since or time.time()) - started, 2)
    diff['after'] = '\n'.join(describe(h) for h in after) + '\n'
    result = dict(changed=bool(actions), actions=actions, holders_before=_strip(before),
                  holders_after=_strip(after), gpu=gpu, elapsed_s=elapsed, diff=diff)
    if errors:
        result['errors'] = errors
    if foreign:
        module.fail_json(
            msg='GPU still held after %ss by: %s' % (module.params['timeout'],
                                                     '; '.join(describe(h) for h in foreign)),
            hint='Look at the listed units/containers/processes (errors lists failed commands); '
                 'add a holder that must stay to ours or protect, or raise timeout.',
            **result)
    if not mem_ok:
        module.fail_json(
            msg='No foreign holder is left but %s MiB of GPU memory is still in use '
                '(max_used_mib=%s)' % (excess, module.params['max_used_mib']),
            hint='A process outside this PID namespace or a leaked context may hold it; '
                 'check nvidia-smi on the host, or raise max_used_mib.',
            **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
