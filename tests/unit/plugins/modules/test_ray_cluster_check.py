"""ray_cluster_check as Ansible runs it, with the probe command answered by real captured stdout."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.ray import _ray
from ansible_collections.sparkfleet.vllm.plugins.modules import ray_cluster_check

FIX = Path(__file__).resolve().parent / "fixtures" / "ray_cluster_check"
# The lab's Ray venv (lab/build-rayvenv.sh; its path carries lab/ray-version): only named in the argv, never run here.
VENV_PY = "/var/tmp/sparklab/share/rayvenv-%s/bin/python" % (
    Path(__file__).resolve().parents[4] / "lab" / "ray-version").read_text().strip()
LOCAL = [{"host": "nodeA", "ip": "127.0.0.1"}, {"host": "nodeB", "ip": "127.0.0.2"}]
LAB = [{"host": "spark-1", "ip": "10.99.1.11"}, {"host": "spark-2", "ip": "10.99.1.12"}]


def stdout_of(name):
    return (FIX / name).read_text()


def as_stdout(doc):
    return "2026-11-29 11:00:05 INFO worker.py -- Connecting to existing Ray cluster\n" + \
        _ray.PROBE_MARKER + json.dumps(doc) + "\n"


def relabel_doc(doc, mapping):
    """A captured probe document moved onto lab addresses, as Ray would have registered them."""
    doc = copy.deepcopy(doc)
    for node in doc["nodes"]:
        old = node["NodeManagerAddress"]
        new_ip, new_host = mapping[old]
        node["NodeManagerAddress"], node["NodeName"], node["NodeManagerHostname"] = new_ip, new_ip, new_host
        if "node:" + old in node["Resources"]:
            node["Resources"]["node:" + new_ip] = node["Resources"].pop("node:" + old)
    for probe in doc["probes"]:
        probe["ip"], probe["hostname"] = mapping[probe["ip"]]
    doc["address"] = "10.99.1.11:6379"
    return doc


@pytest.fixture
def probe_cmd(node_commands):
    """Answer the module's probe command with (rc, stdout, stderr); record what was run (argv and stdin)."""
    state = {"answer": (0, "", "")}
    fake = node_commands(lambda argv: state["answer"], unwrap=False)

    def answer(rc, out, err=""):
        state["answer"] = (rc, out, err)

    answer.calls = fake.ran          # argv as run; fake.kwargs[i]["data"] is its stdin
    answer.fake = fake
    return answer


def run(run_module, **args):
    return run_module(ray_cluster_check, args)


# How the roles name the settings (roles/sparkfleet/vars/main.yml sparkfleet_setting_names).
ROLE_NAMES = {"fabric_ip": "sparkfleet_fabric_ip", "ray_cluster": "the ray_cluster role"}


def test_healthy_cluster_passes_with_times_and_gpus(run_module, probe_cmd):
    probe_cmd(0, stdout_of("probe_ok_local.stdout"))
    res = run(run_module, python=VENV_PY, expected=LOCAL)
    assert not res.get("failed") and res["ok"] is True and res["changed"] is False
    assert res["mismatched"] == [] and res["missing"] == [] and res["extra"] == []
    (probe,) = res["probes"]
    assert probe["host"] == "nodeB" and probe["ok"] is True
    assert probe["to_worker_s"] > 0 and probe["from_worker_s"] > 0
    assert [n["host"] for n in res["nodes"]] == ["nodeA", "nodeB"]
    assert sum(n["gpus"] for n in res["nodes"]) == 1.0
    assert res["summary"].startswith("2 alive Ray node(s) with 1 GPU(s), 2/2 expected on their fabric IP")


def test_command_runs_venv_python_under_timeout_with_program_on_stdin(run_module, probe_cmd):
    probe_cmd(0, stdout_of("probe_ok_local.stdout"))
    run(run_module, python=VENV_PY, expected=LOCAL, timeout=20)
    (args,) = probe_cmd.calls
    assert args[:3] == ["/usr/bin/timeout", "-k", "10"]
    assert int(args[3]) > _ray.probe_deadline(20, 1)  # the outer limit sits behind the watchdog
    assert args[4:6] == [VENV_PY, "-"]
    cfg = json.loads(args[6])
    assert cfg["address"] == "127.0.0.1:6379"  # from the head in expected
    assert cfg["probe"] is True and cfg["timeout"] == 20 and cfg["object_size_mb"] == 16
    assert probe_cmd.fake.kwargs[0]["data"] == _ray.PROBE_PROGRAM


