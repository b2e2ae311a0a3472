"""From the operators' old stack (issue 16): the lab is staged with it by default (lab/stage.sh, lab/oldstack/).

The old deployment on every host (DOMAIN 10): units vllm-cluster, vllm-embeddings, vllm-reranker, vllm-proxy enabled
at boot; containers vllm_node (a real Ray head on 6379 and an API on 8000 on the head, a real Ray worker joined to it
on the workers), vllm_embeddings, reranker with restart policies, all holding /dev/nvidia0; a proxy on 4000. On the
code before issue 16, site.yml stopped in preflight ("port 6379 taken by something that is not ours"), gpu_cleanup
left containers that did not hold the GPU with their restart policies, and a worker joined whatever Ray head answered.

CI-cheap tests use the `serving` fixture (on a fresh CI lab the first deployment is the one from the old stack, since
the default staging includes it); the whole path from a freshly staged old stack, with both hosts rebooted after, is
`long` (scripts/faults.sh).
"""

from __future__ import annotations

import json
import re
import time

import pytest

pytestmark = pytest.mark.lab

HEAD = "spark-1"
OLD_IMAGE = "sparklab/vllm-node:glm47-flash-2025.11"
OLD_UNITS = {"spark-1": ["vllm-cluster", "vllm-embeddings", "vllm-reranker", "vllm-proxy"]}
OLD_CONTAINERS = {"spark-1": ["vllm_node", "vllm_embeddings", "reranker"]}
GUARD = "/usr/local/sbin/sparkfleet-ray-guard"
MUST = "/usr/local/sbin/sparkfleet-must"   # the units run every check through it (issue 40.4)
IDENTITY = "sparkfleet:spark-1@10.99.1.11:6379"


def old_units(host):
    return OLD_UNITS.get(host, ["vllm-cluster"])


def old_containers(host):
    return OLD_CONTAINERS.get(host, ["vllm_node"])


def container_state(lab, host, name):
    """'running restart-policy' of a container, or '' when it does not exist."""
    return lab.host_exec(host, "docker", "inspect", "-f", "{{.State.Status}} {{.HostConfig.RestartPolicy.Name}}",
                         name).stdout.strip()


def restarted_by_systemd(lab, host, unit):
    """How often systemd restarted the unit by itself since it was last started by hand or at boot (NRestarts; an
    explicit start resets it). gpu_release queues the units' stops before it stops their containers: a foreground
    `docker run` under Restart=always whose container ended before its unit's stop was queued would be restarted (and
    stopped again), which this counts. (The journal would not do: a lab host's journal outlives its re-staging.)"""
    return lab.systemctl(host, "show", "-p", "NRestarts", "--value", unit + ".service")


def assert_old_stack_gone_and_kept(lab):
    """Every old unit stopped and disabled, never restarted by systemd on the way, every old container stopped
    without a restart policy; nothing of it deleted: unit files, containers, the image and the launcher stay on
    disk."""
    for host in lab.hosts:
        for unit in old_units(host):
            assert lab.systemctl(host, "is-active", unit) != "active", (host, unit)
            assert lab.systemctl(host, "is-enabled", unit) == "disabled", (host, unit)
            assert restarted_by_systemd(lab, host, unit) == "0", (host, unit)
            assert lab.host_exec(host, "test", "-f", "/etc/systemd/system/%s.service" % unit).returncode == 0
        for name in old_containers(host):
            state = container_state(lab, host, name)
            assert state.split() and state.split()[0] != "running" and state.split()[1] == "no", (host, name, state)
        assert lab.host_exec(host, "docker", "image", "inspect", OLD_IMAGE).returncode == 0, host
        assert lab.host_exec(host, "test", "-x", "/opt/oldstack/launch-cluster.sh").returncode == 0, host
    for port in (8000, 8001, 8002, 4000):  # the old APIs and the proxy answer no more
        assert lab.sh(HEAD, "bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d'" % port).returncode != 0, port


def reboot(lab, host, limit=600):
    """labctl reboot HOST, then wait (bounded) until its sshd runs: under load labctl's own 60 s bound on systemd
    may pass before the host has finished booting."""
    lab.labctl("reboot", host, timeout=900, check=False)
    t0 = time.time()
    while time.time() - t0 < limit:
        if lab.systemctl(host, "is-active", "ssh") == "active":
            return
        time.sleep(3)
    pytest.fail("%s did not come back within %d s of its reboot" % (host, limit))


