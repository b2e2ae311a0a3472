"""DGX OS system services (issue 39, item 5): the GPU cleanup never stops one unless the inventory names it.

A DGX OS install runs services that may open the GPU (the DGX Dashboard on port 11000, DCGM, the persistence daemon,
the desktop's display stack). They are protected by default (``system``), not even ``stop_foreign`` stops them, and
only a unit or container named in the stale lists does; what is left is named with why (gpu_holders' ``left``).
"""

from __future__ import annotations

import os
import sys

from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu import _gpu, _gpu_plan
from ansible_collections.sparkfleet.vllm.plugins.modules import gpu_holders

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'modules', 'fixtures', 'nvidia_smi'))
# pytest fixtures are found by name in this module, so importing them is their use.
from gpu_fakes import holders  # noqa: E402,F401 pylint: disable=unused-import,wrong-import-position

NAMES = {'cleanup_units': 'gpu_cleanup_stale_units', 'cleanup_containers': 'gpu_cleanup_stale_containers',
         'cleanup_protect': 'gpu_cleanup_protect', 'cleanup_system': 'gpu_cleanup_system_services',
         'cleanup_foreign': 'gpu_cleanup_stop_foreign: true'}
OURS = ['sparkfleet-ray', 'sparkfleet-vllm']


def dashboard(pid=2210, unit='dgx-dashboard.service'):
    return {'pid': pid, 'ppid': 1, 'name': 'dgx-dashboard', 'exe': '/opt/nvidia/dgx-dashboard/bin/dgx-dashboard',
            'cmdline': '/opt/nvidia/dgx-dashboard/bin/dgx-dashboard --port 11000', 'user': 'root', 'unit': unit,
            'user_unit': None, 'container': None, 'visible': True, 'parent_holder': None, 'used_memory_mib': None}


def classified(holder, **params):
    named = (params.get('stale_units') or []) + (params.get('stale_containers') or [])
    args = (OURS, params.get('protect', _gpu.DEFAULT_PROTECT), params.get('system', _gpu.DEFAULT_SYSTEM), named)
    status = _gpu.classify(holder, *args) or 'foreign'
    return dict(holder, status=status, protected_by=_gpu.protected_by(holder, *args[1:]) if status == 'protected'
                else None)


def params(**extra):
    base = {'ours': OURS, 'protect': [], 'system': _gpu.DEFAULT_SYSTEM, 'stale_units': _gpu.DEFAULT_STALE,
            'stale_containers': _gpu.DEFAULT_STALE_CONTAINERS, 'stale_commands': _gpu.DEFAULT_STALE_COMMANDS,
            'mask': False, 'remove_containers': False}
    base.update(extra)
    return base


def test_a_dgx_os_service_holding_the_gpu_is_protected_and_stop_foreign_does_not_stop_it():
    holder = classified(dashboard(), protect=[])
    assert (holder['status'], holder['protected_by']) == ('protected', 'system')
    plan = _gpu_plan.build_plan([holder], [], [], [], params=params(protect=[], stop_foreign=True))
    assert plan.actions == [] and plan.blocking() == []
    assert _gpu_plan.left_text(holder, NAMES) == (
        'pid 2210 dgx-dashboard (unit dgx-dashboard.service) holds the GPU and is left running: a DGX OS system service'
        ' (gpu_cleanup_system_services): never stopped unless the inventory names it (add dgx-dashboard to'
        ' gpu_cleanup_stale_units to stop it)')


def test_named_in_the_stale_units_it_is_stopped():
    holder = classified(dashboard(), protect=[], stale_units=['dgx-dashboard'])
    assert holder['status'] == 'foreign'
    units = [{'name': 'dgx-dashboard.service', 'enabled': 'enabled', 'active': 'active', 'starts': []}]
    plan = _gpu_plan.build_plan([holder], units, [], [], params=params(stale_units=['dgx-dashboard']))
    assert [(a['action'], a['target'], a['pids']) for a in plan.actions] == [
        ('stop_unit', 'dgx-dashboard.service', [2210])]