def test_command_in_container_uses_docker_exec_i(run_module, probe_cmd):
    probe_cmd(0, stdout_of("probe_ok_local.stdout"))
    run(run_module, container="vllm", expected=LOCAL, address="auto", probe=False)
    args = probe_cmd.calls[0]
    assert args[4:9] == ["/usr/bin/docker", "exec", "-i", "vllm", "python3"]
    cfg = json.loads(args[10])
    assert cfg["address"] == "auto" and cfg["probe"] is False


def test_unpinned_head_fails_naming_host_both_ips_and_fix(run_module, probe_cmd):
    doc = _ray.parse_probe_output(stdout_of("probe_fetch_timeout_local.stdout"))
    doc = relabel_doc(doc, {"127.0.0.1": ("10.99.0.11", "spark-1"), "127.0.0.2": ("10.99.1.12", "spark-2")})
    probe_cmd(0, as_stdout(doc))
    res = run(run_module, python=VENV_PY, timeout=8, setting_names=ROLE_NAMES,
              expected=[{"host": "spark-1", "ip": "10.99.1.11"}, {"host": "spark-2", "ip": "10.99.1.12"}])
    assert res["failed"] is True and res["ok"] is False and res["changed"] is False
    assert res["mismatched"] == [{"host": "spark-1", "registered_ip": "10.99.0.11", "expected_ip": "10.99.1.11",
                                  "node_id": doc["nodes"][0]["NodeID"]}]
    assert "spark-1 registered with Ray as 10.99.0.11, expected its fabric IP 10.99.1.11" in res["msg"]
    assert "object fetch from spark-2 (registered 10.99.1.12) timed out after 8 s" in res["msg"]
    assert "from the head spark-1 (registered 10.99.0.11)" in res["msg"]
    assert "--node-ip-address 10.99.1.11" in res["hint"] and "sparkfleet_fabric_ip" in res["hint"]
    assert res["probes"][0]["ok"] is False


def test_fail_on_mismatch_false_returns_the_same_report(run_module, probe_cmd):
    probe_cmd(0, stdout_of("probe_fetch_timeout_local.stdout"))
    res = run(run_module, python=VENV_PY, expected=LOCAL, timeout=8, fail_on_mismatch=False)
    assert not res.get("failed") and res["ok"] is False
    assert res["probes"][0]["error"].startswith("object fetch from nodeB (registered 127.0.0.2) timed out after 8 s")
    assert "hint" in res


@pytest.mark.parametrize("fixture, want_msg, want_hint", [
    ("probe_no_ray.stdout", "Ray cannot be imported by the probe's Python: ModuleNotFoundError",
     "interpreter with Ray"),
    ("probe_connect_refused_local.stdout",
     "could not connect a Ray driver to 127.0.0.1:6390: no Ray GCS answers at 127.0.0.1:6390",
     "ray start --head --node-ip-address"),
    ("probe_connect_hang_local.stdout", "could not connect a Ray driver to 127.0.0.1:6391",
     "ray start --head"),
    ("probe_deadline_local.stdout", "hard deadline while in phase 'fetch from 127.0.0.2'", "raise timeout"),
])
def test_driver_errors_fail_with_cause_and_hint(run_module, probe_cmd, fixture, want_msg, want_hint):
    doc = _ray.parse_probe_output(stdout_of(fixture))
    probe_cmd(2, stdout_of(fixture))
    res = run(run_module, python=VENV_PY, address=doc["address"], expected=LOCAL)
    assert res["failed"] is True and res["ok"] is False
    assert want_msg in res["msg"]
    assert want_hint in res["hint"]


