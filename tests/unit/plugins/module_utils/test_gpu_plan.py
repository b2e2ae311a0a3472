"""The cleanup plan (module_utils/gpu/_gpu_plan.py) on the operators' old stack as the lab stages it.

Fixtures under tests/unit/plugins/modules/fixtures/oldstack/ were captured on a lab head (systemd 252, Docker
20.10) running lab/stage.sh's old stack: `systemctl list-unit-files/list-units/show`, `docker ps -a`, `docker inspect`,
the launcher script vllm-cluster.service runs (without its `#!/bin/bash` line: ansible-test refuses shebangs in
tests/unit), and the cgroups of its processes.
"""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu import _gpu, _gpu_plan

FIX = os.path.join(os.path.dirname(__file__), '..', 'modules', 'fixtures', 'oldstack')
NAMES = {'cleanup_units': 'gpu_cleanup_stale_units', 'cleanup_containers': 'gpu_cleanup_stale_containers',
         'cleanup_protect': 'gpu_cleanup_protect'}
OURS = ['sparkfleet-ray', 'sparkfleet-vllm']


def fixture(name):
    with open(os.path.join(FIX, name)) as handle:
        return handle.read()


def read_script(path):
    return '#!/bin/bash\n' + fixture('launch-cluster.sh.txt') if path == '/opt/oldstack/launch-cluster.sh' else None


@pytest.mark.parametrize('argv, names', [
    ('/usr/bin/docker run -d --name vllm_node --restart unless-stopped img', ['vllm_node']),
    ('docker run --name=reranker --restart=always img', ['reranker']),
    ('/usr/bin/docker.real run --name vllm_embeddings img python3 x.py', ['vllm_embeddings']),
    ('docker -H unix:///run/docker.sock container run --rm --name a img', ['a']),
    ('docker start -a --detach-keys ctrl-x old_api other', ['old_api', 'other']),
    ('podman restart -t 5 web', ['web']),
    ('docker run -d img', []),                          # no name: docker picks one, nothing to follow
    ('docker run --name "$NAME" img', []),              # a shell expansion is not a name
    ('docker rm -f vllm_embeddings', []),               # removing is not starting
    ('docker stop vllm_node', []),
    ('/usr/sbin/dockerd -H fd://', []),
    ('/usr/bin/python3 /opt/oldstack/oldstack.py proxy 4000', []),
])
def test_container_refs(argv, names):
    assert _gpu_plan.container_refs(argv.split()) == names


def test_script_commands_join_continued_lines_and_split_on_operators():
    commands = _gpu_plan.script_commands(fixture('launch-cluster.sh.txt'))
    runs = [c for c in commands if c[:2] == ['docker', 'run']]
    assert len(runs) == 2 and runs[0][runs[0].index('--name') + 1] == 'vllm_node'
    assert commands[2][:4] == ['docker', 'rm', '-f', 'vllm_node'] and commands[3] == ['true']  # split at ||
    assert _gpu_plan.script_commands("a 'unterminated\nb c # comment\n") == [['b', 'c']]


def test_systemctl_show_commands_of_every_unit():
    units = _gpu.parse_systemctl_show(fixture('systemctl_show.txt'))
    assert units['vllm-cluster.service'] == [['/opt/oldstack/launch-cluster.sh', 'head']]
    assert units['vllm-embeddings.service'][0] == ['/usr/bin/docker', 'rm', '-f', 'vllm_embeddings']
    assert units['vllm-embeddings.service'][1][:4] == ['/usr/bin/docker', 'run', '--name', 'vllm_embeddings']
    assert units['docker.service'][0][0] == '/usr/sbin/dockerd'
    assert len(units) > 50  # every unit of the host, one block each


