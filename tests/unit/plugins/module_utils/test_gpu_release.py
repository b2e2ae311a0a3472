"""module_utils/gpu/_gpu_release.py: the order a plan is carried out in, what is read, and the reports."""

from __future__ import annotations

import os

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu import _gpu_plan, _gpu_release


class Res(object):
    def __init__(self, argv, rc=0):
        self.argv, self.rc, self.stdout, self.stderr = argv, rc, '', 'boom' if rc else ''

    @property
    def ok(self):
        return self.rc == 0


class FakeRunner(object):
    def __init__(self, fail=()):
        self.calls, self.fail = [], fail

    def run(self, argv):
        self.calls.append(argv[1:])
        return Res(argv, 1 if argv[1:] in self.fail else 0)


class FakeScanner(object):
    def __init__(self, params, runner=None, holders=(), units=(), containers=()):
        self.params, self.runner = params, runner or FakeRunner()
        self.docker, self.systemctl = '/usr/bin/docker', '/usr/bin/systemctl'
        self.proc_root, self.self_pids, self.warnings = '/proc', set(), []
        self._holders, self._units, self._containers = list(holders), list(units), list(containers)
        self.reads = []

    def holders(self):
        return [dict(h) for h in self._holders]

    def service_units(self):
        self.reads.append('units')
        return [dict(u) for u in self._units]

    def unit_clients(self):
        return {}

    def containers(self):
        self.reads.append('containers')
        return [dict(c) for c in self._containers]

    def inspect_containers(self, ids):
        return {}


class FakeModule(object):
    def __init__(self, **params):
        self.params = dict(grace=3, timeout=5, settle=0, max_used_mib=1024, mask=False, remove_containers=False,
                           ours=[], protect=[], stale_units=[], stale_containers=[])
        self.params.update(params)


def test_restart_policies_first_then_units_queued_containers_stopped_units_waited_for():
    module = FakeModule()
    scanner = FakeScanner(module.params)
    actions = [
        {'action': 'stop_unit', 'target': 'vllm-embeddings.service', 'pids': [], 'reason': 'stale', 'why': 'x'},
        {'action': 'stop_container', 'target': 'vllm_embeddings', 'pids': [], 'reason': 'stale', 'why': 'x',
         'restart_policy': 'unless-stopped'},
        {'action': 'stop_container', 'target': 'done_before', 'pids': [], 'reason': 'stale', 'why': 'x',
         'restart_policy': 'no'},
        {'action': 'stop_container', 'target': 'reranker', 'pids': [], 'reason': 'stale', 'why': 'x',
         'restart_policy': 'always'},
    ]
    _gpu_release.Releaser(module, scanner).carry_out(actions)
    assert scanner.runner.calls == [
        ['update', '--restart=no', 'vllm_embeddings'], ['update', '--restart=no', 'reranker'],
        ['stop', '--no-block', 'vllm-embeddings.service'],
        ['stop', '-t', '3', 'vllm_embeddings', 'done_before', 'reranker'],
        ['stop', 'vllm-embeddings.service'], ['disable', 'vllm-embeddings.service']]
    assert [a['result'] for a in actions] == ['stopped'] * 4


def test_units_alone_are_stopped_in_one_blocking_stop():
    module = FakeModule()
    scanner = FakeScanner(module.params)
    actions = [{'action': 'stop_unit', 'target': u, 'pids': [], 'reason': 'stale', 'why': 'x'}
               for u in ('vllm-proxy.service', 'vllm-cluster.service')]
    _gpu_release.Releaser(module, scanner).carry_out(actions)
    assert scanner.runner.calls == [['stop', 'vllm-proxy.service', 'vllm-cluster.service'],
                                    ['disable', 'vllm-proxy.service', 'vllm-cluster.service']]


