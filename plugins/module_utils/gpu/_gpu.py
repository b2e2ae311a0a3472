# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Finding who holds an NVIDIA GPU (private to sparkfleet.vllm).

Parsers take text and return plain data; the /proc readers take a ``proc_root`` so tests
can point them at a fixture tree. ``GpuScanner`` is the one part that runs commands (nvidia-smi,
docker, systemctl): through the collection's command runner (``_command.Runner``).
"""

from __future__ import annotations

import csv
import fnmatch
import glob
import os
import pwd
import re

from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils._files import read_file
from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json

# Values nvidia-smi prints where a field has no value on this GPU (GB10 memory.*, MIG ids ...).
_NA_VALUES = frozenset(['', 'n/a', '[n/a]', 'not supported', '[not supported]',
                        '[notsupported]', 'notsupported', '[unknown error]', 'unknown error',
                        '[insufficient permissions]', 'insufficient permissions'])

# The fields the modules ask nvidia-smi for. Header names differ from query names.
GPU_QUERY_FIELDS = ('index', 'name', 'uuid', 'driver_version', 'memory.used', 'memory.total')
APP_QUERY_FIELDS = ('pid', 'process_name', 'used_memory')

_HEADER_ALIASES = {
    'used_gpu_memory': 'used_memory',
    'process_name': 'process_name',
}

_UNIT_RE = re.compile(r'^(.*?)\s*\[[^\]]*\]$')
_MIB_RE = re.compile(r'^(-?\d+(?:\.\d+)?)\s*(MiB|GiB|KiB|B)?$', re.IGNORECASE)
_DOCKER_SCOPE_RE = re.compile(r'docker-([0-9a-f]{12,64})\.scope')
_DOCKER_CGROUPFS_RE = re.compile(r'/docker/([0-9a-f]{12,64})(?:/|$)')
_LIBPOD_RE = re.compile(r'libpod-([0-9a-f]{12,64})\.scope')


def is_na(value):
    """True when nvidia-smi printed a placeholder rather than a value."""
    return value is None or value.strip().lower() in _NA_VALUES


def parse_mib(value):
    """'1234', '1234 MiB', '[N/A]', '[Not Supported]' -> int MiB or None."""
    if is_na(value):
        return None
    match = _MIB_RE.match(value.strip())
    if not match:
        return None
    number = float(match.group(1))
    unit = (match.group(2) or 'MiB').lower()
    factor = {'mib': 1.0, 'gib': 1024.0, 'kib': 1.0 / 1024, 'b': 1.0 / (1024 * 1024)}[unit]
    mib = number * factor
    if not abs(mib) < 2 ** 53:   # an enormous (or infinite) figure is no reading of a GPU's memory
        return None
    return int(round(mib))


def _header_key(cell):
    """'used_gpu_memory [MiB]' -> 'used_memory'; 'memory.total [MiB]' -> 'memory.total'."""
    cell = cell.strip()
    match = _UNIT_RE.match(cell)
    if match:
        cell = match.group(1)
    return _HEADER_ALIASES.get(cell, cell)


def parse_query_csv(text, fields):
    """Parse ``nvidia-smi --query-*=<fields> --format=csv[,noheader][,nounits]`` output.

    Returns a list of dicts keyed by the requested field names, values as printed (stripped),
    with placeholders ('[N/A]', '[Not Supported]') turned into None. A header line, when
    present, is recognised and skipped; a message such as 'No devices were found' yields [].
    """
    rows = []
    # A line csv refuses (a field past its limit, a NUL) is no row of nvidia-smi's: it is skipped, never raised.
    lines = [line for line in text.splitlines() if line.strip() and len(line) <= 65536 and "\0" not in line]
    for index, row in enumerate(_csv_rows(lines)):
        if index == 0 and row and _header_key(row[0]) == _header_key(fields[0]) \
                and not re.match(r'^\d', row[0].strip()):
            continue
        if len(row) != len(fields):
            # nvidia-smi prints plain messages ("No running processes found") on some drivers.
            continue
        rows.append(dict((field, None if is_na(value) else value.strip())
                         for field, value in zip(fields, row)))
    return rows


def _csv_rows(lines):
    for line in lines:
        try:
            yield next(csv.reader([line], skipinitialspace=True), [])
        except csv.Error:
            continue


def parse_gpus(text):
    """Rows of GPU_QUERY_FIELDS -> list of GPU dicts with int MiB (or None)."""
    gpus = []
    for row in parse_query_csv(text, GPU_QUERY_FIELDS):
        gpus.append({
            'index': int(row['index']) if row['index'] and row['index'].isdigit() else None,
            'name': row['name'],
            'uuid': row['uuid'],
            'driver_version': row['driver_version'],
            'memory_used_mib': parse_mib(row['memory.used']),
            'memory_total_mib': parse_mib(row['memory.total']),
        })
    return gpus


def parse_compute_apps(text):
    """Rows of APP_QUERY_FIELDS -> list of {pid, process_name, used_memory_mib}."""
    apps = []
    for row in parse_query_csv(text, APP_QUERY_FIELDS):
        pid = row['pid']
        if not pid or not pid.isdigit():
            continue
        apps.append({
            'pid': int(pid),
            'process_name': row['process_name'],
            'used_memory_mib': parse_mib(row['used_memory']),
        })
    return apps


_TABLE_HEAD_RE = re.compile(r'NVIDIA-SMI\s+(\S+)\s+Driver Version:\s+(\S+)\s+CUDA Version:\s+(\S+)')
_TABLE_GPU_RE = re.compile(r'^\|\s+(\d+)\s+(.+?)\s+(On|Off)\s+\|\s+(\S+)\s+(On|Off)\s+\|')
_TABLE_MEM_RE = re.compile(r'\|\s+(\d+)MiB\s+/\s+(\d+)MiB\s+\|')
_TABLE_PROC_RE = re.compile(
    r'^\|\s+(\d+)\s+(\S+)\s+(\S+)\s+(\d+)\s+([CGM+]+)\s+(.+?)\s+(\d+MiB|N/A|Not Supported)\s+\|$')


def parse_smi_table(text):
    """Parse the default ``nvidia-smi`` table (driver 5xx layout).

    Returns {driver_version, cuda_version, gpus: [{index, name, bus_id, memory_used_mib,
    memory_total_mib}], processes: [{gpu, pid, type, process_name, used_memory_mib}]}.
    GB10 prints 'Not Supported' where the memory column would be: both memory values None.
    """
    result = {'driver_version': None, 'cuda_version': None, 'gpus': [], 'processes': []}
    in_procs = False
    current = None
    for line in text.splitlines():
        head = _TABLE_HEAD_RE.search(line)
        if head:
            result['driver_version'] = head.group(2)
            result['cuda_version'] = head.group(3)
            continue
        if 'Processes:' in line:
            in_procs = True
            continue
        if in_procs:
            match = _TABLE_PROC_RE.match(line.strip())
            if match:
                result['processes'].append({
                    'gpu': int(match.group(1)),
                    'pid': int(match.group(4)),
                    'type': match.group(5),
                    'process_name': match.group(6).strip(),
                    'used_memory_mib': parse_mib(match.group(7)),
                })
            continue
        gpu = _TABLE_GPU_RE.match(line)
        if gpu:
            current = {'index': int(gpu.group(1)), 'name': gpu.group(2).strip(),
                       'bus_id': gpu.group(4), 'memory_used_mib': None, 'memory_total_mib': None}
            result['gpus'].append(current)
            continue
        if current is not None and current.get('_second_line_seen') is None:
            # The line after the name line carries temperature, power and Memory-Usage.
            current['_second_line_seen'] = True
            mem = _TABLE_MEM_RE.search(line)
            if mem:
                current['memory_used_mib'] = int(mem.group(1))
                current['memory_total_mib'] = int(mem.group(2))
    for gpu in result['gpus']:
        gpu.pop('_second_line_seen', None)
    return result


def parse_meminfo(text):
    """/proc/meminfo -> {'mem_total_mib', 'mem_available_mib'} (None when absent)."""
    values = {}
    for line in text.splitlines():
        key, _sep, rest = line.partition(':')
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key.strip()] = int(parts[0])
    total = values.get('MemTotal')
    avail = values.get('MemAvailable')
    return {
        'mem_total_mib': total // 1024 if total is not None else None,
        'mem_available_mib': avail // 1024 if avail is not None else None,
    }


def parse_cgroup(text):
    """/proc/PID/cgroup (v1 or v2) -> {'path', 'unit', 'user_unit', 'container_id'}.

    ``unit`` is the deepest system-manager unit (``x.service`` under system.slice or any
    non-user slice), ``user_unit`` a unit under a user manager or session scope, and
    ``container_id`` the full docker/podman id from ``docker-<id>.scope`` (systemd driver)
    or ``/docker/<id>`` (cgroupfs driver).
    """
    unified = named = first = None
    for line in text.splitlines():
        parts = line.strip().split(':', 2)
        if len(parts) != 3:
            continue
        hier, controllers, cpath = parts
        if hier == '0' and controllers == '':
            unified = cpath
        elif controllers == 'name=systemd':
            named = cpath
        elif first is None or first == '/':
            first = cpath
    # Pure v2: the 0:: line. Hybrid v1/v2 often leaves 0:: at '/', then name=systemd tells.
    path = next((p for p in (unified, named, first) if p and p != '/'), unified or named or first)
    result = {'path': path, 'unit': None, 'user_unit': None, 'container_id': None}
    if not path:
        return result
    for regex in (_DOCKER_SCOPE_RE, _DOCKER_CGROUPFS_RE, _LIBPOD_RE):
        match = regex.search(path)
        if match:
            result['container_id'] = match.group(1)
            break
    components = [c for c in path.split('/') if c]
    in_user = any(c == 'user.slice' or c.startswith('user@') for c in components)
    unit = None
    for comp in components:
        if comp.endswith('.service') or comp.endswith('.scope'):
            unit = comp
    if unit is None:
        return result
    if in_user:
        result['user_unit'] = unit
    elif result['container_id'] is None or not unit.startswith(('docker-', 'libpod-')):
        result['unit'] = unit if unit != 'init.scope' else None
    return result


def parse_docker_inspect(text):
    """``docker inspect`` JSON -> list of {id, name, image, running, pid, restart_policy}."""
    try:
        data = _json.loads(text, "docker inspect's output")
    except ValueError:
        return []
    if isinstance(data, dict):
        data = [data]
    containers = []
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict):
            continue
        state = item.get('State') or {}
        host = item.get('HostConfig') or {}
        policy = (host.get('RestartPolicy') or {}).get('Name') or 'no'
        containers.append({
            'id': item.get('Id'),
            'name': (item.get('Name') or '').lstrip('/') or None,
            'image': (item.get('Config') or {}).get('Image'),
            'running': bool(state.get('Running')),
            'pid': state.get('Pid') or None,
            'restart_policy': policy,
        })
    return containers


def parse_unit_files(text):
    """``systemctl list-unit-files --type=service --no-legend --plain`` -> {unit: state}."""
    states = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and '.' in parts[0]:
            states[parts[0]] = parts[1]
    return states


def parse_units(text):
    """``systemctl list-units --all --no-legend --plain`` -> {unit: {'active', 'sub'}}."""
    units = {}
    for line in text.splitlines():
        parts = line.lstrip('* \u25cf').split()
        if len(parts) >= 4 and '.' in parts[0]:
            units[parts[0]] = {'load': parts[1], 'active': parts[2], 'sub': parts[3]}
    return units


def parse_docker_ps(text):
    """``docker ps -a --format '{{.ID}}\\t{{.Names}}\\t{{.State}}'`` -> list of dicts."""
    containers = []
    for line in text.splitlines():
        parts = line.split('\t')
        if len(parts) >= 3:
            containers.append({'id': parts[0], 'name': parts[1], 'state': parts[2]})
    return containers


_EXEC_ARGV_RE = re.compile(r'argv\[\]=(.*?) ; ')


def parse_systemctl_show(text):
    """``systemctl show -p Id -p ExecStart ... UNIT...`` -> {unit: [argv, ...]} (every Exec* command of each unit).

    systemd prints each command as ``{ path=... ; argv[]=WORDS ; ignore_errors=... }``, its words joined by spaces
    (quoting is lost: a word holding a space reads as two). Units are separated by blank lines.
    """
    units = {}
    for block in re.split(r'\n\s*\n', text or ''):
        unit, commands = None, []
        for line in block.splitlines():
            key, _sep, value = line.partition('=')
            if key == 'Id':
                unit = value.strip()
            elif key.startswith('Exec'):
                commands.extend(m.split() for m in _EXEC_ARGV_RE.findall(value + ' '))
        if unit:
            units[unit] = [c for c in commands if c]
    return units


def name_matches(name, patterns):
    """Shell-style match of a unit/container/process name; 'foo' also matches 'foo.service'."""
    if not name:
        return False
    candidates = [name]
    for suffix in ('.service', '.scope'):
        if name.endswith(suffix):
            candidates.append(name[:-len(suffix)])
    for pattern in patterns or []:
        for cand in candidates:
            if fnmatch.fnmatchcase(cand, pattern):
                return True
    return False


_COMM_LEN = 15  # the kernel truncates comm: nvidia-persistenced shows as nvidia-persiste


def _matches_holder(holder, patterns):
    container = holder.get('container') or {}
    names = [holder.get('unit'), holder.get('user_unit'), container.get('name'),
             holder.get('name'), os.path.basename(holder.get('exe') or '') or None]
    if any(name_matches(n, patterns) for n in names):
        return True
    comm = holder.get('name') or ''
    if len(comm) == _COMM_LEN:
        return any(fnmatch.fnmatchcase(comm, p[:_COMM_LEN])
                   for p in patterns or [] if len(p) > _COMM_LEN)
    return False


def command_matches(holder, patterns):
    """True when the holder's process name (comm) or its whole command line matches one of ``patterns`` (shell
    patterns: ``VLLM::*`` matches vLLM's retitled engine processes, ``*vllm serve*`` a command line holding it)."""
    texts = [t for t in (holder.get('name'), (holder.get('cmdline') or '').strip()) if t]
    return any(fnmatch.fnmatchcase(text, pattern) for text in texts for pattern in patterns or [])