def test_unit_starts_directly_through_a_script_and_sh_c():
    show = _gpu.parse_systemctl_show(fixture('systemctl_show.txt'))
    starts = dict((u, _gpu_plan.unit_starts(c, read_script)) for u, c in show.items())
    assert starts['vllm-cluster.service'] == ['vllm_node']        # through the launcher script
    assert starts['vllm-embeddings.service'] == ['vllm_embeddings']
    assert starts['vllm-reranker.service'] == ['reranker']         # the container's name is not the unit's
    assert starts['vllm-proxy.service'] == [] and starts['ssh.service'] == []
    assert _gpu_plan.unit_starts([['/bin/sh', '-c', 'docker', 'start', 'old_api;', 'sleep', '1']], read_script) == \
        ['old_api']


def test_the_docker_client_of_a_foreground_unit_is_in_the_units_cgroup():
    cgroup = _gpu.parse_cgroup(fixture('cgroup.docker_client.txt'))
    assert cgroup['unit'] == 'vllm-embeddings.service' and cgroup['container_id'] is None
    argv = [w for w in fixture('cmdline.docker_client').split('\0') if w]
    assert _gpu_plan.container_refs(argv) == ['vllm_embeddings']
    assert _gpu.parse_cgroup(fixture('cgroup.container.txt'))['container_id'].startswith('9cb0d96a6475')


# ---- the old stack, as read on the lab's head ----

def old_stack(states=None):
    """units, containers, GPU holders and the 6379/10001/30000 listeners of the captured head."""
    enabled = _gpu.parse_unit_files(fixture('list-unit-files.txt'))
    active = _gpu.parse_units(fixture('list-units.txt'))
    show = _gpu.parse_systemctl_show(fixture('systemctl_show.txt'))
    units = [{'name': n, 'enabled': enabled.get(n), 'active': active.get(n, {}).get('active', 'inactive'),
              'starts': _gpu_plan.unit_starts(show.get(n, []), read_script)}
             for n in sorted(set(enabled) | set(active)) if not n.endswith('@.service')]
    inspected = dict((c['id'], c) for c in _gpu.parse_docker_inspect(fixture('docker_inspect.json')))
    containers = [dict(c, restart_policy=inspected[c['id']]['restart_policy'])
                  for c in _gpu.parse_docker_ps(fixture('docker_ps.txt'))]
    for cont in containers:
        cont['state'] = (states or {}).get(cont['name'], cont['state'])
    ids = dict((c['name'], c['id']) for c in containers)
    running = [c['name'] for c in containers if c['state'] == 'running']
    pids = {'vllm_node': 546, 'vllm_embeddings': 692, 'reranker': 782}
    holders = [{'pid': pids[name], 'name': 'python3', 'status': 'foreign', 'unit': None, 'visible': True,
                'parent_holder': None, 'used_memory_mib': 19,
                'container': {'id': ids[name], 'name': name, 'restart_policy': None}} for name in running]
    listeners = [
        {'port': 6379, 'setting': 'sparkfleet_ray_port', 'address': '::', 'pid': 575, 'name': 'gcs_server',
         'unit': None, 'user_unit': None, 'container_id': ids['vllm_node'], 'container_name': 'vllm_node'},
        {'port': 10001, 'setting': 'ray_cluster_client_server_port', 'address': '::ffff:10.99.1.11', 'pid': 620,
         'name': 'python3', 'unit': None, 'user_unit': None, 'container_id': ids['vllm_node'],
         'container_name': 'vllm_node'},
    ]
    return holders, units, containers, listeners


def params(**extra):
    base = {'ours': OURS, 'protect': _gpu.DEFAULT_PROTECT, 'stale_units': _gpu.DEFAULT_STALE,
            'stale_containers': _gpu.DEFAULT_STALE_CONTAINERS, 'mask': False, 'remove_containers': False}
    base.update(extra)
    return base


