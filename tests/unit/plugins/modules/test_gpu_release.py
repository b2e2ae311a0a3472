"""gpu_release against real local processes holding a stand-in device file, and fake commands."""

from __future__ import annotations

import getpass
import json
import os
import sys
import time

from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu import _gpu
from ansible_collections.sparkfleet.vllm.plugins.modules import gpu_release

sys.path.insert(0, os.path.join(os.path.dirname(__file__), 'fixtures', 'nvidia_smi'))
# pytest fixtures are found by name in this module, so importing them is their use.
from gpu_fakes import alive, fakebin, fixture, holders, smi_answers, warnings_seen  # noqa: E402,F401 pylint: disable=unused-import


def base(tmp_path, **extra):
    """The options of these tests: the plain python holders they start are foreign, so stop_foreign lets the module stop
    them (the tests of the default, which refuses them, set it false)."""
    args = {'device_glob': str(tmp_path / 'nvidia[0-9]*'), 'stale_units': [], 'stale_containers': [],
            'nvidia_smi': 'skip', 'grace': 1, 'timeout': 5, 'settle': 0, 'stop_foreign': True}
    args.update(extra)
    return args


def test_terminates_plain_holders_and_reports_free(run_module, holders, tmp_path):
    one = holders.start()
    two = holders.start()
    result = run_module(gpu_release, base(tmp_path))
    assert not result.get('failed'), result.get('msg')
    assert result['changed'] is True
    assert not alive(one) and not alive(two)
    assert [(a['action'], a['pids'], a['result']) for a in result['actions']] == \
        [('signal', [one], 'terminated'), ('signal', [two], 'terminated')]
    assert result['holders_after'] == []
    assert sorted(h['pid'] for h in result['holders_before']) == sorted([one, two])
    assert result['diff']['before'].count('pid ') == 2 and 'pid ' not in result['diff']['after']


def test_sigterm_ignored_gets_sigkill_after_grace(run_module, main_sleeps, holders, tmp_path):
    stubborn = holders.start('ignore')
    polite = holders.start()
    result = run_module(gpu_release, base(tmp_path, grace=2))
    assert not result.get('failed'), result.get('msg')
    assert not alive(stubborn) and not alive(polite)
    by_pid = dict((a['pids'][0], a) for a in result['actions'])
    assert by_pid[stubborn]['result'] == 'killed' and by_pid[stubborn]['killed'] == [stubborn]
    assert by_pid[stubborn]['exit_s'][str(stubborn)] >= 2.0      # never killed before its grace
    assert by_pid[polite]['result'] == 'terminated'
    assert by_pid[polite]['exit_s'][str(polite)] < by_pid[stubborn]['exit_s'][str(stubborn)]
    # One grace period for all processes, not one each: what the module chose to wait, not the wall clock.
    assert sum(main_sleeps) < 2 * 2


def test_child_holder_stopped_with_its_parent(run_module, holders, tmp_path):
    parent, child = holders.start('parent')
    result = run_module(gpu_release, base(tmp_path))
    assert not result.get('failed'), result.get('msg')
    assert [(a['target'].split()[1], sorted(a['pids'])) for a in result['actions']] == \
        [(str(parent), sorted([parent, child]))]
    assert not alive(parent) and not alive(child)


def test_check_mode_plans_and_changes_nothing(run_module, holders, tmp_path):
    parent, child = holders.start('parent')
    stubborn = holders.start('ignore')
    result = run_module(gpu_release, base(tmp_path), check_mode=True)
    assert result['changed'] is True
    assert all(a['result'] == 'planned' for a in result['actions'])
    assert sorted(p for a in result['actions'] for p in a['pids']) == sorted([parent, child, stubborn])
    assert alive(parent) and alive(child) and alive(stubborn)
    assert 'pid %d' % stubborn in result['diff']['before']
    assert 'pid %d' % stubborn not in result['diff']['after']


def test_nothing_to_do_is_not_changed(run_module, holders, tmp_path):
    result = run_module(gpu_release, base(tmp_path))
    assert not result.get('failed') and result['changed'] is False and result['actions'] == []
    result = run_module(gpu_release, base(tmp_path), check_mode=True)
    assert result['changed'] is False