def staged_old_stack(lab):
    return all(lab.host_exec(h, "test", "-d", "/opt/oldstack").returncode == 0 for h in lab.hosts)


def test_a_deployment_from_the_old_stack_left_it_stopped_disabled_and_on_disk(lab, serving):
    """The lab's first deployment started from the old stack (the default staging): it is gone and kept."""
    if not staged_old_stack(lab):
        pytest.skip("this lab was staged without the old stack (lab/stage.sh --clean)")
    assert_old_stack_gone_and_kept(lab)
    assert lab.serves()


LEGACY_UNIT = """[Unit]
Description=An API the deployment does not know (not stale, not ours)
Requires=docker.service
After=docker.service
[Service]
ExecStartPre=-/usr/bin/docker rm -f legacy_api
ExecStart=/usr/bin/docker run --name legacy_api --restart always --network host --entrypoint python3 %s -m http.server %d
Restart=always
[Install]
WantedBy=multi-user.target
"""


@pytest.mark.long  # ~140 s (two runs and a foreign unit's restart loop): scripts/faults.sh runs it
@pytest.mark.fault(name="a port we need held by a container of a unit that is neither stale nor ours",
                   expected="preflight refuses before anything changes, naming port, pid, container, unit and the "
                            "variable that makes it stale; named there, it is planned and gpu_cleanup stops it")
def test_a_foreign_port_holder_is_refused_then_planned_and_stopped_once_named_stale(lab, serving, tmp_path, observe):
    port = 30001  # the API port of this run (sparkfleet_api_port): ours serves on 30000 meanwhile
    image = lab.host_exec(HEAD, "docker", "inspect", "-f", "{{.Config.Image}}", "sparkfleet-ray").stdout.strip()
    lab.sh(HEAD, "cat > /etc/systemd/system/legacy-api.service <<'EOF'\n%sEOF\nsystemctl daemon-reload && "
                 "systemctl enable --now legacy-api" % (LEGACY_UNIT % (image, port)))
    try:
        for _ in range(60):
            if lab.sh(HEAD, "bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d'" % port).returncode == 0:
                break
            time.sleep(1)
        extra = {"sparkfleet_api_port": port}
        ray_before = lab.systemctl(HEAD, "show", "-p", "InvocationID", "--value", "sparkfleet-ray")
        r, failures = lab.play(tmp_path / "refused", "playbooks/preflight.yml", extravars=extra)
        assert r["status"] == "failed" and lab.changed_total(r) == 0
        msg = lab.messages(failures)
        found = re.search(r"port %d \(sparkfleet_api_port\) on [0-9.:]+: pid \d+ python3 in container legacy_api, which the GPU "
                          r"cleanup will not stop: add legacy_api to "
                          r"gpu_cleanup_stale_containers \(or legacy-api.service, which starts it, to "
                          r"gpu_cleanup_stale_units\), or move ours \(sparkfleet_api_port\)" % port, msg)
        assert found, msg[-2000:]
        observe(found.group(0))
        assert container_state(lab, HEAD, "legacy_api") == "running always"

        # Named stale: the plan lists it (container, unit, pid, port) and the run goes on (--check shows the same
        # plan); gpu_cleanup stops it.
        extra["gpu_cleanup_stale_containers"] = ["legacy_*"]
        r, failures = lab.play(tmp_path / "planned", "playbooks/preflight.yml", cmdline="--check", extravars=extra)
        assert r["status"] == "successful" and not failures, lab.messages(failures)[-2000:]
        plans = [e["res"]["will_stop"] for e in r["events"] if e["host"] == HEAD and "will_stop" in (e["res"] or {})]
        assert any(re.search(r"container legacy_api \(named in gpu_cleanup_stale_containers; started by "
                             r"legacy-api.service; stopped, restart policy always removed\): port %d "
                             r"\(sparkfleet_api_port\) on [0-9.:]+: pid \d+ python3 in container legacy_api" % port, line)
                   for line in plans[-1]), plans
        assert "unit legacy-api.service (starts container legacy_api; stopped and disabled)" in plans[-1], plans[-1]
        r, failures = lab.play(tmp_path / "cleanup", "playbooks/gpu_cleanup.yml", extravars=extra)
        assert r["status"] == "successful" and not failures, lab.messages(failures)[-2000:]
        assert container_state(lab, HEAD, "legacy_api") in ("exited no", "created no")
        assert lab.systemctl(HEAD, "is-enabled", "legacy-api") == "disabled"
        assert lab.systemctl(HEAD, "is-active", "legacy-api") != "active"
        # ours untouched (a second run changing nothing: test_site's re-run, with the old stack's remains)
        assert lab.systemctl(HEAD, "show", "-p", "InvocationID", "--value", "sparkfleet-ray") == ray_before
    finally:
        lab.sh(HEAD, "systemctl disable --now legacy-api; docker rm -f legacy_api; "
                     "rm -f /etc/systemd/system/legacy-api.service; systemctl daemon-reload")
        # The cleanup run above kept legacy-api.service and legacy_api in gpu_cleanup_record and in the unit that stops
        # the stale stack before our Ray starts (issue 45.5): a run with the defaults writes both again without them,
        # so the next site.yml (test_site's re-run) changes nothing.
        lab.play(tmp_path / "record", "playbooks/gpu_cleanup.yml")
        assert "legacy" not in lab.host_exec(HEAD, "cat", "/var/lib/sparkfleet/stale-stack.json").stdout