def system_service(holder, system, named=()):
    """Whether a holder is a DGX OS system service (``system``) that the inventory did not name for stopping: its unit
    or container matches none of ``named`` (the stale unit and container patterns). Only a name the inventory gives
    stops one; a command-line pattern or stop_foreign never does."""
    if not _matches_holder(holder, system):
        return False
    container = holder.get('container') or {}
    return not any(name_matches(n, named) for n in (holder.get('unit'), holder.get('user_unit'), container.get('name')))


def classify(holder, ours, protect, system=(), named=()):
    """Return 'ours', 'protected' or None for a holder dict (unit/container/process name). A DGX OS system service
    (``system``) is protected unless its unit or container is in ``named`` (``system_service``)."""
    if _matches_holder(holder, ours):
        return 'ours'
    if _matches_holder(holder, protect) or system_service(holder, system, named):
        return 'protected'
    return None


def protected_by(holder, protect, system=(), named=()):
    """Why a protected holder is left: 'protect' (the operator's list) or 'system' (a DGX OS system service)."""
    if _matches_holder(holder, protect):
        return 'protect'
    return 'system' if system_service(holder, system, named) else None


# ---- /proc readers (I/O, but no commands) ----


def parse_stat(text):
    """/proc/PID/stat -> {'comm', 'state', 'ppid', 'starttime'} (comm may hold spaces)."""
    if not text:
        return None
    left = text.find('(')
    right = text.rfind(')')
    if left < 0 or right < 0:
        return None
    rest = text[right + 2:].split()
    if len(rest) < 20:
        return None
    return {'comm': text[left + 1:right], 'state': rest[0], 'ppid': int(rest[1]),
            'starttime': int(rest[19])}


