"""Issue 11's faults on a deployed lab: each injected for real, each with the outcome a user must see.

The tests share one deployment (conftest's `serving`: the lab as an earlier module left it serving, else deployed)
and run in file order; each leaves the cluster serving again (or ends by restoring it). Tests over about two minutes,
and second forms of a path another CI test takes, are marked `long` (scripts/faults.sh).
    SPARKLAB_NAME=x SPARKLAB_KEEP_LAB=1 lab/labctl ctl -- .venv/bin/pytest tests/integration/test_faults.py -m lab
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

HEAD = "spark-1"


@pytest.fixture
def serve_with_fault(lab, tmp_path):
    """serve_with_fault(fault, **extravars): run the vllm_serve play with the stand-in told to fail in a given way;
    returns (result, failures, seconds). The fault stays in the engine's unit until a run writes the inventory's
    settings again, so afterwards the inventory's settings are deployed again (site.yml --tags vllm_serve) and must
    serve: the next test, whichever runs (CI's subset, scripts/faults.sh's, one test alone), finds the lab serving."""
    def run(fault, **extra):
        env = {"SPARKLAB_SECONDS_PER_SHARD": "0.5", "SPARKLAB_FAULT": fault}
        extravars = {"vllm_serve_env": env, "vllm_serve_failure_logs_dir": str(tmp_path / "logs")}
        extravars.update(extra)
        t0 = time.time()
        r, failures = lab.play(tmp_path, "site.yml", cmdline="--tags vllm_serve", extravars=extravars)
        return r, failures, time.time() - t0
    yield run
    r, failures = lab.play(tmp_path / "restore", "site.yml", cmdline="--tags vllm_serve")
    assert r["status"] == "successful" and not failures, lab.messages(failures)[-2000:]
    assert lab.completion()[0] == 200


@pytest.mark.fault(name="engine crash mid-load (a worker's rank dies at shard 4 of 8)",
                   expected="play fails with the class and the log line; every node's vLLM/Ray journals and Ray logs"
                            " fetched to a directory the message names")
def test_engine_crash_mid_load_names_the_class_and_fetches_every_node_s_logs(lab, serving, serve_with_fault, tmp_path,
                                                                              observe):
    r, failures, _ = serve_with_fault("crash_load")
    assert r["status"] == "failed" and failures
    final = failures[-1]["res"]["msg"]
    m = re.search(r"vLLM startup failed in (\w+): (\w+): (.+?)\s+(.*)fetched to (\S+)", final, re.S)
    assert m, final
    phase, cause, _evidence, _rest, logs = m.groups()
    assert phase == "loading_weights" and cause not in ("engine_exited", "stalled"), final
    observe(final[:300])
    logs = Path(logs)
    assert logs.parent == tmp_path / "logs" and logs.name.endswith("-" + cause)
    files = {p.relative_to(logs).as_posix(): p.read_text(errors="replace") for p in logs.rglob("*") if p.is_file()}
    assert set(files) == {"spark-1/sparkfleet-vllm.journal.txt", "spark-1/sparkfleet-ray.journal.txt",
                          "spark-1/ray-logs-and-units.txt", "spark-2/sparkfleet-ray.journal.txt",
                          "spark-2/ray-logs-and-units.txt"}, sorted(files)
    # The head's vLLM journal holds the load and the crash; each node's Ray logs are there, cut to a bound.
    assert "Starting to load model" in files["spark-1/sparkfleet-vllm.journal.txt"]
    assert "ActorDiedError" in files["spark-1/sparkfleet-vllm.journal.txt"]
    for host in lab.hosts:
        assert re.search(r"==> raylet[.0-9]*\.out <==", files[host + "/ray-logs-and-units.txt"]), host
        assert "sparkfleet-ray.service" in files[host + "/ray-logs-and-units.txt"]
        assert "Started sparkfleet-ray.service" in files[host + "/sparkfleet-ray.journal.txt"] or \
            "ray start" in files[host + "/sparkfleet-ray.journal.txt"].lower()
    assert all(len(text.encode()) <= 4 * 1024 * 1024 for text in files.values())
    key = lab.api_key()
    assert not [name for name, text in files.items() if key in text]
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in logs.rglob("*") if p.is_file())


# CI classifies an engine failure by the test above (and the journal's classes by the unit tests of vllm_wait); this
# second engine start and restore (~100 s of CI) is long.
@pytest.mark.long
@pytest.mark.fault(name="engine fails within seconds and its --rm container is gone (API port bind fails)",
                   expected="the cause class comes from the unit's journal (port_in_use), not engine_exited")
def test_early_exit_is_classified_from_the_unit_journal(lab, serving, serve_with_fault, observe):
    r, failures, _ = serve_with_fault("port_in_use")
    assert r["status"] == "failed" and failures
    wait = [f["res"] for f in failures if "log_source" in (f.get("res") or {})]
    assert wait and wait[-1]["failure"]["class"] == "port_in_use", lab.messages(failures)[-2000:]
    assert wait[-1]["log_source"] == "journal"
    observe(failures[-1]["res"]["msg"][:300])


# CI repairs a worker's shard by test_site's same-size corruption (the harder case: size and mtime kept); this one
# (~60 s of CI) is long.
@pytest.mark.long
@pytest.mark.fault(name="shard truncated on a worker after a good sync",
                   expected="the next run re-sends it before serving and the engine restarts onto it")
def test_a_shard_truncated_on_a_worker_is_repaired_before_serving(lab, serving, tmp_path, observe):
    worker, shard = lab.hosts[-1], "/models/sparklab-tiny/model-00003-of-00008.safetensors"
    size = int(lab.host_exec(HEAD, "stat", "-c", "%s", shard).stdout)
    assert lab.host_exec(worker, "truncate", "-s", str(size // 2), shard).returncode == 0
    before = lab.host_exec(HEAD, "docker", "inspect", "-f", "{{.Id}}", "sparkfleet-vllm").stdout.strip()
    r, failures = lab.play(tmp_path, "site.yml", cmdline="--tags model_sync,vllm_serve")
    assert r["status"] == "successful" and not failures, lab.messages(failures)[-2000:]
    assert int(lab.host_exec(worker, "stat", "-c", "%s", shard).stdout) == size
    sums = {h: lab.host_exec(h, "sha256sum", shard).stdout.split()[0] for h in (HEAD, worker)}
    assert sums[HEAD] == sums[worker]
    after = lab.host_exec(HEAD, "docker", "inspect", "-f", "{{.Id}}", "sparkfleet-vllm").stdout.strip()
    assert after and after != before, "the engine still serves what it loaded before the repair"
    assert lab.completion()[0] == 200
    observe("%s re-sent (%d of %d bytes were missing); engine restarted" % (shard.rsplit("/", 1)[1], size - size // 2, size))


@pytest.mark.fault(name="disk full on the worker (its model filesystem too small for a missing shard)",
                   expected="refused before copying, naming the host, the bytes free and the bytes needed; the copy"
                            " already there untouched")
def test_a_full_worker_disk_is_refused_before_copying_with_the_numbers(lab, serving, tmp_path, observe):
    worker, model = lab.hosts[-1], "/models/sparklab-tiny"
    missing = model + "/model-00008-of-00008.safetensors"
    size = int(lab.host_exec(HEAD, "du", "-sb", model).stdout.split()[0])
    shard = int(lab.host_exec(HEAD, "stat", "-c", "%s", missing).stdout)
    # A small filesystem over /models on the worker holding the model less one shard, with less room than that shard.
    fill = ("set -e; mkdir -p /run/sfl-full; cp -a %s /run/sfl-full/; rm /run/sfl-full/sparklab-tiny/%s; "
            "mount -t tmpfs -o size=%d,mode=0755 sfl-full /models; cp -a /run/sfl-full/sparklab-tiny /models/; "
            "rm -rf /run/sfl-full" % (model, missing.rsplit("/", 1)[1], size - shard + 64 * 1024))
    assert lab.host_exec(worker, "sh", "-c", fill).returncode == 0
    try:
        before = lab.host_exec(worker, "sh", "-c", "cd %s && sha256sum * | sort" % model).stdout
        r, failures = lab.play(tmp_path, "site.yml", cmdline="--tags model_sync")
        assert r["status"] == "failed" and failures
        msgs = lab.messages(failures)
        m = re.search(r"(\d+) bytes \([0-9.]+ GB\) free under [^,]+, the sync needs (\d+) bytes", msgs)
        # model_sync names destinations by fabric IP
        assert m and int(m.group(1)) < int(m.group(2)) and lab.fabric_ip(worker) in msgs, msgs[-2000:]
        observe(msgs[msgs.index(m.group(0)) - 80:][:240])
        assert lab.host_exec(worker, "sh", "-c", "cd %s && sha256sum * | sort" % model).stdout == before
        assert lab.host_exec(worker, "test", "-e", missing).returncode != 0
    finally:
        lab.host_exec(worker, "umount", "/models")
    assert int(lab.host_exec(worker, "stat", "-c", "%s", missing).stdout or 0) == shard


@pytest.mark.long
@pytest.mark.fault(name="Ray's memory monitor turned on by the user (threshold 0.95) kills a rank at graph capture",
                   expected="the play fails within seconds of the kill with the class ray_oom_killed and a hint naming"
                            " our variable; the inventory's settings serve again")
def test_a_ray_oom_kill_at_graph_capture_fails_with_its_class_and_our_variable(lab, serving, tmp_path, observe):
    fault = {"SPARKLAB_SECONDS_PER_SHARD": "0.2", "SPARKLAB_FAULT": "ray_oom_graph"}
    try:
        r, failures = lab.play(tmp_path / "oom", "site.yml", cmdline="--tags ray_cluster,vllm_serve",
                               extravars={"vllm_serve_env": fault, "vllm_serve_gpu_memory_utilization": 0.95,
                                          "ray_cluster_memory_monitor": True,
                                          "ray_cluster_memory_usage_threshold": 0.95})
        assert r["status"] == "failed" and failures
        final = lab.messages(failures)
        assert "ray_oom_killed" in final, final[-3000:]
        assert "ray_cluster_memory_monitor" in final or "vllm_serve_gpu_memory_utilization" in final, final[-3000:]
        observe(final[final.index("ray_oom_killed"):][:300])
    finally:
        r, failures = lab.play(tmp_path / "back", "site.yml", cmdline="--tags ray_cluster,vllm_serve")
    assert r["status"] == "successful" and not failures, lab.messages(failures)[-2000:]
    assert lab.completion()[0] == 200


@pytest.mark.long
@pytest.mark.fault(name="engine hangs mid-load (stops printing at shard 4 of 8)",
                   expected="`stalled` after vllm_serve_stall_timeout (45 s), long before the global timeout (900 s)")
def test_engine_hang_is_stalled_after_stall_timeout(lab, serving, serve_with_fault, observe):
    r, failures, took = serve_with_fault("hang", vllm_serve_stall_timeout=45, vllm_serve_ready_timeout=900)
    assert r["status"] == "failed" and failures
    wait = [f["res"] for f in failures if "log_source" in (f.get("res") or {})]
    assert wait and wait[-1]["failure"]["class"] == "stalled", lab.messages(failures)[-2000:]
    # The worker's rank hung at shard 4; the head's rank finished loading, so the log's phase may already be past it.
    assert wait[-1]["failed_phase"] in ("loading_weights", "profiling"), wait[-1]["failed_phase"]
    assert wait[-1]["timed_out"] is False      # the stall ended it, not the 900 s ready timeout
    observe("%s (the play took %.0f s)" % (failures[-1]["res"]["msg"][:240], took))


def _node_state(lab, host):
    """What a deployment would change on a node, as text (units, their runs, files we write, containers)."""
    probe = ("ls -l --time-style=+%s /etc/systemd/system | grep -i sparkfleet; ls -lA --time-style=+%s /etc/sparkfleet;"
             " docker ps -a --no-trunc --format '{{.Names}} {{.ID}}';"
             " systemctl show -p InvocationID --value sparkfleet-ray sparkfleet-vllm")
    return lab.host_exec(host, "sh", "-c", probe).stdout


@pytest.mark.fault(name="worker unreachable at start (its sshd stopped)",
                   expected="preflight fails naming the host; nothing changed on the head")
def test_a_worker_that_ssh_cannot_reach_fails_preflight_naming_it(lab, serving, tmp_path, observe):
    worker = lab.hosts[-1]
    before = _node_state(lab, HEAD)
    stopped = lab.host_exec(worker, "systemctl", "stop", "ssh.socket", "ssh.service")
    assert stopped.returncode == 0, stopped.stderr
    try:
        r, failures = lab.play(tmp_path, "site.yml")
        assert r["status"] == "failed" and failures
        msgs = lab.messages(failures)
        assert "cannot reach %s (%s)" % (worker, lab.fabric_ip(worker)) in msgs, msgs[-2000:]
        assert "port 22" in msgs
        observe(msgs[msgs.index("cannot reach"):][:240])
        # Only preflight ran: the head is as it was.
        assert lab.changed_total(r) == 0
        assert _node_state(lab, HEAD) == before
    finally:
        lab.host_exec(worker, "systemctl", "start", "ssh.socket", "ssh.service")
    assert lab.completion()[0] == 200


# CI: stop.yml stops the same units the same way (systemctl stop) and test_site.py::test_stop_keeps_the_model_and_
# stops_our_services asserts each inactive, not failed; this stop and the restart after it (~40 s of CI): long.
@pytest.mark.long
@pytest.mark.fault(name="plain stop of our units (systemctl stop)",
                   expected="every unit inactive, none failed (Ray's exit 1 on SIGTERM, docker's 143 are a stop)")
def test_a_plain_stop_leaves_the_units_inactive_not_failed(lab, serving, observe):
    lab.host_exec(HEAD, "systemctl", "stop", "sparkfleet-vllm")
    for host in reversed(lab.hosts):
        lab.host_exec(host, "systemctl", "stop", "sparkfleet-ray", timeout=120)
    try:
        states = {}
        for h in lab.hosts:
            for u in ("sparkfleet-ray", "sparkfleet-vllm") if h == HEAD else ("sparkfleet-ray",):
                out = lab.systemctl(h, "show", "-p", "ActiveState", "-p", "Result", "-p", "ExecMainStatus", u)
                states[(h, u)] = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        observe("; ".join("%s %s: %s" % (h, u, " ".join("%s=%s" % kv for kv in sorted(p.items())))
                          for (h, u), p in states.items()))
        for (host, unit), props in states.items():
            assert props["ActiveState"] == "inactive", (host, unit, props)
    finally:
        for host in lab.hosts:
            lab.host_exec(host, "systemctl", "start", "--no-block", "sparkfleet-ray")
        lab.host_exec(HEAD, "systemctl", "start", "--no-block", "sparkfleet-vllm")
        lab.wait_serving(300)


@pytest.mark.long
@pytest.mark.fault(name="worker's Ray dies while serving (its raylet killed)",
                   expected="healthcheck fails on a real completion naming the worker's Ray; status.yml names the"
                            " node's Ray (down, or restarted by its unit); a re-run of site.yml restores serving")
def test_worker_ray_dying_while_serving_is_named_and_a_rerun_restores(lab, serving, tmp_path, observe):
    worker = lab.hosts[-1]
    assert lab.completion()[0] == 200
    pids = lab.host_exec(worker, "pgrep", "-x", "raylet").stdout.split()
    assert len(pids) == 1, pids
    assert lab.host_exec(worker, "kill", "-9", pids[0]).returncode == 0
    r, failures = lab.play(tmp_path / "healthcheck", "playbooks/healthcheck.yml")
    assert r["status"] == "failed" and failures
    msg = failures[-1]["res"]["msg"]
    assert msg.startswith("not serving: Send a real completion") or msg.startswith(
        "not serving: Check the completion returned text"), msg
    assert "%s: Ray (sparkfleet-ray)" % worker in msg, msg
    observe(msg[:300])
    # Day two: the worker's unit restarts its Ray by itself (ray start --block exits with its raylet), so by the
    # time status.yml runs the worker may be back: status names its Ray either as down or in the restarts it lists.
    r, failures = lab.play(tmp_path / "status", "playbooks/status.yml")
    seen = json.dumps([e.get("res") for e in r["events"] if e["host"] == HEAD])
    assert "%s: Ray (sparkfleet-ray)" % worker in seen or "%s: sparkfleet-ray stopped" % worker in seen, seen[-3000:]
    if r["status"] == "successful":  # exit 0 only while a request is answered
        assert lab.serves(), seen[-3000:]
    lab.site(tmp_path / "site")
    assert lab.completion()[0] == 200


@pytest.mark.long
@pytest.mark.fault(name="fabric link of the worker down mid-run (after preflight, before the image transfer and ray_cluster)",
                   expected="clear failure naming the node, its fabric address and the interface; after the link"
                            " returns a re-run completes")
def test_fabric_down_mid_run_is_named_and_a_rerun_completes(lab, serving, tmp_path, observe):
    worker = lab.hosts[-1]
    lab.labctl("break", "fabric-down", worker)
    try:
        # The run's preflight passed before the cable was pulled: the rest of site.yml meets the dead link.
        r, failures = lab.play(tmp_path / "broken", "site.yml",
                               cmdline="--tags ray_cluster,vllm_serve,healthcheck --skip-tags preflight")
        assert r["status"] == "failed" and failures
        msgs = lab.messages(failures)
        ip = lab.fabric_ip(worker)
        assert "cannot reach %s (%s) over the fabric: interface enp1s0f1np1" % (worker, ip) in msgs, msgs[-2000:]
        observe(msgs[msgs.index("cannot reach"):][:240])
    finally:
        lab.labctl("fix", "fabric-down", worker, check=False)
    lab.site(tmp_path / "fixed")
    assert lab.completion()[0] == 200


@pytest.mark.long
@pytest.mark.fault(name="the worker's model directory deleted and created again while Ray runs (rm -r, then a re-run)",
                   expected="model_sync re-sends the model, Ray on that worker restarts onto the new directory (its"
                            " container held the deleted one), the engine restarts and the API completes")
def test_a_recreated_model_directory_on_a_worker_is_mounted_again(lab, serving, tmp_path, observe):
    worker = lab.hosts[-1]
    model_dir = "/models/sparklab-tiny"
    before = _active_since(lab, worker, "sparkfleet-ray")
    assert lab.host_exec(worker, "sh", "-c", "rm -rf %s && mkdir %s" % (model_dir, model_dir)).returncode == 0
    seen = lab.host_exec(worker, "docker", "exec", "sparkfleet-ray", "sh", "-c", "ls -A %s | wc -l" % model_dir)
    assert seen.stdout.strip() == "0", seen  # the running container still holds the removed directory
    r = lab.site(tmp_path)
    # node_facts reads every mount asked (CONTAINER:PATH) before the role decides to restart Ray.
    probes = [m for e in r["events"] if e["host"] == worker and e["event"] == "runner_on_ok"
              for m in ((e.get("res") or {}).get("mounts") or {}).values() if m.get("stale") is True]
    assert probes, "no stale mount reported for %s" % worker
    assert probes[0]["state"] == "removed", probes[0]
    observe("stale: " + probes[0]["msg"][:200])
    assert _active_since(lab, worker, "sparkfleet-ray") != before
    seen = lab.host_exec(worker, "docker", "exec", "sparkfleet-ray", "sh", "-c", "ls %s | grep -c safetensors" % model_dir)
    assert int(seen.stdout.strip() or 0) > 0, seen
    assert lab.completion()[0] == 200


def _active_since(lab, host, unit):
    out = lab.systemctl(host, "show", "--timestamp=unix", "-p", "ActiveEnterTimestamp", "--value", unit)
    return float(out.lstrip("@")) if out.startswith("@") else None


@pytest.mark.long
@pytest.mark.fault(name="reboot of the worker, then of the head (disk kept)",
                   expected="units come back in order, the API answers, no manual step")
def test_reboots_of_worker_then_head_heal_without_a_manual_step(lab, serving, observe):
    seen = []
    for host in (lab.hosts[-1], HEAD):
        t0 = time.time()
        lab.labctl("reboot", host, timeout=600)
        lab.wait_serving(420)
        seen.append("%s rebooted: API answers %.0f s after the reboot began" % (host, time.time() - t0))
        # In order on the head: Ray before vLLM; the worker's Ray up before vLLM loaded its ranks.
        ray, vllm = _active_since(lab, HEAD, "sparkfleet-ray"), _active_since(lab, HEAD, "sparkfleet-vllm")
        assert ray is not None and vllm is not None and ray <= vllm, (ray, vllm)
        assert _active_since(lab, lab.hosts[-1], "sparkfleet-ray") <= vllm
        for h in lab.hosts:
            assert lab.systemctl(h, "is-active", "sparkfleet-ray") == "active"
    observe("; ".join(seen))
