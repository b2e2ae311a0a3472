"""roles/sparkfleet/files/sparkfleet_watchdog.py: the decisions of the units' watchdog (commands faked)."""

from __future__ import annotations

import json
import os
import subprocess
import types
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "roles" / "sparkfleet" / "files" / "sparkfleet_watchdog.py"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ray_status"    # real `ray status` outputs: CAPTURED.md
FLAP_GCS_LOG = FIXTURES / "gcs_server_after_worker_flap.out"   # the head's GCS log 6-17 s after a worker's flap
# The same on Ray 2.53 (the Sparks' image): no "Failed to remove N bundle(s)" in 2.53's GCS; its words for the failed
# removal are "Failed to cancel the resource reserved for bundle: ..." (CAPTURED.md)
FLAP_GCS_LOG_253 = FIXTURES / "gcs_server_after_worker_flap_ray253.out"


@pytest.fixture
def wd(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_WATCHDOG_DIR", str(tmp_path))
    monkeypatch.setenv("SPARKFLEET_WATCHDOG_RUN_DIR", str(tmp_path))
    # compiled by hand: an import would leave a __pycache__ in the role's files/ (shipped as role content)
    mod = types.ModuleType("sparkfleet_watchdog")
    mod.__file__ = str(SCRIPT)
    exec(compile(SCRIPT.read_text(), str(SCRIPT), "exec"), mod.__dict__)
    mod.calls = []
    return mod


class Node:
    """A fake node: systemd's view of a unit, docker's answers, the clock."""

    def __init__(self, wd, monkeypatch, running=True, start=100.0, clock=1000.0):
        self.wd, self.running, self.start, self.clock = wd, running, start, clock
        self.procs = {"raylet", "gcs_server", "ray"}
        self.gcs = {"ok": True, "nodes": [{"ip": "10.99.1.11", "alive": True}, {"ip": "10.99.1.12", "alive": True}]}
        self.paused = "false"
        self.dockerd = True         # whether dockerd answers `docker version`
        self.status = (FIXTURES / "serving.txt").read_text()     # `ray status` on the head
        self.gcs_log = None         # the head's GCS log (a file here; None: it cannot be read), grepped for real
        monkeypatch.setattr(wd, "run", self.run)
        monkeypatch.setattr(wd, "now", lambda: self.clock + 1.7e9)
        monkeypatch.setattr(wd, "unit_run", lambda unit: (self.running, self.start))
        monkeypatch.setattr(wd.time, "monotonic", lambda: self.clock)
        monkeypatch.setattr(wd, "container_processes", lambda c: self.procs)
        monkeypatch.setattr(wd, "gcs_nodes", lambda c, a, t, ops=None: self.gcs)

    def run(self, argv, timeout=60, stdin=None):
        self.wd.calls.append(argv)
        if argv[:2] == ["docker", "inspect"]:
            return 0, self.paused + "\n", ""
        if argv[:2] == ["docker", "version"]:
            return (0, "20.10.24+dfsg1\n", "") if self.dockerd else (1, "", "Cannot connect to the Docker daemon")
        if argv[:2] == ["docker", "exec"] and argv[3:5] == ["ray", "status"]:
            return (0, self.status, "") if self.status is not None else (1, "", "ConnectionError: GCS unreachable")
        if argv[:2] == ["docker", "exec"] and argv[3] == "grep":
            assert argv[-1] == "/tmp/ray/session_latest/logs/gcs_server.out"
            if self.gcs_log is None:
                return 2, "", "grep: /tmp/ray/session_latest/logs/gcs_server.out: No such file or directory\n"
            p = subprocess.run(argv[3:-1] + [str(self.gcs_log)], capture_output=True, text=True, check=False)
            return p.returncode, p.stdout, p.stderr
        return 0, "", ""

    def restarts(self):
        return [c for c in self.wd.calls if c[:2] == ["systemctl", "restart"]]


def log_lines(tmp_path):
    path = tmp_path / "supervision.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def ray_args(wd, head=False, node_ip="10.99.1.12"):
    return wd.main.__globals__["argparse"].Namespace(
        unit="sparkfleet-ray", container="sparkfleet-ray", address="10.99.1.11:6379", node_ip=node_ip, head=head,
        grace=60, checks=2, timeout=20, pg_stuck=120, pg_stuck_leak=10)


def vllm_args(wd, start_grace=1800):
    return wd.main.__globals__["argparse"].Namespace(
        unit="sparkfleet-vllm", container="sparkfleet-vllm", url="http://10.99.0.11:30000", model="m",
        env_file="/nonexistent", timeout=20, failures=2, start_grace=start_grace, ray_unit="sparkfleet-ray", node=[],
        incidents_keep=0, incident_wait=45, incident_node=[])


# --------------------------------------------------------------------------- Ray
@pytest.mark.parametrize("head, procs, gcs, expected", [
    (False, {"raylet"}, {"ok": True, "nodes": [{"ip": "10.99.1.12", "alive": True}]}, None),
    (False, {"ray"}, {"ok": None}, "raylet gone while `ray start --block` lingers"),
    (True, {"raylet", "ray"}, {"ok": None}, "gcs_server gone"),
    (False, {"raylet"}, {"ok": True, "nodes": [{"ip": "10.99.1.12", "alive": False}]}, "lists 10.99.1.12 as dead"),
    (False, {"raylet"}, {"ok": True, "nodes": [{"ip": "10.99.1.11", "alive": True}]}, "as no node at all"),
    # an old dead entry and the new live one: alive
    (False, {"raylet"}, {"ok": True, "nodes": [{"ip": "10.99.1.12", "alive": False},
                                               {"ip": "10.99.1.12", "alive": True}]}, None),
    # a worker whose head is away waits (restarting would not bring the head back)
    (False, {"raylet"}, {"ok": False, "error": "no answer"}, None),
    (True, {"raylet", "gcs_server"}, {"ok": False, "error": "no answer"}, "head's GCS does not answer"),
    (False, None, {"ok": None}, "container does not"),
])
def test_ray_verdict(wd, head, procs, gcs, expected):
    got = wd.ray_verdict(head, "10.99.1.12", procs, gcs)
    if expected is None:
        assert got is None
    else:
        assert expected in got
        assert "dead in Ray" in got or "container" in expected


def test_ray_restarted_after_two_bad_checks_only(wd, monkeypatch, tmp_path):
    node = Node(wd, monkeypatch)
    node.procs = {"ray"}                            # raylet killed, `ray start --block` still there
    a = ray_args(wd)
    wd.check_ray(a)
    assert node.restarts() == []                    # one bad check: not yet
    wd.check_ray(a)
    assert node.restarts() == [["systemctl", "restart", "--no-block", "sparkfleet-ray.service"]]
    (entry,) = log_lines(tmp_path)
    assert entry["unit"] == "sparkfleet-ray" and entry["event"] == "restart" and entry["by"] == "watchdog"
    assert "raylet gone" in entry["cause"] and "alive in systemd, dead in Ray" in entry["cause"]


def test_ray_not_judged_while_dockerd_does_not_answer(wd, monkeypatch):
    # dockerd restarting (live-restore keeps the container): `docker top` fails, which is no proof the container is gone
    node = Node(wd, monkeypatch)
    node.procs, node.dockerd = None, False
    a = ray_args(wd)
    for _check in range(3):
        wd.check_ray(a)
    assert node.restarts() == []
    node.dockerd = True                             # dockerd answers and the container is gone: judged as before
    for _check in range(2):
        wd.check_ray(a)
    assert node.restarts() == [["systemctl", "restart", "--no-block", "sparkfleet-ray.service"]]


def test_ray_bad_count_resets_when_alive_again(wd, monkeypatch):
    node = Node(wd, monkeypatch)
    node.gcs = {"ok": True, "nodes": [{"ip": "10.99.1.12", "alive": False}]}
    a = ray_args(wd)
    wd.check_ray(a)
    node.gcs = {"ok": True, "nodes": [{"ip": "10.99.1.12", "alive": True}]}
    wd.check_ray(a)
    node.gcs = {"ok": True, "nodes": [{"ip": "10.99.1.12", "alive": False}]}
    wd.check_ray(a)
    assert node.restarts() == []


def test_ray_never_judged_within_grace_or_when_stopped(wd, monkeypatch):
    node = Node(wd, monkeypatch, start=990.0, clock=1000.0)   # started 10 s ago
    node.procs = {"ray"}
    a = ray_args(wd)
    for _check in range(3):
        wd.check_ray(a)
    assert node.restarts() == []
    node.clock, node.running = 2000.0, False                # stopped on purpose: not the watchdog's business
    for _check in range(3):
        wd.check_ray(a)
    assert node.restarts() == []


def test_ray_new_run_starts_counting_afresh(wd, monkeypatch):
    node = Node(wd, monkeypatch)
    node.procs = {"ray"}
    a = ray_args(wd)
    wd.check_ray(a)
    node.start = 500.0                              # systemd restarted it meanwhile
    wd.check_ray(a)
    assert node.restarts() == []


# A worker's raylet after the head's Ray restarted (seen on the lab, 2 Dec, Ray 2.60): it lingers with the old cluster
# id, the new GCS answers `drain_node` with "WrongClusterID: Perhaps the client is accessing GCS after it has
# restarted" and lists only the nodes that joined it. Before, the worker waited for its 90 s grace and two checks (54 s
# after the head's restart).
OLD, NEW = "8da4803cc9d6a91e2f70475ec4c4cd00056a024340c3f4864e5056bf", "1f0c77aa52e94c0b9d3e4a1a8cbb2e3f10aa4ef1b6e2d3c4f5a6b7c8"


def cluster(cid, *alive_ips):
    return {"ok": True, "cluster": cid, "nodes": [{"ip": ip, "alive": True} for ip in alive_ips]}


def test_a_worker_left_in_the_old_cluster_is_restarted_at_once(wd, monkeypatch, tmp_path):
    node = Node(wd, monkeypatch, start=990.0, clock=1000.0)     # 10 s into its run: within the grace
    node.gcs = cluster(OLD, "10.99.1.11", "10.99.1.12")
    a = ray_args(wd)
    wd.check_ray(a)                                 # alive in OLD: remembered
    node.clock += 15
    node.gcs = cluster(NEW, "10.99.1.11")           # the head's Ray restarted; this node is not in the new GCS
    wd.check_ray(a)
    assert node.restarts() == [["systemctl", "restart", "--no-block", "sparkfleet-ray.service"]]
    (entry,) = log_lines(tmp_path)
    assert entry["checks"] == 1
    assert entry["cause"] == ("the head's GCS is a new one (cluster id 1f0c77aa..., this node joined 8da4803c...: the"
                              " head's Ray restarted) and does not know 10.99.1.12: this raylet belongs to the old"
                              " cluster and is never taken back")


@pytest.mark.parametrize("later, why", [
    (cluster(NEW, "10.99.1.11", "10.99.1.12"), "alive in the new cluster"),
    (cluster(OLD, "10.99.1.11"), "the same cluster: the usual checks judge it"),
    ({"ok": True, "cluster": None, "nodes": [{"ip": "10.99.1.11", "alive": True}]}, "a Ray without cluster ids"),
    ({"ok": False, "error": "no answer from the GCS"}, "the GCS does not answer (the head away)"),
])
def test_no_orphan_restart_without_a_new_cluster_that_forgot_the_node(wd, monkeypatch, later, why):
    node = Node(wd, monkeypatch, start=990.0, clock=1000.0)
    node.gcs = cluster(OLD, "10.99.1.11", "10.99.1.12")
    a = ray_args(wd)
    wd.check_ray(a)
    node.gcs = later
    for _check in range(3):                         # within the grace: only an orphan would be restarted
        node.clock += 15
        wd.check_ray(a)
    assert node.restarts() == [], why


def test_a_new_run_must_be_seen_alive_before_it_can_be_an_orphan(wd, monkeypatch):
    node = Node(wd, monkeypatch, start=990.0, clock=1000.0)
    node.gcs = cluster(OLD, "10.99.1.11", "10.99.1.12")
    a = ray_args(wd)
    wd.check_ray(a)
    node.start = 1010.0                             # restarted by systemd: joining the new GCS takes a few seconds
    node.clock = 1015.0
    node.gcs = cluster(NEW, "10.99.1.11")
    wd.check_ray(a)
    assert node.restarts() == []


# --------------------------------------------------------------------------- vLLM liveness
def test_vllm_slow_start_is_not_killed(wd, monkeypatch):
    node = Node(wd, monkeypatch, start=0.0, clock=700.0)     # an 11-minute weight load, still loading
    monkeypatch.setattr(wd, "probe", lambda *a: (False, "no answer (Connection refused)"))
    a = vllm_args(wd)
    for _check in range(5):
        wd.check_vllm(a)
    assert node.restarts() == []


def test_vllm_start_that_never_serves_is_restarted_after_the_grace(wd, monkeypatch, tmp_path):
    node = Node(wd, monkeypatch, start=0.0, clock=1900.0)
    monkeypatch.setattr(wd, "probe", lambda *a: (False, "no token within 20 s"))
    monkeypatch.setattr(wd, "http", lambda *a, **k: (None, "timed out"))
    a = vllm_args(wd)
    wd.check_vllm(a)
    wd.check_vllm(a)
    assert len(node.restarts()) == 1
    assert "never served 1900 s after its start" in log_lines(tmp_path)[0]["cause"]


def test_vllm_hung_engine_restarted_after_n_failures_with_cause(wd, monkeypatch, tmp_path):
    node = Node(wd, monkeypatch, start=0.0, clock=100.0)
    answers = iter([(True, ""), (False, "no token within 20 s"), (False, "no token within 20 s")])
    monkeypatch.setattr(wd, "probe", lambda *a: next(answers))
    monkeypatch.setattr(wd, "http", lambda *a, **k: (200, "ok"))   # /health still answers
    node.paused = "true"
    a = vllm_args(wd)
    wd.check_vllm(a)                                # served: now it is judged at once
    wd.check_vllm(a)
    assert node.restarts() == []
    wd.check_vllm(a)
    assert ["docker", "unpause", "sparkfleet-vllm"] in wd.calls
    assert len(node.restarts()) == 1
    cause = log_lines(tmp_path)[0]["cause"]
    assert "engine stopped generating" in cause and "answers /health, generates nothing" in cause
    assert "paused" in cause and "2 probes in a row" in cause


def test_vllm_failures_must_be_in_a_row(wd, monkeypatch):
    node = Node(wd, monkeypatch, start=0.0, clock=100.0)
    answers = iter([(True, ""), (False, "x"), (True, ""), (False, "x"), (True, "")])
    monkeypatch.setattr(wd, "probe", lambda *a: next(answers))
    a = vllm_args(wd)
    for _check in range(5):
        wd.check_vllm(a)
    assert node.restarts() == []


def test_vllm_restart_floor_after_a_watchdog_restart(wd, monkeypatch):
    """After a restart the new run is a start again: not judged until it serves or the grace ends."""
    node = Node(wd, monkeypatch, start=0.0, clock=100.0)
    answers = iter([(True, ""), (False, "x"), (False, "x")] + [(False, "refused")] * 6)
    monkeypatch.setattr(wd, "probe", lambda *a: next(answers))
    monkeypatch.setattr(wd, "http", lambda *a, **k: (None, "refused"))
    a = vllm_args(wd)
    for _check in range(3):
        wd.check_vllm(a)
    assert len(node.restarts()) == 1
    node.start, node.clock = 150.0, 400.0           # the restarted run, loading for 250 s
    for _check in range(6):
        wd.check_vllm(a)
    assert len(node.restarts()) == 1


# --------------------------------------------------------------------------- the run judged is the run restarted
@pytest.mark.parametrize("after, why", [
    ((True, 160.0), "a deploy restarted vLLM during the probe: the new run is loading, nobody judged it"),
    ((False, 0.0), "a deploy stopped vLLM during the probe: a restart would start what it stopped"),
])
def test_vllm_a_run_replaced_while_it_was_probed_is_left_alone(wd, monkeypatch, tmp_path, after, why):
    node = Node(wd, monkeypatch, start=0.0, clock=100.0)
    answers = iter([(True, ""), (False, "x")])
    monkeypatch.setattr(wd, "probe", lambda *a: next(answers))
    a = vllm_args(wd)
    wd.check_vllm(a)
    wd.check_vllm(a)                                # one failure: the next one restarts the run it judged

    def probe_while_restarted(*_a):
        node.running, node.start = after            # systemd's view changes while the probe waits for its deadline
        return False, "no answer (Connection reset by peer)"
    monkeypatch.setattr(wd, "probe", probe_while_restarted)
    monkeypatch.setattr(wd, "http", lambda *a, **k: (None, "refused"))
    wd.check_vllm(a)
    assert node.restarts() == [], why
    assert log_lines(tmp_path) == []


def test_a_worker_restarted_by_the_deploy_while_judged_an_orphan_is_left_alone(wd, monkeypatch, tmp_path):
    """site.yml restarts the head's Ray, then the workers': a worker's check that judged the old run an orphan must not
    restart the run the deploy has just started."""
    node = Node(wd, monkeypatch, start=990.0, clock=1000.0)
    node.gcs = cluster(OLD, "10.99.1.11", "10.99.1.12")
    a = ray_args(wd)
    wd.check_ray(a)
    node.clock += 15

    def gcs_while_restarted(*_a):
        node.start = 1012.0                         # the deploy's restart, while the GCS was being asked
        return cluster(NEW, "10.99.1.11")
    monkeypatch.setattr(wd, "gcs_nodes", gcs_while_restarted)
    wd.check_ray(a)
    assert node.restarts() == [] and log_lines(tmp_path) == []
    node.clock += 15                                # the next check judges the new run afresh: joining is not orphaned
    wd.check_ray(a)
    assert node.restarts() == []


def hold(tmp_path, node, age):
    """ray_cluster's handlers' hold, touched `age` seconds ago by the node's clock."""
    path = tmp_path / "sparkfleet-watchdog-hold-sparkfleet-ray"
    path.touch()
    t = node.clock + 1.7e9 - age
    os.utime(path, (t, t))


@pytest.mark.parametrize("age, restarted", [
    (5, False),         # the handlers restart the head, then this worker: its watchdog waits for them
    (299, False),
    (301, True),        # a run that died between the head's restart and the workers': the hold no longer counts
    (-120, True),       # touched "in the future" (the clock was set back): no hold
])
def test_a_deploy_restarting_ray_holds_the_workers_orphan_check(wd, monkeypatch, tmp_path, age, restarted):
    node = Node(wd, monkeypatch, start=990.0, clock=1000.0)
    node.gcs = cluster(OLD, "10.99.1.11", "10.99.1.12")
    a = ray_args(wd)
    wd.check_ray(a)
    node.clock += 15
    node.gcs = cluster(NEW, "10.99.1.11")            # the head restarted by the deploy; this worker not yet
    hold(tmp_path, node, age)
    asked = []

    def gcs_nodes(*_a):
        asked.append(1)
        return node.gcs
    monkeypatch.setattr(wd, "gcs_nodes", gcs_nodes)
    wd.check_ray(a)
    assert bool(node.restarts()) is restarted
    assert bool(asked) is restarted                 # held: the GCS is not even asked
    if not restarted:
        (tmp_path / "sparkfleet-watchdog-hold-sparkfleet-ray").unlink()     # the handlers are done
        node.start, node.clock = 1020.0, 1021.0      # and restarted this worker: a new run, judged afresh
        node.gcs = cluster(NEW, "10.99.1.11", "10.99.1.12")
        wd.check_ray(a)
        assert node.restarts() == []


def test_a_held_head_is_not_judged_either(wd, monkeypatch, tmp_path):
    node = Node(wd, monkeypatch)
    node.procs = {"ray"}                            # what a head looks like while the handler restarts it
    a = ray_args(wd, head=True, node_ip="10.99.1.11")
    hold(tmp_path, node, 10)
    for _check in range(4):
        wd.check_ray(a)
        node.clock += 15
    assert node.restarts() == []


def test_api_key_read_from_the_env_file_only(wd, tmp_path):
    env = tmp_path / "vllm.env"
    env.write_text("VLLM_HOST_IP=10.99.1.11\nVLLM_API_KEY=s3cr=t\n")
    assert wd.env_value(str(env), "VLLM_API_KEY") == "s3cr=t"
    assert wd.env_value(str(tmp_path / "missing"), "VLLM_API_KEY") == ""


# --------------------------------------------------------------------------- ExecStopPost record
@pytest.mark.parametrize("env, cause", [
    ({"SERVICE_RESULT": "exit-code", "EXIT_CODE": "exited", "EXIT_STATUS": "137"}, "container killed (exit 137"),
    ({"SERVICE_RESULT": "success", "EXIT_CODE": "exited", "EXIT_STATUS": "143"}, "stopped (exit 143)"),
    ({"SERVICE_RESULT": "signal", "EXIT_CODE": "killed", "EXIT_STATUS": "KILL"}, "killed by signal KILL"),
    ({"SERVICE_RESULT": "exit-code", "EXIT_CODE": "exited", "EXIT_STATUS": "1"}, "exit-code (exited 1)"),
    ({"SERVICE_RESULT": "success", "EXIT_CODE": "exited", "EXIT_STATUS": "1"}, "exited 1 (a stop, or a failed `ray start`"),
    ({"SERVICE_RESULT": "exit-code", "EXIT_CODE": "exited", "EXIT_STATUS": "3"}, "start refused or timed out (exit 3"),
    # systemd 252 in the lab, after the memory gate refused a start (ExecStartPre exit 3): no exit code is set
    ({"SERVICE_RESULT": "exit-code", "EXIT_CODE": "", "EXIT_STATUS": ""}, "start refused before it ran (an ExecStartPre"),
])
def test_record_names_why_the_unit_stopped(wd, monkeypatch, tmp_path, env, cause):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    wd.main(["record", "--unit", "sparkfleet-vllm"])
    (entry,) = log_lines(tmp_path)
    assert cause in entry["cause"] and entry["event"] == "stopped" and entry["by"] == "systemd"


def test_log_is_trimmed(wd, monkeypatch, tmp_path):
    monkeypatch.setattr(wd, "LOG_KEEP", 5)
    for i in range(11):
        wd.log_event("u", "stopped", "c%d" % i)
    lines = log_lines(tmp_path)
    assert len(lines) == 5 and lines[-1]["cause"] == "c10"


def test_a_head_gcs_that_does_not_answer_needs_two_more_checks(wd, monkeypatch, tmp_path):
    """Its process runs: it may only be slow (a loaded head), so a short stall never restarts the whole cluster."""
    node = Node(wd, monkeypatch)
    node.gcs = {"ok": False, "error": "no answer from the GCS at 10.99.1.11:6379 within 20 s"}
    a = ray_args(wd, head=True, node_ip="10.99.1.11")
    for _check in range(3):
        wd.check_ray(a)
    assert node.restarts() == []
    wd.check_ray(a)
    assert len(node.restarts()) == 1
    cause = log_lines(tmp_path)[0]["cause"]
    assert cause.startswith("the head's GCS does not answer") and "dead in Ray" in cause


# --------------------------------------------------------------------------- Ray's scheduler stuck (head)
@pytest.mark.parametrize("fixture, expected", [
    ("serving.txt", None),                                   # the engine's placement group holds both GPUs
    ("stuck_after_worker_fabric_flap.txt", (2.0, 2.0)),      # pending, both GPUs free: stuck
    ("worker_away.txt", None),                               # pending for the worker's GPU: waiting, not stuck
])
def test_pending_pg_verdict_on_real_ray_status(wd, fixture, expected):
    assert wd.pending_pg_verdict((FIXTURES / fixture).read_text()) == expected


@pytest.mark.parametrize("text, expected", [
    ("", None),
    ("Total Usage:\n 1.0/2.0 GPU\nPending Demands:\n {'GPU': 1.0} * 1 (PACK): 1+ pending placement groups\n", (1.0, 1.0)),
    # a task's demand is not a placement group's
    ("Total Usage:\n 0.0/2.0 GPU\nPending Demands:\n {'GPU': 1.0}: 1+ pending tasks/actors\n", None),
    # a placement group without GPUs is not the engine's
    ("Total Usage:\n 0.0/2.0 GPU\nPending Demands:\n {'CPU': 1.0} * 2 (PACK): 1+ pending placement groups\n", None),
    # two pending: the one the free GPU would hold counts
    ("Total Usage:\n 1.0/2.0 GPU\nPending Demands:\n {'GPU': 1.0} * 2 (PACK): 1+ pending placement groups\n"
     " {'GPU': 1.0} * 1 (PACK): 1+ pending placement groups\n", (1.0, 1.0)),
])
def test_pending_pg_verdict_edges(wd, text, expected):
    assert wd.pending_pg_verdict(text) == expected


def head_args(wd):
    return ray_args(wd, head=True, node_ip="10.99.1.11")


def stuck_for_105_s(wd, monkeypatch):
    """A head whose scheduler is stuck, checked every 15 s for 105 s: the next check is at 120 s (pg_stuck)."""
    node = Node(wd, monkeypatch)
    node.status = (FIXTURES / "stuck_after_worker_fabric_flap.txt").read_text()
    a = head_args(wd)
    for _check in range(8):
        wd.check_ray(a)
        node.clock += 15
    return node, a


def test_a_stuck_scheduler_restarts_the_head_after_pg_stuck_seconds(wd, monkeypatch, tmp_path):
    node, a = stuck_for_105_s(wd, monkeypatch)
    assert node.restarts() == []
    assert "pending 105 s with 2 GPU(s) free" in json.loads((tmp_path / "sparkfleet" / "watchdog-sparkfleet-ray.json").read_text())["cause"]
    wd.check_ray(a)                                 # 120 s
    assert node.restarts() == [["systemctl", "restart", "--no-block", "sparkfleet-ray.service"]]
    (entry,) = log_lines(tmp_path)
    assert entry["event"] == "restart" and entry["pending_s"] == 120
    assert entry["cause"].startswith("Ray's scheduler stuck: a placement group of 2 GPU(s) pending for 120 s while 2")


def test_a_scheduler_restart_that_did_not_happen_does_not_double_the_wait(wd, monkeypatch, tmp_path):
    node, a = stuck_for_105_s(wd, monkeypatch)
    runs = iter([(True, node.start), (True, node.clock - 2)])  # the check's read; a deploy's new run at restart time
    monkeypatch.setattr(wd, "unit_run", lambda unit: next(runs))
    wd.check_ray(a)                                 # 120 s: the verdict, but the run it judged is gone
    assert node.restarts() == [] and log_lines(tmp_path) == []
    assert "pg_wait" not in json.loads((tmp_path / "sparkfleet" / "watchdog-sparkfleet-ray.json").read_text())   # not doubled


def test_a_stuck_scheduler_waits_twice_as_long_after_each_restart(wd, monkeypatch):
    """A placement group Ray cannot place for another reason must not restart the cluster every few minutes."""
    node = Node(wd, monkeypatch)
    node.status = (FIXTURES / "stuck_after_worker_fabric_flap.txt").read_text()
    a = head_args(wd)
    restarted_at = []
    for _check in range(200):                       # 50 minutes, 15 s apart, stuck all along
        before = len(node.restarts())
        wd.check_ray(a)
        if len(node.restarts()) > before:
            restarted_at.append(node.clock)
            node.start = node.clock                 # the restart is a new run of the unit, judged after the grace
        node.clock += 15
    gaps = [b - a_ for a_, b in zip(restarted_at, restarted_at[1:])]
    assert len(restarted_at) == 4, restarted_at     # 120 s, then 240, 480, 960 (+ the grace after each start)
    assert gaps[0] > 240
    assert all(later > earlier for earlier, later in zip(gaps, gaps[1:])), gaps


@pytest.mark.parametrize("between, second_after", [
    ("serving.txt", 120),             # the restart placed the GPUs: a later stuck scheduler (another flap) waits 120 s
    ("worker_away.txt", 240),         # nothing placed since (waiting for a node): twice as long
])
def test_the_wait_starts_again_once_the_restart_placed_the_gpus(wd, monkeypatch, between, second_after):
    node = Node(wd, monkeypatch)
    stuck = (FIXTURES / "stuck_after_worker_fabric_flap.txt").read_text()
    node.status = stuck
    a = head_args(wd)
    while not node.restarts():
        wd.check_ray(a)
        node.clock += 15
    node.start = node.clock
    node.clock += 90                                # Ray's grace after its restart
    node.status = (FIXTURES / between).read_text()
    wd.check_ray(a)
    node.status = stuck
    t0 = node.clock
    while len(node.restarts()) < 2:
        wd.check_ray(a)
        node.clock += 15
    assert node.clock - 15 - t0 == second_after


# The GCS's lines (FLAP_GCS_LOG, CAPTURED.md), as the lab's Ray 2.60 head logged them (before issue 39) 6 s after a worker's fabric
# came back: "gcs_placement_group_scheduler.cc:302: Failed to remove 1 bundle(s) for placement group b906... at node
# 4642.... Status: RpcError: ...", five of them a second apart, then "... because the max retry count is reached."
def test_the_gcs_mark_of_a_stuck_scheduler_shortens_the_wait(wd, monkeypatch, tmp_path):
    node = Node(wd, monkeypatch)
    node.status = (FIXTURES / "stuck_after_worker_fabric_flap.txt").read_text()
    node.gcs_log = FLAP_GCS_LOG
    a = head_args(wd)
    wd.check_ray(a)                                 # pending seen: the wait starts
    assert node.restarts() == []
    assert json.loads((tmp_path / "sparkfleet" / "watchdog-sparkfleet-ray.json").read_text())["pg_restart_after"] == 10
    node.clock += 15
    wd.check_ray(a)                                 # 15 s pending, the mark in the log: not 120 s
    assert node.restarts() == [["systemctl", "restart", "--no-block", "sparkfleet-ray.service"]]
    (entry,) = log_lines(tmp_path)
    assert entry["pending_s"] == 15 and entry["bundle_leaks"] == 6
    assert "after the GCS failed to remove a dead node's bundles (6 time(s) in its log)" in entry["cause"]


def test_ray_2_53_s_words_for_the_failed_removal_shorten_the_wait_too(wd, monkeypatch, tmp_path):
    """Ray 2.53's GCS (the lab's Ray since issue 39, the Sparks' image's) logs the failed removal of a dead node's
    bundle in other words than 2.60; the shortcut reads both (the 2.53 log has no 2.60 line, so it would never fire)."""
    assert "Failed to remove" not in FLAP_GCS_LOG_253.read_text()
    node = Node(wd, monkeypatch)
    node.status = (FIXTURES / "stuck_after_worker_fabric_flap.txt").read_text()
    node.gcs_log = FLAP_GCS_LOG_253
    a = head_args(wd)
    wd.check_ray(a)
    node.clock += 15
    wd.check_ray(a)
    assert node.restarts() == [["systemctl", "restart", "--no-block", "sparkfleet-ray.service"]]
    (entry,) = log_lines(tmp_path)
    assert entry["pending_s"] == 15 and entry["bundle_leaks"] == 1


def test_ray_2_53_s_serving_status_has_nothing_pending(wd):
    """`ray status` of Ray 2.53 (the Sparks' image) while serving after a flap, three Active node lines (the worker's
    old id beside its new one): the GPU line and the demands read as in 2.60's."""
    text = (FIXTURES / "serving_ray253.txt").read_text()
    assert wd.gpu_usage(text) == (2.0, 2.0) and wd.pending_pg_verdict(text) is None


@pytest.mark.parametrize("log, why", [
    (None, "the GCS log cannot be read"),
    ("serving.txt", "no failed removal in the log"),
])
def test_without_the_gcs_mark_the_wait_is_pg_stuck(wd, monkeypatch, log, why):
    node = Node(wd, monkeypatch)
    node.status = (FIXTURES / "stuck_after_worker_fabric_flap.txt").read_text()
    node.gcs_log = log and FIXTURES / log
    a = head_args(wd)
    while not node.restarts():
        wd.check_ray(a)
        node.clock += 15
    assert node.clock - 15 - 1000 == 120, why


def test_the_mark_alone_restarts_nothing(wd, monkeypatch):
    """The line is logged after flaps that heal by themselves too: only a group pending with its GPUs free counts."""
    node = Node(wd, monkeypatch)
    node.gcs_log = FLAP_GCS_LOG
    a = head_args(wd)
    for status in ["serving.txt", "worker_away.txt"]:
        node.status = (FIXTURES / status).read_text()
        for _check in range(20):
            wd.check_ray(a)
            node.clock += 15
    assert node.restarts() == []


def test_after_a_restart_that_placed_nothing_the_mark_does_not_shorten_the_doubled_wait(wd, monkeypatch, tmp_path):
    node = Node(wd, monkeypatch)
    node.status = (FIXTURES / "stuck_after_worker_fabric_flap.txt").read_text()
    node.gcs_log = FLAP_GCS_LOG
    a = head_args(wd)
    restarted_at = []
    for _check in range(60):
        before = len(node.restarts())
        wd.check_ray(a)
        if len(node.restarts()) > before:
            restarted_at.append(node.clock)
            node.start = node.clock
        node.clock += 15
    first, second = [e["pending_s"] for e in log_lines(tmp_path)][:2]
    assert (first, second) == (15, 240), restarted_at   # then twice --pg-stuck (120 s), not the mark's 10 s again


def test_no_shortcut_when_pg_stuck_leak_is_off(wd, monkeypatch):
    node = Node(wd, monkeypatch)
    node.status = (FIXTURES / "stuck_after_worker_fabric_flap.txt").read_text()
    node.gcs_log = FLAP_GCS_LOG
    a = head_args(wd)
    a.pg_stuck_leak = 0
    while not node.restarts():
        wd.check_ray(a)
        node.clock += 15
    assert node.clock - 15 - 1000 == 120
    assert not [c for c in wd.calls if c[3:4] == ["grep"]]     # not even read


@pytest.mark.parametrize("change", ["scheduled", "ray status fails", "worker", "off"])
def test_a_pending_pg_that_is_not_stuck_restarts_nothing(wd, monkeypatch, change):
    node = Node(wd, monkeypatch)
    stuck = (FIXTURES / "stuck_after_worker_fabric_flap.txt").read_text()
    node.status = stuck
    a = head_args(wd)
    if change == "worker":                          # pending stuck on a worker: only the head judges the scheduler
        a = ray_args(wd)
    if change == "off":
        a.pg_stuck = 0
    for i in range(20):
        if change == "scheduled":                   # scheduled in between: the wait starts again
            node.status = stuck if i % 7 else (FIXTURES / "serving.txt").read_text()
        if change == "ray status fails":
            node.status = None if i % 5 == 0 else stuck
        wd.check_ray(a)
        node.clock += 15
    assert node.restarts() == []                    # an unreadable check starts the wait again, like a scheduled one


def test_status_yml_names_the_stuck_scheduler_from_the_state_the_watchdog_wrote(wd, monkeypatch, tmp_path):
    """The state file is what playbooks/status.yml reads (healthcheck's diagnose.yml, filter serving_cause)."""
    from ansible_collections.sparkfleet.vllm.plugins.filter.serving_cause import serving_cause
    node = Node(wd, monkeypatch)
    node.status = (FIXTURES / "stuck_after_worker_fabric_flap.txt").read_text()
    a = head_args(wd)
    for _check in range(6):
        wd.check_ray(a)
        node.clock += 15
    units = "%d\nId=sparkfleet-ray.service\nActiveState=active\nSubState=running\n\n" \
            "Id=sparkfleet-vllm.service\nActiveState=active\nSubState=running\n" % wd.now()
    state = (tmp_path / "sparkfleet" / "watchdog-sparkfleet-ray.json").read_text()
    assert serving_cause({"spark-1": units + "@@ scheduler\n" + state}, "spark-1") == [
        "spark-1: Ray's scheduler: a placement group of 2 GPU(s) pending 75 s with 2 GPU(s) free; the head's Ray"
        " watchdog restarts Ray (sparkfleet-ray) once it has been pending 120 s (the workers' Ray and vLLM follow)"]
    node.status = (FIXTURES / "serving.txt").read_text()      # scheduled: nothing to name any more
    wd.check_ray(a)
    state = (tmp_path / "sparkfleet" / "watchdog-sparkfleet-ray.json").read_text()
    assert serving_cause({"spark-1": units + "@@ scheduler\n" + state}, "spark-1") == []


def test_a_full_disk_does_not_stop_the_liveness_timer_from_restarting_a_hung_engine(wd, monkeypatch, tmp_path):
    # seen on a second lab: both watchdogs wrote their state before they acted and died at every check with ENOSPC,
    # so a hung engine was never restarted (283 of 283 requests failed) until space came back
    full = tmp_path / "full"
    full.write_text("")                                   # the log's directory cannot be made: every write fails
    monkeypatch.setattr(wd, "STATE_DIR", str(full / "watchdog"))
    node = Node(wd, monkeypatch, start=0.0, clock=100.0)
    answers = iter([(True, ""), (False, "no token within 20 s"), (False, "no token within 20 s")])
    monkeypatch.setattr(wd, "probe", lambda *a: next(answers))
    monkeypatch.setattr(wd, "http", lambda *a, **k: (None, "timed out"))
    a = vllm_args(wd)
    for _check in range(3):
        wd.check_vllm(a)                                  # the counters live in /run (tmpfs)
    assert len(node.restarts()) == 1


def test_an_engine_that_answers_404_to_the_name_is_never_restarted(wd, monkeypatch):
    # a restart cannot teach the engine another name (seen after a model switch: restarted for ever)
    node = Node(wd, monkeypatch, start=0.0, clock=4000.0)
    monkeypatch.setattr(wd, "probe", lambda *a: (False, "HTTP 404 after 0 s"))
    a = vllm_args(wd)
    for _check in range(4):
        wd.check_vllm(a)
    assert node.restarts() == []


@pytest.mark.bad_input(name="a node's memory report in the head's GCS nested past the parser's depth, or not an object",
                       expected="that node has no report (the gate waits for a fresh one); the head's check never crashes")
def test_a_hostile_memory_report_is_no_report_and_no_crash(wd, monkeypatch, observe):
    kv = {"memory:192.168.200.13": "[" * 100000, "memory:192.168.200.14": "[1, 2]",
          "memory:192.168.200.15": json.dumps({"used": 1})}
    monkeypatch.setattr(wd, "gcs_nodes", lambda c, a, t, ops=None: {"ok": True, "kv": kv})
    monkeypatch.setattr(wd, "engine_ranks", lambda container: [])
    monkeypatch.setattr(wd, "memory_report", lambda ip, model_dir, ranks: {"used": 0})
    a = types.SimpleNamespace(node=["spark-1=192.168.200.12", "spark-2=192.168.200.13"], ray_container="sparkfleet-ray",
                              address="192.168.200.12:6379", gcs_timeout=5, model_dir="")
    _nodes, reports, _gcs = wd.cluster_memory(a)
    assert set(reports) == {"192.168.200.12", "192.168.200.15"}, reports
    observe("reports kept: %s (the nested and the list dropped)" % ", ".join(sorted(reports)))