@pytest.mark.fault(name="a Ray head that is not ours answers where a worker joins (an old vllm_node's head)",
                   expected="the worker's check refuses it (no cluster identity), accepts ours; the head's check "
                            "names the container holding the port")
def test_a_worker_joins_only_a_ray_head_that_carries_our_identity(lab, serving, observe):
    worker = lab.hosts[-1]
    image = lab.host_exec(HEAD, "docker", "inspect", "-f", "{{.Config.Image}}", "sparkfleet-ray").stdout.strip()
    started = lab.host_exec(HEAD, "docker", "run", "-d", "--name", "foreign_ray", "--network", "host", "--entrypoint",
                            "ray", image, "start", "--head", "--block", "--port", "6390", "--node-ip-address",
                            "10.99.1.11", "--num-cpus", "1", "--include-dashboard=false", "--disable-usage-stats",
                            "--ray-client-server-port", "20091", timeout=120)
    assert started.returncode == 0, started.stderr
    try:
        for _ in range(180):
            if lab.sh(HEAD, "bash -c 'exec 3<>/dev/tcp/10.99.1.11/6390'").returncode == 0:
                break
            time.sleep(1)
        else:
            pytest.fail("the foreign Ray head never answered: %s" % lab.host_exec(HEAD, "docker", "logs", "--tail", "5",
                                                                               "foreign_ray").stderr)
        env = "/etc/sparkfleet/ray-client.env"
        # the worker's guard probes with the image by the worker's own ID of it (its unit names it so; a loaded image
        # may have another local ID than the head's)
        image = lab.host_exec(worker, "docker", "inspect", "-f", "{{.Config.Image}}", "sparkfleet-ray").stdout.strip()
        foreign = lab.host_exec(worker, GUARD, "check", image, env, "10.99.1.11:6390", IDENTITY, "10", timeout=180)
        # 3, not 1: the Ray unit counts exit status 1 as success (SuccessExitStatus) for its ExecStartPre/Post too
        assert foreign.returncode == 3, (foreign.stdout, foreign.stderr)
        assert "the Ray head at 10.99.1.11:6390 is not ours" in foreign.stderr and "not joining it" in foreign.stderr
        assert "it answers without our cluster identity" in foreign.stderr, foreign.stderr  # it did answer
        observe(foreign.stderr.strip().splitlines()[-1])
        ours = lab.host_exec(worker, GUARD, "check", image, env, "10.99.1.11:6379", IDENTITY, "30", timeout=180)
        assert ours.returncode == 0, ours.stderr
        held = lab.host_exec(HEAD, GUARD, "port", "6390")
        assert held.returncode == 3 and "port 6390 on this node is taken by gcs_server" in held.stderr, held.stderr
        assert "in container foreign_ray" in held.stderr
        assert lab.host_exec(HEAD, GUARD, "port", "6391").returncode == 0
        # the units carry the checks: the worker's before it joins, the head's before it starts
        unit = lab.host_exec(worker, "systemctl", "cat", "sparkfleet-ray").stdout
        assert "ExecStartPre=%s %s check " % (MUST, GUARD) in unit and "ExecStartPost=%s %s joined " % (MUST, GUARD) in unit
        unit = lab.host_exec(HEAD, "systemctl", "cat", "sparkfleet-ray").stdout
        assert "ExecStartPre=%s %s port 6379" % (MUST, GUARD) in unit and "ExecStartPost=%s %s mark " % (MUST, GUARD) in unit
    finally:
        lab.host_exec(HEAD, "docker", "rm", "-f", "foreign_ray", timeout=120)


