"""Pure logic of ray_cluster_check: node comparison, probe output parsing, error sentences.

Fixtures are real ray.nodes() outputs and real probe-program stdout captured from Ray 2.60.0
(see fixtures/ray_cluster_check/README.md for how each was made).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.ray import _ray

FIX = Path(__file__).resolve().parents[1] / "modules" / "fixtures" / "ray_cluster_check"


def raw_nodes(name):
    return json.loads((FIX / name).read_text())


def relabel(raw, mapping):
    """Move captured nodes onto other IPs/hostnames the way Ray would have registered them.

    mapping: {old_ip: (new_ip, new_hostname)}; node:<ip> resources move with the address.
    """
    raw = copy.deepcopy(raw)
    for node in raw:
        old = node["NodeManagerAddress"]
        if old not in mapping:
            continue
        new_ip, new_host = mapping[old]
        node["NodeManagerAddress"] = new_ip
        node["NodeName"] = new_ip
        node["NodeManagerHostname"] = new_host
        res = node["Resources"]
        if "node:" + old in res:  # dead nodes list no resources
            res["node:" + new_ip] = res.pop("node:" + old)
    return raw


EXPECTED_LAB = [{"host": "spark-1", "ip": "10.99.1.11"}, {"host": "spark-2", "ip": "10.99.1.12"}]
PINNED_LAB = {"127.0.0.1": ("10.99.1.11", "spark-1"), "127.0.0.2": ("10.99.1.12", "spark-2")}
UNPINNED_HEAD = {"127.0.0.1": ("10.99.0.11", "spark-1"), "127.0.0.2": ("10.99.1.12", "spark-2")}


def test_normalize_nodes_reads_head_gpus_and_death():
    head, worker = _ray.normalize_nodes(raw_nodes("nodes_local_2node_pinned.json"))
    assert (head["ip"], head["head"], head["alive"], head["gpus"], head["cpus"]) == ("127.0.0.1", True, True, 0.0, 1.0)
    assert (worker["ip"], worker["head"], worker["alive"], worker["gpus"]) == ("127.0.0.2", False, True, 1.0)
    assert worker["resources"]["node:127.0.0.2"] == 1.0
    assert head["death_reason"] is None

    _head, dead = _ray.normalize_nodes(raw_nodes("nodes_local_worker_dead.json"))
    # Ray empties a dead node's resources and keeps why it died.
    assert (dead["alive"], dead["gpus"], dead["resources"]) == (False, 0.0, {})
    assert dead["death_reason"] == "received SIGTERM"


def test_normalize_expected_first_is_head_unless_flagged():
    assert [e["head"] for e in _ray.normalize_expected(EXPECTED_LAB)] == [True, False]
    flagged = [{"host": "a", "ip": "1"}, {"host": "b", "ip": "2", "head": True}]
    assert [e["head"] for e in _ray.normalize_expected(flagged)] == [False, True]
    assert _ray.normalize_expected([]) == []


def _compare(raw, expected):
    return _ray.compare(_ray.normalize_nodes(raw), _ray.normalize_expected(expected))


@pytest.mark.parametrize("case, raw, expected, want", [
    ("pinned: every node on its fabric IP",
     relabel(raw_nodes("nodes_local_2node_pinned.json"), PINNED_LAB), EXPECTED_LAB,
     {"matched": ["spark-1", "spark-2"], "mismatched": [], "missing": [], "extra": []}),
    ("unpinned head: the head registered its management IP",
     relabel(raw_nodes("nodes_local_2node_pinned.json"), UNPINNED_HEAD), EXPECTED_LAB,
     {"matched": ["spark-2"], "mismatched": [("spark-1", "10.99.0.11", "10.99.1.11")],
      "missing": [], "extra": []}),
    ("worker died: missing, with Ray's reason",
     relabel(raw_nodes("nodes_local_worker_dead.json"), PINNED_LAB), EXPECTED_LAB,
     {"matched": ["spark-1"], "mismatched": [],
      "missing": [("spark-2", "10.99.1.12", "registered at 10.99.1.12 but dead (received SIGTERM)")],
      "extra": []}),
    ("worker restarted: the dead entry is history, not a problem",
     relabel(raw_nodes("nodes_local_worker_restarted.json"), PINNED_LAB), EXPECTED_LAB,
     {"matched": ["spark-1", "spark-2"], "mismatched": [], "missing": [], "extra": []}),
    ("worker never joined",
     relabel(raw_nodes("nodes_local_2node_pinned.json"), PINNED_LAB)[:1], EXPECTED_LAB,
     {"matched": ["spark-1"], "mismatched": [],
      "missing": [("spark-2", "10.99.1.12", "not registered")], "extra": []}),
    ("a node the inventory does not know",
     relabel(raw_nodes("nodes_local_2node_pinned.json"), PINNED_LAB), EXPECTED_LAB[:1],
     {"matched": ["spark-1"], "mismatched": [], "missing": [], "extra": [("10.99.1.12", "spark-2")]}),
    ("captured unpinned head: management IP registered, pinned worker fine",
     raw_nodes("nodes_rig_unpinned_head.json"), EXPECTED_LAB,
     {"matched": ["spark-2"], "mismatched": [("spark-1", "10.99.0.11", "10.99.1.11")],
      "missing": [], "extra": []}),
    ("captured as-is: same hostname on both nodes is not used to pair",
     raw_nodes("nodes_local_2node_pinned.json"),
     [{"host": "vm-a", "ip": "127.0.0.1"}, {"host": "vm-b", "ip": "127.0.0.9"}],
     {"matched": ["vm-a"], "mismatched": [("vm-b", "127.0.0.2", "127.0.0.9")], "missing": [], "extra": []}),
])
def test_compare(case, raw, expected, want):
    got = _compare(raw, expected)
    assert sorted(m["host"] for m in got["matched"]) == want["matched"], case
    assert [(m["host"], m["registered_ip"], m["expected_ip"]) for m in got["mismatched"]] == want["mismatched"], case
    assert [(m["host"], m["expected_ip"], m["reason"]) for m in got["missing"]] == want["missing"], case
    assert [(x["ip"], x["hostname"]) for x in got["extra"]] == want["extra"], case


def test_compare_pairs_by_hostname_before_leftovers():
    # Both nodes registered wrong IPs: hostnames decide who is who, not list order.
    raw = relabel(raw_nodes("nodes_local_2node_pinned.json"),
                  {"127.0.0.1": ("10.99.0.11", "spark-1"), "127.0.0.2": ("172.17.0.2", "spark-2")})
    got = _compare(list(reversed(raw)), EXPECTED_LAB)
    assert [(m["host"], m["registered_ip"]) for m in got["mismatched"]] == [
        ("spark-1", "10.99.0.11"), ("spark-2", "172.17.0.2")]


def test_compare_pairs_head_with_expected_head_when_hostnames_differ():
    raw = relabel(raw_nodes("nodes_local_2node_pinned.json"),
                  {"127.0.0.1": ("10.99.0.11", "gx10-a1b2"), "127.0.0.2": ("10.99.0.12", "gx10-c3d4")})
    got = _compare(raw, EXPECTED_LAB)
    by_host = dict((m["host"], m["registered_ip"]) for m in got["mismatched"])
    assert by_host == {"spark-1": "10.99.0.11", "spark-2": "10.99.0.12"}


def test_problems_name_host_and_both_ips_and_hint_names_the_fix():
    raw = relabel(raw_nodes("nodes_local_2node_pinned.json"), UNPINNED_HEAD)
    expected = _ray.normalize_expected(EXPECTED_LAB)
    got = _compare(raw, EXPECTED_LAB)
    problems = _ray.problems_of(got, _ray.normalize_nodes(raw), expected, [])
    assert problems == ["spark-1 registered with Ray as 10.99.0.11, expected its fabric IP 10.99.1.11"]
    hint = _ray.hint_for(got, [])
    assert "--node-ip-address 10.99.1.11 (the node's fabric IP)" in hint  # module_utils names no role variable
    hint = _ray.hint_for(got, [], names={"fabric_ip": "sparkfleet_fabric_ip"})
    assert "--node-ip-address 10.99.1.11 (sparkfleet_fabric_ip)" in hint


def test_problem_when_head_runs_elsewhere():
    raw = relabel(raw_nodes("nodes_local_2node_pinned.json"), PINNED_LAB)
    expected = _ray.normalize_expected([dict(EXPECTED_LAB[0]), dict(EXPECTED_LAB[1], head=True)])
    got = _ray.compare(_ray.normalize_nodes(raw), expected)
    problems = _ray.problems_of(got, _ray.normalize_nodes(raw), expected, [])
    assert problems == ["the Ray head runs on spark-1 (10.99.1.11), the inventory expects spark-2 to be the head"]


def test_parse_probe_output_takes_marker_line_among_noise():
    real = (FIX / "probe_ok_local.stdout").read_text()
    noisy = "2026-11-29 10:57:08,230\tINFO worker.py:1 -- Connecting to existing Ray cluster\n" + real + "bye\n"
    doc = _ray.parse_probe_output(noisy)
    assert doc["connected"] is True and doc["ray_version"] == "2.60.0"
    assert len(doc["nodes"]) == 2
    assert _ray.parse_probe_output("Traceback (most recent call last):\n  ...\n") is None
    assert _ray.parse_probe_output(_ray.PROBE_MARKER + "{not json\n") is None
    assert _ray.parse_probe_output("") is None


def _probe_reports(fixture, host_of, timeout, reverse=True):
    doc = _ray.parse_probe_output((FIX / fixture).read_text())
    return _ray.probe_reports(doc["probes"], host_of, "spark-1", "10.99.1.11", timeout, reverse)


def test_probe_reports_ok_carries_both_directions():
    doc = _ray.parse_probe_output((FIX / "probe_ok_local.stdout").read_text())
    worker = doc["probes"][0]["node_id"]
    (rep,) = _probe_reports("probe_ok_local.stdout", {worker: "spark-2"}, 20)
    assert rep["ok"] is True and rep["error"] is None and rep["host"] == "spark-2"
    assert rep["to_worker_s"] > 0 and rep["from_worker_s"] > 0


def test_probe_reports_fetch_timeouts_name_host_ip_and_fix():
    doc = _ray.parse_probe_output((FIX / "probe_fetch_timeout_local.stdout").read_text())
    worker = doc["probes"][0]["node_id"]
    (rep,) = _probe_reports("probe_fetch_timeout_local.stdout", {worker: "spark-2"}, 8)
    assert rep["ok"] is False
    assert ("object fetch from spark-2 (registered 127.0.0.2) timed out after 8 s: the node's raylet is not "
            "reachable from the head; check that every node runs ray start --node-ip-address <fabric ip>"
            ) in rep["error"]
    assert ("object fetch by spark-2 (registered 127.0.0.2) from the head spark-1 (registered 10.99.1.11) "
            "timed out after 8 s") in rep["error"]


def test_probe_cut_by_deadline_is_not_ok():
    (rep,) = _probe_reports("probe_deadline_local.stdout", {}, 20)
    assert rep["ok"] is False
    assert rep["host"] == "vm"  # unmatched: the hostname Ray reported
    assert "did not finish" in rep["error"]


def test_reverse_none_does_not_require_to_worker():
    raw = [{"node_id": "n1", "ip": "10.99.1.12", "schedule_s": 1.0, "from_worker_s": 0.2,
            "to_worker_s": None, "errors": []}]
    (rep,) = _ray.probe_reports(raw, {"n1": "spark-2"}, "spark-1", "10.99.1.11", 20, False)
    assert rep["ok"] is True
    (rep,) = _ray.probe_reports(raw, {"n1": "spark-2"}, "spark-1", "10.99.1.11", 20, True)
    assert rep["ok"] is False


def test_schedule_timeout_sentence():
    raw = [{"node_id": "n1", "ip": "10.99.1.12", "errors": [
        {"phase": "schedule", "kind": "timeout", "detail": "GetTimeoutError: ..."}]}]
    (rep,) = _ray.probe_reports(raw, {"n1": "spark-2"}, "spark-1", "10.99.1.11", 20, True)
    assert rep["error"].startswith("a task pinned to spark-2 (registered 10.99.1.12) did not run within 20 s")


def test_deadline_grows_with_workers_and_timeout():
    assert _ray.probe_deadline(20, 1) < _ray.probe_deadline(20, 3) < _ray.probe_deadline(40, 3)
    cfg, deadline = _ray.probe_config("10.99.1.11:6379", timeout=20, workers=1)
    cfg = json.loads(cfg)
    assert cfg["deadline"] == deadline and cfg["connect_timeout"] <= deadline
    assert cfg["address"] == "10.99.1.11:6379" and cfg["reverse_from"] == "task"


# --- the probe program itself, run by a real interpreter --------------------------------------

def test_probe_program_compiles_for_this_python():
    compile(_ray.PROBE_PROGRAM, "<probe>", "exec")


def _run_program(cfg, pythonpath=None):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    # timeout: a probe that outlives its own deadline fails the test here (TimeoutExpired), whatever the load
    return subprocess.run([sys.executable, "-", cfg], input=_ray.PROBE_PROGRAM, text=True,
                          capture_output=True, env=env, timeout=60, check=False)


def test_probe_program_without_ray_reports_import_error(tmp_path):
    # An empty 'ray' shadow that fails to import stands for an interpreter without Ray.
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    cfg = _ray.probe_config("auto", deadline=30)[0]
    proc = _run_program(cfg, tmp_path)
    doc = _ray.parse_probe_output(proc.stdout)
    assert proc.returncode == _ray.PROBE_RC_ERROR
    assert doc["error"]["kind"] == "import" and "No module named 'ray'" in doc["error"]["detail"]


def test_probe_program_watchdog_ends_a_hung_connect(tmp_path):
    # ray.init() that never returns (an unreachable GCS retries for minutes) must end at the deadline.
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text(
        "import time\n__version__ = '2.60.0'\n\ndef init(**kwargs):\n    time.sleep(600)\n")
    cfg = _ray.probe_config("auto", deadline=3)[0]
    proc = _run_program(cfg, tmp_path)
    doc = _ray.parse_probe_output(proc.stdout)
    assert doc["connected"] is False and doc["error"]["phase"] == "connect"
    assert doc["error"]["kind"] in ("timeout", "deadline")


def test_probe_program_without_address_honours_timeout(tmp_path):
    # Issue 11.6: address auto (no GCS to test first) waited a fixed 60 s whatever timeout said.
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text(
        "import time\n__version__ = '2.60.0'\n\ndef init(**kwargs):\n    time.sleep(600)\n")
    cfg, deadline = _ray.probe_config("auto", timeout=2, probe=False)
    assert json.loads(cfg)["connect_timeout"] == 2 and deadline == 2 + 15
    proc = _run_program(cfg, tmp_path)
    doc = _ray.parse_probe_output(proc.stdout)
    assert doc["error"] == {"phase": "connect", "kind": "timeout", "detail": "ray.init() did not return within 2.0 s"}


def test_probe_program_refuses_fast_when_no_gcs_listens(tmp_path):
    import socket
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text(
        "import time\n__version__ = '2.60.0'\n\ndef init(**kwargs):\n    time.sleep(600)\n")
    cfg = _ray.probe_config("127.0.0.1:%d" % port, deadline=30)[0]
    proc = _run_program(cfg, tmp_path)
    doc = _ray.parse_probe_output(proc.stdout)
    assert doc["error"]["kind"] == "unreachable" and "127.0.0.1:%d" % port in doc["error"]["detail"]


def test_without_inventory_nothing_is_extra_or_missing():
    got = _compare(raw_nodes("nodes_local_2node_pinned.json"), [])
    assert got["extra"] == [] and got["missing"] == [] and got["mismatched"] == []


_FAKE_RAY_TWO_NODES = (
    "__version__ = '2.60.0'\n"
    "def init(**kwargs):\n    return None\n"
    "def nodes():\n"
    "    return [{'NodeID': 'a', 'NodeManagerAddress': '10.99.1.11', 'Alive': True},\n"
    "            {'NodeID': 'b', 'NodeManagerAddress': '10.99.1.12', 'Alive': %s}]\n"
    "class _Ctx:\n    def get_node_id(self):\n        return 'a'\n"
    "def get_runtime_context():\n    return _Ctx()\n"
    "class _Fn:\n    def options(self, **kwargs):\n        return self\n"
    "    def remote(self, *args):\n        return object()\n"
    "def remote(**kwargs):\n    return lambda f: _Fn()\n"
    "def get(ref, timeout=None):\n    raise TimeoutError('no worker in this fake')\n")


@pytest.mark.parametrize("worker_alive, probed", [("True", True), ("False", False)])
def test_probe_program_probes_a_whole_cluster_only(tmp_path, worker_alive, probed):
    # probe_if_ips: a wait that polls without probing proves the cluster in the same run once it is whole; a cluster
    # still forming (the worker not alive yet) is only listed.
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text(_FAKE_RAY_TWO_NODES % worker_alive)
    cfg, deadline = _ray.probe_config("auto", probe=False, timeout=2, probe_if_ips=["10.99.1.12", "10.99.1.11"])
    assert deadline > _ray.probe_deadline(2, 0)  # the probe's time is in the deadline
    proc = _run_program(cfg, tmp_path)
    doc = _ray.parse_probe_output(proc.stdout)
    assert doc["connected"] is True and len(doc["nodes"]) == 2
    assert bool(doc.get("probed")) is probed
    assert len(doc["probes"]) == (1 if probed else 0)  # the fake's worker never answers: the probe says so
