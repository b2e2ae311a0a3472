"""gpu_holders on real H200 captures, GB10-format outputs and real local processes."""

from __future__ import annotations

import os
import sys

import pytest

from ansible_collections.sparkfleet.vllm.plugins.modules import gpu_holders

sys.path.insert(0, os.path.join(os.path.dirname(__file__), 'fixtures', 'nvidia_smi'))
# pytest fixtures are found by name in this module, so importing them is their use.
from gpu_fakes import fakebin, fixture, holders, smi_answers, warnings_seen  # noqa: E402,F401 pylint: disable=unused-import


def base(tmp_path, **extra):
    args = {'device_glob': str(tmp_path / 'nvidia[0-9]*'), 'stale_units': [], 'stale_containers': []}
    args.update(extra)
    return args


def test_h200_two_cuda_processes_listed_with_memory(run_module, fakebin, tmp_path):
    fakebin.add('nvidia-smi', smi_answers('h200', 'two'))
    result = run_module(gpu_holders, base(tmp_path))
    assert not result.get('failed'), result
    assert result['changed'] is False
    assert [(h['pid'], h['used_memory_mib'], h['status']) for h in result['holders']] == \
        [(527, 4706, 'foreign'), (568, 6754, 'foreign')]
    assert result['foreign'] == [527, 568]
    gpu = result['gpu']
    assert (gpu['name'], gpu['driver_version'], gpu['memory_used_mib'], gpu['memory_total_mib'],
            gpu['unified_memory']) == ('NVIDIA H200', '580.159.04', 11475, 143771, False)
    # Those PIDs live on the device machine, not here: named from nvidia-smi, marked not visible.
    assert result['holders'][0]['visible'] is False
    assert result['holders'][0]['name'] == 'python3'


def test_h200_idle_has_no_holders(run_module, fakebin, tmp_path):
    fakebin.add('nvidia-smi', smi_answers('h200', 'zero'))
    result = run_module(gpu_holders, base(tmp_path))
    assert result['holders'] == [] and result['foreign'] == []
    assert result['gpu']['memory_used_mib'] == 0


def test_gb10_unified_memory_reported_from_meminfo(run_module, fakebin, tmp_path):
    fakebin.add('nvidia-smi', smi_answers('gb10', 'stale'))
    result = run_module(gpu_holders, base(tmp_path))
    gpu = result['gpu']
    assert gpu['name'] == 'NVIDIA GB10'
    assert gpu['memory_used_mib'] is None and gpu['memory_total_mib'] is None
    assert gpu['unified_memory'] is True
    assert gpu['mem_total_mib'] > 0 and 0 < gpu['mem_available_mib'] <= gpu['mem_total_mib']
    assert [(h['pid'], h['name'], h['used_memory_mib']) for h in result['holders']] == \
        [(114687, 'VLLM::EngineCore', 98304), (115020, 'python', 19135)]


def test_compute_app_and_device_holder_merged_by_pid(run_module, fakebin, holders, tmp_path):
    pid = holders.start()
    fakebin.add('nvidia-smi', smi_answers(
        'h200', 'one', apps='%d, /usr/bin/python3, 4706\n' % pid))
    result = run_module(gpu_holders, base(tmp_path))
    assert len(result['holders']) == 1
    holder = result['holders'][0]
    assert holder['pid'] == pid
    assert holder['compute_app'] is True and holder['devices'] == [holders.device]
    assert holder['used_memory_mib'] == 4706
    assert holder['visible'] is True and holder['user'] == 'root'
    assert holder['ppid'] == os.getpid()
    assert 'holder.py' in holder['cmdline']


def test_device_holders_found_without_nvidia_smi(run_module, fakebin, holders, tmp_path):
    parent, child = holders.start('parent')
    other = holders.start()
    result = run_module(gpu_holders, base(tmp_path, nvidia_smi='skip'))
    by_pid = dict((h['pid'], h) for h in result['holders'])
    assert sorted(by_pid) == sorted([parent, child, other])
    assert by_pid[child]['parent_holder'] == parent
    assert by_pid[parent]['parent_holder'] is None
    assert all(h['compute_app'] is False and h['used_memory_mib'] is None for h in by_pid.values())
    assert result['gpu']['nvidia_smi'] is None


