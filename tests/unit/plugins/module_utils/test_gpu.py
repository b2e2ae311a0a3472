"""Parsers of module_utils/gpu/_gpu.py on real H200 captures and GB10 outputs built to the real format."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu import _gpu

FIX = os.path.join(os.path.dirname(__file__), '..', 'modules', 'fixtures', 'nvidia_smi')
H200_STATES = ['zero', 'one', 'two', 'ours_only', 'stubborn_and_child', 'zero_after']


def fixture(gpu, name):
    with open(os.path.join(FIX, gpu, name)) as handle:
        return handle.read()


# ---- compute apps: what each captured state held (pid, MiB) ----
APPS = [
    ('h200', 'zero', []),
    ('h200', 'one', [(527, 4706)]),
    ('h200', 'two', [(527, 4706), (568, 6754)]),
    ('h200', 'ours_only', [(635, 1634)]),
    ('h200', 'stubborn_and_child', [(635, 1634), (746, 2658), (745, 3682), (781, 2658)]),
    ('h200', 'zero_after', []),
    ('gb10', 'idle', []),
    ('gb10', 'stale', [(114687, 98304), (115020, 19135)]),
]


@pytest.mark.parametrize('gpu,state,expected', APPS)
@pytest.mark.parametrize('variant', ['apps', 'apps_header'])
def test_compute_apps_with_and_without_header_and_units(gpu, state, expected, variant):
    apps = _gpu.parse_compute_apps(fixture(gpu, '%s.%s.txt' % (state, variant)))
    assert [(a['pid'], a['used_memory_mib']) for a in apps] == expected


def test_compute_apps_names_keep_paths_and_vllm_titles():
    apps = _gpu.parse_compute_apps(fixture('gb10', 'stale.apps.txt'))
    assert [a['process_name'] for a in apps] == ['VLLM::EngineCore', '/usr/local/bin/python']
    apps = _gpu.parse_compute_apps(fixture('h200', 'two.apps.txt'))
    assert set(a['process_name'] for a in apps) == {'/opt/torch/.venv/bin/python3'}


@pytest.mark.parametrize('state,used', [('zero', 0), ('one', 4715), ('two', 11475),
                                        ('ours_only', 1643), ('stubborn_and_child', 10658),
                                        ('zero_after', 0)])
def test_h200_gpu_query_reports_memory(state, used):
    gpus = _gpu.parse_gpus(fixture('h200', '%s.gpu_module.txt' % state))
    assert gpus == [{'index': 0, 'name': 'NVIDIA H200',
                     'uuid': 'GPU-be6e3891-ca9c-e5fb-dd28-7b19eb3b5ffb',
                     'driver_version': '580.159.04', 'memory_used_mib': used,
                     'memory_total_mib': 143771}]


def test_gb10_gpu_query_has_no_memory():
    gpus = _gpu.parse_gpus(fixture('gb10', 'stale.gpu_module.txt'))
    assert gpus[0]['name'] == 'NVIDIA GB10'
    assert gpus[0]['driver_version'] == '580.126.09'
    assert gpus[0]['memory_used_mib'] is None and gpus[0]['memory_total_mib'] is None


@pytest.mark.parametrize('gpu,name,expected', [
    ('h200', 'two.gpu_memory.txt', [{'memory.used': '11475', 'memory.total': '143771'}]),
    ('h200', 'two.gpu_memory_header.txt', [{'memory.used': '11475 MiB', 'memory.total': '143771 MiB'}]),
    ('gb10', 'idle.gpu_memory.txt', [{'memory.used': None, 'memory.total': None}]),
    ('gb10', 'idle.gpu_memory_header.txt', [{'memory.used': None, 'memory.total': None}]),
])
def test_query_csv_header_units_and_na(gpu, name, expected):
    rows = _gpu.parse_query_csv(fixture(gpu, name), ('memory.used', 'memory.total'))
    assert rows == expected
    assert [_gpu.parse_mib(r['memory.used']) for r in rows] == \
        [None if e['memory.used'] is None else 11475 for e in expected]


@pytest.mark.parametrize('value,mib', [
    ('4706', 4706), ('4706 MiB', 4706), ('2 GiB', 2048), ('[N/A]', None), ('N/A', None),
    ('[Not Supported]', None), ('Not Supported', None), ('', None), (None, None),
    ('[Insufficient Permissions]', None), ('garbage', None),
])
def test_parse_mib(value, mib):
    assert _gpu.parse_mib(value) == mib


def test_query_csv_ignores_messages_and_blank_lines():
    assert _gpu.parse_compute_apps('No running processes found\n\n') == []
    assert _gpu.parse_compute_apps('') == []


@pytest.mark.parametrize('state', H200_STATES)
def test_h200_table_agrees_with_queries(state):
    table = _gpu.parse_smi_table(fixture('h200', '%s.table.txt' % state))
    gpus = _gpu.parse_gpus(fixture('h200', '%s.gpu_module.txt' % state))
    apps = _gpu.parse_compute_apps(fixture('h200', '%s.apps.txt' % state))
    assert table['driver_version'] == '580.159.04'
    assert table['cuda_version'] == '13.0'
    assert [(g['name'], g['memory_used_mib'], g['memory_total_mib']) for g in table['gpus']] == \
        [(g['name'], g['memory_used_mib'], g['memory_total_mib']) for g in gpus]
    assert table['gpus'][0]['bus_id'] == '00000000:00:06.0'
    assert sorted((p['pid'], p['used_memory_mib'], p['type']) for p in table['processes']) == \
        sorted((a['pid'], a['used_memory_mib'], 'C') for a in apps)


def test_gb10_table_memory_not_supported_and_graphics_clients():
    table = _gpu.parse_smi_table(fixture('gb10', 'stale.table.txt'))
    assert table['driver_version'] == '580.126.09'
    assert table['gpus'] == [{'index': 0, 'name': 'NVIDIA GB10', 'bus_id': '0000000F:01:00.0',
                              'memory_used_mib': None, 'memory_total_mib': None}]
    assert [(p['pid'], p['type'], p['process_name'], p['used_memory_mib'])
            for p in table['processes']] == [
        (2871, 'G', '/usr/lib/xorg/Xorg', 43), (3115, 'G', '/usr/bin/gnome-shell', 16),
        (114687, 'C', 'VLLM::EngineCore', 98304), (115020, 'C', '/usr/local/bin/python', 19135)]
    # The compute-apps query leaves graphics clients out: the table is the only place they show.
    compute = [p['pid'] for p in table['processes'] if 'C' in p['type']]
    assert compute == [a['pid'] for a in _gpu.parse_compute_apps(fixture('gb10', 'stale.apps.txt'))]


DOCKER_ID = 'f3b1c2d4e5a6978812345678901234567890abcdef1234567890abcdef123456'
CGROUPS = [
    ('v2 system service', '0::/system.slice/vllm-cluster.service\n',
     {'unit': 'vllm-cluster.service', 'user_unit': None, 'container_id': None}),
    ('v2 docker, systemd driver', '0::/system.slice/docker-%s.scope\n' % DOCKER_ID,
     {'unit': None, 'user_unit': None, 'container_id': DOCKER_ID}),
    ('v2 docker, cgroupfs driver', '0::/docker/%s\n' % DOCKER_ID,
     {'unit': None, 'user_unit': None, 'container_id': DOCKER_ID}),
    ('v2 ssh session', '0::/user.slice/user-1000.slice/session-4.scope\n',
     {'unit': None, 'user_unit': 'session-4.scope', 'container_id': None}),
    ('v2 user service', '0::/user.slice/user-1000.slice/user@1000.service/app.slice/sglang.service\n',
     {'unit': None, 'user_unit': 'sglang.service', 'container_id': None}),
    ('v2 init', '0::/init.scope\n', {'unit': None, 'user_unit': None, 'container_id': None}),
    ('v1 system service',
     '12:pids:/system.slice/vllm-proxy.service\n11:memory:/system.slice/vllm-proxy.service\n'
     '1:name=systemd:/system.slice/vllm-proxy.service\n0::/\n',
     {'unit': 'vllm-proxy.service', 'user_unit': None, 'container_id': None}),
    ('v1 docker', '13:cpuset:/docker/%s\n3:memory:/docker/%s\n1:name=systemd:/docker/%s\n'
     % (DOCKER_ID, DOCKER_ID, DOCKER_ID),
     {'unit': None, 'user_unit': None, 'container_id': DOCKER_ID}),
    ('unreadable', '', {'unit': None, 'user_unit': None, 'container_id': None}),
]


@pytest.mark.parametrize('label,text,expected', CGROUPS, ids=[c[0] for c in CGROUPS])
def test_parse_cgroup(label, text, expected):
    got = _gpu.parse_cgroup(text)
    assert dict((k, got[k]) for k in expected) == expected


DOCKER_INSPECT = json.dumps([{
    'Id': DOCKER_ID, 'Name': '/vllm-head',
    'State': {'Status': 'running', 'Running': True, 'Pid': 114600},
    'HostConfig': {'RestartPolicy': {'Name': 'unless-stopped', 'MaximumRetryCount': 0}},
    'Config': {'Image': 'nvcr.io/nvidia/vllm:25.11-py3'},
}, {
    'Id': 'a' * 64, 'Name': '/sglang-worker',
    'State': {'Status': 'exited', 'Running': False, 'Pid': 0},
    'HostConfig': {'RestartPolicy': {'Name': '', 'MaximumRetryCount': 0}},
    'Config': {'Image': 'lmsysorg/sglang:spark'},
}], indent=4)


def test_parse_docker_inspect():
    assert _gpu.parse_docker_inspect(DOCKER_INSPECT) == [
        {'id': DOCKER_ID, 'name': 'vllm-head', 'image': 'nvcr.io/nvidia/vllm:25.11-py3',
         'running': True, 'pid': 114600, 'restart_policy': 'unless-stopped'},
        {'id': 'a' * 64, 'name': 'sglang-worker', 'image': 'lmsysorg/sglang:spark',
         'running': False, 'pid': None, 'restart_policy': 'no'}]
    assert _gpu.parse_docker_inspect('Error: No such object: x') == []
    assert _gpu.parse_docker_inspect('[]') == []


MEMINFO_GB10 = """MemTotal:       127601152 kB
MemFree:        98210332 kB
MemAvailable:   101735616 kB
Buffers:            9876 kB
Cached:          4013344 kB
"""


def test_parse_meminfo_unified_pool():
    assert _gpu.parse_meminfo(MEMINFO_GB10) == {'mem_total_mib': 124610, 'mem_available_mib': 99351}
    assert _gpu.parse_meminfo('') == {'mem_total_mib': None, 'mem_available_mib': None}


def test_parse_systemctl_listings():
    files = ('vllm-cluster.service                  enabled         enabled\n'
             'vllm-proxy.service                    disabled        enabled\n'
             'sglang-head.service                   masked          enabled\n')
    assert _gpu.parse_unit_files(files) == {'vllm-cluster.service': 'enabled',
                                            'vllm-proxy.service': 'disabled',
                                            'sglang-head.service': 'masked'}
    units = ('vllm-cluster.service   loaded    active   running vLLM cluster head\n'
             '\u25cf vllm-proxy.service   loaded    failed   failed  vLLM proxy\n')
    assert _gpu.parse_units(units) == {
        'vllm-cluster.service': {'load': 'loaded', 'active': 'active', 'sub': 'running'},
        'vllm-proxy.service': {'load': 'loaded', 'active': 'failed', 'sub': 'failed'}}


def test_parse_docker_ps():
    text = '%s\tvllm-head\trunning\n%s\tsglang-worker\texited\n' % (DOCKER_ID, 'a' * 64)
    assert [c['name'] for c in _gpu.parse_docker_ps(text)] == ['vllm-head', 'sglang-worker']


@pytest.mark.parametrize('name,patterns,hit', [
    ('vllm-cluster.service', ['vllm-cluster'], True),
    ('vllm-cluster', ['vllm-cluster'], True),
    ('sglang-worker.service', ['sglang*'], True),
    ('vllm-head.service', ['vllm-cluster', 'sglang*'], False),
    ('dcgm-exporter', ['dcgm*'], True),
    (None, ['*'], False),
])
def test_name_matches(name, patterns, hit):
    assert _gpu.name_matches(name, patterns) is hit


def test_classify_ours_wins_and_container_names_count():
    holder = {'unit': None, 'container': {'name': 'vllm-head'}, 'name': 'python3', 'exe': None}
    assert _gpu.classify(holder, ['vllm-head'], ['python3']) == 'ours'
    assert _gpu.classify(holder, [], ['python3']) == 'protected'
    assert _gpu.classify(holder, [], _gpu.DEFAULT_PROTECT) is None
    assert _gpu.classify({'name': 'nvidia-persistenced', 'unit': 'nvidia-persistenced.service'},
                         [], _gpu.DEFAULT_PROTECT) == 'protected'


def test_parse_stat_comm_with_spaces_and_parens():
    text = '4242 (VLLM::Worker (x)) S 4200 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 1 1\n'
    assert _gpu.parse_stat(text) == {'comm': 'VLLM::Worker (x)', 'state': 'S', 'ppid': 4200,
                                     'starttime': 98765}