def proc_info(pid, proc_root='/proc'):
    """Facts about one process from /proc, or None when it is gone (or a zombie)."""
    base = os.path.join(proc_root, str(pid))
    stat = parse_stat(read_file(os.path.join(base, 'stat')))
    if stat is None or stat['state'] in ('Z', 'X'):
        return None
    raw = read_file(os.path.join(base, 'cmdline'), binary=True) or b''
    cmdline = [part.decode('utf-8', 'replace') for part in raw.split(b'\0') if part]
    uid = None
    status = read_file(os.path.join(base, 'status')) or ''
    for line in status.splitlines():
        if line.startswith('Uid:'):
            fields = line.split()
            if len(fields) > 1 and fields[1].isdigit():
                uid = int(fields[1])
            break
    try:
        exe = os.readlink(os.path.join(base, 'exe'))
    except OSError:
        exe = None
    cgroup = parse_cgroup(read_file(os.path.join(base, 'cgroup')) or '')
    return {
        'pid': int(pid), 'ppid': stat['ppid'], 'name': stat['comm'], 'state': stat['state'],
        'starttime': stat['starttime'], 'cmdline': ' '.join(cmdline), 'exe': exe, 'uid': uid,
        'cgroup': cgroup['path'], 'unit': cgroup['unit'], 'user_unit': cgroup['user_unit'],
        'container_id': cgroup['container_id'],
    }