def test_ours_and_protected_are_left_running(run_module, holders, tmp_path):
    ours = holders.start(comm='vllm-worker')
    protected = holders.start(comm='nvidia-persistenced')
    foreign = holders.start()
    result = run_module(gpu_release, base(tmp_path, ours=['vllm-worker']))
    assert not result.get('failed'), result.get('msg')
    assert alive(ours) and alive(protected) and not alive(foreign)
    assert sorted(h['pid'] for h in result['holders_after']) == sorted([ours, protected])
    assert [a['pids'] for a in result['actions']] == [[foreign]]


def test_fails_naming_a_holder_that_comes_back(run_module, holders, tmp_path):
    # A supervisor that is not itself a holder restarts the holder: the restart loop of a
    # stale deployment. Release must fail after timeout and name what holds the GPU.
    script = tmp_path / 'supervisor.py'
    script.write_text(
        'import subprocess, sys, time\n'
        'while True:\n'
        '    subprocess.call([sys.executable, "-c", "import time; f = open(%r); time.sleep(60)"])\n'
        '    time.sleep(0.1)\n' % holders.device)
    import subprocess
    sup = subprocess.Popen([sys.executable, str(script)])
    holders.procs.append(sup)
    holders.pids.append(sup.pid)
    try:
        deadline = time.time() + 10
        while not _gpu.device_holders(holders.device) and time.time() < deadline:
            time.sleep(0.05)
        result = run_module(gpu_release, base(tmp_path, timeout=3, settle=2))
        assert result['failed'] is True
        assert 'GPU still held after 3s by: pid ' in result['msg']
        assert 'ppid=%d' % sup.pid in result['msg']
        remaining = [h['pid'] for h in result['holders_after']]
        assert remaining and all(str(pid) in result['msg'] for pid in remaining)
        assert 'ours' in result['hint']
    finally:
        for child in _gpu.descendants(sup.pid, _gpu.children_map()):
            holders.pids.append(child)


def test_memory_still_used_fails_on_gpus_that_report_it(run_module, fakebin, tmp_path):
    # No compute app left (h200 zero) but the GPU still reports two processes' worth in use.
    fakebin.add('nvidia-smi', smi_answers('h200', 'zero', gpu_state='two'))
    result = run_module(gpu_release, base(tmp_path, nvidia_smi='auto', timeout=1))
    assert result['failed'] and '11475 MiB' in result['msg'] and 'max_used_mib=1024' in result['msg']
    result = run_module(gpu_release, base(tmp_path, nvidia_smi='auto', timeout=1,
                                          max_used_mib=12000))
    assert not result.get('failed')


def test_memory_of_ours_does_not_count(run_module, fakebin, holders, tmp_path):
    ours = holders.start(comm='vllm-head')
    apps = '%d, /usr/bin/python3, 11000\n' % ours
    fakebin.add('nvidia-smi', smi_answers('h200', 'two', apps=apps))  # 11475 MiB used in all
    result = run_module(gpu_release, base(tmp_path, nvidia_smi='auto', ours=['vllm-head']))
    assert not result.get('failed'), result.get('msg')
    assert result['changed'] is False and alive(ours)


def test_gb10_memory_not_reported_is_not_a_failure(run_module, fakebin, tmp_path):
    fakebin.add('nvidia-smi', smi_answers('gb10', 'idle'))
    result = run_module(gpu_release, base(tmp_path, nvidia_smi='auto'))
    assert not result.get('failed') and result['gpu']['unified_memory'] is True