@pytest.mark.parametrize("rc", [124, -9])  # -9: `timeout -k` sent SIGKILL, which ends `timeout` itself too
def test_killed_probe_without_output_fails_clearly(run_module, probe_cmd, rc):
    probe_cmd(rc, "", "")
    res = run(run_module, python=VENV_PY, expected=LOCAL)
    assert res["failed"] is True
    assert "did not finish within" in res["msg"] and "killed" in res["msg"]
    assert res["rc"] == rc
    argv = probe_cmd.calls[0]
    assert argv[:3] == ["/usr/bin/timeout", "-k", "10"] and "within %s s" % argv[3] in res["msg"]


def test_python_traceback_without_marker_is_shown(run_module, probe_cmd):
    probe_cmd(1, "", "Traceback (most recent call last):\n  File \"<stdin>\"\nSyntaxError: invalid syntax\n")
    res = run(run_module, python=VENV_PY, expected=LOCAL)
    assert res["failed"] is True and "SyntaxError: invalid syntax" in res["msg"]


def test_check_mode_still_checks_and_changes_nothing(run_module, probe_cmd):
    probe_cmd(0, stdout_of("probe_fetch_timeout_local.stdout"))
    res = run_module(ray_cluster_check, dict(python=VENV_PY, expected=LOCAL, timeout=8), check_mode=True)
    assert res["failed"] is True and res["changed"] is False
    assert len(probe_cmd.calls) == 1


def test_bad_numbers_are_refused_before_running(run_module, probe_cmd):
    res = run(run_module, python=VENV_PY, timeout=0)
    assert res["failed"] is True and "positive" in res["msg"]
    assert probe_cmd.calls == []


# --- real captures of the seeds' topology (mgmt + fabric head, fabric-only worker) -------------

@pytest.mark.parametrize("fixture", ["probe_rig_pinned.stdout", "probe_lab_pinned.stdout"])
def test_real_pinned_two_node_cluster_passes(run_module, probe_cmd, fixture):
    probe_cmd(0, stdout_of(fixture))
    res = run(run_module, python=VENV_PY, expected=LAB)
    assert not res.get("failed") and res["ok"] is True
    assert [(n["host"], n["ip"], n["head"]) for n in res["nodes"]] in (
        [("spark-1", "10.99.1.11", True), ("spark-2", "10.99.1.12", False)],
        [("spark-2", "10.99.1.12", False), ("spark-1", "10.99.1.11", True)])
    (probe,) = res["probes"]
    assert probe["host"] == "spark-2" and probe["ok"] is True


@pytest.mark.parametrize("fixture", ["probe_rig_unpinned_head.stdout", "probe_lab_unpinned_head.stdout"])
def test_real_unpinned_head_trap_fails_with_both_ips_and_bounded_fetch(run_module, probe_cmd, fixture):
    # Captured: ray status shows 2 nodes, the pinned task runs, both object fetches time out.
    probe_cmd(0, stdout_of(fixture))
    res = run(run_module, python=VENV_PY, expected=LAB, timeout=10, setting_names=ROLE_NAMES)
    assert res["failed"] is True and res["ok"] is False and res["changed"] is False
    assert len([n for n in res["nodes"] if n["alive"]]) == 2
    assert [(m["host"], m["registered_ip"], m["expected_ip"]) for m in res["mismatched"]] == [
        ("spark-1", "10.99.0.11", "10.99.1.11")]
    (probe,) = res["probes"]
    assert probe["schedule_s"] > 0 and probe["ok"] is False
    assert probe["error"].startswith(
        "object fetch from spark-2 (registered 10.99.1.12) timed out after 10 s: the node's raylet is not "
        "reachable from the head; check that every node runs ray start --node-ip-address <fabric ip>")
    assert "object fetch by spark-2 (registered 10.99.1.12) from the head spark-1 (registered 10.99.0.11)" \
        in probe["error"]
    assert res["msg"].startswith("Ray cluster check failed: spark-1 registered with Ray as 10.99.0.11, "
                                 "expected its fabric IP 10.99.1.11; object fetch from spark-2")
    assert res["msg"].count("check that every node runs ray start") == 1  # advice once, at the end
    assert "--node-ip-address 10.99.1.11" in res["hint"] and "sparkfleet_fabric_ip" in res["hint"]