def list_pids(proc_root='/proc'):
    try:
        names = os.listdir(proc_root)
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


def device_holders(device_glob, proc_root='/proc', skip_pids=()):
    """Map pid -> sorted list of device paths matching ``device_glob`` that it holds open.

    Scans /proc/PID/fd links; processes we may not read (other users without root) are
    skipped silently, which is why the modules want root.
    """
    devices = set(glob.glob(device_glob))
    patterns = [device_glob]
    holders = {}
    for pid in list_pids(proc_root):
        if pid in skip_pids:
            continue
        fd_dir = os.path.join(proc_root, str(pid), 'fd')
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        found = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target in devices or any(fnmatch.fnmatchcase(target, p) for p in patterns):
                found.add(target)
        if found:
            holders[pid] = sorted(found)
    return holders


def children_map(proc_root='/proc'):
    """Map ppid -> [child pids] for all live processes."""
    children = {}
    for pid in list_pids(proc_root):
        stat = parse_stat(read_file(os.path.join(proc_root, str(pid), 'stat')))
        if stat is None or stat['state'] in ('Z', 'X'):
            continue
        children.setdefault(stat['ppid'], []).append(pid)
    return children


def descendants(pid, children):
    """All descendants of pid (depth first, deepest last) given a children_map."""
    out = []
    stack = list(children.get(pid, []))
    while stack:
        child = stack.pop()
        if child in out:
            continue
        out.append(child)
        stack.extend(children.get(child, []))
    return out