def test_units_and_containers_are_stopped_disabled_and_unrestarted(run_module, fakebin, tmp_path, monkeypatch):
    cid = 'd' * 64
    fakebin.add('nvidia-smi', smi_answers('gb10', 'stale'))
    fakebin.add('systemctl', {
        'list-unit-files': [0, 'vllm-proxy.service enabled enabled\n'
                               'vllm-embeddings.service disabled enabled\n'],
        'list-units': [0, ''],
        '*': [0, ''],
    })
    fakebin.add('docker', {
        'ps': [0, '%s\tsglang-head\texited\n' % cid],
        'inspect': [0, '[{"Id": "%s", "Name": "/sglang-head", "State": {"Running": false},'
                       ' "HostConfig": {"RestartPolicy": {"Name": "always"}}}]' % cid],
        '*': [0, ''],
    })
    # The two GB10 compute apps belong to a unit and a container (their cgroups on a real
    # Spark); first scan finds them, the verify scan finds them gone.
    scans = []

    def fake_holders(self):
        scans.append(1)
        if len(scans) > 1:
            return []
        return [
            {'pid': 114687, 'name': 'VLLM::EngineCore', 'status': 'foreign', 'unit': 'vllm-cluster.service',
             'container': None, 'visible': True, 'parent_holder': None, 'used_memory_mib': 98304},
            {'pid': 115020, 'name': 'python', 'status': 'foreign', 'unit': None, 'visible': True,
             'container': {'id': 'e' * 64, 'name': 'vllm-old', 'restart_policy': 'unless-stopped'},
             'parent_holder': None, 'used_memory_mib': 19135},
        ]
    monkeypatch.setattr(_gpu.GpuScanner, 'holders', fake_holders)
    args = base(tmp_path, nvidia_smi='auto', stale_units=['vllm-*', 'sglang*'], grace=7)

    result = run_module(gpu_release, args, check_mode=True)
    assert [(a['action'], a['target'], a['reason']) for a in result['actions']] == [
        ('stop_unit', 'vllm-cluster.service', 'holder'),
        ('stop_container', 'vllm-old', 'holder'),
        ('stop_unit', 'vllm-proxy.service', 'stale'),
        ('stop_container', 'sglang-head', 'stale')]
    assert [c[0] for c in fakebin.calls('systemctl')] == ['list-unit-files', 'list-units', 'show']
    assert all(c[0] in ('ps', 'inspect') for c in fakebin.calls('docker'))

    scans.clear()
    result = run_module(gpu_release, args)
    assert not result.get('failed'), result.get('msg')
    acting = [c for c in fakebin.calls('systemctl') if c[0] not in ('list-unit-files', 'list-units', 'show')]
    # One stop for all units (one systemd transaction, queued, then waited for once the containers are stopped) and
    # one for all containers (docker stops them in parallel): the old stack's containers whose PID 1 ignores SIGTERM
    # cost one grace, not one each, and the units' graces overlap the containers'.
    assert acting == [['stop', '--no-block', 'vllm-cluster.service', 'vllm-proxy.service'],
                      ['stop', 'vllm-cluster.service', 'vllm-proxy.service'],
                      ['disable', 'vllm-cluster.service', 'vllm-proxy.service']]
    # Every restart policy goes before anything stops: a container whose process ends by a stopped unit's signal
    # must not be restarted by docker.
    acting = [c for c in fakebin.calls('docker') if c[0] not in ('ps', 'inspect')]
    assert acting == [['update', '--restart=no', 'vllm-old'], ['update', '--restart=no', 'sglang-head'],
                      ['stop', '-t', '7', 'vllm-old', 'sglang-head']]
    assert all(a['result'] == 'stopped' for a in result['actions'])


def test_a_container_that_fails_to_stop_among_several_is_named(run_module, fakebin, tmp_path, monkeypatch):
    # docker stops what it can and exits 1 naming the one it could not: each one alone again says which.
    fakebin.add('docker', {
        'ps': [0, ''],
        'stop -t 1 vllm_node vllm_embeddings': [1, 'vllm_node\n'],
        'stop -t 1 vllm_embeddings': [1, 'Error response from daemon: cannot stop container: vllm_embeddings: '
                                         'permission denied\n'],
        '*': [0, '']})
    fakebin.add('systemctl', {'*': [0, '']})

    def fake_holders(self):
        return [{'pid': 4000 + n, 'name': 'python3', 'status': 'foreign', 'unit': None, 'visible': True,
                 'container': {'id': str(n) * 64, 'name': name, 'restart_policy': 'no'},
                 'parent_holder': None, 'used_memory_mib': None}
                for n, name in enumerate(('vllm_node', 'vllm_embeddings'), 1)]
    monkeypatch.setattr(_gpu.GpuScanner, 'holders', fake_holders)
    result = run_module(gpu_release, base(tmp_path, timeout=1))
    assert result['failed']
    assert dict((a['target'], a['result']) for a in result['actions'] if a['action'] == 'stop_container') == {
        'vllm_node': 'stopped', 'vllm_embeddings': 'failed'}
    assert [e['cmd'][1:] for e in result['errors']] == [['stop', '-t', '1', 'vllm_embeddings']]
    assert 'permission denied' in result['errors'][0]['stderr']


