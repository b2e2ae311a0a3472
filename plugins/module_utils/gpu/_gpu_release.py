# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Freeing a node's GPU: read everything once, plan, stop, verify (private to sparkfleet.vllm).

The logic of gpu_release and of gpu_holders' plan. ``survey`` reads the node through ``_gpu.GpuScanner`` (GPU
holders, service units and the containers their commands start, every container, the listeners of the ports asked
about); ``_gpu_plan.build_plan`` decides; ``Releaser`` carries the plan out and waits until the GPU stays free.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json
from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu._gpu import children_map, describe, parse_stat, read_script
from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu._gpu_plan import (
    action_text,
    build_plan,
    foreign_holder_text,
    foreign_text,
    gpu_blocking_text,
    unit_starts,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.host._ports import listeners as port_listeners
from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import render_text

POLL_S = 0.25
# The stale-stack record names a few units and containers; more than this is not ours.
RECORD_MAX_BYTES = 1024 * 1024
# The ports option of gpu_holders: each port with the setting that chose it (named in messages).
PORTS_SPEC = dict(type='list', elements='dict', default=[],
                  options=dict(port=dict(type='int', required=True), setting=dict(type='str')))


def ports_problem(ports):
    bad = [p['port'] for p in ports or [] if not 1 <= p['port'] <= 65535]
    return 'ports must be 1-65535, got %s' % bad if bad else None


def survey(scanner, ports=()):
    """{holders, units, containers, listeners}: what a plan is made from, each read once."""
    holders = scanner.holders()
    params = scanner.params
    wanted = params['stale_units'] or params['stale_containers'] or ports or \
        any(h['container'] for h in holders if h['status'] == 'foreign')
    units = scanner.service_units() if wanted else []
    clients = scanner.unit_clients() if units else {}
    for unit in units:  # list-units lists transient units (systemd-run) too
        unit['starts'] = unit_starts(unit['commands'] + clients.get(unit['name'], []), read_script)
    containers = scanner.containers() if wanted else []
    socks = []
    if ports:
        settings = dict((p['port'], p.get('setting')) for p in ports)
        socks = port_listeners(sorted(settings), scanner.proc_root)
        names = dict((c['id'], c['name']) for c in containers)
        unknown = set(s['container_id'] for s in socks if s['container_id'] and s['container_id'] not in names)
        names.update((cid, c['name']) for cid, c in scanner.inspect_containers(unknown).items())
        for sock in socks:
            sock['setting'] = settings.get(sock['port'])
            sock['container_name'] = names.get(sock['container_id']) if sock['container_id'] else None
    return {'holders': holders, 'units': units, 'containers': containers, 'listeners': socks}


def make_plan(scanner, data):
    return build_plan(data['holders'], data['units'], data['containers'], data['listeners'], scanner.params,
                      self_pids=scanner.self_pids, children=children_map(scanner.proc_root))


def plan_lines(plan, names=None):
    """(will_stop, blocking): one line per action, one per holder the cleanup will not stop."""
    will = [action_text(act, plan.ports, names) for act in plan.actions]
    blocking = [gpu_blocking_text(h) for h in plan.refused + plan.unreachable]
    blocking += [foreign_holder_text(h, names) for h in plan.foreign]
    blocking += [foreign_text(p, names) for p in plan.ports if p['status'] == 'foreign']
    return will, blocking


def stale_report(data, plan, names=None):
    """gpu_holders' ``stale``: every unit and container the plan counts as stale, whether it needs stopping or not."""
    out = []
    for unit in data['units']:
        if unit['name'] in plan.stale_units:
            out.append({'kind': 'unit', 'name': unit['name'], 'enabled': unit.get('enabled'),
                        'active': unit.get('active'), 'sub': unit.get('sub'), 'starts': unit.get('starts'),
                        'why': render_text(plan.stale_units[unit['name']], names)})
    for cont in data['containers']:
        if cont['name'] in plan.stale_containers:
            out.append({'kind': 'container', 'name': cont['name'], 'id': cont['id'], 'state': cont['state'],
                        'restart_policy': cont.get('restart_policy'),
                        'why': render_text(plan.stale_containers[cont['name']], names)})
    return out


def record_stale(path, plan, check_mode=False):
    """Keep on the node the stale units and containers this plan knows (JSON ``{units, containers}``, written atomically
    and only when it differs), for what must stop them before our units start at the next boot. (changed, record)."""
    record = {'units': sorted(plan.stale_units), 'containers': sorted(plan.stale_containers)}
    try:
        if _json.load_file(path, limit=RECORD_MAX_BYTES) == record:
            return False, record
    except (IOError, OSError, ValueError):
        pass
    if check_mode:
        return True, record
    folder = os.path.dirname(path) or '.'
    if not os.path.isdir(folder):
        os.makedirs(folder, 0o755)
    fd, tmp = tempfile.mkstemp(prefix='.stale-', dir=folder)
    try:
        with os.fdopen(fd, 'w') as handle:
            json.dump(record, handle, indent=1, sort_keys=True)
            handle.write('\n')
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True, record


def strip(holders):
    for holder in holders:
        holder.pop('starttime', None)
    return holders


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
    """Carries out a plan on the node: restart policies first, then units, containers, signals."""

    def __init__(self, module, scanner):
        self.module = module
        self.params = module.params
        self.scanner = scanner
        self.errors = []

    def _cmd(self, cmd):
        res = self.scanner.runner.run(cmd)
        if not res.ok:
            self.errors.append({'cmd': res.argv, 'rc': res.rc, 'stderr': (res.stderr or res.stdout).strip()})
        return res.rc

    def _missing(self, tool):
        self.errors.append({'cmd': [tool], 'rc': None, 'stderr': '%s not found' % tool})
        return False

    def unrestart(self, act):
        """docker update --restart=no: a container whose process a stopped unit's signal ends (``docker run`` in the
        foreground passes SIGTERM on) would otherwise be restarted by docker's own policy."""
        if (act.get('restart_policy') or '') != 'no' and self.scanner.docker:
            self._cmd([self.scanner.docker, 'update', '--restart=no', act['target']])

    def all_at_once(self, cmd, targets):
        """``cmd + targets`` as one command, so systemd's one transaction or docker's CLI acts on them all at once: n
        containers whose PID 1 ignores SIGTERM (an old stack's shell entrypoints) cost one grace, not n. When it
        fails, each target again alone says which one failed, and one that cannot be acted on does not hold back the
        others (those already done are done again at once). Returns {target: done?}."""
        if self.scanner.runner.run(cmd + targets).ok:
            return dict((target, True) for target in targets)
        return dict((target, self._cmd(cmd + [target]) == 0) for target in targets)

    def stop_units(self, targets):
        systemctl = self.scanner.systemctl
        if not systemctl:
            return dict((target, self._missing('systemctl')) for target in targets)
        stopped = self.all_at_once([systemctl, 'stop'], targets)
        self.all_at_once([systemctl, 'disable'], targets)
        if self.params['mask']:
            self.all_at_once([systemctl, 'mask'], targets)
        return stopped

    def stop_containers(self, targets):
        docker = self.scanner.docker
        if not docker:
            return dict((target, self._missing('docker')) for target in targets)
        stopped = self.all_at_once([docker, 'stop', '-t', str(self.params['grace'])], targets)
        if self.params['remove_containers']:
            self.all_at_once([docker, 'rm'], targets)
        return stopped

    def terminate(self, pids):
        """SIGTERM pids, wait grace, SIGKILL survivors: (terminated, killed, failed, exit_s: pid -> seconds)."""
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
                    self.module.fail_json(msg='Not allowed to signal pid %d (%s)' % (pid, sig),
                                          hint='Run gpu_release with become: true; it must signal processes '
                                               'of other users.')

        send(signal.SIGTERM, alive())
        deadline = start + self.params['grace']
        while alive() and time.time() < deadline:
            time.sleep(POLL_S / 5)
        survivors = alive()
        if survivors:
            send(signal.SIGKILL, survivors)
            deadline = time.time() + 10
            while alive() and time.time() < deadline:
                time.sleep(POLL_S / 5)
        failed = alive()
        killed = [p for p in survivors if p not in failed]
        terminated = [p for p in identity if p not in survivors]
        return terminated, killed, failed, exit_s

    def carry_out(self, actions):
        """Every action of the plan, in order: policies, the units (all at once, their stops queued), the containers (all
        at once, while the units stop), the units' stops waited for, then one signal round."""
        for act in actions:
            if act['action'] == 'stop_container':
                self.unrestart(act)
        leftovers = []
        by_kind = dict((kind, [a for a in actions if a['action'] == kind]) for kind in ('stop_unit', 'stop_container'))
        steps = (('stop_unit', self.stop_units), ('stop_container', self.stop_containers))
        queued = None
        if by_kind['stop_unit'] and by_kind['stop_container'] and self.scanner.systemctl:
            # The units' stop jobs are queued first and run while docker stops the containers, so the two graces
            # (a unit's ExecStop is often a docker stop of its own) overlap. systemd does not restart a unit whose
            # stop job is pending, so a container ended under a Restart=always unit stays down. The blocking stop
            # after the containers waits for those jobs and says which unit failed.
            queued = time.time()
            self.scanner.runner.run([self.scanner.systemctl, 'stop', '--no-block']
                                    + [act['target'] for act in by_kind['stop_unit']])
            steps = steps[::-1]
        for kind, step in steps:
            acts = by_kind[kind]
            if not acts:
                continue
            t0 = queued if kind == 'stop_unit' and queued else time.time()
            stopped = step([act['target'] for act in acts])
            took = round(time.time() - t0, 2)
            for act in acts:
                act['result'] = 'stopped' if stopped[act['target']] else 'failed'
                act['elapsed_s'] = took
                leftovers.extend(act['pids'])
        # One SIGTERM round for every bare process, so n holders cost one grace, not n. A unit with KillMode=none
        # or a container docker could not stop leaves processes behind.
        still = [pid for pid in leftovers if _starttime(pid) is not None]
        if still:
            actions.append({'action': 'signal', 'target': 'left behind by units/containers', 'pids': sorted(still),
                            'tree': sorted(still), 'reason': 'holder', 'why': 'still running after its stop'})
        signal_acts = [act for act in actions if act['action'] == 'signal']
        if signal_acts:
            t0 = time.time()
            everything = sorted(set(pid for act in signal_acts for pid in act['tree']))
            terminated, killed, failed, exit_s = self.terminate(everything)
            took = round(time.time() - t0, 2)
            for act in signal_acts:
                tree = set(act.pop('tree'))
                act['signalled'] = sorted(tree & set(terminated + killed + failed))
                act['killed'] = sorted(tree & set(killed))
                act['exit_s'] = dict((str(pid), exit_s[pid]) for pid in sorted(tree) if pid in exit_s)
                act['result'] = 'failed' if tree & set(failed) else ('killed' if act['killed'] else 'terminated')
                act['elapsed_s'] = took

    def free_state(self):
        """(foreign holders, gpu summary, memory in use not counting ours/protected or None, holders)."""
        gpu = self.scanner.gpu_summary()
        holders = self.scanner.holders()
        foreign = [h for h in holders if h['status'] == 'foreign']
        spare = sum(h['used_memory_mib'] or 0 for h in holders if h['status'] != 'foreign')
        excess = None
        if gpu['memory_used_mib'] is not None:
            excess = sum(g['memory_used_mib'] or 0 for g in gpu['gpus']) - spare
        return foreign, gpu, excess, holders

    def wait_free(self, settle):
        """Poll until no foreign holder is left and memory is under the limit for ``settle`` seconds (or timeout):
        (foreign, gpu, excess, holders, free_since)."""
        deadline = time.time() + self.params['timeout']
        free_since = None
        while True:
            foreign, gpu, excess, holders = self.free_state()
            mem_ok = excess is None or excess <= self.params['max_used_mib']
            now = time.time()
            if foreign or not mem_ok:
                free_since = None
            elif free_since is None:
                free_since = now
            # free only for part of the settle time counts as free when nothing came back before the timeout
            if (free_since is not None and now - free_since >= settle) or now >= deadline:
                return foreign, gpu, excess, holders, free_since
            time.sleep(POLL_S * 2)


def release(module, scanner):
    """gpu_release: plan, refuse what must not be stopped, act (only plan in check mode), verify.

    Returns (result, failure): failure is None or {msg, hint} for fail_json; result holds ``diff`` (before/after)."""
    params = module.params
    negative = ['%s=%s' % (k, params[k]) for k in ('grace', 'timeout', 'settle', 'max_used_mib') if params[k] < 0]
    if negative:
        return {}, {'msg': '%s: must be 0 or more' % ', '.join(negative),
                    'hint': 'grace, timeout and settle are seconds, max_used_mib MiB.'}
    scanner.gpu_summary()  # fails early when nvidia_smi=required and it is broken
    names = params.get('setting_names')
    data = survey(scanner)
    before = data['holders']
    plan = make_plan(scanner, data)
    if plan.refused:
        return {'holders_before': strip(before)}, {
            'msg': 'Refusing to stop GPU holders that run this module or init: %s'
                   % ', '.join(describe(h) for h in plan.refused),
            'hint': 'Run the module from a process that does not hold the GPU, or list it in ours.'}
    if plan.foreign:
        # Preflight refuses these before anything changes; this one started since (or gpu_release runs alone).
        return {'holders_before': strip(before)}, {
            'msg': 'Refusing to stop GPU holders that are not stale: %s'
                   % '; '.join(foreign_holder_text(h, names) for h in plan.foreign),
            'hint': 'Nothing was stopped.'}
    actions = plan.actions
    for act in actions:
        act['text'] = action_text(act, names=names)
        act['why'] = render_text(act['why'], names)
    keep = [h for h in before if h['status'] != 'foreign']
    diff = {'before': '\n'.join(describe(h) for h in before) + '\n',
            'after': '\n'.join(describe(h) for h in keep) + '\n'}
    for warning in scanner.warnings:
        module.warn(warning)
    recorded, record = False, None
    if params.get('record'):
        recorded, record = record_stale(params['record'], plan, module.check_mode)
    if module.check_mode:
        for act in actions:
            act['result'] = 'planned'
            act.pop('tree', None)
        return dict(changed=bool(actions) or recorded, actions=actions, holders_before=strip(before),
                    holders_after=before, gpu=scanner.gpu_summary(), elapsed_s=0.0, diff=diff, stale_record=record), None

    rel = Releaser(module, scanner)
    started = time.time()
    rel.carry_out(actions)
    foreign, gpu, excess, after, free_since = rel.wait_free(params['settle'] if actions else 0)
    diff['after'] = '\n'.join(describe(h) for h in after) + '\n'
    result = dict(changed=bool(actions) or recorded, actions=actions, holders_before=strip(before),
                  holders_after=strip(after), gpu=gpu, elapsed_s=round((free_since or time.time()) - started, 2),
                  diff=diff, stale_record=record)
    if rel.errors:
        result['errors'] = rel.errors
    if foreign:
        held = '; '.join(describe(h) for h in foreign)
        return result, {'msg': 'GPU still held after %ss by: %s' % (params['timeout'], held),
                        'hint': 'Look at the listed units/containers/processes (errors lists failed commands); '
                                'add a holder that must stay to ours or protect, or raise timeout.'}
    if excess is not None and excess > params['max_used_mib']:
        return result, {'msg': 'No foreign holder is left but %s MiB of GPU memory is still in use (max_used_mib=%s)'
                               % (excess, params['max_used_mib']),
                        'hint': 'A process outside this PID namespace or a leaked context may hold it; '
                                'check nvidia-smi on the host, or raise max_used_mib.'}
    return result, None