def test_a_unit_whose_queued_stop_fails_is_named_by_the_stop_that_waits():
    # systemctl refuses the whole transaction when one unit cannot be stopped; the blocking stop after the
    # containers, then each unit alone, say which one.
    module = FakeModule()
    scanner = FakeScanner(module.params, runner=FakeRunner(fail=[
        ['stop', '--no-block', 'a.service', 'b.service'], ['stop', 'a.service', 'b.service'], ['stop', 'b.service']]))
    actions = [{'action': 'stop_unit', 'target': u, 'pids': [], 'reason': 'stale', 'why': 'x'}
               for u in ('a.service', 'b.service')]
    actions.append({'action': 'stop_container', 'target': 'c', 'pids': [], 'reason': 'stale', 'why': 'x',
                    'restart_policy': 'no'})
    rel = _gpu_release.Releaser(module, scanner)
    rel.carry_out(actions)
    assert [a['result'] for a in actions] == ['stopped', 'failed', 'stopped']
    assert rel.errors == [{'cmd': ['/usr/bin/systemctl', 'stop', 'b.service'], 'rc': 1, 'stderr': 'boom'}]
    assert scanner.runner.calls.index(['stop', '-t', '3', 'c']) < scanner.runner.calls.index(['stop', 'a.service'])


def test_a_failed_stop_is_reported_with_its_command():
    module = FakeModule(mask=True, remove_containers=True)
    scanner = FakeScanner(module.params, runner=FakeRunner(fail=[['stop', 'a.service']]))
    actions = [{'action': 'stop_unit', 'target': 'a.service', 'pids': [], 'reason': 'stale', 'why': 'x'},
               {'action': 'stop_container', 'target': 'c', 'pids': [], 'reason': 'stale', 'why': 'x',
                'restart_policy': 'no'}]
    rel = _gpu_release.Releaser(module, scanner)
    rel.carry_out(actions)
    assert [a['result'] for a in actions] == ['failed', 'stopped']
    assert ['mask', 'a.service'] in scanner.runner.calls and ['rm', 'c'] in scanner.runner.calls
    assert rel.errors == [{'cmd': ['/usr/bin/systemctl', 'stop', 'a.service'], 'rc': 1, 'stderr': 'boom'}]


def test_units_and_containers_are_read_only_when_something_can_be_stale():
    scanner = FakeScanner(FakeModule().params)
    data = _gpu_release.survey(scanner)
    assert scanner.reads == [] and data['units'] == [] and data['containers'] == []
    scanner = FakeScanner(FakeModule(stale_containers=['vllm_node']).params)
    _gpu_release.survey(scanner)
    assert scanner.reads == ['units', 'containers']
    holder = {'pid': os.getpid(), 'status': 'foreign', 'container': {'id': 'a' * 64, 'name': 'x'}}
    scanner = FakeScanner(FakeModule().params, holders=[holder])
    _gpu_release.survey(scanner)
    assert scanner.reads == ['units', 'containers']


def test_stale_report_and_plan_lines_name_the_callers_variables():
    params = FakeModule(stale_units=['vllm-cluster'], ours=['sparkfleet-ray']).params
    units = [{'name': 'vllm-cluster.service', 'enabled': 'disabled', 'active': 'inactive', 'commands': [],
              'starts': ['vllm_node']}]
    containers = [{'id': 'b' * 64, 'name': 'vllm_node', 'state': 'exited', 'restart_policy': 'always'}]
    data = {'holders': [], 'units': units, 'containers': containers, 'listeners': []}
    plan = _gpu_plan.build_plan([], units, containers, [], params)
    names = {'cleanup_units': 'gpu_cleanup_stale_units'}
    assert _gpu_release.stale_report(data, plan, names) == [
        {'kind': 'unit', 'name': 'vllm-cluster.service', 'enabled': 'disabled', 'active': 'inactive', 'sub': None,
         'starts': ['vllm_node'], 'why': 'named in gpu_cleanup_stale_units'},
        {'kind': 'container', 'name': 'vllm_node', 'id': 'b' * 64, 'state': 'exited', 'restart_policy': 'always',
         'why': 'started by vllm-cluster.service'}]
    will, blocking = _gpu_release.plan_lines(plan, names)
    assert will == ['container vllm_node (started by vllm-cluster.service; stopped, restart policy always removed)']
    assert blocking == []


@pytest.mark.parametrize('ports, problem', [
    ([{'port': 6379}, {'port': 30000}], None),
    ([{'port': 0}], 'ports must be 1-65535, got [0]'),
    ([{'port': 70000}, {'port': 22}], 'ports must be 1-65535, got [70000]'),
])
def test_ports_are_checked(ports, problem):
    assert _gpu_release.ports_problem(ports) == problem
