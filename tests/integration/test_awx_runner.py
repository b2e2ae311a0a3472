"""site.yml as an AWX job runs it: ansible-runner on a private data dir laid out as AWX lays it, twice.

AWX gives ansible-runner: project/ (a copy of the project's checkout: this repository), inventory/hosts (an
executable that prints the inventory's JSON), env/extravars (the survey answers), the custom credential's extra
vars in a file of their own passed by env/cmdline (`-e @file`, before env/extravars, so a survey answer beats the
credential), env/ssh_key (the Machine credential) and a HOME with nothing in it. The second run changes nothing,
the Ray token lives on the head (not in the job's throwaway HOME), and the results come back as set_stats
artifacts, the way an AWX workflow reads them.

Marked `long` (about 4 minutes: three runs, two engine restarts): CI's 45-minute budget leaves it to scripts/faults.sh
(`scripts/faults.sh -k awx`); the AWX assets themselves are checked in tests/unit/extensions/awx. It starts from the
lab as it is. On a lab that serves (deployed by a plain run, from another HOME), the
first job applies what the credential changes (its API key: the engine restarts) and must keep the head's Ray token
and Ray itself; on a lab that does not serve, the first job is the deployment. Then the inventory's own settings are
restored (--tags vllm_serve), so the modules after it find the lab serving with the inventory's API key.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml
from jinja2.sandbox import ImmutableSandboxedEnvironment

pytestmark = [pytest.mark.lab, pytest.mark.long]

HEAD = "spark-1"
RAY_TOKEN = "/etc/sparkfleet/ray-token"
ASSETS = "extensions/awx/sparkfleet-vllm.json"

RUNNER = r"""
import json, sys, ansible_runner
# timeout: the runner ends the job itself (a playbook whose runner is killed runs on, holding the deploy lock).
r = ansible_runner.run(private_data_dir=sys.argv[1], playbook=sys.argv[2], quiet=True, timeout=860)
stats_ev = [e for e in r.events if e.get("event") == "playbook_on_stats"]
fails = [dict(host=e["event_data"].get("host"), task=e["event_data"].get("task"),
              msg=str((e["event_data"].get("res") or {}).get("msg", ""))[:500])
         for e in r.events if e.get("event") in ("runner_on_failed", "runner_on_unreachable")
         and not e["event_data"].get("ignore_errors")]
print(json.dumps(dict(status=r.status, rc=r.rc, stats=r.stats, failures=fails,
                      artifacts=(stats_ev[-1]["event_data"].get("artifact_data") if stats_ev else None)), default=str))
"""


def copy_project(repo, dest):
    """What an AWX project update leaves: the files of the checkout (symlinks kept; not what git ignores)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=repo, capture_output=True,
                           check=True).stdout.split(b"\0")
    dest.mkdir(parents=True)
    for f in filter(None, files):
        src, dst = repo / f.decode(), dest / f.decode()
        if not os.path.lexists(src):
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)


def awx_job_dir(lab, base, survey_answers, credential_inputs):
    pdd = base / "awx-job"
    copy_project(lab.repo, pdd / "project")
    # inventory/hosts: AWX writes an executable printing the inventory it holds (imported with ansible-inventory).
    inv = lab.run([lab.repo / ".venv" / "bin" / "ansible-inventory", "-i", lab.inventory, "--list", "--export"],
                  env_extra={"ANSIBLE_CONFIG": str(lab.repo / "ansible.cfg")}, cwd=str(lab.repo))
    assert inv.returncode == 0, inv.stderr
    (pdd / "inventory").mkdir()
    script = pdd / "inventory" / "hosts"
    script.write_text("#!/bin/sh\ncat <<'JSON'\n%s\nJSON\n" % inv.stdout.strip())
    script.chmod(0o700)
    env = pdd / "env"
    env.mkdir()
    (env / "extravars").write_text(json.dumps(survey_answers))
    # The custom credential type's extra_vars injector, rendered as AWX renders it (sandboxed Jinja, blanks as '').
    [ctype] = json.loads((lab.repo / ASSETS).read_text())["credential_types"]
    sandbox = ImmutableSandboxedEnvironment()
    given = {k: v for k, v in credential_inputs.items() if v}
    injected = {sandbox.from_string(k).render(**given): sandbox.from_string(v).render(**given)
                for k, v in ctype["injectors"]["extra_vars"].items()}
    cred = env / "tmp_credential_extravars"
    cred.write_text(yaml.safe_dump(injected))
    cred.chmod(0o400)
    (env / "cmdline").write_text("-e @%s" % cred)
    (env / "ssh_key").write_text(lab.ssh_key.read_text())
    home = base / "home"
    home.mkdir()
    (env / "envvars").write_text(json.dumps({"HOME": str(home), "SPARKFLEET_REPORT_DIR": str(base / "reports")}))
    return pdd, home


