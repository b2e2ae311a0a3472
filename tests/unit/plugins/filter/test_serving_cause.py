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


def test_a_worker_ray_restarted_while_the_engine_placed_its_ranks_is_no_cause_once_it_answers():
    # Seen in the 3 Dec soak (fabric flap on the worker): vLLM restarted by its liveness probe, the worker's Ray
    # restarted 28 s into the new engine's placement, the engine placed on the new raylet and served; status.yml
    # said "the engine's rank(s) there died with it" and exited 2 for 4 minutes while every request was answered.
    nodes = {"spark-1": show(1264, dict(RUNNING, ExecMainStartTimestamp="@100"),
                             dict(RUNNING, ExecMainStartTimestamp="@1000")),
             "spark-2": show(1264, dict(RUNNING, ExecMainStartTimestamp="@1028", NRestarts="1"))}
    assert serving_cause(nodes, "spark-1", api={"health": 200, "completion_ok": True}) == []
    # Without a token the restart is still named (the ranks may have died with it).
    failing = serving_cause(nodes, "spark-1", api={"health": 200, "completion_ok": False, "completion_msg": "HTTP 500"})
    assert failing[0].startswith("spark-2: Ray (sparkfleet-ray) restarted 236 s ago, after the engine started 264 s")


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
        "spark-1: vLLM (sparkfleet-vllm) is failed/failed; systemd gave up (start-limit-hit): run site.yml to start it"]


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


# --------------------------------------------------------------------------- what systemd cannot see (issue 18)
HEALTHY_HEAD = show(1000, dict(RUNNING, ExecMainStartTimestamp="@100"), dict(RUNNING, ExecMainStartTimestamp="@200"))
# The Ray journal of a worker whose ray.env carries a token the head does not accept (raylet's words, lab Ray 2.60).
REJECTED = ("[2026-12-01 16:02:11,304 C 61 61] gcs_rpc_client.h:179: Failed to connect to GCS: "
            "InvalidAuthToken: Authentication token is missing or incorrect")


def test_a_rejected_ray_token_is_named_and_never_called_coming_back():
    nodes = {"spark-1": show(1000, dict(RUNNING, ExecMainStartTimestamp="@100"),
                             {"ActiveState": "activating", "SubState": "start-pre", "ExecMainStartTimestamp": "@900"}),
             "spark-2": show(1000, {"ActiveState": "activating", "SubState": "auto-restart", "NRestarts": "40",
                                    "Result": "exit-code"})}
    causes = serving_cause(nodes, "spark-1", journals={"spark-2": {"stdout": "starting\n" + REJECTED}},
                           ray={"missing": [{"host": "spark-2", "reason": "not registered"}]})
    assert causes[0].startswith("spark-2: Ray (sparkfleet-ray) is activating/auto-restart, restarted 40 time(s) by "
                                "systemd: Ray token rejected by the head (")
    assert "InvalidAuthToken" in causes[0] and causes[0].endswith("run site.yml")
    assert not any("bringing it back" in c or "systemd restarts it" in c for c in causes)
    assert causes[1] == ("spark-1: vLLM (sparkfleet-vllm) is activating/start-pre; it waits for the cluster's GPUs, "
                         "which the cause above keeps away")


def test_an_old_token_line_on_a_node_alive_in_ray_is_history():
    nodes = {"spark-1": HEALTHY_HEAD, "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@150"))}
    assert serving_cause(nodes, "spark-1", journals={"spark-2": REJECTED}, ray={"missing": []}) == []


def test_alive_in_systemd_dead_in_ray():
    timer = "\nId=sparkfleet-ray-watchdog.timer\nActiveState=active\nSubState=waiting\n"
    nodes = {"spark-1": HEALTHY_HEAD, "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@150")) + timer}
    causes = serving_cause(nodes, "spark-1", ray={"missing": [{"host": "spark-2", "reason": "dead"}]})
    assert causes == ["spark-2: Ray (sparkfleet-ray) is alive in systemd, dead in Ray (dead); its watchdog restarts it"]
    unguarded = {"spark-1": HEALTHY_HEAD, "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@150"))}
    assert serving_cause(unguarded, "spark-1", ray={"missing": [{"host": "spark-2", "reason": "dead"}]})[0].endswith(
        "no watchdog runs here: run site.yml")
    # Ray could not be read at all: no claim about the node
    assert serving_cause(unguarded, "spark-1", ray={"error": "connect", "missing": [{"host": "spark-2"}]}) == []