def ancestors(pid, proc_root='/proc'):
    """pid's ancestors up to 1 (inclusive), to never signal the chain that runs us."""
    chain = []
    seen = set()
    current = pid
    while current and current not in seen:
        seen.add(current)
        stat = parse_stat(read_file(os.path.join(proc_root, str(current), 'stat')))
        if stat is None:
            break
        current = stat['ppid']
        if current:
            chain.append(current)
    return chain


def describe(holder):
    """One line naming a holder for messages and diffs."""
    text = 'pid %s %s' % (holder.get('pid'), holder.get('name'))
    if holder.get('ppid'):
        text += ' ppid=%s' % holder['ppid']
    if holder.get('used_memory_mib') is not None:
        text += ' (%s MiB)' % holder['used_memory_mib']
    if holder.get('unit'):
        text += ' unit=%s' % holder['unit']
    if holder.get('container'):
        cont = holder['container']
        text += ' container=%s' % (cont.get('name') or (cont.get('id') or '')[:12])
    return text


# ---- shared by gpu_holders and gpu_release ----

DEFAULT_PROTECT = ['nvidia-persistenced', 'nvidia-fabricmanager', 'dcgm*', 'nv-hostengine',
                   'nvidia-dcgm', 'gdm*', 'lightdm', 'sddm', 'display-manager', 'Xorg', 'Xwayland',
                   'gnome-shell']