def test_the_whole_old_stack_is_planned_and_nothing_blocks():
    plan = _gpu_plan.build_plan(*old_stack(), params=params())
    assert [(a['action'], a['target'], a['reason']) for a in plan.actions] == [
        ('stop_container', 'reranker', 'holder'),
        ('stop_container', 'vllm_embeddings', 'holder'),
        ('stop_container', 'vllm_node', 'holder'),
        ('stop_unit', 'vllm-cluster.service', 'stale'),
        ('stop_unit', 'vllm-embeddings.service', 'stale'),
        ('stop_unit', 'vllm-proxy.service', 'stale'),   # holds nothing of ours: stopped because it is named
        ('stop_unit', 'vllm-reranker.service', 'stale')]
    assert [p['status'] for p in plan.ports] == ['stale', 'stale'] and plan.blocking() == []
    node = next(a for a in plan.actions if a['target'] == 'vllm_node')
    line = _gpu_plan.action_text(node, plan.ports, NAMES)
    assert line == ('container vllm_node (holds the GPU; started by vllm-cluster.service; stopped, restart policy'
                    ' unless-stopped removed): pid 546 holds'
                    ' the GPU; port 6379 (sparkfleet_ray_port) on ::: pid 575 gcs_server in container vllm_node; port 10001'
                    ' (ray_cluster_client_server_port) on ::ffff:10.99.1.11: pid 620 python3 in container vllm_node')
    unit = next(a for a in plan.actions if a['target'] == 'vllm-cluster.service')
    assert _gpu_plan.action_text(unit, plan.ports, NAMES) == \
        'unit vllm-cluster.service (named in gpu_cleanup_stale_units; starts container vllm_node; stopped and disabled)'


def test_containers_are_found_by_what_started_them_not_by_their_names():
    """No container glob at all: a stale unit's containers are stale whatever their names, and a container that
    exited (not holding the GPU now) still loses its restart policy."""
    holders, units, containers, listeners = old_stack(states={'reranker': 'exited'})
    plan = _gpu_plan.build_plan(holders, units, containers, listeners, params=params(stale_containers=[]))
    reranker = next(a for a in plan.actions if a['target'] == 'reranker')
    assert (reranker['reason'], reranker['why'], reranker['restart_policy'], reranker['pids']) == \
        ('stale', 'started by vllm-reranker.service', 'always', [])
    assert plan.stale_containers == {'reranker': 'started by vllm-reranker.service',
                                     'vllm_embeddings': 'started by vllm-embeddings.service',
                                     'vllm_node': 'started by vllm-cluster.service'}


def test_a_unit_that_starts_a_stopped_container_is_disabled_even_when_not_named():
    """Nothing named stale, foreign holders stopped (stop_foreign): the GPU holders' containers are stopped, and the
    units that start them (a foreground docker run with Restart=always would start it again at once, a oneshot at the
    next boot) are disabled."""
    plan = _gpu_plan.build_plan(*old_stack(), params=params(stale_units=[], stale_containers=[], stop_foreign=True))
    units = dict((a['target'], a['why']) for a in plan.actions if a['action'] == 'stop_unit')
    assert units == {'vllm-cluster.service': 'starts container vllm_node',
                     'vllm-embeddings.service': 'starts container vllm_embeddings',
                     'vllm-reranker.service': 'starts container reranker'}


def test_second_run_has_nothing_left_to_do():
    """After the cleanup: containers exited with no policy, units disabled and inactive: no action."""
    holders, units, containers, listeners = old_stack(states=dict.fromkeys(['vllm_node', 'vllm_embeddings',
                                                                           'reranker'], 'exited'))
    for cont in containers:
        cont['restart_policy'] = 'no'
    for unit in units:
        if unit['name'].startswith('vllm-'):
            unit.update(enabled='disabled', active='inactive')
    plan = _gpu_plan.build_plan(holders, units, containers, [], params=params())
    assert plan.actions == [] and sorted(plan.stale_containers) == ['reranker', 'vllm_embeddings', 'vllm_node']


def foreign(listener, **kw):
    holders, units, containers, _listeners = old_stack()
    units.append({'name': 'legacy.service', 'enabled': 'enabled', 'active': 'active', 'starts': ['legacy_api']})
    containers.append({'id': 'f' * 64, 'name': 'legacy_api', 'state': 'running', 'restart_policy': 'always'})
    plan = _gpu_plan.build_plan(holders, units, containers, [listener], params=params(**kw))
    return plan, [_gpu_plan.foreign_text(p, NAMES) for p in plan.ports if p['status'] == 'foreign']