def test_without_inventory_it_finds_the_local_cluster_and_still_probes(run_module, probe_cmd):
    probe_cmd(0, stdout_of("probe_lab_pinned.stdout"))
    res = run(run_module, python=VENV_PY)
    cfg = json.loads(probe_cmd.calls[0][-1])
    assert cfg["address"] == "auto"
    assert res["ok"] is True and res["expected"] == []
    # Unmatched nodes are named by the hostname Ray reports.
    assert [p["host"] for p in res["probes"]] == ["spark-2"]


@pytest.mark.parametrize("timeout", [-1, 0, float("nan"), float("inf")])
def test_timeout_must_be_a_positive_number(run_module, probe_cmd, timeout):
    res = run(run_module, python=VENV_PY, expected=LOCAL, timeout=timeout)
    assert res["failed"] and "timeout and object_size_mb must be positive" in res["msg"]
    assert probe_cmd.calls == []


def test_without_an_address_the_connect_wait_is_timeout(run_module, probe_cmd):
    # Issue 11.6: with no address (and no head in expected) the connect used to wait a fixed 60 s.
    probe_cmd(0, stdout_of("probe_ok_local.stdout"))
    run(run_module, python=VENV_PY, probe=False, timeout=5)
    cfg = json.loads(probe_cmd.calls[0][6])
    assert cfg["address"] == "auto" and cfg["connect_timeout"] == 5
    assert int(probe_cmd.calls[0][3]) <= 5 + 15 + 15


def test_hints_without_setting_names_name_generic_settings(run_module, probe_cmd):
    doc = _ray.parse_probe_output(stdout_of("probe_fetch_timeout_local.stdout"))
    doc = relabel_doc(doc, {"127.0.0.1": ("10.99.0.11", "spark-1"), "127.0.0.2": ("10.99.1.12", "spark-2")})
    probe_cmd(0, as_stdout(doc))
    res = run(run_module, python=VENV_PY, timeout=8,
              expected=[{"host": "spark-1", "ip": "10.99.1.11"}, {"host": "spark-2", "ip": "10.99.1.12"}])
    assert "--node-ip-address 10.99.1.11 (the node's fabric IP)" in res["hint"]
    assert "sparkfleet" not in res["hint"]


def test_connect_hint_names_the_port_tried_and_the_callers_setting(run_module, probe_cmd):
    doc = _ray.parse_probe_output(stdout_of("probe_connect_refused_local.stdout"))
    probe_cmd(2, stdout_of("probe_connect_refused_local.stdout"))
    res = run(run_module, python=VENV_PY, address=doc["address"], expected=LOCAL, setting_names=ROLE_NAMES)
    assert "ray start --head --node-ip-address <fabric ip> --port 6390 (the ray_cluster role)" in res["hint"]


def test_unknown_setting_names_are_refused(run_module, probe_cmd):
    res = run(run_module, python=VENV_PY, expected=LOCAL, setting_names={"fabric": "x"})
    assert res["failed"] is True and res["msg"] == "setting_names has unknown setting(s) fabric"


def test_a_wait_that_finds_the_cluster_whole_returns_the_proof(run_module, probe_cmd):
    # probe_if_complete: the program gets the expected IPs and probes when exactly those are alive; the module says so.
    doc = _ray.parse_probe_output(stdout_of("probe_ok_local.stdout"))
    probe_cmd(0, as_stdout(dict(doc, probed=True)))
    res = run(run_module, python=VENV_PY, expected=LOCAL, probe=False, probe_if_complete=True,
              fail_on_mismatch=False)
    cfg = json.loads(probe_cmd.calls[0][6])
    assert cfg["probe"] is False and cfg["probe_if_ips"] == sorted(e["ip"] for e in LOCAL)
    assert res["ok"] is True and res["probed"] is True and "object round trips ok" in res["summary"]
    # a cluster still forming: listed only, and the module says it did not probe
    probe_cmd(0, as_stdout(dict(doc, probes=[], probed=False)))
    res = run(run_module, python=VENV_PY, expected=LOCAL, probe=False, probe_if_complete=True,
              fail_on_mismatch=False)
    assert res["probed"] is False and "round trips" not in res["summary"]
