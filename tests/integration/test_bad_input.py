"""Issue 17 on the lab: bad input of several roles, and a path that leads out through a link planted on a worker,
stop site.yml in preflight with every problem named at once; nothing on any node changes, the GPU holder stays.

The link is what only the node can tell (the controller sees an ordinary path): the worker's path_guard run resolves
it. Quick (one failing preflight, no staging needed):
SPARKLAB_NAME=me lab/labctl ctl -- .venv/bin/pytest tests/integration/test_bad_input.py -m lab
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.lab

HEAD = "spark-1"
HOLDER = "import time; f = open('/dev/nvidia0', 'rb'); time.sleep(300)"
LINK = "/srv/sparkfleet-ray"


def _node_state(lab, host):
    """What the later plays would change on a node, as text: units, our directories, the link's target (~spark/.ssh:
    names, modes, owners), containers, the firewall table (a container restarted by systemd meanwhile is not ours)."""
    probe = ("ls /etc/systemd/system | grep -i sparkfleet; ls -A /etc/sparkfleet /var/lib/sparkfleet 2>&1;"
             " stat -c '%n %a %U:%G' ~spark/.ssh ~spark/.ssh/* 2>&1; docker ps -a --format '{{.Names}} {{.Image}}' 2>&1;"
             " systemctl is-enabled sparkfleet-ray sparkfleet-vllm 2>&1; nft list tables 2>&1")
    return lab.host_exec(host, "sh", "-c", probe).stdout


@pytest.mark.fault(name="bad input of several roles at once; then a Ray directory linked into ~/.ssh on a worker",
                   expected="preflight names every bad variable (host, variable, fix), then the link on the worker; "
                            "nothing changes")
def test_bad_input_and_a_link_out_stop_site_in_preflight_with_nothing_changed(lab, tmp_path, observe):
    worker = lab.hosts[-1]
    lab.host_exec(worker, "sh", "-c", "mkdir -p /srv && ln -sfn ~spark/.ssh %s" % LINK)
    started = lab.host_exec(HEAD, "sh", "-c", "setsid python3 -c \"%s\" >/dev/null 2>&1 < /dev/null & echo $!" % HOLDER)
    pid = started.stdout.strip()
    assert pid.isdigit(), started.stderr
    try:
        before = {h: _node_state(lab, h) for h in lab.hosts}
        # 1. bad values of several roles: every host names all of its problems in one failure
        r, failures = lab.play(tmp_path / "vars", "site.yml", extravars={
            "vllm_serve_served_model_name": ["tiny", "--host=0.0.0.0"],
            # the pre-issue-10 leak: the head's fabric interface in vLLM's driver environment
            "vllm_serve_env": {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "VLLM_CONFIG_ROOT": "/nonexistent"},
            "ray_cluster_env": {"RAY_AUTH_MODE": "disabled"},
            "ray_cluster_firewall_allow": ["0.0.0.0/1", "128.0.0.0/1"],
            "gpu_cleanup_grace": -1,
        })
        assert r["status"] == "failed"
        assert sorted(f["host"] for f in failures) == sorted(lab.hosts), json.dumps(failures)[:3000]
        msgs = {f["host"]: f["res"]["msg"] for f in failures}
        assert any(m.startswith("%s: vllm_serve_served_model_name ['tiny', '--host=0.0.0.0'] has the element"
                                " '--host=0.0.0.0'" % HEAD) for m in msgs[HEAD]), msgs[HEAD]
        env = [m for m in msgs[HEAD] if m.startswith("%s: vllm_serve_env {NCCL_SOCKET_IFNAME: ..., VLLM_CONFIG_ROOT: ...}"
                                                      % HEAD)]
        assert len(env) == 1 and "may not set NCCL_SOCKET_IFNAME" in env[0] and "may not set VLLM_CONFIG_ROOT" in env[0], env
        for host, msg in msgs.items():
            msg = "\n".join(msg)
            for part in ("%s: ray_cluster_env may not set RAY_AUTH_MODE" % host,
                         "%s: ray_cluster_firewall_allow 0.0.0.0/1, 128.0.0.0/1 reaches beyond the fabric subnet" % host,
                         "%s: gpu_cleanup_grace -1 must be at least 1" % host):
                assert part in msg, (part, msg)
        assert lab.changed_total(r) == 0
        # 2. a path that only the node can judge: the worker's path_guard run names where the link leads
        r, failures = lab.play(tmp_path / "link", "site.yml", extravars={"sparkfleet_ray_tmp_dir": LINK})
        assert r["status"] == "failed"
        assert [f["host"] for f in failures] == [worker], json.dumps(failures)[:3000]
        link_msg = "%s: sparkfleet_ray_tmp_dir %s leads through a symbolic link to /home/spark/.ssh" % (worker, LINK)
        problems = failures[0]["res"]["msg"]
        assert len(problems) == 1 and problems[0].startswith(link_msg) and "set it to a directory" in problems[0], problems
        observe(problems[0])
        assert lab.changed_total(r) == 0
        assert lab.host_exec(HEAD, "kill", "-0", pid).returncode == 0
        assert {h: _node_state(lab, h) for h in lab.hosts} == before
    finally:
        lab.host_exec(HEAD, "kill", pid)
        lab.host_exec(worker, "rm", "-f", LINK)