API = {'port': 30000, 'setting': 'sparkfleet_api_port', 'address': '0.0.0.0', 'pid': 4242, 'name': 'python3',
       'unit': None, 'user_unit': None, 'container_id': None, 'container_name': None}


def test_a_foreign_container_is_named_with_the_variables_that_make_it_stale():
    plan, lines = foreign(dict(API, container_id='f' * 64, container_name='legacy_api'))
    assert lines == ['port 30000 (sparkfleet_api_port) on 0.0.0.0: pid 4242 python3 in container legacy_api, which the GPU cleanup'
                     ' will not stop: add legacy_api to gpu_cleanup_stale_containers (or legacy.service, which starts'
                     ' it, to gpu_cleanup_stale_units), or move ours (sparkfleet_api_port)']
    # ... and once named there, it is planned instead
    plan, lines = foreign(dict(API, container_id='f' * 64, container_name='legacy_api'),
                          stale_containers=['legacy_*'])
    assert lines == [] and plan.ports[0]['action'] == 'stop_container legacy_api'
    assert [a['why'] for a in plan.actions if a['target'] == 'legacy.service'] == ['starts container legacy_api']
    plan, lines = foreign(dict(API, container_id='f' * 64, container_name='legacy_api'), stale_units=['legacy'])
    assert lines == [] and plan.stale_containers['legacy_api'] == 'started by legacy.service'


@pytest.mark.parametrize('where, fix', [
    ({'unit': 'legacy-api.service'}, 'add legacy-api.service to gpu_cleanup_stale_units, or move ours'),
    ({'user_unit': 'app.service'}, "it runs in a user's unit (app.service), which the cleanup never stops"),
    ({}, 'it runs outside any unit or container, so the cleanup cannot keep it from coming back: stop it yourself'),
    ({'name': 'nv-hostengine'}, 'it is protected (gpu_cleanup_protect)'),
])
def test_a_foreign_process_is_named_with_what_would_make_it_stale(where, fix):
    _plan, lines = foreign(dict(API, **where))
    assert len(lines) == 1 and fix in lines[0], lines


def test_ours_is_left_alone_and_a_gpu_holder_elsewhere_blocks():
    ours = dict(API, container_id='a' * 64, container_name='sparkfleet-vllm')
    holders, units, containers, _listeners = old_stack()
    holders.append({'pid': 99999, 'name': 'python3', 'status': 'foreign', 'unit': None, 'container': None,
                    'visible': False, 'parent_holder': None, 'used_memory_mib': 5})
    plan = _gpu_plan.build_plan(holders, units, containers, [ours], params=params())
    assert plan.ports[0]['status'] == 'ours'
    assert [_gpu_plan.gpu_blocking_text(h) for h in plan.unreachable] == [
        'GPU: pid 99999 python3 (5 MiB) is outside this PID namespace: the cleanup cannot stop it; stop it where '
        'it runs']


def test_braces_from_the_node_do_not_break_a_message():
    _plan, lines = foreign(dict(API, name='{weird}', unit='a{b}.service'))
    assert 'pid 4242 {weird} of unit a{b}.service' in lines[0]


def test_the_fixture_is_what_the_lab_staged():
    data = json.loads(fixture('docker_inspect.json'))
    assert sorted(c['Name'] for c in data) == ['/reranker', '/vllm_embeddings', '/vllm_node']


# ---- bare and unlisted GPU holders (issue 45, item 7): only stale ones are stopped, any other is named ----

NAMES_FOREIGN = dict(NAMES, cleanup_foreign='gpu_cleanup_stop_foreign: true', cleanup_commands='gpu_cleanup_stale_commands')