DEFAULT_STALE = ['vllm-cluster', 'vllm-proxy', 'vllm-embeddings', 'vllm-reranker', 'sglang*']
# The containers the operators' older deployment ran (DOMAIN 10); any name a stale unit starts counts too.
DEFAULT_STALE_CONTAINERS = ['vllm_node', 'vllm_embeddings', 'reranker']

# GPU holders known by their command lines as an engine of an earlier deployment, whatever unit or container (if any)
# runs them: vLLM (V1 retitles its engine processes VLLM::EngineCore / VLLM::Worker*), Ray's workers (ray::...) and
# daemons, SGLang. Matched against the process name and the whole command line.
DEFAULT_STALE_COMMANDS = ['VLLM::*', '*vllm serve*', '*vllm.entrypoints*', 'ray::*', 'raylet', 'gcs_server',
                          '*/ray/_private/workers/default_worker.py*', 'sglang::*', '*sglang.launch_server*']

# Services a DGX OS install runs that may open the GPU (/dev/nvidia*) or hold its memory: the driver's persistence
# daemon, NVIDIA's DCGM and its host engine, NVSM (DGX system management), the DGX Dashboard (a web UI on port 11000,
# inside Ray's default worker port range), the power daemon, and the desktop's display stack (GNOME on Xorg or
# Wayland). Sources: README "GPU cleanup and DGX OS services". Left running unless the inventory names one in
# stale_units or stale_containers; stop_foreign and the stale command patterns never stop them.
DEFAULT_SYSTEM = ['nvidia-persistenced', 'nvidia-fabricmanager', 'nvidia-dcgm', 'dcgm*', 'nv-hostengine', 'nvsm*',
                  'dgx-dashboard*', 'nvidia-powerd', 'gdm*', 'display-manager', 'Xorg', 'Xwayland', 'gnome-shell',
                  'gnome-remote-desktop']

COMMON_ARGSPEC = dict(
    nvidia_smi=dict(type='str', default='auto', choices=['auto', 'required', 'skip']),
    device_glob=dict(type='str', default='/dev/nvidia[0-9]*'),
    ours=dict(type='list', elements='str', default=[]),
    protect=dict(type='list', elements='str', default=DEFAULT_PROTECT),
    stale_units=dict(type='list', elements='str', default=DEFAULT_STALE),
    stale_containers=dict(type='list', elements='str', default=DEFAULT_STALE_CONTAINERS),
    stale_commands=dict(type='list', elements='str', default=DEFAULT_STALE_COMMANDS),
    stop_foreign=dict(type='bool', default=False),
    system=dict(type='list', elements='str', default=DEFAULT_SYSTEM),
)