def test_a_command_pattern_never_makes_a_system_service_stale():
    # a stale command pattern broad enough to match its command line (a DGX OS service running Python, say)
    holder = classified(dashboard(), protect=[])
    plan = _gpu_plan.build_plan([holder], [], [], [], params=params(stale_commands=['*dgx-dashboard*']))
    assert plan.actions == []


def test_an_operator_protect_list_still_wins_and_says_so():
    holder = classified(dashboard(), protect=['dgx-dashboard'], stale_units=['dgx-dashboard'])
    assert (holder['status'], holder['protected_by']) == ('protected', 'protect')
    assert _gpu_plan.left_text(holder, NAMES).endswith('left running: protected (gpu_cleanup_protect)')


def test_a_system_unit_that_starts_a_stopped_container_is_not_made_stale():
    units = [{'name': 'dgx-dashboard.service', 'enabled': 'enabled', 'active': 'active', 'starts': ['vllm_node']},
             {'name': 'vllm-cluster.service', 'enabled': 'enabled', 'active': 'active', 'starts': ['vllm_node']}]
    containers = [{'id': 'a' * 64, 'name': 'vllm_node', 'state': 'running', 'restart_policy': 'unless-stopped'}]
    plan = _gpu_plan.build_plan([], units, containers, [], params=params())
    assert 'dgx-dashboard.service' not in plan.stale_units and 'vllm-cluster.service' in plan.stale_units


def test_the_dashboard_on_a_port_we_need_is_named_as_a_system_service():
    listener = {'port': 11000, 'setting': 'ray_cluster_min_worker_port', 'address': '0.0.0.0', 'pid': 2210,
                'name': 'dgx-dashboard', 'cmdline': None, 'unit': 'dgx-dashboard.service', 'user_unit': None,
                'container_id': None, 'container_name': None}
    plan = _gpu_plan.build_plan([], [], [], [listener], params=params())
    (sock,) = plan.ports
    assert (sock['status'], sock['protected'], sock['protected_by']) == ('foreign', True, 'system')
    assert _gpu_plan.foreign_text(sock, NAMES).endswith(
        'it is a DGX OS system service (gpu_cleanup_system_services), which the cleanup stops only where the '
        'inventory names it: add it to gpu_cleanup_stale_units to stop it, or move ours (ray_cluster_min_worker_port)')


def test_the_default_list_names_the_services_and_keeps_the_old_protect_entries():
    for name in ('dgx-dashboard.service', 'nvidia-persistenced.service', 'nvidia-dcgm.service', 'gdm3.service',
                 'nvsm-core.service'):
        assert _gpu.name_matches(name, _gpu.DEFAULT_SYSTEM), name
    assert not _gpu.name_matches('vllm-cluster.service', _gpu.DEFAULT_SYSTEM)


def test_gpu_holders_names_what_it_leaves_and_stop_foreign_leaves_it(run_module, holders, tmp_path):
    """Real processes holding a stand-in device file: one named like the DGX Dashboard, one a colleague's job."""
    service = holders.start(comm='dgx-dashboard')
    job = holders.start()
    args = {'device_glob': str(tmp_path / 'nvidia[0-9]*'), 'stale_units': [], 'stale_containers': [],
            'nvidia_smi': 'skip', 'stop_foreign': True, 'fail_on_foreign': True, 'setting_names': NAMES}
    result = run_module(gpu_holders, args)
    assert not result.get('failed'), result.get('msg')
    status = dict((h['pid'], (h['status'], h['protected_by'])) for h in result['holders'])
    assert status == {service: ('protected', 'system'), job: ('foreign', None)}
    assert [p for a in result['plan'] for p in a['pids']] == [job]
    assert len(result['left']) == 1 and result['left'][0].startswith('pid %d dgx-dashboard' % service)
    assert 'a DGX OS system service (gpu_cleanup_system_services)' in result['left'][0]
