"""Issue 5: run gpu_holders / gpu_release against a real NVIDIA GPU, as Ansible runs them.

Started by run_device.sh. Writes to $OUT:
  captures.json  every nvidia-smi output in every state (becomes unit-test fixtures)
  results.json   every module result (ansible JSON) with timings
  LAST_RUN.md    the readable report (copied to tests/gpu/LAST_RUN.md)
Holder processes are started here and stopped by the module under test; whatever survives
is killed by PID at the end.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.environ.get('OUT') or tempfile.mkdtemp(prefix='gpu-out-')
ANSIBLE = os.environ.get('ANSIBLE_BIN') or shutil.which('ansible')
FAKE = os.environ.get('SPARKFLEET_FAKE_GPU')
DEVICE_GLOB = FAKE if FAKE else '/dev/nvidia[0-9]*'
OURS = 'sfv-ours'
SMI = shutil.which('nvidia-smi')

APP_FIELDS = 'pid,process_name,used_memory'
GPU_FIELDS = 'index,name,uuid,driver_version,memory.used,memory.total'
QUERIES = [
    ('table', []),
    ('list', ['-L']),
    ('gpu_ident', ['--query-gpu=name,uuid,driver_version', '--format=csv,noheader']),
    ('gpu_memory', ['--query-gpu=memory.used,memory.total', '--format=csv,noheader,nounits']),
    ('gpu_memory_header', ['--query-gpu=memory.used,memory.total', '--format=csv']),
    ('gpu_module', ['--query-gpu=' + GPU_FIELDS, '--format=csv,noheader,nounits']),
    ('apps', ['--query-compute-apps=' + APP_FIELDS, '--format=csv,noheader,nounits']),
    ('apps_header', ['--query-compute-apps=' + APP_FIELDS, '--format=csv']),
]

captures = {}
results = []
checks = []
report = []
procs = []
T0 = time.time()


def say(text=''):
    line = '[%6.1fs] %s' % (time.time() - T0, text) if text else ''
    print(line, flush=True)
    report.append(text)


def run(cmd, timeout=120):
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        return proc.returncode, proc.stdout, proc.stderr
    except FileNotFoundError as exc:
        return 127, '', str(exc)
    except subprocess.TimeoutExpired:
        return 124, '', 'timeout after %ss' % timeout


def capture(state):
    captures[state] = {}
    if not SMI:
        say('capture %s: no nvidia-smi' % state)
        return
    for name, args in QUERIES:
        rc, out, err = run([SMI] + args)
        captures[state][name] = {'cmd': ' '.join(['nvidia-smi'] + args), 'rc': rc,
                                 'stdout': out, 'stderr': err}
    apps = captures[state]['apps']['stdout'].strip() or '(none)'
    mem = captures[state]['gpu_memory']['stdout'].strip()
    say('capture %s: memory.used,total=%s; compute apps: %s' % (state, mem, apps.replace('\n', ' | ')))


def module(name, args, check=False, label=''):
    cmd = [sys.executable, ANSIBLE, 'localhost', '-i', 'localhost,', '-c', 'local',
           '-m', 'sparkfleet.vllm.' + name, '-a', json.dumps(args),
           '-e', 'ansible_python_interpreter=' + sys.executable]
    if check:
        cmd += ['--check', '--diff']
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_CALLBACK_RESULT_FORMAT='json', ANSIBLE_NOCOLOR='1',
               ANSIBLE_DEPRECATION_WARNINGS='0')
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=300, check=False)
    elapsed = round(time.time() - t0, 2)
    text = proc.stdout
    result = None
    if '=> {' in text:
        try:
            result = json.loads(text[text.index('=> {') + 3:].split('\n}\n')[0] + '\n}')
        except ValueError:
            result = None
    results.append({'label': label, 'module': name, 'args': args, 'check': check,
                    'rc': proc.returncode, 'elapsed_s': elapsed, 'result': result,
                    'stdout': text if result is None else None, 'stderr': proc.stderr})
    say('%s: ansible -m %s%s rc=%s in %.2fs' % (label, name, ' --check' if check else '',
                                                proc.returncode, elapsed))
    if result is not None:
        result['_rc'] = proc.returncode
        if 'localhost |' in text and check:
            result['_diff_text'] = text[:text.index('localhost |')].strip()
    if result is None:
        say('  unparsed output: %s %s' % (text[-2000:], proc.stderr[-2000:]))
        return {}
    for warning in result.get('warnings') or []:
        say('  warning: %s' % warning)
    return result


def check(name, ok, detail=''):
    checks.append((name, bool(ok), detail))
    say('%s %s %s' % ('PASS' if ok else 'FAIL', name, detail))


def start(mib, tag, *extra):
    ready = os.path.join(tempfile.gettempdir(), 'sfv-ready-%s-%d' % (tag, os.getpid()))
    for path in (ready, ready + '.child'):
        if os.path.exists(path):
            os.unlink(path)
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, 'cuda_hold.py'), str(mib), ready]
                            + list(extra))
    procs.append(proc)
    return proc, ready


def wait_ready(*readies):
    deadline = time.time() + 180
    for ready in readies:
        while not os.path.exists(ready):
            if time.time() > deadline:
                raise SystemExit('holder did not get ready: %s' % ready)
            time.sleep(0.2)
    time.sleep(0.5)


def alive(pid):
    try:
        with open('/proc/%d/stat' % pid) as handle:
            return handle.read().rsplit(')', 1)[1].split()[0] not in ('Z', 'X')
    except OSError:
        return False


def holder(result, pid):
    for item in result.get('holders') or result.get('holders_before') or []:
        if item['pid'] == pid:
            return item
    return None


def main():
    say('# Device run of gpu_holders / gpu_release (issue 5)')
    say('')
    say('date: %s; host kernel: %s; python: %s' % (time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()),
                                                   platform.release(), platform.python_version()))
    if SMI:
        rc, out, _err = run([SMI, '--query-gpu=name,driver_version,memory.total', '--format=csv,noheader'])
        say('GPU: %s' % out.strip())
    try:
        import torch  # noqa: F401
        say('torch %s, CUDA %s' % (torch.__version__, torch.version.cuda))
    except ImportError:
        say('torch not importable (dry run: %s)' % bool(FAKE))
    say('device_glob: %s' % DEVICE_GLOB)
    common = {'device_glob': DEVICE_GLOB, 'stale_units': [], 'nvidia_smi': 'auto'}

    # ---- zero holders ----
    capture('zero')
    res = module('gpu_holders', dict(common, stale_units=['vllm-*', 'sglang*']), label='idle holders')
    check('idle: no foreign holder', res and res.get('foreign') == [], str(res.get('foreign')))
    idle_used = (res.get('gpu') or {}).get('memory_used_mib')
    say('idle memory.used = %s MiB of %s' % (idle_used, (res.get('gpu') or {}).get('memory_total_mib')))
    res = module('gpu_release', common, label='release with nothing to do')
    check('release on a free GPU: ok and changed=false', res and not res.get('failed') and res.get('changed') is False)

    # ---- one, then two CUDA processes ----
    a, ra = start(4096, 'a')
    wait_ready(ra)
    capture('one')
    b, rb = start(6144, 'b')
    wait_ready(rb)
    capture('two')
    if a.pid and SMI:
        rc, out, _err = run(['ls', '-l', '/proc/%d/fd' % a.pid])
        say('device files held by a CUDA process: %s' % ', '.join(
            sorted(set(l.split('-> ')[1] for l in out.splitlines() if '-> /dev/nvidia' in l))))
    res = module('gpu_holders', common, label='two holders')
    for proc, mib in ((a, 4096), (b, 6144)):
        item = holder(res, proc.pid)
        mem = item and item.get('used_memory_mib')
        ok = item is not None and item['status'] == 'foreign' and (FAKE or (mem or 0) >= mib)
        check('holders lists pid %d with >= %d MiB' % (proc.pid, mib), ok,
              'used_memory_mib=%s devices=%s' % (mem, item and item.get('devices')))

    o, ro = start(1024, 'ours', '--comm', OURS)
    wait_ready(ro)
    rel_args = dict(common, ours=[OURS], grace=5, timeout=60, settle=5)
    res = module('gpu_release', rel_args, check=True, label='release --check (a, b foreign; ours kept)')
    planned = sorted(p for act in res.get('actions', []) for p in act['pids'])
    check('check mode plans exactly a and b', planned == sorted([a.pid, b.pid]), str(planned))
    check('check mode changes nothing', alive(a.pid) and alive(b.pid) and alive(o.pid))
    say('  diff:\n```\n%s\n```' % res.get('_diff_text'))

    res = module('gpu_release', rel_args, label='release a, b')
    acts = res.get('actions', [])
    check('release ok, changed', res and not res.get('failed') and res.get('changed'), res.get('msg', ''))
    check('a and b gone, ours alive', not alive(a.pid) and not alive(b.pid) and alive(o.pid))
    for act in acts:
        say('  action %s %s -> %s exit_s=%s killed=%s (%.2fs)' % (
            act['action'], act['target'], act.get('result'), act.get('exit_s'), act.get('killed'),
            act.get('elapsed_s') or 0))
    say('  total elapsed_s (stop + verify free) = %s' % res.get('elapsed_s'))
    gpu = res.get('gpu') or {}
    after_apps = [h['pid'] for h in res.get('holders_after', [])]
    check('after release only ours holds the GPU', after_apps == [o.pid], str(after_apps))
    say('  memory.used after release = %s MiB (ours holds %s)' % (
        gpu.get('memory_used_mib'), (holder({'holders': res.get('holders_after', [])}, o.pid) or {}).get('used_memory_mib')))
    capture('ours_only')

    # ---- a SIGTERM-ignoring process and a parent with a CUDA child ----
    c, rc_ = start(3072, 'c', '--ignore-term')
    d, rd = start(2048, 'd', '--child', '2048')
    wait_ready(rc_, rd, rd + '.child')
    with open(rd + '.child') as handle:
        e_pid = int(handle.read())
    capture('stubborn_and_child')
    res = module('gpu_holders', dict(common, ours=[OURS]), label='stubborn + parent/child holders')
    e = holder(res, e_pid)
    check('child holder %d names parent_holder %d' % (e_pid, d.pid), e and e.get('parent_holder') == d.pid,
          str(e and e.get('parent_holder')))
    check('ours is reported as ours', (holder(res, o.pid) or {}).get('status') == 'ours')
    res = module('gpu_release', dict(rel_args, grace=3), label='release stubborn + parent/child')
    acts = res.get('actions', [])
    for act in acts:
        say('  action %s %s pids=%s -> %s exit_s=%s killed=%s (%.2fs)' % (
            act['action'], act['target'], act['pids'], act.get('result'), act.get('exit_s'),
            act.get('killed'), act.get('elapsed_s') or 0))
    killed = sorted(p for act in acts for p in act.get('killed', []))
    check('SIGTERM-ignoring pid %d needed SIGKILL' % c.pid, killed == [c.pid], str(killed))
    exit_c = max([act.get('exit_s', {}).get(str(c.pid), 0) for act in acts] or [0])
    check('it was killed after the 3 s grace', 3 <= exit_c < 6, 'exit_s=%s' % exit_c)
    check('parent %d and child %d stopped by one action' % (d.pid, e_pid),
          any(sorted(act['pids']) == sorted([d.pid, e_pid]) for act in acts))
    check('release ok; c, d, child gone; ours alive',
          res and not res.get('failed') and not alive(c.pid) and not alive(d.pid)
          and not alive(e_pid) and alive(o.pid), res.get('msg', ''))
    say('  total elapsed_s = %s' % res.get('elapsed_s'))

    # ---- a restart loop: a supervisor (not a holder) respawns the CUDA holder ----
    loop_base = os.path.join(tempfile.gettempdir(), 'sfv-loop-%d' % os.getpid())
    sup = subprocess.Popen([sys.executable, '-c', (
        'import subprocess, sys, time\n'
        'n = 0\n'
        'while True:\n'
        '    n += 1\n'
        '    subprocess.call([sys.executable, %r, "1024", "%s.%%d" %% n])\n'
        '    time.sleep(0.1)\n') % (os.path.join(HERE, 'cuda_hold.py'), loop_base)])
    procs.append(sup)
    wait_ready(loop_base + '.1')
    with open(loop_base + '.1') as handle:
        first = int(handle.read())
    t_rel = time.time()
    res = module('gpu_release', dict(rel_args, grace=3, timeout=20, settle=5),
                 label='release a holder that a supervisor restarts (settle=5)')
    check('restart loop: release fails', res.get('_rc') != 0 and 'still held' in res.get('msg', ''),
          res.get('msg', '')[:300])
    check('failure names the respawned holder and its supervisor', 'ppid=%d' % sup.pid in res.get('msg', '')
          and 'pid %d ' % first not in res.get('msg', ''))
    if os.path.exists(loop_base + '.2'):
        say('  respawned holder ready %.2fs after release started (CUDA init included)'
            % (os.path.getmtime(loop_base + '.2') - t_rel))
    sup.kill()
    sup.wait(10)
    for n in range(1, 50):
        path = '%s.%d' % (loop_base, n)
        if os.path.exists(path):
            with open(path) as handle:
                try:
                    os.kill(int(handle.read()), signal.SIGKILL)
                except OSError:
                    pass
    time.sleep(1)

    # ---- ours gone too: the GPU is idle again ----
    o.send_signal(signal.SIGTERM)
    o.wait(30)
    time.sleep(1)
    capture('zero_after')
    res = module('gpu_holders', common, label='idle again')
    gpu = res.get('gpu') or {}
    check('idle again: no holders', res.get('holders') == [], str([h['pid'] for h in res.get('holders', [])]))
    if idle_used is not None:
        check('memory back near idle', gpu.get('memory_used_mib') is not None
              and gpu['memory_used_mib'] <= idle_used + 64,
              '%s MiB now, %s MiB at start' % (gpu.get('memory_used_mib'), idle_used))
    res = module('gpu_holders', dict(common, nvidia_smi='required'), label='nvidia_smi=required')
    check('nvidia_smi=required %s' % ('works with the driver' if SMI else 'fails without nvidia-smi'),
          (res.get('_rc') != 0) != bool(SMI), res.get('msg', '')[:200])


if __name__ == '__main__':
    code = 0
    try:
        main()
    except Exception as exc:  # the report must still be written
        import traceback
        say('ERROR: %s' % traceback.format_exc())
        code = 2
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    say('')
    say('## Checks: %d passed, %d failed' % (sum(1 for c in checks if c[1]), sum(1 for c in checks if not c[1])))
    for name, ok, detail in checks:
        report.append('- %s %s %s' % ('PASS' if ok else 'FAIL', name, detail))
    if 'two' in captures and captures['two']:
        report.append('\n## nvidia-smi with two CUDA processes\n\n```\n%s```' % captures['two']['table']['stdout'])
    with open(os.path.join(OUT, 'LAST_RUN.md'), 'w') as handle:
        handle.write('\n'.join(report) + '\n')
    with open(os.path.join(OUT, 'captures.json'), 'w') as handle:
        json.dump(captures, handle, indent=1)
    with open(os.path.join(OUT, 'results.json'), 'w') as handle:
        json.dump(results, handle, indent=1)
    print('OUT=%s' % OUT)
    if any(not c[1] for c in checks):
        code = code or 1
    sys.exit(code)
