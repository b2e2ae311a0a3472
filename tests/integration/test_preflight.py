"""Preflight on the lab: a bad serving value stops site.yml before any node changes (issue 11.2).

Before, preflight checked the inventory layout only: plays 2-4 stopped the GPU holders, wrote keys and
started Ray, and only play 5 refused the value. Quick (one failing preflight, no staging needed); run it on
its own lab instance: SPARKLAB_NAME=prefl lab/labctl ctl -- .venv/bin/pytest tests/integration/test_preflight.py -m lab
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.lab

HEAD = "spark-1"
# A GPU holder as gpu_cleanup sees one: a process with the GPU device open.
HOLDER = "import time; f = open('/dev/nvidia0', 'rb'); time.sleep(300)"


def _node_state(lab, host, live=True):
    """Everything plays 2-6 would change on a node, as text. live=False leaves out what a running deployment changes
    by itself (its containers and its units' states: under a fault the engine's unit restarts it, which is supervision
    at work, not the playbook) and takes the content of every unit and configuration file instead."""
    probe = ("ls /etc/systemd/system | grep -i sparkfleet; ls -A /etc/sparkfleet /var/lib/sparkfleet 2>&1;"
             " ls -A ~spark/.ssh 2>&1;")
    if live:
        probe += (" docker ps -a --no-trunc --format '{{.Names}} {{.ID}} {{.Status}}' 2>&1"
                  " | sed -E 's/(Up|Exited \\([0-9]+\\)) .*/\\1/';"
                  " systemctl is-active sparkfleet-ray sparkfleet-vllm 2>&1")
    else:
        probe += (" find /etc/systemd/system -maxdepth 1 -name 'sparkfleet*' -type f -exec sha256sum {} + 2>&1 | sort;"
                  " find /etc/sparkfleet ~spark/.ssh -type f -exec sha256sum {} + 2>&1 | sort")
    return lab.host_exec(host, "sh", "-c", probe).stdout


@pytest.mark.fault(name='bad serving values (gpu_memory_utilization 1.5, port 0, typo and -tp in extra args)',
                   expected='preflight names each but the typo (the image judges flags it does not know, issue 41.9), '
                            'all at once; GPU holder, units, keys untouched')
def test_bad_serving_values_stop_site_in_preflight_with_nothing_changed(lab, tmp_path):
    started = lab.host_exec(HEAD, "sh", "-c", "setsid python3 -c \"%s\" >/dev/null 2>&1 < /dev/null & echo $!" % HOLDER)
    pid = started.stdout.strip()
    assert pid.isdigit(), started.stderr
    try:
        before = {h: _node_state(lab, h) for h in lab.hosts}
        r, failures = lab.play(tmp_path, "site.yml",
                               extravars={"vllm_serve_gpu_memory_utilization": 1.5, "sparkfleet_api_port": 0,
                                          "vllm_serve_extra_args": {"tensor-paralel-size": 2, "-tp": 1}})
        assert r["status"] == "failed"
        assert len(failures) == 1 and failures[0]["host"] == HEAD and failures[0]["event"] == "runner_on_failed"
        msg = failures[0]["res"]["msg"]
        assert sorted(msg) == [  # every problem at once; the order is preflight's, not part of the contract
            "spark-1: sparkfleet_api_port 0 must be between 1 and 65535",
            "spark-1: vllm_serve_extra_args: -tp is pinned by this deployment (vLLM reads -tp as"
            " --tensor-parallel-size); set vllm_serve_tensor_parallel_size instead",
            "spark-1: vllm_serve_gpu_memory_utilization 1.5 must be in (0, 1] (it is a fraction: 0.85 means 85%)",
        ], json.dumps(msg)
        assert lab.changed_total(r) == 0
        # Nothing after preflight ran: the holder still holds the GPU, no unit, key, container or service.
        assert lab.host_exec(HEAD, "kill", "-0", pid).returncode == 0
        assert pid in lab.host_exec(HEAD, "nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader").stdout
        assert {h: _node_state(lab, h) for h in lab.hosts} == before
    finally:
        lab.host_exec(HEAD, "kill", pid)


# CI names an unreachable worker by test_faults' (ssh) and a link down by test_rdma_facts' (the head's); this one
# waits for the cluster to heal after the flap (~85 s of CI): long.
@pytest.mark.long
@pytest.mark.fault(name="fabric link of the worker down (cable pulled) before a run",
                   expected="preflight names the head, the worker, its fabric address and the cause; nothing changed")
def test_a_worker_unreachable_over_the_fabric_is_named_in_preflight(lab, tmp_path, observe):
    worker = lab.hosts[-1]
    served = lab.serves()
    before = {h: _node_state(lab, h, live=False) for h in lab.hosts[:1]}
    lab.labctl("break", "fabric-down", worker)
    try:
        r, failures = lab.play(tmp_path, "site.yml")
        assert r["status"] == "failed"
        msgs = lab.messages(failures)
        ip = lab.fabric_ip(worker)
        assert "cannot reach %s (%s) over the fabric" % (worker, ip) in msgs, msgs[-2000:]
        # The cause as the head's kernel gives it: a timeout, the link down, or no neighbour answering ARP.
        assert any(cause in msgs for cause in ("does not answer on port 22", "is down", "No route to host")), \
            msgs[-2000:]
        observe(msgs[msgs.index("cannot reach"):][:240])
        # Nothing was changed by the run (the engine's unit may have restarted it meanwhile: the worker is gone).
        assert lab.changed_total(r) == 0
        assert {h: _node_state(lab, h, live=False) for h in lab.hosts[:1]} == before
    finally:
        lab.labctl("fix", "fabric-down", worker, check=False)
    if served:
        # The fabric back, a serving cluster usually heals by itself: the GCS marked the worker dead, so its raylet
        # exits and its unit starts a new one; the engine's unit (restarted when its ranks were lost) places on it and
        # serves (~40-60 s on the lab). Not always: after the flap Ray may leave every placement group pending although
        # both nodes are alive with both GPUs free (seen on the lab, Ray 2.60: a restarted engine waits too; restarting
        # Ray heals it, which the head's Ray watchdog does after ray_cluster_watchdog_pg_stuck(_leak)). That is
        # recorded, not asserted here (this test is about preflight), and should it still not serve after 300 s the
        # test does the human step so the tests after it find a serving lab.
        back = lab.wait_serving(limit=300, fail=False)
        if back is not None:
            observe("serving again %.0f s after the fabric came back" % back)
        else:
            observe("NOT serving 300 s after the fabric came back (the engine's placement group pending): the test"
                    " restarted Ray on every node, then vLLM")
            for host in lab.hosts:
                lab.host_exec(host, "systemctl", "restart", "sparkfleet-ray", timeout=180)
            lab.host_exec(HEAD, "systemctl", "restart", "sparkfleet-vllm", timeout=180)
            lab.wait_serving(limit=300)