def test_ours_and_protected_by_process_name(run_module, fakebin, holders, tmp_path):
    ours = holders.start(comm='vllm-head')
    protected = holders.start(comm='nv-hostengine')
    foreign = holders.start()
    result = run_module(gpu_holders, base(tmp_path, nvidia_smi='skip', ours=['vllm-head']))
    status = dict((h['pid'], h['status']) for h in result['holders'])
    assert status == {ours: 'ours', protected: 'protected', foreign: 'foreign'}
    assert result['foreign'] == [foreign]


def test_nvidiactl_style_files_outside_the_glob_are_ignored(run_module, fakebin, holders, tmp_path):
    # A process with only nvidiactl/nvidia-uvm open (an NVML client) holds no GPU memory.
    holders.start()
    result = run_module(gpu_holders, {'device_glob': str(tmp_path / 'nvidia-uvm*'),
                                      'nvidia_smi': 'skip', 'stale_units': []})
    assert result['holders'] == []


def test_nvidia_smi_missing(run_module, fakebin, tmp_path, monkeypatch, warnings_seen):
    monkeypatch.setenv('PATH', fakebin.path)
    result = run_module(gpu_holders, base(tmp_path, nvidia_smi='required'))
    assert result['failed'] and 'nvidia-smi' in result['msg']
    result = run_module(gpu_holders, base(tmp_path))
    assert not result.get('failed')
    assert any('nvidia-smi not found' in w for w in warnings_seen())


def test_nvidia_smi_broken_driver(run_module, fakebin, tmp_path, warnings_seen):
    broken = ('NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver. '
              'Make sure that the latest NVIDIA driver is installed and running.\n')
    fakebin.add('nvidia-smi', {'*': [9, broken]})
    result = run_module(gpu_holders, base(tmp_path, nvidia_smi='required'))
    assert result['failed'] and result['rc'] == 9 and 'communicate' in result['msg']
    assert 'driver' in result['hint']
    result = run_module(gpu_holders, base(tmp_path))
    assert not result.get('failed') and result['gpu']['gpus'] == []
    assert any('nvidia-smi failed (rc 9)' in w for w in warnings_seen())


def test_stale_units_and_containers_listed(run_module, fakebin, tmp_path):
    fakebin.add('nvidia-smi', smi_answers('gb10', 'idle'))
    fakebin.add('systemctl', {
        'list-unit-files': [0, 'vllm-cluster.service enabled enabled\n'
                               'vllm-proxy.service disabled enabled\n'
                               'vllm-head.service enabled enabled\n'
                               'ssh.service enabled enabled\n'],
        'list-units': [0, 'vllm-proxy.service loaded failed failed vLLM proxy\n'
                          'ssh.service loaded active running OpenBSD Secure Shell server\n'],
    })
    cid = 'c0ffee' + '0' * 58
    fakebin.add('docker', {
        'ps': [0, '%s\tsglang-head\texited\n%s\tvllm-head\trunning\n' % (cid, 'b' * 64)],
        'inspect': [0, '[{"Id": "%s", "Name": "/sglang-head", "State": {"Running": false},'
                       ' "HostConfig": {"RestartPolicy": {"Name": "unless-stopped"}}}]' % cid],
    })
    result = run_module(gpu_holders, {'device_glob': str(tmp_path / 'x*'),
                                      'stale_units': ['vllm-*', 'sglang*'], 'ours': ['vllm-head']})
    assert result['stale'] == [
        {'kind': 'unit', 'name': 'vllm-cluster.service', 'enabled': 'enabled',
         'active': 'inactive', 'sub': None, 'starts': [], 'why': 'named in stale_units'},
        {'kind': 'unit', 'name': 'vllm-proxy.service', 'enabled': 'disabled',
         'active': 'failed', 'sub': 'failed', 'starts': [], 'why': 'named in stale_units'},
        {'kind': 'container', 'name': 'sglang-head', 'id': cid, 'state': 'exited',
         'restart_policy': 'unless-stopped', 'why': 'named in stale_containers'}]
    assert any(c[0] == 'inspect' and cid in c for c in fakebin.calls('docker'))
    # the plan: the enabled unit is disabled, the failed one is left (disabled, inactive), the container loses its
    # policy; our own container (vllm-head) is never stale
    assert [(a['action'], a['target'], a['why']) for a in result['plan']] == [
        ('stop_unit', 'vllm-cluster.service', 'named in stale_units'),
        ('stop_container', 'sglang-head', 'named in stale_containers')]