def test_answers_health_generates_nothing():
    nodes = {"spark-1": HEALTHY_HEAD, "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@150"))}
    causes = serving_cause(nodes, "spark-1", ray={"missing": []},
                           api={"health": 200, "completion_ok": False, "completion_msg": "no token within 20 s"})
    assert causes == ["spark-1: vLLM (sparkfleet-vllm) answers /health, generates nothing (no token within 20 s); "
                      "no liveness timer runs: restart it (playbooks/restart.yml)"]
    starting = serving_cause(nodes, "spark-1", api={"health": -1, "completion_ok": False, "phase": "loading_weights"})
    assert starting == ["spark-1: vLLM (sparkfleet-vllm) is active and still starting (phase loading_weights); "
                        "requests fail until it serves"]
    assert serving_cause(nodes, "spark-1", api={"health": 200, "completion_ok": True}) == []


def test_an_incomplete_worker_copy_is_named():
    nodes = {"spark-1": HEALTHY_HEAD, "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@150"))}
    state = "copy=incomplete\nverified=no\nfingerprint=none\nupdated=2026-12-01T15:00:00Z\nreason=No space left\n"
    assert serving_cause(nodes, "spark-1", models={"spark-2": {"stdout": state}, "spark-1": ""}) == [
        "spark-2: model copy on this node incomplete (No space left): run site.yml to finish the sync"]
    assert serving_cause(nodes, "spark-1", models={"spark-2": "copy=complete\nverified=yes\n"}) == []


def test_history_shows_the_latest_restarts_and_why_newest_first():
    nodes = {"spark-1": HEALTHY_HEAD, "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@900",
                                                                 NRestarts="1"))}
    log1 = "\n".join([
        '{"by": "systemd", "cause": "container killed (exit 137: SIGKILL)", "event": "stopped", "time": 700.0, '
        '"unit": "sparkfleet-vllm"}',
        "not json",
        '{"by": "watchdog", "cause": "engine stopped generating: no token within 20 s in 2 probes in a row", '
        '"event": "restart", "time": 950.0, "unit": "sparkfleet-vllm"}'])
    log2 = ('{"by": "watchdog", "cause": "raylet gone while `ray start --block` lingers", "event": "restart", '
            '"time": 890.0, "unit": "sparkfleet-ray"}')
    assert serving_cause(nodes, "spark-1", history=True, events={"spark-1": {"stdout": log1}, "spark-2": log2}) == [
        "spark-1: sparkfleet-vllm restarted by its watchdog 50 s ago: engine stopped generating: no token within 20 s"
        " in 2 probes in a row",
        "spark-2: sparkfleet-ray restarted by its watchdog 110 s ago: raylet gone while `ray start --block` lingers",
        "spark-1: sparkfleet-vllm stopped 300 s ago: container killed (exit 137: SIGKILL)"]


def test_new_inputs_must_be_dicts():
    with pytest.raises(AnsibleFilterError, match="api= expects a dict"):
        serving_cause({"spark-1": HEALTHY_HEAD}, "spark-1", api=["x"])


def test_one_read_per_node_carries_journal_events_and_model_sections():
    worker = (show(1000, {"ActiveState": "activating", "SubState": "auto-restart", "NRestarts": "3"})
              + "\n@@ journal\n" + REJECTED + "\n@@ events\n"
              + '{"by": "systemd", "cause": "exit-code (exited 1)", "event": "stopped", "time": 990, "unit": "sparkfleet-ray"}'
              + "\n@@ model\ncopy=incomplete\nreason=killed\n")
    nodes = {"spark-1": {"stdout": HEALTHY_HEAD + "\n@@ journal\n\n@@ events\n\n@@ model\n"},
             "spark-2": {"stdout": worker}}
    causes = serving_cause(nodes, "spark-1")
    assert "Ray token rejected by the head" in causes[0]
    assert causes[1] == "spark-2: model copy on this node incomplete (killed): run site.yml to finish the sync"
    assert serving_cause(nodes, "spark-1", history=True) == [
        "spark-2: sparkfleet-ray stopped 10 s ago: exit-code (exited 1)"]


