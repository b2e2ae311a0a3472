"""Security on the lab (issue 10 point 9, issue 11 "Security"): what the management side can reach, where secrets go.

One deployment for the module (site.yml at -v, its whole output kept), then read-only checks, then one fault (nft
missing on a worker: refused in preflight, nothing changed); the lab is left serving. The API's refusal of a request
without the key is tests/integration/test_site.py::test_api_key_is_enforced; the firewall's removal by stop.yml and its
return at the unit's start are test_site.py's test_stop_keeps_the_model_and_stops_our_services and
test_the_unit_restores_the_firewall_before_ray_starts.
"""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.lab

HEAD = "spark-1"
MGMT_IP = "10.99.0.11"
API_PORT = 30000
RAY_TOKEN = "/etc/sparkfleet/ray-token"
TABLE = "inet sparkfleet"
# Ray's ports as ray_cluster pins them (GCS, node/object manager, agents, metrics, client server, dashboard) and the
# edges of its worker range: scanned even when nothing listens there at the moment.
RAY_PORTS = [6379, 6380, 6381, 6382, 6383, 6384, 6385, 8265, 10001, 10002, 19999]
# The monitoring role's ports (on by default, roles/monitoring/defaults/main.yml): they answer the head's management
# network by design (Prometheus, Alertmanager, the node exporter), and nothing else there does.
MONITORING_PORTS = [9090, 9093, 9100]
# Where a non-root user could find a secret we wrote: our trees, logs, temp and home directories.
READABLE_TREES = ["/etc", "/run", "/tmp", "/var/log", "/var/lib/sparkfleet", "/var/cache/sparkfleet", "/var/tmp",
                  "/home", "/usr/local", "/opt"]
# The files meant to hold a secret: root only.
SECRET_FILES = ["/etc/sparkfleet/ray-token", "/etc/sparkfleet/ray.env", "/etc/sparkfleet/ray-client.env",
                "/etc/sparkfleet/vllm.env", "/etc/sparkfleet/model-sync_ed25519", "/etc/sparkfleet/image-sync_ed25519"]

# Probe TCP ports from wherever it runs; prints "port state" per line (open / the error). Bounded: 2 s per port,
# 32 at a time.
PROBE = r"""
import concurrent.futures as cf, socket, sys
host, ports, src = sys.argv[1], [int(p) for p in sys.argv[2].split(",")], (sys.argv[3] if len(sys.argv) > 3 else None)
def probe(port):
    s = socket.socket(); s.settimeout(2)
    try:
        if src: s.bind((src, 0))
        s.connect((host, port)); return port, "open"
    except socket.timeout: return port, "timeout"
    except OSError as e: return port, (e.strerror or str(e)).replace(" ", "_")
    finally: s.close()
with cf.ThreadPoolExecutor(32) as ex:
    for port, state in ex.map(probe, ports): print(port, state)
"""


def listening_ports(lab, host):
    out = lab.host_exec(host, "ss", "-Hltn").stdout
    return sorted({int(line.split()[3].rsplit(":", 1)[1]) for line in out.splitlines() if line.strip()})


