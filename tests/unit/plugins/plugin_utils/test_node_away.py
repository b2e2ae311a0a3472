"""A node that went away during a run: told apart from the late errors it causes, on Ray's and ssh's real text."""

from __future__ import annotations

import gzip
import os

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.ray._ray import probe_error_text
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _node_away

HERE = os.path.dirname(__file__)
FIXTURES = os.path.join(HERE, "..", "..")
VLLM_WAIT = os.path.join(FIXTURES, "plugins", "modules", "fixtures", "vllm_wait")
IPS = {"10.99.1.11": "spark-1", "10.99.1.12": "spark-2"}

# Ray's own text: TaskUnschedulableError's str() ("The task is not schedulable: " + the raylet's message for a node
# affinity whose node is gone, as Ray's tests assert it), as ray_cluster_check's probe reports it.
UNSCHEDULABLE = ("TaskUnschedulableError: The task is not schedulable: The node specified via "
                 "NodeAffinitySchedulingStrategy doesn't exist any more or is infeasible, and soft=False was specified.")


def _gz(name):
    with gzip.open(os.path.join(VLLM_WAIT, name), "rt", errors="replace") as handle:
        return handle.read()


def _ray_check_failure():
    """What ray_cluster_check fails with when the worker's node left during its pinned probe."""
    problem = probe_error_text({"phase": "schedule", "kind": "error", "detail": UNSCHEDULABLE}, "spark-2",
                               "10.99.1.12", "spark-1", "10.99.1.11", 20)
    return {"msg": "Ray cluster check failed: " + problem, "problems": [problem],
            "expected": [{"host": "spark-1", "ip": "10.99.1.11", "head": True},
                         {"host": "spark-2", "ip": "10.99.1.12", "head": False}], "missing": []}


def test_ray_check_s_task_unschedulable_names_the_worker_not_the_head():
    verdict = _node_away.classify("failed", "spark-1", _ray_check_failure(), {})
    assert verdict["host"] == "spark-2" and verdict["how"] == "left the Ray cluster"
    assert "NodeAffinitySchedulingStrategy" in verdict["evidence"]


def test_a_node_marked_dead_by_the_gcs_relayed_in_vllm_s_log_is_named_by_its_address():
    # Real capture (lab): the head's vLLM journal relays the GCS marking the worker's node dead.
    verdict = _node_away.classify("failed", "spark-1", {"msg": _gz("real_ray_fabric_back_lab.log.gz")}, IPS)
    assert verdict["host"] == "spark-2" and verdict["ip"] == "10.99.1.12"
    assert "has been marked dead" in verdict["evidence"]


def test_the_gcs_log_of_a_worker_flap_names_the_worker():
    path = os.path.join(FIXTURES, "roles", "fixtures", "ray_status", "gcs_server_after_worker_flap.out")
    with open(path) as handle:
        verdict = _node_away.classify("failed", "spark-1", {"stderr": handle.read()}, IPS)
    assert verdict["host"] == "spark-2"


def test_an_address_no_host_of_the_run_has_still_gives_a_verdict_without_a_name():
    verdict = _node_away.classify("failed", "spark-1", {"msg": _gz("real_ray_fabric_back_lab.log.gz")}, {})
    assert verdict["host"] is None
    msg = _node_away.message(verdict)
    assert "Ray's node 10.99.1.12" in msg and "status.yml" in msg and msg.endswith("run site.yml again")


@pytest.mark.parametrize("status, result", [
    ("unreachable", {"msg": "Failed to connect to the host via ssh: ssh: connect to host 10.99.1.12 port 22: "
                            "Connection refused", "unreachable": True}),
    ("unreachable", {"msg": "Data could not be sent to remote host \"10.99.1.12\". Make sure this host can be reached "
                            "over ssh: kex_exchange_identification: Connection closed by remote host"}),
    # the node's sshd stopped under a running module (systemctl reboot): Ansible's MODULE FAILURE with ssh's line
    ("failed", {"msg": "MODULE FAILURE: No start of json char found\nSee stdout/stderr for the exact error",
                "module_stderr": "Shared connection to 10.99.1.12 closed.\r\n", "rc": 255}),
])
def test_a_node_whose_ssh_stopped_answering_is_the_one_named(status, result):
    verdict = _node_away.classify(status, "spark-2", result, IPS)
    assert verdict["host"] == "spark-2" and verdict["how"] == "stopped answering ssh"


def test_the_head_s_transfer_to_a_worker_that_went_away_names_the_worker():
    result = {"msg": "rsync to spark-2 failed", "stderr": "ssh: connect to host 10.99.1.12 port 22: No route to host\n"
                                                          "rsync: connection unexpectedly closed (0 bytes received)"}
    verdict = _node_away.classify("failed", "spark-1", result, IPS)
    assert verdict["host"] == "spark-2" and verdict["ip"] == "10.99.1.12"


def test_the_head_s_fabric_check_losing_a_worker_that_ran_tasks_in_this_run_names_it_gone():
    # the lab's power cut of the worker during site.yml: ray_cluster's re-check found its sshd gone (the netns answers)
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric._reach import verdict as reach_verdict
    msg = reach_verdict("spark-1", "spark-2", "10.99.1.12", 22, {"kind": "local", "dev": "enp1s0f1np1"},
                        {"operstate": "up", "carrier": "1"}, "refused", 5, ["enp1s0f1np1"])
    assert "nothing listens on port 22 (sshd)" in msg
    verdict = _node_away.classify("failed", "spark-1", {"msg": msg}, IPS, answered={"spark-1", "spark-2"})
    assert verdict["host"] == "spark-2" and verdict["how"] == "stopped answering ssh", verdict
    # a worker that ran nothing in this run did not go away: it never came up (preflight names it so)
    assert _node_away.classify("failed", "spark-1", {"msg": msg}, IPS, answered={"spark-1"}) is None


@pytest.mark.parametrize("result", [
    {"msg": "worker disk full"},
    {"msg": "spark-1 registered with Ray as 10.99.0.11, expected its fabric IP 10.99.1.11"},
    {"msg": "MODULE FAILURE", "module_stderr": "Traceback (most recent call last):\nKeyError: 'x'"},
    # its own address in an ssh error is no other node going away
    {"msg": "x", "stderr": "ssh: connect to host 10.99.1.11 port 22: Connection refused"},
])
def test_other_failures_are_not_a_node_going_away(result):
    assert _node_away.classify("failed", "spark-1", result, IPS) is None


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(VLLM_WAIT) if f.endswith(".log.gz")
                                        and f != "real_ray_fabric_back_lab.log.gz"))
def test_no_other_captured_vllm_failure_reads_as_a_node_going_away(name):
    assert _node_away.classify("failed", "spark-1", {"msg": _gz(name)}, IPS) is None


def test_the_run_s_verdict_is_the_named_node_and_one_sentence_with_the_next_step():
    unnamed = _node_away.classify("failed", "spark-1", {"msg": _gz("real_ray_fabric_back_lab.log.gz")}, {})
    ray = _node_away.classify("failed", "spark-1", _ray_check_failure(), {})
    ssh = _node_away.classify("unreachable", "spark-2", {"msg": "Connection timed out"}, IPS)
    verdict = _node_away.merge([unnamed, ray, ssh])
    msg = _node_away.message(verdict, at=0)
    assert msg.startswith("spark-2 went away during the run (left the Ray cluster at ")
    assert "it also stopped answering ssh" in msg and msg.endswith(": when it is back, run site.yml again")
    assert _node_away.merge([]) is None