def gb10_holders(cmdlines):
    """The GB10 capture's two compute apps (nvidia-smi --query-compute-apps: VLLM::EngineCore with 98304 MiB, a python
    with 19135 MiB) as bare processes of user aurora, each with the command line given for its pid."""
    apps = _gpu.parse_compute_apps(fixture_smi('gb10', 'stale.apps.txt'))
    return [{'pid': a['pid'], 'ppid': 1, 'name': os.path.basename(a['process_name']), 'user': 'aurora', 'unit': None,
             'user_unit': 'session-4.scope', 'container': None, 'visible': True, 'parent_holder': None,
             'used_memory_mib': a['used_memory_mib'], 'cmdline': cmdlines.get(a['pid'], a['process_name']),
             'status': 'foreign'} for a in apps]


def fixture_smi(gpu, name):
    with open(os.path.join(FIX, '..', 'nvidia_smi', gpu, name)) as handle:
        return handle.read()


def bare_params(**extra):
    return params(stale_commands=_gpu.DEFAULT_STALE_COMMANDS, **extra)


def test_a_bare_vllm_engine_is_stale_by_its_name_and_a_job_beside_it_is_named_not_stopped():
    holders = gb10_holders({115020: '/usr/local/bin/python train.py --epochs 3'})
    plan = _gpu_plan.build_plan(holders, [], [], [], params=bare_params())
    assert [(a['action'], a['pids']) for a in plan.actions] == [('signal', [114687])]
    assert [h['pid'] for h in plan.foreign] == [115020] and plan.blocking() == plan.foreign
    assert _gpu_plan.foreign_holder_text(plan.foreign[0], NAMES_FOREIGN) == (
        'GPU: pid 115020 python (user aurora; 19135 MiB; user\'s unit session-4.scope; command: /usr/local/bin/python'
        ' train.py --epochs 3) is neither the old stack nor a vLLM/Ray process, so the GPU cleanup will not stop it:'
        ' stop it yourself, or set gpu_cleanup_stop_foreign: true to let the cleanup stop it')
    # the variable makes it stopped with the rest
    plan = _gpu_plan.build_plan(holders, [], [], [], params=bare_params(stop_foreign=True))
    assert [a['pids'] for a in plan.actions] == [[114687], [115020]] and plan.foreign == []
    assert render(plan.actions[1]['why']) == 'holds the GPU outside any unit or container; gpu_cleanup_stop_foreign: true'


def render(text):
    from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import render_text
    return render_text(text, NAMES_FOREIGN)


@pytest.mark.parametrize('cmdline', [
    '/usr/local/bin/python -m vllm.entrypoints.openai.api_server --model /models/glm --port 8000',
    '/usr/bin/python3 /usr/local/bin/vllm serve /models/glm --tensor-parallel-size 2',
    '/usr/bin/python3 /usr/local/lib/python3.12/dist-packages/ray/_private/workers/default_worker.py --node-ip-address'
    '=10.99.1.11',
    'ray::RayWorkerWrapper',
    'python3 -m sglang.launch_server --model-path /models/x',
])
def test_vllm_ray_and_sglang_are_known_by_their_command_lines(cmdline):
    holders = gb10_holders({115020: cmdline, 114687: cmdline})
    plan = _gpu_plan.build_plan(holders, [], [], [], params=bare_params())
    assert plan.foreign == [] and sorted(p for a in plan.actions for p in a['pids']) == [114687, 115020]
    assert all(render(a['why']).endswith('by its command line (gpu_cleanup_stale_commands)')
               for a in plan.actions if 115020 in a['pids'])


def test_h200_capture_two_torch_jobs_are_foreign_with_their_memory():
    """The real H200 capture (two CUDA processes of /opt/torch/.venv/bin/python3, 4706 and 6754 MiB)."""
    apps = _gpu.parse_compute_apps(fixture_smi('h200', 'two.apps.txt'))
    holders = [{'pid': a['pid'], 'name': 'python3', 'user': 'root', 'unit': None, 'container': None, 'visible': True,
                'parent_holder': None, 'used_memory_mib': a['used_memory_mib'], 'cmdline': a['process_name'],
                'status': 'foreign'} for a in apps]
    plan = _gpu_plan.build_plan(holders, [], [], [], params=bare_params())
    assert plan.actions == []
    lines = [_gpu_plan.foreign_holder_text(h, NAMES_FOREIGN) for h in plan.foreign]
    assert [line.split(' (')[0] for line in lines] == ['GPU: pid 527 python3', 'GPU: pid 568 python3']
    assert '4706 MiB' in lines[0] and '6754 MiB' in lines[1]


