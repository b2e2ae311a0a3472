"""The liveness timer's incidents (issue 39.6): a hang's stacks and evidence saved before the restart, read into a cause.

Stacks are py-spy dumps captured in the lab during `labctl break collective-hang spark-2` (fixtures/incident/
CAPTURED.md); docker, the GCS and the clock are faked as in test_sparkfleet_watchdog.py.
"""

from __future__ import annotations

import json
import os
import types
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "roles" / "sparkfleet" / "files" / "sparkfleet_watchdog.py"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "incident"
WAITING = (FIXTURES / "pyspy-rank-waiting.txt").read_text()
SPINNING = (FIXTURES / "pyspy-rank-spinning.txt").read_text()
NODES = ["spark-1=10.99.1.11", "spark-2=10.99.1.12"]


@pytest.fixture
def wd(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_WATCHDOG_DIR", str(tmp_path / "watchdog"))
    monkeypatch.setenv("SPARKFLEET_WATCHDOG_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("SPARKFLEET_INCIDENT_DIR", str(tmp_path / "incidents"))
    mod = types.ModuleType("sparkfleet_watchdog")
    mod.__file__ = str(SCRIPT)
    exec(compile(SCRIPT.read_text(), str(SCRIPT), "exec"), mod.__dict__)
    return mod


def rank(pid, stack, cpu, state="S", env=None):
    return {"pid": pid, "cmd": "ray::RayWorkerWrapper.execute_method", "cpu": cpu, "state": state, "wchan": "",
            "env": env or {}, "stack": stack}


def part(ip, *procs, engine=()):
    containers = {"sparkfleet-ray": {"spy": "/opt/venv/bin/py-spy", "processes": list(procs)}}
    if engine:
        containers["sparkfleet-vllm"] = {"spy": "/opt/venv/bin/py-spy", "processes": list(engine)}
    return {"host": ip, "ip": ip, "containers": containers, "journal": {"sparkfleet-ray": "ray log line\n"},
            "memory": "MemTotal: 5242880 kB\n", "ps": "PID ...\n", "dmesg": "[x] nothing\n"}


def test_py_frames_reads_the_main_thread_of_a_real_dump(wd):
    active, frames = wd.py_frames(WAITING)
    assert not active
    assert frames[0] == ("all_reduce", "torch/distributed/distributed_c10d.py:3252")
    assert ("RayWorkerWrapper.step", "sparklab_vllm/worker.py:205") in frames
    active, frames = wd.py_frames(SPINNING)
    assert active and frames[0] == ("spin_barrier", "sparklab_vllm/hang.py:48")
    assert wd.py_frames("") == (False, [])


def test_a_spinning_rank_and_a_waiting_one_are_a_collective_hang(wd):
    nodes = wd.parse_nodes(NODES)
    # the worker's spinner sampled at 20 % of a core on a loaded machine: py-spy's "active" decides
    parts = {"10.99.1.11": part("10.99.1.11", rank(2391, WAITING, 0)),
             "10.99.1.12": part("10.99.1.12", rank(1176, SPINNING, 20, "R"))}
    slug, cause = wd.hang_cause(parts, nodes)
    assert slug == "collective-hang"
    assert cause == ("collective hang: spark-2 rank 1 spinning in spin_barrier (hang.py), "
                     "spark-1 rank 0 waiting in all_reduce")


def test_rank_order_is_the_engines_node_first_then_by_ip(wd):
    # the head's IP sorts after the worker's: vLLM still gives the driver's node rank 0
    nodes = wd.parse_nodes(["spark-9=10.99.1.19", "spark-2=10.99.1.12"])
    parts = {"10.99.1.19": part("10.99.1.19", rank(5, WAITING, 0)),
             "10.99.1.12": part("10.99.1.12", rank(6, SPINNING, 99, "R"))}
    assert wd.hang_cause(parts, nodes)[1] == ("collective hang: spark-2 rank 1 spinning in spin_barrier (hang.py), "
                                              "spark-9 rank 0 waiting in all_reduce")


def test_without_stacks_the_cause_says_what_is_missing_and_is_no_collective_hang(wd):
    nodes = wd.parse_nodes(NODES)
    p = rank(2391, "", 0)
    p["stack_error"] = "py-spy is not in this image"
    parts = {"10.99.1.11": part("10.99.1.11", p)}
    slug, cause = wd.hang_cause(parts, nodes)
    assert slug == "stopped-generating"
    assert "spark-1 rank 0: no stack (py-spy is not in this image; cpu 0%, state S)" in cause
    assert wd.hang_cause({}, nodes) == ("stopped-generating",
                                        "engine stopped generating; no rank process found on any node")


def test_every_rank_idle_outside_a_collective_is_not_called_a_hang(wd):
    idle = "Thread 7 (idle): \"MainThread\"\n    Worker.main_loop (ray/_private/worker.py:1031)\n"
    parts = {"10.99.1.11": part("10.99.1.11", rank(7, idle, 0))}
    slug, cause = wd.hang_cause(parts, wd.parse_nodes(NODES))
    assert slug == "stopped-generating" and "spark-1 rank 0 in Worker.main_loop (worker.py:1031)" in cause


def test_a_part_travels_through_the_kv_bounded_and_whole(wd):
    big = part("10.99.1.12", *[rank(i, SPINNING * 40, 100, "R") for i in range(32)])
    big["ps"] = "x" * 500000
    blob = wd.encode_part(json.loads(json.dumps(big)))
    assert len(blob) <= wd.PART_MAX
    back = wd.decode_part(blob)
    assert back["ip"] == "10.99.1.12" and len(back["containers"]["sparkfleet-ray"]["processes"]) == 32
    assert len(back["ps"]) <= wd.TEXT_MAX + 100
    small = part("10.99.1.12", rank(1176, SPINNING, 20, "R"))
    assert wd.decode_part(wd.encode_part(json.loads(json.dumps(small))))["containers"] == small["containers"]
    assert wd.decode_part("not base64 !") is None


def test_secret_values_in_command_lines_are_redacted(wd):
    text = wd.redact("vllm serve m --api-key s3cr3t --port 8000 --hf-token=abc RAY_x --password  pw")
    assert "s3cr3t" not in text and "abc" not in text and "pw" not in text.split()
    assert "--port 8000" in text


def test_the_capture_program_drops_secret_names_from_the_environment(wd):
    # the program that runs in the containers, run here on this very process's environment
    import subprocess
    import sys
    env = dict(os.environ, NCCL_SOCKET_IFNAME="enp1s0f1np1", RAY_AUTH_TOKEN="tok", VLLM_API_KEY="k",
               RAY_ADDRESS="10.99.1.11:6379", NCCL_IB_PASSWORD="pw")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        out = subprocess.run([sys.executable, "-", json.dumps(["time.sleep(30)"]), "5", "2", "1000", "4"],
                             input=wd.PROC_PROGRAM, capture_output=True, text=True, timeout=60, check=True).stdout
    finally:
        child.kill()
    (proc,) = [p for p in json.loads(out)["processes"] if p["pid"] == child.pid]
    got = dict((k, v) for k, v in proc["env"].items() if k.startswith(("NCCL_", "RAY_", "VLLM_")))
    assert got == {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "RAY_ADDRESS": "10.99.1.11:6379"}
    assert proc["state"] in ("S", "R") and proc["cpu"] is not None


def test_a_worker_answers_a_fresh_request_once(wd, monkeypatch):
    puts = []
    monkeypatch.setattr(wd, "now", lambda: 1000.0)
    monkeypatch.setattr(wd, "node_part", lambda containers, units, budget: part("?", rank(1176, SPINNING, 20, "R")))
    monkeypatch.setattr(wd, "gcs_nodes", lambda c, a, t, ops=None: puts.append(ops) or {"ok": True})
    a = types.SimpleNamespace(container="sparkfleet-ray", unit="sparkfleet-ray", address="10.99.1.11:6379",
                              timeout=20, node_ip="10.99.1.12")
    state = {}
    gcs = {"ok": True, "kv": {"incident-request": json.dumps({"id": "20261205T041943Z", "time": 990.0})}}
    wd.answer_incident(a, state, gcs)
    wd.answer_incident(a, state, gcs)          # the same request at the next check: answered already
    assert len(puts) == 1
    (key, blob), = puts[0]["put"].items()
    assert key == "incident:20261205T041943Z:10.99.1.12"
    assert wd.decode_part(blob)["ip"] == "10.99.1.12"
    old = {"ok": True, "kv": {"incident-request": json.dumps({"id": "20261205T000000Z", "time": 1000.0 - 301})}}
    wd.answer_incident(a, state, old)          # a request older than 300 s is not answered
    assert len(puts) == 1


def test_save_incident_writes_every_node_and_keeps_the_newest(wd, monkeypatch, tmp_path):
    worker = part("10.99.1.12", rank(1176, SPINNING, 20, "R", env={"NCCL_SOCKET_IFNAME": "enp1s0f1np1"}))
    asked = []

    def gcs(c, address, t, ops=None):
        asked.append(ops)
        if ops and ops.get("get"):
            return {"ok": True, "kv": dict((k, wd.encode_part(json.loads(json.dumps(worker)))) for k in ops["get"])}
        return {"ok": True, "kv": {}}
    monkeypatch.setattr(wd, "gcs_nodes", gcs)
    monkeypatch.setattr(wd, "node_part", lambda containers, units: part("10.99.1.11", rank(2391, WAITING, 0)))
    a = types.SimpleNamespace(node=NODES, incident_node=[], address="10.99.1.11:6379", ray_container="sparkfleet-ray",
                              gcs_timeout=20, container="sparkfleet-vllm", unit="sparkfleet-vllm",
                              ray_unit="sparkfleet-ray", incident_wait=45, incidents_keep=2)
    for old in ("20200101T000000Z-stopped-generating", "20200102T000000Z-collective-hang"):
        (tmp_path / "incidents" / old).mkdir(parents=True)
    d, cause = wd.save_incident(a, "no token within 20 s in 2 probes in a row")
    assert json.loads(asked[0]["put"]["incident-request"])["id"] in d
    assert cause.startswith("collective hang: spark-2 rank 1 spinning in spin_barrier")
    assert d.endswith("-collective-hang") and os.path.isdir(d)
    assert sorted(os.listdir(tmp_path / "incidents")) == ["20200102T000000Z-collective-hang", os.path.basename(d)]
    assert open(os.path.join(d, "cause.txt")).read() == cause + "\n"
    summary = json.load(open(os.path.join(d, "incident.json")))
    assert summary["nodes"] == {"spark-1": "captured", "spark-2": "captured"} and summary["class"] == "collective-hang"
    assert "spin_barrier" in open(os.path.join(d, "spark-2", "stacks.txt")).read()
    assert "NCCL_SOCKET_IFNAME=enp1s0f1np1" in open(os.path.join(d, "spark-2", "env.txt")).read()
    for f in ("memory.txt", "ps.txt", "dmesg.txt", "journal-sparkfleet-ray.txt"):
        assert os.path.exists(os.path.join(d, "spark-1", f))
    assert oct(os.stat(d).st_mode & 0o777) == "0o700"


def test_a_silent_worker_bounds_the_wait_and_is_named(wd, monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(wd.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(wd.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    monkeypatch.setattr(wd, "gcs_nodes", lambda c, a, t, ops=None: {"ok": True, "kv": {}})
    monkeypatch.setattr(wd, "node_part", lambda containers, units: part("10.99.1.11", rank(2391, WAITING, 0)))
    a = types.SimpleNamespace(node=[], incident_node=NODES, address="10.99.1.11:6379", ray_container="sparkfleet-ray",
                              gcs_timeout=20, container="sparkfleet-vllm", unit="sparkfleet-vllm",
                              ray_unit="sparkfleet-ray", incident_wait=10, incidents_keep=5)
    d, cause = wd.save_incident(a, "why")
    assert clock[0] <= 13
    summary = json.load(open(os.path.join(d, "incident.json")))
    assert summary["nodes"]["spark-2"] == "no part within 10 s (its Ray watchdog did not answer)"
    # every rank found waits in its collective: still a collective hang, on what was captured
    assert cause == "collective hang: spark-1 rank 0 waiting in all_reduce"


@pytest.mark.parametrize("gate", [True, False])
def test_the_liveness_unit_passes_what_an_incident_needs(wd, monkeypatch, gate):
    """The rendered liveness service's ExecStart, parsed by the watchdog itself: the incident options and the nodes
    (through the memory gate's options, or their own when the gate is off), and a start timeout that holds the wait."""
    import shlex
    import sys
    import yaml
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from support.units import render, _bool
    import jinja2
    nodes = [{"host": "spark-2", "ip": "10.99.1.12", "head": False}, {"host": "spark-1", "ip": "10.99.1.11", "head": True}]
    common = dict(sparkfleet_cluster_nodes=nodes, sparkfleet_ray_unit="sparkfleet-ray", sparkfleet_head_fabric_ip="10.99.1.11",
                  sparkfleet_ray_port=6379, vllm_serve_memory_gate=gate, vllm_serve_incidents_keep=10,
                  vllm_serve_incident_wait=45)
    role_vars = yaml.safe_load((SCRIPT.parents[2] / "vllm_serve" / "vars" / "main.yml").read_text())
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["quote"] = shlex.quote
    env.filters["bool"] = _bool
    incident_args = env.from_string(role_vars["_vllm_serve_incident_args"]).render(**common)
    unit = render("vllm_serve", "sparkfleet-vllm-watchdog.service.j2", **dict(
        common, sparkfleet_vllm_unit="sparkfleet-vllm", vllm_serve_liveness_timeout=20, vllm_serve_liveness_failures=2,
        vllm_serve_liveness_start_grace=900, sparkfleet_api_url="http://10.99.0.11:30000", sparkfleet_api_host="10.99.0.11",
        sparkfleet_api_port=30000, _vllm_serve_probe_model="m", sparkfleet_config_dir="/etc/sparkfleet",
        _vllm_serve_memory_args="--node spark-1=10.99.1.11 --node spark-2=10.99.1.12 --ray-container sparkfleet-ray"
                                " --address 10.99.1.11:6379", _vllm_serve_incident_args=incident_args))
    start = [line for line in unit.splitlines() if line.startswith("ExecStart=")][0]
    assert "TimeoutStartSec=%d" % (20 * 2 + 60 + 45 + 60) in unit
    seen = {}
    monkeypatch.setitem(wd.main.__globals__, "check_vllm", lambda a: seen.update(a=a) or 0)
    wd.main(shlex.split(start[len("ExecStart="):])[2:])
    a = seen["a"]
    assert a.incidents_keep == 10 and a.incident_wait == 45
    assert (a.node or a.incident_node) == ["spark-1=10.99.1.11", "spark-2=10.99.1.12"]
    assert a.address == "10.99.1.11:6379" and a.ray_container == "sparkfleet-ray"
