# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a GPU cleanup will stop, and what it cannot (private to sparkfleet.vllm).

Pure: ``build_plan`` takes what ``_gpu.GpuScanner`` read (the GPU's holders, every service unit with the containers
its commands start, every container, the listeners of the ports a deployment needs) and classifies each holder of
the GPU or of a port as ours, stale (a unit or container the cleanup stops: named like a stale unit, started by one
whatever its name, named like a stale container, or holding the GPU without being protected) or foreign (nothing
the cleanup would stop). A DGX OS system service (``system``) is protected unless the inventory names its unit or
container in the stale lists. gpu_holders shows the plan (preflight refuses what is foreign before anything changes);
gpu_release carries it out. Messages name *settings* (``{cleanup_units}``, ``{cleanup_containers}``, ``{cleanup_protect}``);
the caller's ``setting_names`` turn them into its variables.
"""

from __future__ import annotations

import os
import shlex

from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu._gpu import (classify, command_matches, describe, name_matches,
                                                                               protected_by)
from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import render_text

# Units the cleanup never stops, whatever the stale patterns say, and never suggests making stale: the node's access
# (a process started over ssh runs in ssh.service where logind does not give it a session), its login and user
# managers, systemd itself, and the container runtime our units run on.
NEVER_STALE = ('ssh.service', 'sshd.service', 'ssh.socket', 'sshd.socket', 'ssh@*.service', 'sshd@*.service',
               'systemd-*', 'dbus.service', 'dbus-broker.service', 'user@*.service', 'user-runtime-dir@*.service',
               'getty@*.service', 'serial-getty@*.service', 'init.scope', 'session-*.scope', '*.slice',
               'docker.service', 'docker.socket', 'containerd.service', 'cron.service', 'polkit.service',
               'NetworkManager.service', 'networking.service', 'nvidia-persistenced.service')


def never_stale(unit):
    """Whether unit is one the cleanup never stops (NEVER_STALE)."""
    return bool(unit) and name_matches(unit, NEVER_STALE)


# docker's global options that take a value (before the subcommand).
_GLOBAL_VALUE_OPTS = frozenset(['-H', '--host', '-c', '--context', '--config', '-l', '--log-level', '--tlscacert',
                                '--tlscert', '--tlskey'])
# `docker start` / `restart` options that take a value.
_START_VALUE_OPTS = frozenset(['--detach-keys', '--checkpoint', '--checkpoint-dir', '-t', '--time', '-s', '--signal'])
_SHELLS = frozenset(['sh', 'bash', 'dash', 'zsh'])
_SEPARATORS = frozenset([';', '&&', '||', '|', '&', ';;', '(', ')'])
ACTIVE_STATES = ('active', 'activating', 'reloading')
ENABLED_STATES = ('enabled', 'enabled-runtime', 'linked', 'linked-runtime')
LIVE_CONTAINER_STATES = ('running', 'restarting', 'paused')


def is_container_cli(word):
    """docker (the lab's wrapper execs docker.real), podman or nerdctl, by the command's file name."""
    base = os.path.basename(word or '')
    return base in ('docker', 'podman', 'nerdctl') or base.startswith('docker.')


def container_refs(argv):
    """Names of the containers a container-CLI command line creates or starts.

    ``docker run|create ... --name N`` gives N; ``docker start|restart [options] N...`` gives each N; the
    ``container`` management form (``docker container run``) too. Anything else, a name that is still a shell
    expansion (``$NAME``), or a command that is not a container CLI gives nothing.
    """
    words = [w for w in argv if w is not None]
    start = next((i for i, w in enumerate(words) if is_container_cli(w)), None)
    if start is None:
        return []
    rest = words[start + 1:]
    i = 0
    while i < len(rest) and rest[i].startswith('-'):
        i += 2 if rest[i] in _GLOBAL_VALUE_OPTS else 1
    if i < len(rest) and rest[i] == 'container':
        i += 1
    if i >= len(rest):
        return []
    verb, args = rest[i], rest[i + 1:]
    names = []
    if verb in ('run', 'create'):
        for j, word in enumerate(args):
            if word == '--name' and j + 1 < len(args):
                names.append(args[j + 1])
                break
            if word.startswith('--name='):
                names.append(word.split('=', 1)[1])
                break
    elif verb in ('start', 'restart'):
        j = 0
        while j < len(args):
            word = args[j]
            if word.startswith('-'):
                j += 2 if word in _START_VALUE_OPTS else 1
                continue
            names.append(word)
            j += 1
    return [n for n in names if n and '$' not in n and '`' not in n]


def script_commands(text):
    """The simple commands of a shell script (continued lines joined; comments, and lines shlex cannot split, left
    out), each as a list of words."""
    commands = []
    logical, pending = [], ''
    for line in (text or '').splitlines():
        if line.rstrip().endswith('\\'):
            pending += line.rstrip()[:-1] + ' '
            continue
        logical.append(pending + line)
        pending = ''
    if pending:
        logical.append(pending)
    for line in logical:
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        lex.commenters = '#'
        try:
            words = list(lex)
        except ValueError:
            continue
        current = []
        for word in words + [';']:
            if word in _SEPARATORS:
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(word)
    return commands


def unit_starts(commands, read_script):
    """Container names a unit's commands start: directly, through ``sh -c '...'`` or through a script they run
    (``read_script(path)`` returns a script's text, or None when the path is not a readable script). One level of
    scripts: a script that runs another script is not followed."""
    names = []
    for argv in commands:
        if not argv:
            continue
        lines = [argv]
        base = os.path.basename(argv[0])
        if base in _SHELLS and '-c' in argv[1:]:
            lines = script_commands(' '.join(argv[argv.index('-c') + 1:]))
        elif base in _SHELLS and len(argv) > 1 and not argv[1].startswith('-'):
            lines = script_commands(read_script(argv[1]) or '')
        elif not is_container_cli(argv[0]):
            text = read_script(argv[0])
            lines = script_commands(text) if text is not None else []
        for words in lines:
            for name in container_refs(words):
                if name not in names:
                    names.append(name)
    return names


# ---- the plan ----


def _unit_wanted(unit, mask):
    return unit.get('active') in ACTIVE_STATES or unit.get('enabled') in ENABLED_STATES or \
        (mask and unit.get('enabled') != 'masked')


def _container_wanted(cont, remove):
    return cont.get('state') in LIVE_CONTAINER_STATES or (cont.get('restart_policy') or 'no') != 'no' or remove


class Plan(object):
    """The cleanup of one node: ``actions`` (ordered, as gpu_release runs them), ``refused`` (holders it must not
    stop: its own process chain, init), ``unreachable`` (holders it cannot signal: another PID namespace),
    ``foreign`` (GPU holders that are not stale, left running unless ``stop_foreign``) and ``ports`` (every listener
    of the ports asked about, classified)."""

    def __init__(self):
        self.actions = []
        self.refused = []
        self.unreachable = []
        self.foreign = []
        self.ports = []
        self.stale_units = {}       # unit -> why it is stale (acted on or not)
        self.stale_containers = {}  # container name -> why

    def blocking(self):
        """Holders of the GPU or of a port that the cleanup will not stop (preflight refuses them)."""
        return self.refused + self.unreachable + self.foreign + [p for p in self.ports if p['status'] == 'foreign']


def build_plan(holders, units, containers, listeners, params, self_pids=(), children=None):
    """The plan for one node.

    holders: gpu_holders' holders (status ours/protected/foreign, unit, container, pid, visible, parent_holder).
    units: [{name, enabled, active, starts: [container names its commands start]}] (every service unit).
    containers: [{id, name, state, restart_policy}] (every container of the node).
    listeners: [{port, setting, address, pid, name, cmdline, unit, user_unit, container_id, container_name}].
    params: ours, protect, stale_units, stale_containers, mask, remove_containers.
    children: ppid -> [pids] (``_gpu.children_map()``), for the process trees signalled with a bare holder.
    """
    ours, protect, system = params.get('ours') or [], params.get('protect') or [], params.get('system') or []
    stale_patterns = params.get('stale_units') or []
    container_patterns = (params.get('stale_containers') or []) + stale_patterns
    plan = Plan()

    def kept(name):
        # a DGX OS system service is kept unless the inventory names it as stale
        return name_matches(name, ours) or name_matches(name, protect) or never_stale(name) or \
            (name_matches(name, system) and not name_matches(name, container_patterns))

    unit_by_name = dict((u['name'], u) for u in units)
    starters = {}
    for unit in units:
        for name in unit.get('starts') or []:
            starters.setdefault(name, []).append(unit['name'])
    stale_units = dict((u['name'], 'named in {cleanup_units}') for u in units
                       if name_matches(u['name'], stale_patterns) and not kept(u['name']))
    cont_by_key = {}
    for cont in containers:
        cont_by_key[cont['id']] = cont
        if cont.get('name'):
            cont_by_key[cont['name']] = cont
    stale_conts = {}
    for cont in containers:
        name = cont.get('name')
        if not name or kept(name):
            continue
        by_unit = sorted(u for u in starters.get(name, []) if u in stale_units)
        if by_unit:
            stale_conts[name] = 'started by %s' % _lit(', '.join(by_unit))
        elif name_matches(name, container_patterns):
            stale_conts[name] = 'named in {cleanup_containers}'

    targets = [h for h in holders if h['status'] == 'foreign']
    by_pid = dict((h['pid'], h) for h in targets)
    plan.refused = [h for h in targets if h['pid'] in self_pids or h['pid'] == 1]
    keep_pids = set(h['pid'] for h in holders if h['status'] != 'foreign')
    # Only stale holders are stopped (the old stack's units and containers, vLLM/Ray/SGLang by their command lines);
    # any other (a colleague's job) is left running and named, unless stop_foreign says to stop it too.
    why_stale = {}
    for holder in targets:
        why = _holder_stale(holder, stale_units, stale_conts, stale_patterns, container_patterns,
                            params.get('stale_commands') or [])
        if why is None and params.get('stop_foreign'):
            why = '{cleanup_foreign}'
        if why is not None:
            why_stale[holder['pid']] = why
    for holder in targets:  # a child of a bare holder shares its parent's fate (a process tree is stopped whole)
        parent = by_pid.get(holder.get('parent_holder'))
        if parent is not None and not holder['unit'] and not holder['container'] and not parent['unit'] \
                and not parent['container'] and parent['pid'] in why_stale and holder['pid'] not in why_stale:
            why_stale[holder['pid']] = why_stale[parent['pid']]
    # one in another PID namespace is named as unreachable below (nothing here could stop it, stale or not)
    plan.foreign = [h for h in targets if h['pid'] not in why_stale and h not in plan.refused and h['visible']]
    targets = [h for h in targets if h not in plan.foreign]
    holder_units, holder_conts = {}, {}
    for holder in targets:
        if holder in plan.refused:
            continue
        if holder['unit'] and not never_stale(holder['unit']):
            holder_units.setdefault(holder['unit'], []).append(holder['pid'])
        elif holder['container']:
            cont = holder['container']
            holder_conts.setdefault(cont.get('name') or cont['id'], []).append(holder['pid'])
    for name in sorted(holder_units):
        plan.actions.append({'action': 'stop_unit', 'target': name, 'pids': sorted(holder_units[name]),
                             'reason': 'holder', 'why': 'holds the GPU',
                             'starts': (unit_by_name.get(name) or {}).get('starts') or []})
    for name in sorted(holder_conts):
        cont = cont_by_key.get(name) or {}
        policy = cont.get('restart_policy') or next(
            (h['container'].get('restart_policy') for h in targets if h['pid'] in holder_conts[name]), None)
        plan.actions.append({'action': 'stop_container', 'target': name, 'pids': sorted(holder_conts[name]),
                             'reason': 'holder', 'why': 'holds the GPU', 'restart_policy': policy,
                             'started_by': sorted(starters.get(name, []))})
    covered = set(pid for act in plan.actions for pid in act['pids'])
    for holder in targets:
        pid = holder['pid']
        if holder in plan.refused or pid in covered:
            continue
        parent = by_pid.get(holder.get('parent_holder'))
        if parent is not None and parent['pid'] not in covered and parent not in plan.refused \
                and not (parent['unit'] and not never_stale(parent['unit'])) and not parent['container']:
            continue  # stopped with its parent's tree
        if not holder['visible']:
            plan.unreachable.append(holder)  # another PID namespace: nothing this node can signal
            continue
        foreign_pids = set(h['pid'] for h in plan.foreign)
        tree = [pid] + [d for d in _descendants(pid, children or {})
                        if d not in self_pids and d not in keep_pids and d not in foreign_pids]
        plan.actions.append({'action': 'signal', 'target': 'pid %d %s' % (pid, holder['name']),
                             'pids': sorted(p for p in tree if p in by_pid), 'tree': tree, 'reason': 'holder',
                             'why': 'holds the GPU outside any unit or container; %s' % why_stale[pid]})

    # A unit that starts a container we stop would start it again (Restart=always, or at the next boot).
    stopped_conts = set(holder_conts) | set(stale_conts)
    for name in sorted(stopped_conts):
        for unit in starters.get(name, []):
            if unit not in stale_units and unit not in holder_units and not kept(unit):
                stale_units[unit] = 'starts container %s' % _lit(name)
    done = set(holder_units)
    for name in sorted(stale_units):
        unit = unit_by_name.get(name) or {'name': name}
        if name not in done and _unit_wanted(unit, params.get('mask')):
            plan.actions.append({'action': 'stop_unit', 'target': name, 'pids': [], 'reason': 'stale',
                                 'why': stale_units[name], 'enabled': unit.get('enabled'),
                                 'active': unit.get('active'), 'starts': unit.get('starts') or []})
    for name in sorted(stale_conts):
        cont = cont_by_key.get(name) or {}
        if name in holder_conts or cont.get('id') in holder_conts:
            continue
        if _container_wanted(cont, params.get('remove_containers')):
            plan.actions.append({'action': 'stop_container', 'target': name, 'pids': [], 'reason': 'stale',
                                 'why': stale_conts[name], 'state': cont.get('state'),
                                 'restart_policy': cont.get('restart_policy'),
                                 'started_by': sorted(starters.get(name, []))})
    plan.stale_units, plan.stale_containers = stale_units, stale_conts
    plan.ports = _classify_listeners(listeners, plan, starters, params)
    return plan


def _holder_stale(holder, stale_units, stale_conts, unit_patterns, container_patterns, command_patterns):
    """Why a foreign GPU holder is stale (a template ``render_text`` fills), or None: it is in a stale unit, in a stale
    container, or its command line is one of ``command_patterns`` (vLLM, Ray, SGLang, whoever started it)."""
    unit = holder.get('unit')
    if unit and not never_stale(unit) and (unit in stale_units or name_matches(unit, unit_patterns)):
        return 'in {cleanup_units}'
    cont = holder.get('container') or {}
    if cont.get('name') and (cont['name'] in stale_conts or name_matches(cont['name'], container_patterns)):
        return 'in a stale container'
    if command_matches(holder, command_patterns):
        return 'a stale engine by its command line ({cleanup_commands})'
    return None


def _descendants(pid, children):
    out, stack = [], list(children.get(pid, []))
    while stack:
        child = stack.pop()
        if child not in out:
            out.append(child)
            stack.extend(children.get(child, []))
    return out


def _classify_listeners(listeners, plan, starters, params):
    """Each listener: ours, stale (``action``: the action of the plan that stops it) or foreign."""
    by_unit, by_cont, by_pid = {}, {}, {}
    for act in plan.actions:
        if act['action'] == 'stop_unit':
            by_unit[act['target']] = act['target']
        elif act['action'] == 'stop_container':
            by_cont[act['target']] = act['target']
        else:
            for pid in act['tree']:
                by_pid[pid] = act['target']
    out = []
    for sock in listeners:
        item = dict(sock)
        cname, cid = sock.get('container_name'), sock.get('container_id')
        like = {'unit': sock.get('unit'), 'user_unit': sock.get('user_unit'), 'name': sock.get('name'),
                'exe': None, 'container': {'name': cname} if (cname or cid) else None}
        named = (params.get('stale_units') or []) + (params.get('stale_containers') or [])
        status = classify(like, params.get('ours') or [], params.get('protect') or [], params.get('system') or [],
                          named)
        cont_act = by_cont.get(cname) or by_cont.get(cid) or (by_cont.get(cid[:12]) if cid else None)
        item.update(status='foreign', action=None)
        if status == 'ours':
            item['status'] = 'ours'
        elif status is None and cont_act:
            item.update(status='stale', action='stop_container ' + cont_act)
        elif status is None and sock.get('unit') in by_unit:
            item.update(status='stale', action='stop_unit ' + sock['unit'])
        elif status is None and sock.get('pid') in by_pid:
            item.update(status='stale', action='signal ' + by_pid[sock['pid']])
        else:
            item.update(protected=status == 'protected', starters=sorted(starters.get(cname, [])),
                        protected_by=protected_by(like, params.get('protect') or [], params.get('system') or [],
                                                  named) if status == 'protected' else None)
        out.append(item)
    return out


# ---- what a person reads ----


def holder_text(sock):
    """'port 6379 (sparkfleet_ray_port) on ::: pid 575 gcs_server in container vllm_node'."""
    text = 'port %s' % sock['port']
    if sock.get('setting'):
        text += ' (%s)' % sock['setting']
    if sock.get('address'):
        text += ' on %s' % sock['address']
    if sock.get('pid') is None:
        return text + ': a socket whose process cannot be seen (run as root)'
    text += ': pid %s %s' % (sock['pid'], sock.get('name') or '?')
    cont = sock.get('container_name') or (sock.get('container_id') or '')[:12]
    if cont:
        text += ' in container %s' % cont
    if sock.get('unit'):
        text += ' of unit %s' % sock['unit']
    elif sock.get('user_unit'):
        text += " of a user's unit %s" % sock['user_unit']
    return text


def _lit(text):
    """Text taken from the node (names, commands), safe inside a template ``render_text`` fills."""
    return str(text).replace('{', '{{').replace('}', '}}')


def foreign_text(sock, names=None):
    """Why the cleanup leaves this listener running, and what makes it stale."""
    text = _lit(holder_text(sock))
    if sock.get('pid') is None:
        return render_text(text, names)
    cont = _lit(sock.get('container_name') or '')
    if sock.get('protected') and sock.get('protected_by') == 'system':
        fix = 'it is a DGX OS system service ({cleanup_system}), which the cleanup stops only where the inventory ' \
            'names it: add it to {cleanup_units} to stop it'
    elif sock.get('protected'):
        fix = 'it is protected ({cleanup_protect}): take it out of that list or stop it yourself'
    elif cont:
        fix = 'add %s to {cleanup_containers}' % cont
        if sock.get('starters'):
            fix += ' (or %s, which starts it, to {cleanup_units})' % _lit(', '.join(sock['starters']))
    elif sock.get('unit') and not never_stale(sock['unit']):
        fix = 'add %s to {cleanup_units}' % _lit(sock['unit'])
    elif sock.get('unit'):
        fix = 'it runs in %s, which the cleanup never stops (the node\'s access or its runtime): stop it yourself' \
            % _lit(sock['unit'])
    elif sock.get('user_unit'):
        fix = "it runs in a user's unit (%s), which the cleanup never stops: stop it yourself" % _lit(sock['user_unit'])
    else:
        fix = 'it runs outside any unit or container, so the cleanup cannot keep it from coming back: stop it ' \
              'yourself'
    text += ', which the GPU cleanup will not stop: ' + fix
    if sock.get('setting'):
        text += ', or move ours (%s)' % _lit(sock['setting'])
    return render_text(text, names)


def action_text(act, ports=(), names=None):
    """One 'will stop' line: what, why, what it holds (GPU pids, ports) and what happens to it."""
    kind = {'stop_unit': 'unit', 'stop_container': 'container'}.get(act['action'])
    text = _lit('%s %s' % (kind, act['target']) if kind else act['target'])
    details = [act.get('why') or act['reason']]
    if act['action'] == 'stop_unit':
        if act.get('starts') and not details[0].startswith('starts container'):
            details.append('starts container %s' % _lit(', '.join(act['starts'])))
        details.append('stopped and disabled')
    elif act['action'] == 'stop_container':
        if act.get('started_by') and not act.get('why', '').startswith('started by'):
            details.append('started by %s' % _lit(', '.join(act['started_by'])))
        policy = act.get('restart_policy') or 'no'
        details.append('stopped' + (', restart policy %s removed' % _lit(policy) if policy != 'no' else ''))
    else:
        details.append('SIGTERM, then SIGKILL')
    held = ['pid %s holds the GPU' % pid for pid in act.get('pids') or []]
    held += [_lit(holder_text(p)) for p in ports if p.get('action') == '%s %s' % (act['action'], act['target'])]
    text += ' (%s)' % '; '.join(details)
    if held:
        text += ': ' + '; '.join(held)
    return render_text(text, names)


def foreign_holder_text(holder, names=None):
    """A GPU holder that is not stale, named (pid, command, user, unit or container, memory) with what lets the
    cleanup stop it."""
    held = 'pid %s %s' % (holder.get('pid'), holder.get('name') or '?')
    facts = []
    if holder.get('user'):
        facts.append('user %s' % holder['user'])
    if holder.get('used_memory_mib') is not None:
        facts.append('%s MiB' % holder['used_memory_mib'])
    cont = holder.get('container') or {}
    cont_name = cont.get('name') or (cont.get('id') or '')[:12]
    if cont_name:
        facts.append('container %s' % cont_name)
    elif holder.get('unit'):
        facts.append('unit %s' % holder['unit'])
    elif holder.get('user_unit'):
        facts.append("user's unit %s" % holder['user_unit'])
    cmd = (holder.get('cmdline') or '').strip()
    if cmd:
        facts.append('command: %s' % (cmd if len(cmd) <= 120 else cmd[:117] + '...'))
    text = 'GPU: %s (%s) is neither the old stack nor a vLLM/Ray process, so the GPU cleanup will not stop it' % (
        _lit(held), _lit('; '.join(facts)))
    fix = 'stop it yourself, or set {cleanup_foreign} to let the cleanup stop it'
    if cont_name:
        fix += ', or add %s to {cleanup_containers}' % _lit(cont_name)
    elif holder.get('unit') and not never_stale(holder['unit']):
        fix += ', or add %s to {cleanup_units}' % _lit(holder['unit'])
    return render_text(text + ': ' + fix, names)


def gpu_blocking_text(holder):
    """A GPU holder the cleanup cannot stop."""
    if not holder.get('visible', True):
        return 'GPU: %s is outside this PID namespace: the cleanup cannot stop it; stop it where it runs' % \
            describe(holder)
    return 'GPU: %s runs this task (or is init): the cleanup will not stop it' % describe(holder)


def left_text(holder, names=None):
    """A protected GPU holder the cleanup leaves running, and why: a DGX OS system service (and how the inventory
    names it to be stopped) or the operator's protect list."""
    cont = holder.get('container') or {}
    where = cont.get('name') and 'container %s' % cont['name'] or holder.get('unit') and 'unit %s' % holder['unit'] \
        or holder.get('user_unit') and "user's unit %s" % holder['user_unit']
    text = _lit('pid %s %s%s' % (holder.get('pid'), holder.get('name') or '?', ' (%s)' % where if where else ''))
    if holder.get('protected_by') == 'system':
        unit = holder.get('unit') or cont.get('name') or holder.get('name') or '?'
        why = 'a DGX OS system service ({cleanup_system}): never stopped unless the inventory names it (add %s to ' \
            '{cleanup_units} to stop it)' % _lit(unit.replace('.service', ''))
    else:
        why = 'protected ({cleanup_protect})'
    return render_text('%s holds the GPU and is left running: %s' % (text, why), names)