def deploy_playbook(lab):
    """The playbook AWX's `sparkfleet deploy` job template runs (a path in the project)."""
    with open(lab.repo / ASSETS, encoding="utf-8") as f:
        return next(jt["playbook"] for jt in json.load(f)["job_templates"] if jt["name"] == "sparkfleet deploy")


def run_job(lab, pdd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["PATH"] = "%s:%s" % (lab.repo / ".venv" / "bin", env.get("PATH", "/usr/bin:/bin"))
    p = subprocess.run([str(lab.repo / "lab" / "labctl"), "ctl", "--", str(lab.repo / ".venv" / "bin" / "python"),
                        "-c", RUNNER, str(pdd), deploy_playbook(lab)], capture_output=True, text=True, timeout=900, env=env,
                       cwd=str(pdd))
    assert p.returncode == 0, "ansible-runner crashed:\n%s\n%s" % (p.stdout[-3000:], p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def head_token(lab):
    p = lab.host_exec(HEAD, "cat", RAY_TOKEN)
    return p.stdout.strip() if p.returncode == 0 else None


def ray_invocations(lab):
    return {h: lab.systemctl(h, "show", "-p", "InvocationID", "--value", "sparkfleet-ray") for h in lab.hosts}


def test_site_as_an_awx_job_twice_second_changes_nothing(lab, tmp_path):
    served = lab.serves()
    if not served:
        lab.stage("--keep-workers")  # the image and the model on the head, as before a first deployment
    token_before, rays_before = head_token(lab), ray_invocations(lab)
    key = "awx-" + os.urandom(12).hex()
    answers = {"vllm_serve_gpu_memory_utilization": 0.85, "vllm_serve_tensor_parallel_size": len(lab.hosts)}
    pdd, home = awx_job_dir(lab, tmp_path, answers, {"api_key": key, "hf_token": "", "ray_token": ""})
    try:
        first = run_job(lab, pdd)
        assert first["status"] == "successful" and not first["failures"], first["failures"][-3:] or first
        token, rays = head_token(lab), ray_invocations(lab)
        assert token, "the Ray token is kept on the head"
        if served:
            # A job with an empty HOME found the token the plain run left on the head: no new token, Ray untouched.
            assert token == token_before, "the AWX job made a new Ray token"
            assert rays == rays_before, "the AWX job restarted Ray"

        # set_stats artifacts: what an AWX workflow's next node receives.
        art = (first["artifacts"] or {}).get("sparkfleet")
        assert art, first["artifacts"]
        assert art["endpoint"] == lab.api_url and art["model"] == "sparklab/tiny-moe"
        assert isinstance(art["tokens_per_s"], (int, float)) and art["tokens_per_s"] > 0
        assert art["versions"]["vllm"] and art["versions"]["ray"] and art["versions"]["image"]
        assert "loading_weights" in art["vllm_phase_times"]  # the engine (re)started with the credential's key
        # The API key came from the credential, not from the inventory's variable: the served API takes it only.
        assert lab.api("/v1/models", key=key)[0] == 200
        assert lab.api("/v1/models")[0] == 401

        # The report (callback) was written where SPARKFLEET_REPORT_DIR said, with both nodes' phases.
        report = json.loads((tmp_path / "reports" / "latest" / "report.json").read_text())
        assert set(report["phases"]) == set(lab.hosts)
        phases = [row["phase"] for row in report["phases"][HEAD]]
        assert phases[0] == "preflight" and "model_sync" in phases and phases[-2:] == ["healthcheck", "run_lock"]
        assert (tmp_path / "reports" / "latest" / "timeline.png").stat().st_size > 10000

        # Second job: a fresh private data dir and HOME, as AWX gives every job.
        second_dir = tmp_path / "second"
        second_dir.mkdir()
        pdd2, home2 = awx_job_dir(lab, second_dir, answers, {"api_key": key, "hf_token": "", "ray_token": ""})
        second = run_job(lab, pdd2)
        assert second["status"] == "successful" and not second["failures"], second["failures"][-3:]
        changed = {h: n for h, n in (second["stats"] or {}).get("changed", {}).items() if n}
        assert not changed, changed
        assert head_token(lab) == token, "the second job made a new Ray token"
        assert ray_invocations(lab) == rays, "the second job restarted Ray"
        assert (second["artifacts"] or {}).get("sparkfleet", {}).get("endpoint") == lab.api_url, second["artifacts"]
        # Nothing of the cluster's state lives in the job's HOME.
        for h in (home, home2):
            for dirpath, _dirs, files in os.walk(h):
                for f in files:
                    path = os.path.join(dirpath, f)
                    assert token not in open(path, errors="replace").read(), path
    finally:
        # The inventory's own settings (its API key) serve again, for the modules after this one.
        lab.site(tmp_path / "restore", cmdline="--tags vllm_serve")
    assert lab.completion()[0] == 200