@pytest.mark.long
@pytest.mark.fault(name="the operators' old stack, freshly staged, then both hosts rebooted after the deployment",
                   expected="site.yml plans and stops it, serves a completion; after the reboots the old stack "
                            "stays gone (nothing deleted) and our units serve")
def test_from_the_old_stack_to_a_completion_and_through_a_reboot_of_both_hosts(lab, tmp_path, observe):
    if any(lab.systemctl(h, "is-active", "sparkfleet-ray") == "active" for h in lab.hosts):
        r, failures = lab.play(tmp_path / "stop", "playbooks/stop.yml")
        assert r["status"] == "successful" and not failures
    lab.stage()  # what scripts/demo.sh runs: the old stack on every host, started
    hip = lab.fabric_ip(HEAD)
    nodes = lab.host_exec(HEAD, "docker", "exec", "vllm_node", "ray", "status", "--address", hip + ":6379",
                          timeout=120).stdout
    assert len(re.findall(r" node_", nodes)) == len(lab.hosts), nodes  # every worker joined the OLD head
    for host in lab.hosts:
        for name in old_containers(host):
            assert container_state(lab, host, name).startswith("running"), (host, name)
    t0 = time.time()
    r = lab.site(tmp_path / "site")
    took = time.time() - t0
    code, out = lab.completion("From the old stack", max_tokens=4)
    assert code == 200 and out["choices"][0]["text"].strip()
    assert_old_stack_gone_and_kept(lab)
    plans = [line for e in r["events"] for line in ((e.get("res") or {}).get("will_stop") or [])]
    assert any("container vllm_node" in p and "port 6379 (sparkfleet_ray_port)" in p for p in plans), plans
    # What the run stops first is not named as a service our Ray table would close (it was, before the plan came
    # first); its listeners are in the host firewall check's stale_listeners.
    closes = [str(e["res"]["msg"]) for e in r["events"] if "will accept new connections" in str((e.get("res") or {}).get("msg"))]
    assert not [m for m in closes if "vllm_node" in m], closes
    stale = [line for e in r["events"] for line in ((e.get("res") or {}).get("stale_listeners") or [])]
    assert any("port 6379 " in line and "in container vllm_node" in line for line in stale), stale

    for host in lab.hosts:
        reboot(lab, host)
    back = lab.wait_serving(600)
    assert_old_stack_gone_and_kept(lab)
    held = lab.sh(HEAD, "ss -Hltnp 'sport = :6379'").stdout
    assert "gcs_server" in held
    code = ("import json, ray; ray.init(address='auto', log_to_driver=False); "
            "print(json.dumps(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])))")
    p = lab.host_exec(HEAD, "docker", "exec", "sparkfleet-ray", "python3", "-c", code, timeout=120)
    assert p.returncode == 0 and p.stdout.strip().splitlines()[-1] == str(
        sorted(lab.fabric_ip(h) for h in lab.hosts)).replace("'", '"'), p.stdout
    observe("site.yml from the old stack in %.0f s; serving again %.0f s after both reboots, old stack still "
            "stopped and disabled" % (took, back))


def old_cluster_nodes(lab):
    """(address, node manager port) of every alive node of the Ray cluster the old vllm_node heads, or None."""
    code = ("import json, ray; ray.init(address='auto', log_to_driver=False, logging_level='ERROR'); "
            "print(json.dumps(sorted([n['NodeManagerAddress'], n['NodeManagerPort']] for n in ray.nodes() "
            "if n['Alive'])))")
    p = lab.host_exec(HEAD, "docker", "exec", "vllm_node", "python3", "-c", code, timeout=120)
    if p.returncode != 0:
        return None
    return [tuple(n) for n in json.loads(p.stdout.strip().splitlines()[-1])]