class GpuScanner(object):
    """Reads the GPU, its holders and the stale units/containers of one node."""

    def __init__(self, module, proc_root='/proc', meminfo_path='/proc/meminfo'):
        self.module = module
        self.params = module.params
        self.proc_root = proc_root
        self.meminfo_path = meminfo_path
        self.warnings = []
        self.runner = Runner(module)
        self.smi = None
        if self.params['nvidia_smi'] != 'skip':
            self.smi = self.runner.bin('nvidia-smi', required=self.params['nvidia_smi'] == 'required')
            if self.smi is None:
                self._warn('nvidia-smi not found: holders come from open device files only')
        self.docker = self.runner.bin('docker', required=False)
        self.systemctl = self.runner.bin('systemctl', required=False)
        self.self_pids = set([os.getpid()] + ancestors(os.getpid(), proc_root))
        self.own_pid = os.getpid()

    def _warn(self, text):
        if text not in self.warnings:
            self.warnings.append(text)

    def _smi(self, args):
        res = self.runner.run([self.smi] + args)
        if not res.ok:
            if self.params['nvidia_smi'] == 'required':
                self.runner.fail(res, 'nvidia-smi failed', hint='Check that the NVIDIA driver is loaded '
                                                                '(nvidia-smi must work as root on the node).')
            self._warn(res.why('nvidia-smi failed'))
            return None
        return res.stdout

    def gpu_summary(self):
        memory = parse_meminfo(read_file(self.meminfo_path) or '')
        summary = {'nvidia_smi': self.smi, 'gpus': [], 'name': None, 'uuid': None,
                   'driver_version': None, 'memory_used_mib': None, 'memory_total_mib': None,
                   'unified_memory': None, 'mem_total_mib': memory['mem_total_mib'],
                   'mem_available_mib': memory['mem_available_mib']}
        if not self.smi:
            return summary
        out = self._smi(['--query-gpu=' + ','.join(GPU_QUERY_FIELDS),
                         '--format=csv,noheader,nounits'])
        if out is None:
            return summary
        gpus = parse_gpus(out)
        summary['gpus'] = gpus
        if gpus:
            first = gpus[0]
            for key in ('name', 'uuid', 'driver_version', 'memory_used_mib', 'memory_total_mib'):
                summary[key] = first[key]
            # GB10 has no framebuffer of its own: NVML answers Not Supported for memory.*.
            summary['unified_memory'] = all(g['memory_total_mib'] is None for g in gpus)
        return summary

    def compute_apps(self):
        if not self.smi:
            return []
        out = self._smi(['--query-compute-apps=' + ','.join(APP_QUERY_FIELDS),
                         '--format=csv,noheader,nounits'])
        return parse_compute_apps(out or '')

    def inspect_containers(self, ids):
        if not ids:
            return {}
        if not self.docker:
            self._warn('docker not found: containers %s are reported by id only' % ', '.join(
                sorted(i[:12] for i in ids)))
            return {}
        res = self.runner.run([self.docker, 'inspect'] + sorted(ids))
        found = {}
        for cont in parse_docker_inspect(res.stdout or '[]'):
            if cont['id']:
                found[cont['id']] = cont
        if not res.ok and not found:
            self._warn(res.why('docker inspect failed'))
        return found

    def holders(self):
        """All holders merged by pid, each classified ours/protected/foreign."""
        apps = dict((app['pid'], app) for app in self.compute_apps())
        devs = device_holders(self.params['device_glob'], self.proc_root, skip_pids=(self.own_pid,))
        holders = []
        for pid in sorted(set(apps) | set(devs)):
            info = proc_info(pid, self.proc_root)
            app = apps.get(pid)
            if info is None and app is None:
                continue  # exited between the scans
            holder = {
                'pid': pid, 'ppid': None, 'name': None, 'exe': None, 'cmdline': None,
                'uid': None, 'user': None, 'starttime': None, 'unit': None, 'user_unit': None,
                'cgroup': None, 'container_id': None, 'visible': info is not None,
            }
            if info is not None:
                holder.update(info)
                holder.pop('state', None)
            else:
                holder['name'] = os.path.basename(app['process_name'] or '') or None
                holder['cmdline'] = app['process_name']
            if holder['uid'] is not None:
                try:
                    holder['user'] = pwd.getpwuid(holder['uid']).pw_name
                except KeyError:
                    holder['user'] = str(holder['uid'])
            holder['compute_app'] = app is not None
            holder['used_memory_mib'] = app['used_memory_mib'] if app else None
            holder['devices'] = devs.get(pid, [])
            holders.append(holder)
        containers = self.inspect_containers(
            set(h['container_id'] for h in holders if h['container_id']))
        by_pid = dict((h['pid'], h) for h in holders)
        for holder in holders:
            cid = holder.pop('container_id')
            holder['container'] = None
            if cid:
                cont = containers.get(cid) or {'id': cid, 'name': None, 'restart_policy': None,
                                               'image': None, 'running': True, 'pid': None}
                holder['container'] = dict((k, cont.get(k)) for k in
                                           ('id', 'name', 'image', 'restart_policy'))
            named = (self.params['stale_units'] or []) + (self.params['stale_containers'] or [])
            holder['status'] = classify(holder, self.params['ours'], self.params['protect'],
                                        self.params.get('system') or [], named) or 'foreign'
            holder['protected_by'] = protected_by(holder, self.params['protect'], self.params.get('system') or [],
                                                  named) if holder['status'] == 'protected' else None
            # The nearest ancestor that holds the GPU too: stopping it stops this one.
            holder['parent_holder'] = None
            if holder['visible']:
                for anc in ancestors(holder['pid'], self.proc_root):
                    if anc in by_pid:
                        holder['parent_holder'] = anc
                        break
        return holders

    def service_units(self):
        """Every service unit: [{name, enabled, active, sub, commands}] (commands: each Exec* line's words).

        Template units (``x@.service``) have no commands of their own and are left out."""
        if not self.systemctl:
            return []
        files = self.runner.run([self.systemctl, 'list-unit-files', '--type=service', '--no-legend', '--no-pager',
                                 '--plain'])
        units = self.runner.run([self.systemctl, 'list-units', '--type=service', '--all', '--no-legend',
                                 '--no-pager', '--plain'])
        if not files.ok and not units.ok:
            self._warn(files.why('systemctl could not list units'))
        enabled = parse_unit_files(files.stdout if files.ok else '')
        active = parse_units(units.stdout if units.ok else '')
        names = sorted(n for n in set(enabled) | set(active) if not n.endswith('@.service'))
        commands = {}
        if names:
            show = self.runner.run([self.systemctl, 'show', '--no-pager', '-p', 'Id', '-p', 'ExecStartPre',
                                    '-p', 'ExecStart', '-p', 'ExecStartPost', '-p', 'ExecReload'] + names)
            if show.ok:
                commands = parse_systemctl_show(show.stdout)
            else:
                self._warn(show.why('systemctl show failed: the containers units start are not known'))
        return [{'name': name, 'enabled': enabled.get(name), 'active': active.get(name, {}).get('active', 'inactive'),
                 'sub': active.get(name, {}).get('sub'), 'commands': commands.get(name, [])} for name in names]

    def unit_clients(self):
        """{unit: [argv, ...]} of the container-CLI processes running in a system unit now (a unit that runs
        ``docker run`` in the foreground: the words the shell expanded, which a unit file may hide)."""
        found = {}
        for pid in list_pids(self.proc_root):
            raw = read_file(os.path.join(self.proc_root, str(pid), 'cmdline'), binary=True) or b''
            argv = [part.decode('utf-8', 'replace') for part in raw.split(b'\0') if part]
            if not argv or not os.path.basename(argv[0]).startswith(('docker', 'podman', 'nerdctl')):
                continue
            unit = parse_cgroup(read_file(os.path.join(self.proc_root, str(pid), 'cgroup')) or '')['unit']
            if unit:
                found.setdefault(unit, []).append(argv)
        return found

    def containers(self):
        """Every container: [{id, name, state, restart_policy, image}]."""
        if not self.docker:
            return []
        res = self.runner.run([self.docker, 'ps', '-a', '--no-trunc', '--format', '{{.ID}}\t{{.Names}}\t{{.State}}'])
        if not res.ok:
            self._warn(res.why('docker ps failed'))
            return []
        listed = parse_docker_ps(res.stdout)
        details = self.inspect_containers(set(c['id'] for c in listed))
        return [dict(c, restart_policy=details.get(c['id'], {}).get('restart_policy'),
                     image=details.get(c['id'], {}).get('image')) for c in listed]


def read_script(path, limit=262144):
    """A shell script's text (a regular file under ``limit`` bytes starting with ``#!``), else None."""
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > limit:
            return None
    except (OSError, TypeError):
        return None
    text = read_file(path)
    return text if text and text.startswith('#!') else None