def stuck_state(checked, since=900.0):
    """The head's Ray watchdog state while a placement group waits with its GPUs free (sparkfleet_watchdog.py writes
    it; tests/unit/roles/test_sparkfleet_watchdog.py feeds the real one through this filter)."""
    return ('{"bad": 0, "cause": "a placement group of 2 GPU(s) pending 75 s with 2 GPU(s) free", "pg_checked": %s,'
            ' "pg_pending_since": %s, "pg_restart_after": 120, "start": 12.5}' % (checked, since))


def test_a_stuck_scheduler_on_the_head_is_named_with_when_it_is_repaired():
    nodes = {"spark-1": {"stdout": HEALTHY_HEAD + "\n@@ scheduler\n" + stuck_state(995.0) + "\n"},
             "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@150"))}
    assert serving_cause(nodes, "spark-1") == [
        "spark-1: Ray's scheduler: a placement group of 2 GPU(s) pending 75 s with 2 GPU(s) free; the head's Ray"
        " watchdog restarts Ray (sparkfleet-ray) once it has been pending 120 s (the workers' Ray and vLLM follow)"]


@pytest.mark.parametrize("state", [
    "",                                                           # no watchdog state (never ran, or the file is gone)
    "{not json",
    '{"bad": 0, "start": 12.5}',                                  # nothing pending
    stuck_state(600.0),                                           # written 400 s ago: its watchdog no longer runs
])
def test_no_scheduler_cause_without_a_fresh_pending_state(state):
    nodes = {"spark-1": {"stdout": HEALTHY_HEAD + "\n@@ scheduler\n" + state + "\n"},
             "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@150"))}
    assert serving_cause(nodes, "spark-1") == []


def test_a_worker_s_scheduler_state_is_not_read():
    """Only the head's GCS schedules placement groups."""
    nodes = {"spark-1": HEALTHY_HEAD,
             "spark-2": {"stdout": show(1000, dict(RUNNING, ExecMainStartTimestamp="@150")) + "\n@@ scheduler\n"
                         + stuck_state(995.0)}}
    assert serving_cause(nodes, "spark-1") == []


# sparkfleet-ray-guard's refusal as the head's Ray journal holds it (the guard's own words, roles/ray_cluster/files)
GUARD = ("sparkfleet-ray-guard: port 6379 on this node is taken by pid 4242 (gcs_server) in container vllm_node: another"
         " Ray head (or another service) runs here, so our Ray head does not start (our workers would join the wrong"
         " cluster). site.yml's gpu_cleanup stops an older deployment (gpu_cleanup_stale_units,"
         " gpu_cleanup_stale_containers); or stop it yourself and disable it.")


def test_a_ray_head_refused_at_every_start_is_never_called_coming_back():
    # seen on a second lab: "systemd is bringing it back, and vLLM restarts once every GPU is back" while the guard
    # refused every start because another Ray head held 6379
    nodes = {"spark-1": show(1000, {"ActiveState": "activating", "SubState": "auto-restart", "NRestarts": "12",
                                    "Result": "exit-code"},
                             {"ActiveState": "inactive", "SubState": "dead"}),
             "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@150"))}
    causes = serving_cause(nodes, "spark-1", journals={"spark-1": {"stdout": GUARD + "\n"}})
    assert causes[0].startswith("spark-1: the head's Ray (sparkfleet-ray) is activating/auto-restart, restarted 12"
                                " time(s) by systemd: every start is refused while the port is held (port 6379 on this"
                                " node is taken by pid 4242 (gcs_server) in container vllm_node")
    assert causes[0].endswith("(run site.yml: its gpu_cleanup stops an older deployment)")
    assert not any("bringing it back" in c for c in causes)