@pytest.mark.long
@pytest.mark.fault(name="both stacks enabled at boot (the old stack re-enabled by hand), both hosts rebooted",
                   expected="our worker never joins the old Ray head; with sparkfleet-stale-stop (issue 45.5) ours wins, "
                            "the old stack stopped at boot; without it our head's journal names what holds 6379; "
                            "site.yml stops the old stack again and serves")
def test_with_both_stacks_enabled_at_boot_our_worker_never_joins_the_old_head(lab, serving, tmp_path, observe):
    """Issue 16, measured before: the old vllm_node took 6379 first and OUR worker joined the OLD head."""
    if not staged_old_stack(lab):
        pytest.skip("this lab was staged without the old stack (lab/stage.sh --clean)")
    worker = lab.hosts[-1]
    # Issue 45.5: where gpu_cleanup installed sparkfleet-stale-stop (its record names vllm-cluster), the race is decided
    # for us: the old unit and vllm_node are stopped before our Ray starts, on every host.
    guarded = all("vllm-cluster.service" in lab.host_exec(h, "systemctl", "cat", "sparkfleet-stale-stop").stdout
                  for h in lab.hosts)
    try:
        for host in lab.hosts:  # what a person re-enabling the old deployment does
            lab.sh(host, "systemctl enable vllm-cluster; docker update --restart unless-stopped vllm_node")
        for host in lab.hosts:
            reboot(lab, host)
        holder = ""
        for _ in range(120):
            holder = lab.sh(HEAD, "ss -Hltnp 'sport = :6379'").stdout
            if "gcs_server" in holder:
                break
            time.sleep(2)
        pid = re.search(r"pid=(\d+)", holder).group(1)
        cid = re.search(r"docker-([0-9a-f]{64})\.scope", lab.host_exec(HEAD, "cat", "/proc/%s/cgroup" % pid).stdout)
        owner = lab.host_exec(HEAD, "docker", "inspect", "-f", "{{.Name}}", cid.group(1)).stdout.strip().lstrip("/")
        assert not (guarded and owner == "vllm_node"), "the old head won 6379 although sparkfleet-stale-stop guards it"
        if owner == "vllm_node":  # the old head won the port: ours must say so, and our worker must stay out
            ours_seen = []
            for _ in range(20):  # our worker's unit retries meanwhile (RestartSec, backoff)
                nodes = old_cluster_nodes(lab) or []
                ours_seen += [n for n in nodes if n[0] == lab.fabric_ip(worker) and n[1] == 6380]
                time.sleep(6)
            assert not ours_seen, "our worker (node manager port 6380) joined the old head: %s" % ours_seen
            head_log = lab.host_exec(HEAD, "journalctl", "-u", "sparkfleet-ray", "-b", "--no-pager", "-o", "cat").stdout
            guard = [ln for ln in head_log.splitlines() if "sparkfleet-ray-guard" in ln or "sparkfleet-ray.service" in ln]
            assert "port 6379 on this node is taken by gcs_server (pid %s) in container vllm_node" % pid in head_log, \
                guard[-12:]
            worker_log = lab.host_exec(worker, "journalctl", "-u", "sparkfleet-ray", "-b", "--no-pager",
                                       "-o", "cat").stdout
            assert "the Ray head at %s:6379 is not ours" % lab.fabric_ip(HEAD) in worker_log, worker_log[-2000:]
            observe("old head won 6379; our head: %s" % [ln for ln in head_log.splitlines() if "taken by" in ln][-1])
        else:  # ours won: the old head cannot bind, and our cluster forms as usual
            assert owner == "sparkfleet-ray", owner
            lab.wait_serving(600)
            if guarded:  # stopped at boot, not merely kept off the port
                for host in lab.hosts:
                    state = container_state(lab, host, "vllm_node").split()
                    assert state and state[0] != "running" and state[1] == "no", (host, state)
                    assert lab.systemctl(host, "is-active", "vllm-cluster") != "active", host
            observe("our head won 6379; %s" % ("sparkfleet-stale-stop stopped the old stack before our Ray started"
                                                if guarded else "the old vllm_node could not bind it"))
    finally:
        r = lab.site(tmp_path / "site")  # the old stack stopped and disabled again; ours serves
        assert_old_stack_gone_and_kept(lab)
        assert lab.serves()
        plans = [line for e in r["events"] for line in ((e.get("res") or {}).get("will_stop") or [])]
        assert any("unit vllm-cluster.service" in p for p in plans), plans