def test_failed_unit_stop_is_reported(run_module, fakebin, tmp_path, monkeypatch):
    fakebin.add('systemctl', {'stop': [5, 'Failed to stop vllm-cluster.service: Access denied\n'],
                              '*': [0, '']})
    calls = []

    def fake_holders(self):
        calls.append(1)
        return [{'pid': 4242, 'name': 'python3', 'status': 'foreign', 'unit': 'vllm-cluster.service',
                 'container': None, 'visible': True, 'parent_holder': None, 'used_memory_mib': None}]
    monkeypatch.setattr(_gpu.GpuScanner, 'holders', fake_holders)
    result = run_module(gpu_release, base(tmp_path, timeout=1))
    assert result['failed'] and 'unit=vllm-cluster.service' in result['msg']
    assert result['actions'][0]['result'] == 'failed'
    assert result['errors'][0]['rc'] == 5 and 'Access denied' in result['errors'][0]['stderr']


def test_refuses_to_signal_its_own_process_chain(run_module, holders, tmp_path, monkeypatch):
    # Pretend the holder is an ancestor of the module (as if Ansible ran from a process that
    # holds the GPU): the module must refuse, not kill the chain that runs it.
    holder = holders.start()
    real = _gpu.ancestors

    def ancestors(pid, proc_root='/proc'):
        chain = real(pid, proc_root)
        return [holder] + chain if pid == os.getpid() else chain
    monkeypatch.setattr(_gpu, 'ancestors', ancestors)
    result = run_module(gpu_release, base(tmp_path))
    assert result['failed'] is True and 'Refusing' in result['msg']
    assert 'pid %d' % holder in result['msg']
    assert alive(holder)


def test_a_unit_that_cannot_be_disabled_does_not_keep_the_others_enabled(run_module, fakebin, tmp_path, monkeypatch):
    # A generated unit cannot be disabled; a combined `systemctl disable` that fails is done again unit by unit, so the
    # other old unit still stays off after a reboot. Masking and removing containers take the same path.
    fakebin.add('systemctl', {
        'disable vllm-cluster.service vllm-gen.service': [1, 'Failed to disable unit: Unit vllm-gen.service is '
                                                             'transient or generated.\n'],
        'disable vllm-gen.service': [1, 'Failed to disable unit: Unit vllm-gen.service is transient or generated.\n'],
        '*': [0, '']})
    fakebin.add('docker', {'ps': [0, ''], '*': [0, '']})
    scans = []

    def fake_holders(self):
        scans.append(1)
        if len(scans) > 1:
            return []
        return [{'pid': 5000 + n, 'name': 'python3', 'status': 'foreign', 'unit': unit, 'visible': True,
                 'container': None, 'parent_holder': None, 'used_memory_mib': None}
                for n, unit in enumerate(('vllm-cluster.service', 'vllm-gen.service'))] + [
            {'pid': 5009, 'name': 'python3', 'status': 'foreign', 'unit': None, 'visible': True,
             'container': {'id': 'c' * 64, 'name': 'reranker', 'restart_policy': 'no'},
             'parent_holder': None, 'used_memory_mib': None}]
    monkeypatch.setattr(_gpu.GpuScanner, 'holders', fake_holders)
    result = run_module(gpu_release, base(tmp_path, mask=True, remove_containers=True))
    assert not result.get('failed'), result.get('msg')
    acting = [c for c in fakebin.calls('systemctl') if c[0] in ('stop', 'disable', 'mask')]
    assert acting == [['stop', '--no-block', 'vllm-cluster.service', 'vllm-gen.service'],
                      ['stop', 'vllm-cluster.service', 'vllm-gen.service'],
                      ['disable', 'vllm-cluster.service', 'vllm-gen.service'],
                      ['disable', 'vllm-cluster.service'], ['disable', 'vllm-gen.service'],
                      ['mask', 'vllm-cluster.service', 'vllm-gen.service']]
    stops = [c for c in fakebin.calls('docker') if c[0] in ('stop', 'rm')]
    assert stops == [['stop', '-t', '1', 'reranker'], ['rm', 'reranker']]
    assert [e['cmd'][1:] for e in result['errors']] == [['disable', 'vllm-gen.service']]
    assert all(a['result'] == 'stopped' for a in result['actions'])


