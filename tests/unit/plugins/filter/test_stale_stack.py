"""stale_stack: the old stack back beside ours, named by status.yml (issue 45.5).

The units and containers come from gpu_holders run on the lab's old stack as captured (systemctl and docker outputs in
tests/unit/plugins/modules/fixtures/oldstack), with the record gpu_release keeps on the node; the GPU holder is the
shape gpu_holders reports for a process in a container.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.vllm.plugins.filter.stale_stack import parse_record, stale_stack
from ansible_collections.sparkfleet.vllm.plugins.modules import gpu_holders

FIX = os.path.join(os.path.dirname(__file__), '..', 'modules', 'fixtures')
sys.path.insert(0, os.path.join(FIX, 'nvidia_smi'))
# pytest fixtures are found by name in this module, so importing them is their use.
from gpu_fakes import fakebin, smi_answers  # noqa: E402,F401 pylint: disable=unused-import

RECORD = json.dumps({'units': ['vllm-cluster.service', 'vllm-embeddings.service', 'vllm-proxy.service',
                               'vllm-reranker.service'],
                     'containers': ['reranker', 'vllm_embeddings', 'vllm_node']}, indent=1)


def read(name):
    with open(os.path.join(FIX, 'oldstack', name)) as handle:
        return handle.read()


@pytest.fixture
def old_stack(run_module, fakebin, tmp_path):
    """gpu_holders on the node with the old stack running again, asked about the record's units and containers (as
    node_status.yml asks)."""
    fakebin.add('nvidia-smi', smi_answers('gb10', 'idle'))
    fakebin.add('systemctl', {'list-unit-files': [0, read('list-unit-files.txt')],
                              'list-units': [0, read('list-units.txt')], 'show': [0, read('systemctl_show.txt')],
                              '*': [0, '']})
    fakebin.add('docker', {'ps': [0, read('docker_ps.txt')], 'inspect': [0, read('docker_inspect.json')],
                           '*': [0, '']})
    known = stale_stack(RECORD)
    result = run_module(gpu_holders, {'device_glob': str(tmp_path / 'nvidia[0-9]*'), 'stale_units': known['units'],
                                      'stale_containers': known['containers'],
                                      'ours': ['sparkfleet-ray', 'sparkfleet-vllm']})
    assert not result.get('failed'), result.get('msg')
    return result


ENGINE = {'pid': 546, 'name': 'python3', 'user': 'root', 'used_memory_mib': 19135, 'unit': None,
          'container': {'id': '9cb0d96a6475', 'name': 'vllm_node', 'image': 'vllm/vllm-openai', 'restart_policy': 'no'},
          'status': 'foreign'}


def test_the_record_is_read_tolerantly():
    assert parse_record(RECORD) == {'units': ['vllm-cluster.service', 'vllm-embeddings.service', 'vllm-proxy.service',
                                              'vllm-reranker.service'],
                                    'containers': ['reranker', 'vllm_embeddings', 'vllm_node']}
    # a registered `cat` result, missing (rc 1, nothing on stdout), half-written or of the wrong shape: nothing known
    assert parse_record({'rc': 0, 'stdout': RECORD})['containers'] == ['reranker', 'vllm_embeddings', 'vllm_node']
    for bad in ({'rc': 1, 'stdout': '', 'stderr': 'cat: No such file'}, '{"units": ["a.serv', '[1, 2]', '',
                '{"units": "vllm-cluster", "containers": [3, "", "x"]}'):
        assert parse_record(bad) in ({'units': [], 'containers': []}, {'units': [], 'containers': ['x']}), bad
    assert stale_stack('') == {'units': [], 'containers': []}


def test_the_old_stack_back_is_named_with_what_it_holds_and_when_it_stops(old_stack):
    picture = dict(old_stack, holders=[ENGINE])
    lines = stale_stack(RECORD, 'spark-2', holders=picture)
    assert len(lines) == 1
    line = lines[0]
    assert line.startswith('spark-2: an old stack runs beside ours: ')
    # every running one of the record, with its state; what holds the GPU, with its memory
    for name in ('unit vllm-cluster.service (active/exited', 'unit vllm-proxy.service (active/running',
                 'container vllm_node (running', 'container reranker (running', 'container vllm_embeddings (running'):
        assert name in line, name
    assert 'it holds the GPU: pid 546 python3 in container vllm_node, 19135 MiB' in line
    assert 'unified memory free on the node' in line
    assert 'It will stop at the next site.yml (gpu_cleanup) and before sparkfleet-ray\'s next start' in line
    assert 'run site.yml' in line   # the fail message's "Run site.yml to repair it" keys on it
    # none of ours is named as the old stack
    assert 'sparkfleet-' not in line.split('It will stop')[0]


def test_nothing_is_said_when_the_old_stack_stays_stopped(old_stack):
    stopped = dict(old_stack, stale=[dict(e, active='inactive', sub='dead') if e['kind'] == 'unit'
                                     else dict(e, state='exited') for e in old_stack['stale']])
    assert stopped['stale'], 'the record names units and containers the node has'
    assert stale_stack(RECORD, 'spark-2', holders=stopped) == []
    # nothing known (no record): gpu_holders is asked about no stale unit, and nothing is named
    assert stale_stack('', 'spark-2', holders=dict(old_stack, stale=[])) == []


def test_a_running_container_that_holds_nothing_is_still_named(old_stack):
    only = dict(old_stack, holders=[], stale=[e for e in old_stack['stale'] if e['name'] == 'vllm_node'])
    assert stale_stack(RECORD, 'spark-1', holders=only, ray_unit='ray-x') == [
        "spark-1: an old stack runs beside ours: container vllm_node (running%s); it holds no GPU now%s; our engine's"
        " next start may not get the memory it needs. It will stop at the next site.yml (gpu_cleanup) and before"
        " ray-x's next start (sparkfleet-stale-stop): run site.yml to stop it now" % (
            (', restart policy ' + only['stale'][0]['restart_policy']) if only['stale'][0].get('restart_policy') else '',
            '; %d of %d MiB of unified memory free on the node' % (
                old_stack['gpu']['mem_available_mib'], old_stack['gpu']['mem_total_mib']))]


@pytest.mark.parametrize('kwargs, message', [
    ({'host': 'spark-1', 'holders': ['x']}, 'holders= expects a sparkfleet.vllm.gpu_holders result'),
    ({'host': '', 'holders': {'stale': []}}, 'host must be'),
    ({'host': 'spark-1', 'holders': {'stale': []}, 'ray_unit': ''}, 'ray_unit must be'),
])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message):
        stale_stack(RECORD, **kwargs)