def scan(lab, where, target, ports, src=None):
    """{port: state} probed from the control namespace (where='ctl') or from a lab host."""
    argv = ["python3", "-c", PROBE, target, ",".join(str(p) for p in ports)] + ([src] if src else [])
    p = lab.ctl(*argv, timeout=120) if where == "ctl" else lab.host_exec(where, *argv, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return {int(port): state for port, state in (line.split() for line in p.stdout.splitlines())}


def secrets(lab):
    """The API key and the Ray token, as deployed (both must exist, or the checks below would prove nothing)."""
    key = lab.api_key()
    token = lab.host_exec(HEAD, "cat", RAY_TOKEN).stdout.strip()
    assert len(key) >= 16 and len(token) >= 16, "no API key or Ray token to look for"
    return {"API key": key, "Ray token": token}


def grep_as(lab, host, user, trees, found_secrets):
    """Files under trees that `user` can read and that hold a secret (patterns on stdin, never on a command line)."""
    present = [t for t in trees if lab.host_exec(host, "test", "-e", t).returncode == 0]
    # docker's own state is root-only; the lab's shared software (the runtime image tarball) holds no secret
    argv = ["grep", "-rlsF", "--exclude-dir=docker", "--exclude-dir=sparklab", "-f", "-", *present]
    if user != "root":
        argv = ["runuser", "-u", user, "--"] + argv
    p = lab.run([lab.repo / "lab" / "labctl", "exec", host, *argv], input="\n".join(found_secrets.values()) + "\n",
                timeout=300)
    # 2: some file could not be read (what a non-root user cannot read is the point); matches still print
    assert p.returncode in (0, 1, 2) and "grep:" not in p.stderr, p.stderr[-2000:]
    return [line for line in p.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def deployed(lab, deployment, serving):
    """The lab serving, and the session's deployment at -v (its whole output is what the secrets are looked for in:
    in a run of the whole suite, the deployment from the operators' old stack)."""
    return deployment


# --------------------------------------------------------------------------- what the management side reaches
def test_only_ssh_the_api_and_monitoring_answer_on_the_head_from_the_management_side(lab, deployed, observe):
    listening = listening_ports(lab, HEAD)
    assert {22, API_PORT, 6379, 6380, 6381, 10001} <= set(listening), listening  # Ray does listen: the scan is real
    states = scan(lab, "ctl", MGMT_IP, sorted(set(listening) | set(RAY_PORTS)))
    answering = sorted(p for p, s in states.items() if s == "open")
    observe("from the control namespace to %s: %d ports tried, answering: %s" % (MGMT_IP, len(states), answering))
    assert answering == sorted([22, API_PORT] + [p for p in MONITORING_PORTS if p in listening]), states
    assert not set(answering) & set(RAY_PORTS), states


def test_the_workers_ray_ports_answer_the_fabric_subnet_only(lab, deployed):
    """Workers have no management link; from the head's other fabric twin (10.99.2.0/24, outside
    sparkfleet_fabric_subnet) only ssh answers, from the fabric subnet Ray does."""
    for worker in lab.hosts[1:]:
        listening = listening_ports(lab, worker)
        assert {22, 6380, 6381} <= set(listening), listening
        other = scan(lab, HEAD, lab.fabric_ip(worker, "b"), sorted(set(listening) | set(RAY_PORTS)),
                     src=lab.fabric_ip(HEAD, "b"))
        assert sorted(p for p, s in other.items() if s == "open") == [22], other
        fabric = scan(lab, HEAD, lab.fabric_ip(worker), [6380, 6381], src=lab.fabric_ip(HEAD))
        assert set(fabric.values()) == {"open"}, fabric


def test_the_firewall_is_our_own_table_and_leaves_the_others_alone(lab, deployed):
    for host in lab.hosts:
        tables = lab.host_exec(host, "nft", "list", "tables").stdout.split("\n")
        # the lab's own egress guard stands in for the user's rules: still there, next to ours
        assert "table %s" % TABLE in tables and "table inet sfl_egress" in tables, (host, tables)
        unit = lab.host_exec(host, "cat", "/etc/systemd/system/sparkfleet-ray.service").stdout
        assert "ExecStartPre=/usr/local/sbin/sparkfleet-must /usr/sbin/nft -f /etc/sparkfleet/ray-firewall.nft" in unit
        assert "--node-manager-port 6380" in unit and "--min-worker-port 10002" in unit


# --------------------------------------------------------------------------- where secrets go
def test_secrets_never_appear_in_the_output_of_a_verbose_run(lab, deployed):
    found = secrets(lab)
    texts = deployed["output"]
    assert any("TASK [sparkfleet.vllm.vllm_serve" in t for t in texts), "the run's output was not captured"
    for name, value in found.items():
        leaks = [t[max(0, t.find(value) - 200):t.find(value)] for t in texts if value in t]
        assert not leaks, "the %s is in the output of site.yml -v, after: %r" % (name, leaks[0][-200:])


def test_secrets_never_appear_in_journals_or_logs(lab, deployed):
    found = secrets(lab)
    for host in lab.hosts:
        journal = lab.host_exec(host, "journalctl", "--no-pager", "-q", "-o", "cat", timeout=120).stdout
        assert "sparkfleet" in journal  # our units did log
        for name, value in found.items():
            assert value not in journal, "%s: the %s is in the journal" % (host, name)
        containers = [c for c in ("sparkfleet-ray", "sparkfleet-vllm")
                      if lab.host_exec(host, "docker", "inspect", c).returncode == 0]
        for container in containers:
            logs = lab.host_exec(host, "docker", "logs", container, timeout=120)
            for name, value in found.items():
                assert value not in logs.stdout + logs.stderr, "%s: the %s is in docker logs %s" % (host, name, container)
        # Ray's session logs, our state and caches, /var/log: read as root, so nothing is missed.
        leaks = grep_as(lab, host, "root", ["/var/lib/sparkfleet", "/var/cache/sparkfleet", "/var/log", "/run/sparkfleet"],
                        found)
        assert not leaks, "%s: a secret is in %s" % (host, leaks)


def test_secrets_are_not_on_any_command_line_a_non_root_user_sees(lab, deployed):
    found = secrets(lab)
    for host in lab.hosts:
        p = lab.host_exec(host, "runuser", "-u", "nobody", "--", "ps", "-eww", "-o", "pid=,args=")
        assert p.returncode == 0 and "ray" in p.stdout, p.stderr  # nobody sees every process, Ray's too
        for name, value in found.items():
            lines = [ln for ln in p.stdout.splitlines() if value in ln]
            assert not lines, "%s: the %s is on a command line: %s" % (host, name, lines[0][:120])


def test_files_a_non_root_user_can_read_hold_no_secret_and_ours_are_tight(lab, deployed):
    found = secrets(lab)
    for host in lab.hosts:
        leaks = grep_as(lab, host, "nobody", READABLE_TREES, found)
        assert not leaks, "%s: readable by any user and holding a secret: %s" % (host, leaks)
        for path in SECRET_FILES:
            st = lab.host_exec(host, "stat", "-c", "%a %U %G", path)
            if st.returncode != 0:
                continue  # not on this node (the token and the sync key live on the head)
            assert st.stdout.split() == ["600", "root", "root"], (host, path, st.stdout)
        # Everything under our configuration directory: root's, not writable by others, no world-readable secret.
        listing = lab.host_exec(host, "find", "/etc/sparkfleet", "/etc/systemd/system", "-path", "*sparkfleet*", "!", "-type", "l",
                                "-printf", "%m %u %p\\n").stdout.splitlines()
        assert listing
        for line in listing:
            mode, owner, path = line.split(" ", 2)
            assert owner == "root" and not int(mode, 8) & 0o002, (host, line)
        conf = lab.host_exec(host, "stat", "-c", "%a", "/etc/sparkfleet").stdout.strip()
        assert not int(conf, 8) & 0o007, (host, "/etc/sparkfleet", conf)


def test_docker_inspect_holds_the_key_and_only_root_can_run_it(lab, deployed):
    found = secrets(lab)
    env = lab.host_exec(HEAD, "docker", "inspect", "-f", "{{json .Config.Env}}", "sparkfleet-vllm").stdout
    assert found["API key"] in env  # the container's environment carries it: who can ask docker matters
    sock = lab.host_exec(HEAD, "stat", "-L", "-c", "%a %U %G", "/run/docker.sock").stdout.split()
    assert sock[0] == "660" and sock[1] == "root", sock
    members = lab.host_exec(HEAD, "getent", "group", sock[2]).stdout.strip().split(":")[-1]
    assert members == "", "users in the %s group read every container's environment: %s" % (sock[2], members)
    for host in lab.hosts:
        for user in ("nobody", "spark"):  # spark: the ssh user, without sudo here
            p = lab.host_exec(host, "runuser", "-u", user, "--", "docker", "inspect", "sparkfleet-ray")
            assert p.returncode != 0 and "permission denied" in p.stderr.lower(), (host, user, p.stdout[:200])
            assert not any(v in p.stdout for v in found.values())


def test_no_worker_authorizes_the_image_key_between_runs(lab, deployed):
    """runtime_image authorizes its key on a worker only while the head sends it the image, and revokes it in the same
    run. In CI the first deployment (test_cli's, from the old stack: the image taken off the workers) sends it; the
    transfer's own test, test_runtime_image.py's with a worker that cannot pull, is long."""
    for host in lab.hosts[1:]:
        keys = lab.sh(host, "cat ~spark/.ssh/authorized_keys").stdout
        assert keys.strip(), "%s: no authorized_keys for spark (the model sync's key belongs there)" % host
        assert "sparkfleet image sync" not in keys, "%s: the image key outlived its transfer" % host


@pytest.mark.parametrize("path, needs_key", [("/health", False), ("/metrics", False), ("/v1/models", True)])
def test_only_v1_paths_need_the_key_as_the_readme_says(lab, deployed, path, needs_key):
    """vLLM's --api-key guards paths under /v1 only (README: restrict /health and /metrics by bind or firewall)."""
    p = lab.ctl("curl", "-s", "-m", "20", "-o", "/dev/null", "-w", "%{http_code}",
                "http://%s:%d%s" % (MGMT_IP, API_PORT, path), timeout=60)
    assert p.stdout.strip() == ("401" if needs_key else "200"), (path, p.stdout, p.stderr)


# --------------------------------------------------------------------------- faults, then stop
@pytest.mark.fault(name="nft missing on a worker", expected="preflight refuses, naming the host and the fix; nothing changed")
def test_a_node_without_nft_is_refused_before_anything_changes(lab, deployed, tmp_path, observe):
    worker = lab.hosts[-1]
    before = {h: lab.host_exec(h, "systemctl", "show", "-p", "InvocationID", "--value", "sparkfleet-ray").stdout
              for h in lab.hosts}
    lab.labctl("break", "no-nft", worker)
    try:
        r, failures = lab.play(tmp_path, "site.yml")
    finally:
        lab.labctl("fix", "no-nft", worker)
    assert r["status"] == "failed"
    msg = lab.messages(failures)
    assert "%s: nft is not usable" % worker in msg and "apt-get install nftables" in msg, msg[-2000:]
    assert "ray_cluster_firewall: false" in msg
    observe(re.search(r"%s: nft is not usable[^\"]{0,160}" % worker, msg).group(0))
    assert lab.changed_total(r) == 0
    assert lab.api_key()  # the lab's key file is still there
    after = {h: lab.host_exec(h, "systemctl", "show", "-p", "InvocationID", "--value", "sparkfleet-ray").stdout
             for h in lab.hosts}
    assert after == before