def test_a_job_that_is_not_stale_is_refused_and_named_with_nothing_stopped(run_module, holders, tmp_path):
    # A colleague's job (a plain python holding the GPU) beside a stale vLLM engine (retitled as vLLM V1 does): the
    # default refuses before anything is stopped, naming the job and the variable; the engine is left running too.
    engine = holders.start(comm='VLLM::Worker')
    job = holders.start()
    args = base(tmp_path, stop_foreign=False, stale_commands=['VLLM::*'],
                setting_names={'cleanup_foreign': 'gpu_cleanup_stop_foreign: true'})
    result = run_module(gpu_release, args)
    assert result['failed'] is True
    assert result['msg'].startswith('Refusing to stop GPU holders that are not stale: GPU: pid %d python' % job)
    assert 'user %s' % getpass.getuser() in result['msg'] and 'holder.py' in result['msg']
    assert 'set gpu_cleanup_stop_foreign: true to let the cleanup stop it' in result['msg']
    assert 'pid %d' % engine not in result['msg'] and result['hint'] == 'Nothing was stopped.'
    assert alive(engine) and alive(job)
    result = run_module(gpu_release, args, check_mode=True)
    assert result['failed'] is True and alive(job)


def test_a_stale_engine_is_stopped_by_default(run_module, holders, tmp_path):
    engine = holders.start(comm='VLLM::Worker')
    result = run_module(gpu_release, base(tmp_path, stop_foreign=False, stale_commands=['VLLM::*']))
    assert not result.get('failed'), result.get('msg')
    assert not alive(engine)
    assert [(a['pids'], a['why']) for a in result['actions']] == [
        ([engine], 'holds the GPU outside any unit or container; a stale engine by its command line (stale_commands)')]


def test_the_stale_units_and_containers_are_recorded_once_and_atomically(run_module, fakebin, tmp_path):
    # The old stack as the lab stages it (captured systemctl and docker outputs): every stale unit and container is
    # kept in the record, stopped now or not, and a second run with the same picture does not write it again.
    fix = os.path.join(os.path.dirname(__file__), 'fixtures', 'oldstack')

    def read(name):
        with open(os.path.join(fix, name)) as handle:
            return handle.read()
    fakebin.add('systemctl', {'list-unit-files': [0, read('list-unit-files.txt')],
                              'list-units': [0, read('list-units.txt')], 'show': [0, read('systemctl_show.txt')],
                              '*': [0, '']})
    fakebin.add('docker', {'ps': [0, read('docker_ps.txt')], 'inspect': [0, read('docker_inspect.json')], '*': [0, '']})
    record = tmp_path / 'state' / 'stale-stack.json'
    args = base(tmp_path, stale_units=_gpu.DEFAULT_STALE, stale_containers=_gpu.DEFAULT_STALE_CONTAINERS,
                record=str(record))
    result = run_module(gpu_release, args, check_mode=True)
    assert result['changed'] is True and not record.exists()
    result = run_module(gpu_release, args)
    assert not result.get('failed'), result.get('msg')
    kept = json.loads(record.read_text())
    assert kept == result['stale_record']
    assert kept['containers'] == ['reranker', 'vllm_embeddings', 'vllm_node']
    assert 'vllm-cluster.service' in kept['units'] and 'vllm-proxy.service' in kept['units']
    assert [p.name for p in record.parent.iterdir()] == ['stale-stack.json']
    inode = record.stat().st_ino
    # the fakes still show the old stack: the same record, so the file is left as it is (an atomic write is a new inode)
    result = run_module(gpu_release, args)
    assert result['stale_record'] == kept and record.stat().st_ino == inode
    # a record that differs is replaced
    record.write_text('{"units": [], "containers": []}\n')
    result = run_module(gpu_release, args)
    assert json.loads(record.read_text()) == kept and record.stat().st_ino != inode
