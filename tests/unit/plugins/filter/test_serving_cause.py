"""serving_cause: name the node and unit that keep the cluster from serving, from `systemctl show` output.

The outputs are shaped as the lab's systemd 252 prints `date +%s; systemctl show --timestamp=unix -p ...` (captured
on the lab: a worker's Ray restarted by systemd after its raylet was killed under a serving engine).
"""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.vllm.plugins.filter.serving_cause import parse_units, serving_cause


def show(now, ray, vllm=None):
    """The command's output: the node's clock, then one block per unit (systemctl's property order)."""
    out = ["%d" % now]
    for unit, props in (("sparkfleet-ray.service", ray), ("sparkfleet-vllm.service", vllm)):
        if props is None:
            props = {"ActiveState": "inactive", "SubState": "dead", "ExecMainStartTimestamp": "", "NRestarts": "0"}
        out += ["Result=%s" % props.get("Result", "success"), "NRestarts=%s" % props.get("NRestarts", "0"),
                "ExecMainStartTimestamp=%s" % props.get("ExecMainStartTimestamp", ""),
                "ExecMainStatus=%s" % props.get("ExecMainStatus", "0"), "Id=%s" % unit,
                "ActiveState=%s" % props["ActiveState"], "SubState=%s" % props["SubState"], ""]
    return "\n".join(out)


RUNNING = {"ActiveState": "active", "SubState": "running"}


def test_parse_units_reads_the_clock_and_each_unit():
    now, units = parse_units(show(1796095911, dict(RUNNING, ExecMainStartTimestamp="@1796095028")))
    assert now == 1796095911
    assert units["sparkfleet-ray.service"]["ExecMainStartTimestamp"] == "@1796095028"
    assert units["sparkfleet-vllm.service"]["ActiveState"] == "inactive"


def test_a_healthy_cluster_has_no_cause():
    nodes = {"spark-1": show(1000, dict(RUNNING, ExecMainStartTimestamp="@100"),
                             dict(RUNNING, ExecMainStartTimestamp="@200")),
             "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@150"))}
    assert serving_cause(nodes, "spark-1") == []


def test_a_worker_ray_restarted_under_the_engine_is_named():
    nodes = {"spark-1": show(1000, dict(RUNNING, ExecMainStartTimestamp="@100"),
                             dict(RUNNING, ExecMainStartTimestamp="@200")),
             "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@990", NRestarts="1"))}
    assert serving_cause(nodes, "spark-1") == [
        "spark-2: Ray (sparkfleet-ray) restarted 10 s ago, after the engine started 800 s ago: the engine's rank(s)"
        " there died with it (active/running, restarted 1 time(s) by systemd)"]


def test_a_worker_ray_restarting_and_vllm_restarting_both_named_worker_first():
    nodes = {"spark-1": show(1000, dict(RUNNING, ExecMainStartTimestamp="@100"),
                             {"ActiveState": "activating", "SubState": "auto-restart", "NRestarts": "1",
                              "Result": "exit-code", "ExecMainStartTimestamp": "@200"}),
             "spark-2": {"item": "spark-2",
                         "stdout": show(1000, {"ActiveState": "activating", "SubState": "start-pre", "NRestarts": "1",
                                               "ExecMainStartTimestamp": "@300"})}}
    causes = serving_cause(nodes, "spark-1", engine={"failure": {"class": "worker_died", "evidence": [
        "(RayWorkerWrapper pid=180, ip=10.99.1.12) ray.exceptions.ActorDiedError"]}})
    assert causes[0].startswith("spark-2: Ray (sparkfleet-ray) is activating/start-pre, restarted 1 time(s) by"
                                " systemd; systemd is bringing it back")
    assert causes[1].startswith("spark-1: vLLM (sparkfleet-vllm) is activating/auto-restart, restarted 1 time(s)")
    assert causes[2] == "engine log: worker_died: (RayWorkerWrapper pid=180, ip=10.99.1.12) ray.exceptions.ActorDiedError"


def test_stopped_units_say_run_site_yml():
    nodes = {"spark-1": show(1000, {"ActiveState": "inactive", "SubState": "dead"},
                             {"ActiveState": "failed", "SubState": "failed", "Result": "start-limit-hit"})}
    assert serving_cause(nodes, "spark-1") == [
        "spark-1: the head's Ray (sparkfleet-ray) is inactive/dead; run site.yml to start it",
        "spark-1: vLLM (sparkfleet-vllm) is failed/failed; run site.yml to start it"]


def test_an_unreachable_node_is_named():
    nodes = {"spark-1": show(1000, dict(RUNNING, ExecMainStartTimestamp="@100"),
                             dict(RUNNING, ExecMainStartTimestamp="@200")),
             "spark-2": {"unreachable": True, "msg": "Failed to connect to the host via ssh: No route to host"}}
    assert serving_cause(nodes, "spark-1") == [
        "spark-2: cannot be reached to read its units (Failed to connect to the host via ssh: No route to host)"]


def test_units_never_installed():
    nodes = {"spark-1": "1000\n", "spark-2": "1000\n"}
    assert serving_cause(nodes, "spark-1") == [
        "spark-2: Ray (sparkfleet-ray) is not installed; run site.yml",
        "spark-1: Ray (sparkfleet-ray) is not installed; run site.yml",
        "spark-1: vLLM (sparkfleet-vllm) is not installed; run site.yml"]


def test_not_a_dict_is_an_error():
    with pytest.raises(AnsibleFilterError, match="expects a dict"):
        serving_cause(["spark-1"], "spark-1")


def test_history_names_units_systemd_restarted_even_when_healed():
    nodes = {"spark-1": show(1000, dict(RUNNING, ExecMainStartTimestamp="@100"),
                             dict(RUNNING, ExecMainStartTimestamp="@950", NRestarts="1")),
             "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@900", NRestarts="1"))}
    assert serving_cause(nodes, "spark-1") == []
    assert serving_cause(nodes, "spark-1", history=True) == [
        "spark-2: Ray (sparkfleet-ray) was restarted 1 time(s) by systemd, the last start 100 s ago",
        "spark-1: vLLM (sparkfleet-vllm) was restarted 1 time(s) by systemd, the last start 50 s ago"]
