"""GPU holders that are not ours (issue 45, item 7): a colleague's job is named and refused, not killed.

Before, site.yml SIGTERMed any process holding the GPU that was not protected (gpu_cleanup's plan counted every GPU
holder as stale), also a job started after the deployment. Now preflight refuses a GPU holder that is neither in a
stale unit or container nor a vLLM/Ray/SGLang process by its command line, naming pid, command, user, unit and the
memory it holds, with gpu_cleanup_stop_foreign, which lets site.yml stop it. Needs a serving lab (the `serving`
fixture); the second run is a whole site.yml on it (idempotent apart from the stop).
"""

from __future__ import annotations

import json
import time

import pytest

pytestmark = pytest.mark.lab

HEAD = "spark-1"
# A colleague's job as nvidia-smi lists it: a bare process (an ssh session's scope, no unit, no container) with the
# GPU open, whose command line is no vLLM or Ray.
JOB = "import time; f = open('/dev/nvidia0', 'rb'); time.sleep(900)"


def _start_job(lab):
    p = lab.ssh(HEAD, "setsid python3 -c \"%s\" >/dev/null 2>&1 </dev/null & echo $!" % JOB)
    pid = p.stdout.strip()
    assert pid.isdigit(), p.stderr
    deadline = time.time() + 20
    while pid not in lab.host_exec(HEAD, "nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader").stdout:
        assert time.time() < deadline, "nvidia-smi never listed pid %s" % pid
        time.sleep(0.5)
    return pid


def _alive(lab, pid):
    return lab.host_exec(HEAD, "kill", "-0", pid).returncode == 0


@pytest.mark.fault(name="a colleague's job (a bare python in an ssh session) holds the head's GPU before site.yml",
                   expected="preflight names pid, command, user, memory and gpu_cleanup_stop_foreign; nothing changed; "
                            "with gpu_cleanup_stop_foreign: true site.yml stops it")
def test_a_bare_gpu_holder_is_refused_by_name_and_stopped_only_with_the_variable(lab, serving, tmp_path, observe):
    pid = _start_job(lab)
    try:
        services = {h: lab.services(h) for h in lab.hosts}
        r, failures = lab.play(tmp_path / "refused", "site.yml")
        assert r["status"] == "failed"
        assert [f["host"] for f in failures] == [HEAD], json.dumps(failures)[:3000]
        msg = failures[0]["res"]["msg"]
        assert isinstance(msg, str), msg
        assert "GPU: pid %s " % pid in msg, msg
        line = msg[msg.index("GPU: pid %s " % pid):].split("; GPU: ")[0].split("; port ")[0]
        assert line.startswith("GPU: pid %s python3 (user spark; " % pid), line
        # an ssh session's process: in its session scope where logind runs, in ssh.service on the lab's hosts; never
        # suggested as a stale unit (that would stop the node's sshd)
        assert " MiB; " in line and ("session-" in line or "unit ssh.service" in line), line
        assert "command: python3 -c import time" in line and "gpu_cleanup_stale_units" not in line, line
        assert line.endswith("stop it yourself, or set gpu_cleanup_stop_foreign: true to let the cleanup stop it"), line
        observe(line)
        # refused before anything changed: the job runs, ours was not touched
        assert lab.changed_total(r) == 0
        assert _alive(lab, pid)
        assert {h: lab.services(h) for h in lab.hosts} == services

        r, failures = lab.play(tmp_path / "stopped", "site.yml", extravars={"gpu_cleanup_stop_foreign": True})
        assert r["status"] == "successful" and not failures, json.dumps(failures)[:3000]
        assert not _alive(lab, pid)
        stopped = [e for e in r["events"] if e["host"] == HEAD and e["event"] == "runner_on_ok"
                   and any(pid in json.dumps(a.get("pids")) for a in (e.get("res") or {}).get("actions") or [])]
        assert stopped, "gpu_cleanup's result does not name pid %s" % pid
        action = next(a for a in stopped[0]["res"]["actions"] if int(pid) in a["pids"])
        assert action["action"] == "signal" and action["result"] in ("terminated", "killed"), action
        assert "gpu_cleanup_stop_foreign: true" in action["why"], action
        assert lab.serves(timeout=60)
    finally:
        lab.host_exec(HEAD, "kill", pid)


# CI: the plan in tests/unit/plugins/module_utils/test_gpu_plan.py::test_a_bare_vllm_engine_is_stale_by_its_name_and_a_
# job_beside_it_is_named_not_stopped, the stop on the lab by test_site.py::test_stale_unit_holding_the_gpu_is_stopped_
# and_disabled: long.
@pytest.mark.long
def test_a_stale_vllm_process_outside_any_unit_is_still_stopped(lab, serving, tmp_path):
    """A leftover vLLM engine by its command line (retitled VLLM::EngineCore, as vLLM V1 does) in an ssh session: stale,
    so the default stops it (the run is not refused)."""
    code = ("import ctypes, time; ctypes.CDLL(None).prctl(15, b'VLLM::EngineCore', 0, 0, 0);"
            " f = open('/dev/nvidia0', 'rb'); time.sleep(900)")
    p = lab.ssh(HEAD, "setsid python3 -c \"%s\" >/dev/null 2>&1 </dev/null & echo $!" % code)
    pid = p.stdout.strip()
    assert pid.isdigit(), p.stderr
    try:
        r, failures = lab.play(tmp_path / "stale", "site.yml")
        assert r["status"] == "successful" and not failures, json.dumps(failures)[:3000]
        assert not _alive(lab, pid)
    finally:
        lab.host_exec(HEAD, "kill", pid)