def test_a_model_name_the_engine_does_not_serve_is_named_not_restarted():
    # seen on a second lab after a model switch: HTTP 404 read as "answers /health, generates nothing; its liveness
    # timer restarts it" (a restart changes nothing)
    nodes = {"spark-1": HEALTHY_HEAD, "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@150"))}
    causes = serving_cause(nodes, "spark-1", ray={"missing": []},
                           api={"health": 200, "completion_ok": False, "completion_msg": "HTTP 404"})
    assert causes == ["spark-1: vLLM (sparkfleet-vllm) answers, but serves no model by the name asked (HTTP 404): it"
                      " serves another name (a model switch not deployed yet, or a list of served names); run site.yml"]


def test_a_failing_watchdog_and_a_full_disk_are_named():
    # seen on a second lab: a full disk killed both watchdogs at every run and status.yml said "still starting"
    head = show(1000, dict(RUNNING, ExecMainStartTimestamp="@100"), dict(RUNNING, ExecMainStartTimestamp="@200"))
    watchdog = ["Result=exit-code", "NRestarts=0", "Id=sparkfleet-vllm-watchdog.service", "ActiveState=failed",
                "SubState=failed", ""]
    head += "\n" + "\n".join(watchdog)
    disk = "/dev/vda 257952 257902 50 100% /"
    nodes = {"spark-1": {"stdout": head + "\n@@ disk\n" + disk + "\n"},
             "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@150"))}
    causes = serving_cause(nodes, "spark-1", api={"health": 200, "completion_ok": True})
    assert causes == [
        "spark-1: its watchdog sparkfleet-vllm-watchdog.service failed at its last run (exit-code): what it supervises"
        " is not repaired while it fails; read journalctl -u sparkfleet-vllm-watchdog.service there",
        "spark-1: 50 MB free on /, where the supervision log and the deploy's state are written: free space there"]


def test_a_model_changed_since_the_sync_and_a_bad_scrub_are_named_with_the_next_step():
    status = {"state": "changed", "changes": [{"file": "model-00002-of-00003.safetensors"}],
              "msg": "model changed since the sync on spark-2: model-00002-of-00003.safetensors ctime moved (written, "
                     "or its metadata set); size and mtime kept: run site.yml",
              "scrub": {"state": "bad", "time": 1796095000,
                        "msg": "the scrub found 1 file(s) on spark-2 whose content is not the head's: "
                               "model-00002-of-00003.safetensors content differs from the head's: run site.yml"}}
    nodes = {"spark-1": show(1000, dict(RUNNING, ExecMainStartTimestamp="@100"),
                             dict(RUNNING, ExecMainStartTimestamp="@200")),
             "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@150")) + "\n@@ model\ncopy=complete\n"
             + "@@ manifest\n" + __import__("json").dumps(status)}
    causes = serving_cause(nodes, "spark-1")
    assert causes[0] == "spark-2: " + status["msg"]
    assert causes[1].startswith("spark-2: the scrub found 1 file(s) on spark-2 whose content is not the head's")
    stamp = __import__("time").strftime("%Y-%m-%d %H:%M UTC", __import__("time").gmtime(1796095000))
    assert causes[1].endswith("content differs from the head's: run site.yml (scrub of %s)" % stamp)


def test_a_model_as_the_sync_left_it_is_no_cause():
    ok = '{"state": "ok", "changes": [], "msg": "model on spark-2 as the sync left it", "scrub": {"state": "ok"}}'
    nodes = {"spark-1": show(1000, dict(RUNNING, ExecMainStartTimestamp="@100"),
                             dict(RUNNING, ExecMainStartTimestamp="@200")) + "\n@@ manifest\n" + ok,
             "spark-2": show(1000, dict(RUNNING, ExecMainStartTimestamp="@150")) + "\n@@ manifest\n"}
    assert serving_cause(nodes, "spark-1") == []