def test_a_child_of_a_stale_bare_engine_goes_with_it_and_a_child_of_a_foreign_job_stays():
    holders = gb10_holders({114687: 'VLLM::EngineCore', 115020: 'python -c from multiprocessing.spawn import ...'})
    holders[1]['parent_holder'] = 114687
    plan = _gpu_plan.build_plan(holders, [], [], [], params=bare_params(), children={114687: [115020]})
    assert [(a['target'], a['pids']) for a in plan.actions] == [('pid 114687 VLLM::EngineCore', [114687, 115020])]
    holders = gb10_holders({114687: 'python train.py', 115020: 'python -c from multiprocessing.spawn import ...'})
    holders[0]['name'] = 'python'
    holders[1]['parent_holder'] = 114687
    plan = _gpu_plan.build_plan(holders, [], [], [], params=bare_params(), children={114687: [115020]})
    assert plan.actions == [] and [h['pid'] for h in plan.foreign] == [114687, 115020]


def test_old_stack_containers_not_listed_are_foreign_named_with_their_variable():
    """The lab's old stack (captured) with neither its units nor its containers listed: its processes
    (python3 oldstack.py) are no vLLM by command line, so each GPU-holding container is named, not stopped."""
    holders, units, containers, listeners = old_stack()
    for holder in holders:
        holder.update(cmdline='python3 /opt/oldstack/oldstack.py api 8000 glm', user='root')
    plan = _gpu_plan.build_plan(holders, units, containers, [],
                                params=bare_params(stale_units=[], stale_containers=[]))
    assert [a for a in plan.actions if a['reason'] == 'holder'] == []
    lines = [_gpu_plan.foreign_holder_text(h, NAMES_FOREIGN) for h in plan.foreign]
    assert len(lines) == 3
    line = next(line for line in lines if 'pid 782' in line)
    assert line.startswith('GPU: pid 782 python3 (user root; 19 MiB; container reranker; command: python3 ')
    assert line.endswith('or add reranker to gpu_cleanup_stale_containers')
    # a unit's holder names the unit variable
    holder = dict(holders[0], container=None, unit='jupyter.service')
    plan = _gpu_plan.build_plan([holder], units, containers, [],
                                params=bare_params(stale_units=[], stale_containers=[]))
    assert _gpu_plan.foreign_holder_text(plan.foreign[0], NAMES_FOREIGN).endswith(
        'or add jupyter.service to gpu_cleanup_stale_units')


@pytest.mark.parametrize('unit', ['ssh.service', 'session-4.scope', 'user@1000.service', 'docker.service'])
def test_a_holder_in_the_nodes_access_or_runtime_is_signalled_never_its_unit_stopped(unit):
    # A process started over ssh runs in ssh.service where logind gives it no session (the lab's hosts): stopping and
    # disabling "its unit" would cut the node off. It is signalled as a bare process, and never suggested as stale.
    holders = gb10_holders({115020: '/usr/local/bin/python train.py', 114687: 'VLLM::EngineCore'})
    for h in holders:
        h.update(unit=unit, user_unit=None)
    plan = _gpu_plan.build_plan(holders, [{'name': unit, 'enabled': True, 'active': True}], [], [],
                                params=bare_params(stale_units=['*']))
    assert [(a['action'], a['pids']) for a in plan.actions] == [('signal', [114687])]
    assert not any(a['target'] == unit for a in plan.actions if a['action'] == 'stop_unit')
    text = _gpu_plan.foreign_holder_text(plan.foreign[0], NAMES_FOREIGN)
    assert 'unit %s' % unit in text and 'gpu_cleanup_stale_units' not in text, text
    plan = _gpu_plan.build_plan(holders, [], [], [], params=bare_params(stop_foreign=True))
    assert [a['action'] for a in plan.actions] == ['signal', 'signal'] and plan.foreign == []
