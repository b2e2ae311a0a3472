"""ray_cluster_check on the lab: a Ray cluster pinned to the fabric passes, the mixed-IP trap fails.

Run as root: lab/labctl ctl -- .venv/bin/pytest tests/integration/test_ray_check.py -m lab
Ray comes from the shared venv of lab/ray-version (lab/build-rayvenv.sh), started as user spark over ssh on each host,
and is always stopped afterwards. The module runs on spark-1 through Ansible, as the role runs it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

# The shared venv of the lab's Ray version (lab/ray-version, the Sparks' image's Ray): lab/build-rayvenv.sh builds it.
VENV = Path("/var/tmp/sparklab/share/rayvenv-%s" % (Path(__file__).resolve().parents[2] / "lab" / "ray-version")
            .read_text().strip())
RAY = VENV / "bin" / "ray"
PY = VENV / "bin" / "python"
# Own GCS port, worker port range, agent port and temp dir: this cluster can run next to one the
# roles deployed (in containers, as root) without touching it. Ours runs as user spark.
PORT = 6390
TEMP = "/tmp/sfl-raycheck"
COMMON = ("--num-cpus 2 --num-gpus 1 --disable-usage-stats --object-store-memory 300000000 "  # small: shared RAM
          "--temp-dir %s --min-worker-port 20002 --max-worker-port 20999 --dashboard-agent-listen-port 52465"
          % TEMP)
HEAD_ONLY = "--include-dashboard=false --ray-client-server-port 10101"
ENV = "RAY_USAGE_STATS_ENABLED=0"



class RayLab:
    def __init__(self, lab, d):
        self.lab, self.dir = lab, d
        self.head, self.workers = lab.hosts[0], lab.hosts[1:]
        self.started = []

    def ssh(self, host, command, timeout=120):
        p = self.lab.ssh(host, command, timeout=timeout)
        return p

    def start(self, pin_head=True):
        self.stop()
        head_ip = self.lab.fabric_ip(self.head)
        pin = "--node-ip-address %s" % head_ip if pin_head else ""
        self.started.append(self.head)
        p = self.ssh(self.head, "%s %s start --head --port %d %s %s %s"
                     % (ENV, RAY, PORT, HEAD_ONLY, pin, COMMON))
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        for w in self.workers:
            self.started.append(w)
            p = self.ssh(w, "%s %s start --address %s:%d --node-ip-address %s %s"
                         % (ENV, RAY, head_ip, PORT, self.lab.fabric_ip(w), COMMON))
            assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        self.wait_nodes(1 + len(self.workers))

    def wait_nodes(self, count, timeout=60):
        # `ray status` counts what the GCS sees; it passes in the mixed-IP trap too.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.ssh(self.head, "%s status --address %s:%d" % (RAY, self.lab.fabric_ip(self.head), PORT), timeout=60)
            if p.stdout.count("node_") >= count:
                return p.stdout
            time.sleep(2)
        raise AssertionError("Ray did not show %d nodes within %d s:\n%s%s" % (count, timeout, p.stdout, p.stderr))

    def stop(self):
        for h in reversed(self.started):
            # Stops only Ray processes of user spark on that host (the roles' Ray runs as root).
            self.ssh(h, "%s stop --force" % RAY, timeout=120)
        self.started = []

    def check(self, expected=None, probe_timeout=10, fail_on_mismatch=True, check_mode=False):
        if expected is None:
            expected = [{"host": h, "ip": self.lab.fabric_ip(h)} for h in self.lab.hosts]
        playbook = self.lab.repo / "tests" / "integration" / "playbooks" / "ray_check.yml"
        r = self.lab.ansible_run(private_data_dir=str(self.dir), playbook=str(playbook),
                                 inventory=str(self.lab.inventory), cmdline="--check" if check_mode else "",
                                 extravars={"expected": expected, "probe_timeout": probe_timeout, "ray_python": str(PY),
                                            "address": "%s:%d" % (self.lab.fabric_ip(self.head), PORT),
                                            "fail_on_mismatch": fail_on_mismatch},
                                 envvars={"ANSIBLE_CONFIG": str(self.lab.repo / "ansible.cfg")})
        for ev in r["events"]:
            res = ev.get("res") or {}
            if ev["host"] == self.head and ("probes" in res or ev["event"] == "runner_on_failed"):
                res = dict(res, _event=ev["event"])
                return r, res
        raise AssertionError("no ray_cluster_check result in %s" % json.dumps(r)[-3000:])


@pytest.fixture(scope="module")
def raylab(lab, tmp_path_factory):
    if not (VENV / ".complete").exists():
        pytest.skip("no Ray venv: run lab/build-rayvenv.sh first")
    busy = [h for h in lab.hosts if lab.ssh(h, "pgrep -u spark -x raylet").returncode == 0]
    if busy:
        pytest.skip("Ray of user spark already runs on %s (another test?); not touching it" % ", ".join(busy))
    d = tmp_path_factory.mktemp("ray_check")
    rl = RayLab(lab, d)
    yield rl
    rl.stop()


def test_pinned_cluster_passes_and_moves_objects_both_ways(raylab):
    raylab.start(pin_head=True)
    r, res = raylab.check()
    assert r["status"] == "successful", res.get("msg")
    assert res["ok"] is True and res["changed"] is False
    assert res["mismatched"] == [] and res["missing"] == [] and res["extra"] == []
    assert sorted((n["host"], n["ip"]) for n in res["nodes"]) == sorted(
        (h, raylab.lab.fabric_ip(h)) for h in raylab.lab.hosts)
    assert sum(n["gpus"] for n in res["nodes"]) == len(raylab.lab.hosts)
    assert [p["host"] for p in res["probes"]] == raylab.workers
    for p in res["probes"]:
        assert p["ok"] is True and p["to_worker_s"] > 0 and p["from_worker_s"] > 0
    print(res["summary"])

    # Read-only: check mode runs the same check and reports the same.
    r, again = raylab.check(check_mode=True)
    assert r["status"] == "successful" and again["ok"] is True and again["changed"] is False


def test_wrong_expectation_is_reported_not_guessed(raylab):
    # Same healthy cluster, but the inventory claims spark-2 has another fabric IP.
    if not raylab.started:
        raylab.start(pin_head=True)
    expected = [{"host": raylab.head, "ip": raylab.lab.fabric_ip(raylab.head)}, {"host": "spark-2", "ip": "10.99.1.99"}]
    r, res = raylab.check(expected=expected, fail_on_mismatch=False)
    assert r["status"] == "successful" and res["ok"] is False
    assert res["mismatched"] == [{"host": "spark-2", "registered_ip": "10.99.1.12", "expected_ip": "10.99.1.99",
                                  "node_id": res["mismatched"][0]["node_id"]}]
    assert res["probes"][0]["ok"] is True  # the objects still move: only the inventory is wrong


# CI: the same trap on a real capture, tests/unit/plugins/modules/test_ray_cluster_check.py::
# test_real_unpinned_head_trap_fails_with_both_ips_and_bounded_fetch; real Ray here (a second start): long.
@pytest.mark.long
def test_unpinned_head_fails_naming_host_and_both_ips(raylab):
    # The seeds' trap: the head registers its management IP (default route), the worker is pinned.
    raylab.start(pin_head=False)
    start = time.monotonic()
    r, res = raylab.check(probe_timeout=10)
    took = time.monotonic() - start
    assert r["status"] == "failed" and res["_event"] == "runner_on_failed", res.get("msg")
    assert res["ok"] is False and res["changed"] is False
    assert [(m["host"], m["registered_ip"], m["expected_ip"]) for m in res["mismatched"]] == [
        ("spark-1", "10.99.0.11", "10.99.1.11")]
    assert "spark-1 registered with Ray as 10.99.0.11, expected its fabric IP 10.99.1.11" in res["msg"]
    assert "--node-ip-address 10.99.1.11" in res["hint"]
    # Counting nodes passes; moving an object does not, and the wait is bounded.
    assert len([n for n in res["nodes"] if n["alive"]]) == len(raylab.lab.hosts)
    (probe,) = [p for p in res["probes"] if p["host"] == "spark-2"]
    assert probe["ok"] is False and "spark-2 (registered 10.99.1.12)" in probe["error"]
    assert "timed out after 10 s" in probe["error"]
    print("unpinned head: failed in %.0f s: %s" % (took, res["msg"]))