def test_docker_down_is_a_warning(run_module, fakebin, tmp_path, warnings_seen):
    fakebin.add('systemctl', {'*': [1, 'System has not been booted with systemd\n']})
    fakebin.add('docker', {'*': [1, 'Cannot connect to the Docker daemon\n']})
    result = run_module(gpu_holders, {'device_glob': str(tmp_path / 'x*'), 'nvidia_smi': 'skip'})
    assert not result.get('failed') and result['stale'] == []
    assert any('docker ps failed' in w for w in warnings_seen())


def test_module_asks_exactly_the_captured_queries(run_module, fakebin, tmp_path):
    # The H200 fixtures are only evidence if the module runs the very commands captured.
    fakebin.add('nvidia-smi', smi_answers('h200', 'two'))
    run_module(gpu_holders, base(tmp_path))
    with open(os.path.join(os.path.dirname(__file__), 'fixtures', 'nvidia_smi', 'h200',
                           'COMMANDS.txt')) as handle:
        captured = set(line.split(None, 1)[1].strip() for line in handle
                       if line.startswith('two.gpu_module') or line.startswith('two.apps.'))
    asked = set(' '.join(['nvidia-smi'] + call) for call in fakebin.calls('nvidia-smi'))
    assert asked == captured


def test_a_listener_of_a_port_we_need_that_nothing_stops_fails_with_what_would_make_it_stale(run_module, tmp_path):
    import socket
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    try:
        args = base(tmp_path, nvidia_smi='skip', ports=[{'port': port, 'setting': 'my_api_port'}],
                    setting_names={'cleanup_units': 'my_stale_units'})
        result = run_module(gpu_holders, args)
        assert not result.get('failed') and result['changed'] is False
        assert [(p['port'], p['pid'], p['status']) for p in result['port_holders']] == [(port, os.getpid(), 'foreign')]
        assert result['blocking'][0].startswith('port %d (my_api_port) on 127.0.0.1: pid %d ' % (port, os.getpid()))
        assert 'which the GPU cleanup will not stop' in result['blocking'][0]
        assert result['blocking'][0].endswith('or move ours (my_api_port)')
        failed = run_module(gpu_holders, dict(args, fail_on_foreign=True), check_mode=True)
        assert failed['failed'] and result['blocking'][0] in failed['msg'] and failed['hint'] == 'Nothing was changed.'
    finally:
        sock.close()
    # a free port: nothing to report
    result = run_module(gpu_holders, base(tmp_path, nvidia_smi='skip', ports=[{'port': port}], fail_on_foreign=True))
    assert not result.get('failed') and result['port_holders'] == [] and result['blocking'] == []


@pytest.mark.parametrize('args, msg', [
    ({'ports': [{'port': 0}]}, 'ports must be 1-65535, got [0]'),
    ({'setting_names': {'no_such_setting': 'x'}}, 'setting_names has unknown setting(s) no_such_setting'),
])
def test_bad_arguments_are_refused(run_module, tmp_path, args, msg):
    result = run_module(gpu_holders, base(tmp_path, nvidia_smi='skip', **args))
    assert result['failed'] and result['msg'] == msg


def test_a_gpu_holder_that_is_not_stale_blocks_naming_it(run_module, holders, tmp_path):
    job = holders.start()
    engine = holders.start(comm='VLLM::EngineCore')
    result = run_module(gpu_holders, base(tmp_path, nvidia_smi='skip', fail_on_foreign=True,
                                          setting_names={'cleanup_foreign': 'gpu_cleanup_stop_foreign: true'}))
    assert result['failed'] is True and len(result['blocking']) == 1
    assert result['blocking'][0].startswith('GPU: pid %d python' % job)
    assert 'gpu_cleanup_stop_foreign: true' in result['msg'] and result['hint'] == 'Nothing was changed.'
    assert [a['pids'] for a in result['plan']] == [[engine]]
    result = run_module(gpu_holders, base(tmp_path, nvidia_smi='skip', fail_on_foreign=True, stop_foreign=True))
    assert not result.get('failed') and result['blocking'] == []
    assert sorted(p for a in result['plan'] for p in a['pids']) == sorted([job, engine])
