"""Unified memory (GB10: the GPU's memory is the host's): the lab's hosts have a fixed memory (SPARKLAB_HOST_MEM), the
stand-in engine really holds its weights and KV cache there and refuses to start as vLLM 0.17.1 does when free memory
(page cache counted) is short. Supervision must never loop into a wedge: every engine start passes the memory gate, and
what cannot heal safely escalates with the one human step, every node still reachable.
    SPARKLAB_KEEP_LAB=1 lab/labctl ctl -- .venv/bin/pytest tests/integration/test_unified_memory.py -m lab
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

pytestmark = pytest.mark.lab

HEAD = "spark-1"
UNIT = "sparkfleet-vllm"
MARKER = "/run/sparkfleet/escalated-%s" % UNIT
BASELINE = "/var/lib/sparkfleet/watchdog/memory-baseline-%s.json" % UNIT
LOG = "/var/lib/sparkfleet/watchdog/supervision.log"
ENV_FILE = "/etc/sparkfleet/vllm.env"
MiB = 1 << 20


def host_memory(lab, host):
    """(limit, usage) of a lab host's memory, from the machine's side (`labctl mem`)."""
    out = lab.labctl("mem", host).stdout
    fields = {}
    for line in out.splitlines():
        key, sep, rest = line.strip().partition(":")
        if sep and rest.split() and rest.split()[0].isdigit():
            fields[key] = int(rest.split()[0])
    return fields.get("limit", 0), fields.get("usage", 0)


def escalation(lab):
    text = lab.sh(HEAD, "cat %s 2>/dev/null || true" % MARKER).stdout.strip()
    return json.loads(text) if text else None


def events(lab, since):
    rows = []
    for line in lab.sh(HEAD, "cat %s 2>/dev/null || true" % LOG).stdout.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("time", 0) >= since and entry.get("unit") == UNIT:
            rows.append(entry)
    return rows


def reachable(lab):
    """Every node answers ssh (a wedged GB10 does not)."""
    def answers(host):
        try:
            return lab.ssh(host, "true", timeout=30).returncode == 0
        except Exception:  # noqa: BLE001  (a timeout: it does not answer)
            return False
    return {h: answers(h) for h in lab.hosts}


def rank_files(lab, host):
    return int(lab.sh(host, "ls /run/sparklab/uvm 2>/dev/null | grep -c '^rank-' || true").stdout.strip() or 0)


@pytest.fixture
def clean_memory(lab):
    """Leave no leak knob, leaked memory, ballast or escalation behind (later modules restart the engine)."""
    yield
    for host in lab.hosts:
        lab.labctl("fix", "wedge", host, check=False)
        lab.labctl("fix", "leak", host, check=False)
        lab.labctl("fix", "page-cache", host, check=False)
        lab.sh(host, "rm -f /run/sparklab/uvm/rank-*")
    if escalation(lab):
        lab.sh(HEAD, "rm -f %s /run/sparkfleet/starts-%s.json; systemctl start --no-block %s" % (MARKER, UNIT, UNIT))
    lab.wait_serving(limit=300)


@pytest.mark.fault(name="a worker leaks unified memory at every unclean engine exit (a GB10 driver keeps a crashed"
                        " engine's mappings) and freezes past its memory (wedge), and the engine is killed again and"
                        " again",
                   expected="the start after the leak waits at the memory gate, then supervision escalates instead of"
                            " looping: vLLM stays stopped, status.yml exits non-zero naming the worker, what it holds"
                            " and 'reboot spark-2 ..., then run site.yml'; every node answers ssh; once the memory is"
                            " free again the liveness timer starts the engine once and it serves")
def test_a_leaking_worker_escalates_instead_of_looping(lab, serving, tmp_path, observe, clean_memory):
    worker = lab.hosts[-1]
    assert lab.serves(), "the lab does not serve before the fault"
    # the liveness timer saw it serve: every node's memory of that start is the baseline
    has_baseline = lab.wait_for(lambda: lab.sh(HEAD, "test -s %s && echo yes" % BASELINE).stdout.strip() == "yes", 90)
    assert has_baseline is not None, "no memory baseline on the head 90 s after the engine served"
    limit, _usage = host_memory(lab, worker)
    assert limit > 0, "the lab's hosts have no memory limit (SPARKLAB_HOST_MEM)"
    mib = limit // 5 // MiB                       # 20 % of the node: far above the 5 % tolerance
    t0 = time.time()
    lab.labctl("break", "wedge", worker)         # past its memory the worker freezes, as a GB10 does (no OOM kill)
    lab.labctl("break", "leak", worker, str(mib))
    kills = 0
    # The running engine's ranks predate the knob; each start from now on reserves mib MiB on the worker, which an
    # unclean exit leaves held. Kill the engine whenever it runs with a reservation, until supervision stops it.
    while escalation(lab) is None and kills < 4:
        before = rank_files(lab, worker)
        lab.labctl("break", "engine", HEAD)
        kills += 1
        lab.wait_for(lambda: escalation(lab) is not None or rank_files(lab, worker) > before, 240)
    esc = lab.wait_for(lambda: escalation(lab) is not None, 240)
    assert esc is not None, "supervision did not escalate after %d engine kills with a leaking worker" % kills
    m = escalation(lab)
    observe("escalated %.0f s after the leak began (%d kills): %s; step: %s"
            % (time.time() - t0, kills, m["reason"], m["step"]))
    assert m["memory"] is True and worker in m["step"] and "reboot" in m["step"] and "run site.yml" in m["step"], m
    assert any(n.startswith(worker) and "more than at its last healthy start" in n for n in m["nodes"]), m
    # stopped, not looping: the unit stays down and is not started again
    time.sleep(20)
    state = lab.systemctl(HEAD, "show", "-p", "ActiveState", "--value", UNIT)
    assert state in ("inactive", "failed"), "vLLM is %s after the escalation" % state
    assert all(reachable(lab).values()), reachable(lab)
    ok, seen = lab.status(tmp_path / "escalated")
    assert not ok, "status.yml exited 0 while supervision had escalated"
    assert "not started again" in seen and "Human step: reboot %s" % worker in seen, seen[-3000:]
    assert [e["event"] for e in events(lab, t0)].count("escalated") == 1
    # the memory comes back (the lab's reboot frees it the same way: /run is a new tmpfs): started once, serves
    lab.labctl("fix", "leak", worker)
    t1 = time.time()
    lab.sh(worker, "rm -f /run/sparklab/uvm/rank-*")
    back = lab.wait_for(lambda: lab.serves(timeout=10), 240)
    assert back is not None, "the engine did not serve within 240 s of the worker's memory coming back"
    assert escalation(lab) is None
    returns = [e for e in events(lab, t1) if e["event"] == "return"]
    assert len(returns) == 1, events(lab, t1)
    observe("memory freed: started once by the liveness timer, serving %.0f s later" % back)
    ok, seen = lab.status(tmp_path / "back")
    assert ok, seen[-3000:]


# CI: the gate's drop and count in tests/unit/roles/test_sparkfleet_memory.py (test_the_gate_drops_caches_on_every_node_
# once_and_starts, test_measure_counts_the_page_cache_as_not_free), the stand-in's MemFree rule in tests/lab/test_unified.py,
# the gate on the lab by test_a_leaking_worker_escalates_instead_of_looping and test_an_over_use_stops_at_the_gate_not_
# in_a_wedge; a stop, a full page cache and an engine start: long.
@pytest.mark.long
@pytest.mark.fault(name="the worker's page cache full after a sync, with vLLM's later startup rule (MemFree:"
                        " vllm#48140, the page cache is not free), then the engine starts",
                   expected="the memory gate drops the worker's page cache and the engine starts and serves (without"
                            " the gate: 'Free memory on device ... on startup is less than desired GPU memory"
                            " utilization', restarting for ever)")
def test_a_full_page_cache_is_dropped_before_the_engine_starts(lab, serving, tmp_path, observe, clean_memory):
    worker = lab.hosts[-1]
    assert lab.serves()
    # vLLM 0.17.1 (the lab's) reads MemAvailable on a GB10, where clean page cache counts as free; later releases read
    # MemFree. The engine plays that rule from its environment (the stand-in copies SPARKLAB_* to every rank).
    lab.sh(HEAD, "echo SPARKLAB_UMA_FREE=free >>%s && systemctl stop %s" % (ENV_FILE, UNIT))
    try:
        lab.labctl("break", "page-cache", worker)
        limit, usage = host_memory(lab, worker)
        observe("%s: %.0f %% of its memory in use, the ballast cached" % (worker, 100.0 * usage / limit))
        t0 = time.time()
        lab.systemctl(HEAD, "start", "--no-block", UNIT)
        back = lab.wait_for(lambda: lab.serves(timeout=10), 300)
        journal = lab.sh(HEAD, "journalctl -u %s --since @%d -o cat --no-pager" % (UNIT, t0 - 1)).stdout
        assert back is not None, "the engine did not serve within 300 s with the worker's page cache full:\n" \
            + journal[-3000:]
        assert "on startup is less than desired GPU memory utilization" not in journal, journal[-3000:]
        gate = [line for line in journal.splitlines() if line.startswith("memory gate: ")]
        assert gate, journal[-3000:]
        assert escalation(lab) is None
        observe("serving %.0f s after the start; %s" % (back, gate[-1][:200]))
    finally:
        lab.sh(HEAD, "sed -i '/^SPARKLAB_UMA_FREE=/d' %s" % ENV_FILE)
        lab.systemctl(HEAD, "restart", "--no-block", UNIT)


@pytest.mark.long
@pytest.mark.fault(name="vLLM's start failed because the head's Ray could not start then (another service held port"
                        " 6379: 'Dependency failed'), then the port is free again",
                   expected="Ray comes back by itself; the liveness timer starts vLLM once Ray runs and the API answers"
                            " with no human step (before: vLLM stayed down until site.yml)")
def test_a_vllm_stranded_by_a_failed_ray_start_comes_back_once_ray_runs(lab, serving, tmp_path, observe):
    assert lab.serves()
    lab.systemctl(HEAD, "stop", "sparkfleet-ray")             # vLLM (Requires=) stops with it
    try:
        lab.labctl("break", "foreign-listener", HEAD, "6379")
        lab.systemctl(HEAD, "start", "sparkfleet-vllm")       # Ray's guard refuses the held port: a dependency fails
        last = lab.sh(HEAD, "journalctl -u %s -n 3 -o cat --no-pager" % UNIT).stdout.strip().splitlines()
        assert any(line.startswith("Dependency failed for") for line in last), last
    finally:
        lab.labctl("fix", "foreign-listener", HEAD)
    t0 = time.time()
    back = lab.wait_for(lambda: lab.serves(timeout=10), 360)
    assert back is not None, "the API did not answer within 360 s of the port coming free, with no human step"
    started = [e for e in events(lab, t0 - 5) if e["event"] == "restart" and "dependency" in e["cause"]]
    assert started, events(lab, t0 - 5)
    observe("the API answered %.0f s after the port came free; logged: %s" % (back, started[0]["cause"][:140]))


@pytest.mark.long   # a deploy with short waits, a worker's power cut and boot, the deploy again (~8 min)
@pytest.mark.fault(name="a worker powered off while serving and kept off (the cluster short of the engine's GPUs at"
                        " every start)",
                   expected="each start's wait for the GPUs ends short and counts as a refused start; after"
                            " vllm_serve_escalate_after of them supervision escalates naming the worker (before: the unit"
                            " waited and started again for ever); once the worker is back the liveness timer starts the"
                            " engine and the API answers with no human step")
def test_a_worker_away_escalates_after_k_gpu_waits_and_serves_once_it_is_back(lab, serving, tmp_path, observe,
                                                                              clean_memory):
    worker = lab.hosts[-1]
    short = {"vllm_serve_cluster_wait_timeout": 20, "vllm_serve_escalate_after": 2,
             "vllm_serve_memory_gate_timeout": 15}
    r, failures = lab.play(tmp_path / "short", "site.yml", cmdline="--tags vllm_serve", extravars=short)
    assert r["status"] == "successful" and not failures, lab.messages(failures)[-2000:]
    powered_off = False
    try:
        t0 = time.time()
        lab.labctl("poweroff", worker, timeout=120)
        powered_off = True
        # the engine loses its rank, the liveness timer restarts it; each start's GPU wait ends short (20 s)
        took = lab.wait_for(lambda: escalation(lab) is not None, 420, step=5)
        assert took is not None, "no escalation within 420 s of the worker's power cut: %s" % events(lab, t0)[-6:]
        m = escalation(lab)
        assert "did not have the engine's GPUs" in m["reason"] and m["memory"] is True, m
        assert m["step"].startswith("bring %s back" % worker), m
        refused = [e for e in events(lab, t0) if e["event"] == "escalated"]
        assert refused, events(lab, t0)
        def waits():
            return int(lab.sh(HEAD, "journalctl -u %s --since @%d -o cat --no-pager | grep -c 'waiting up to 20 s'"
                                    " || true" % (UNIT, t0)).stdout.strip() or 0)
        before = waits()
        time.sleep(40)      # escalated: systemd skips its starts (no new wait, no new start)
        state = lab.systemctl(HEAD, "show", "-p", "ActiveState", "-p", "SubState", UNIT).split()
        observe("escalated %.0f s after the power cut, after %d GPU wait(s): %s; step: %s; unit %s"
                % (m["time"] - t0, before, m["reason"][:160], m["step"][:120], " ".join(state)))
        assert before >= 2 and waits() == before, (before, waits())
        assert "ActiveState=inactive" in state, state
        lab.labctl("poweron", worker, timeout=600)
        powered_off = False
        t1 = time.time()
        back = lab.wait_for(lambda: lab.serves(timeout=10), 480, step=5)
        assert back is not None, "the API did not answer within 480 s of the worker's boot: %s" % events(lab, t1)[-6:]
        observe("serving %.0f s after the worker was powered on, no human step" % back)
    finally:
        if powered_off:
            lab.labctl("poweron", worker, timeout=600, check=False)
        r, failures = lab.play(tmp_path / "back", "site.yml", cmdline="--tags vllm_serve")
    assert r["status"] == "successful" and not failures, lab.messages(failures)[-2000:]


def ray_used(lab, host):
    """The share of a host's memory Ray's memory monitor counts as used there: the lab's containers see the host's
    memory cgroup as their own (lab/host/docker-wrapper.sh), so Ray reads it as it reads a Spark's /proc/meminfo:
    rss + cache - inactive_file over the cgroup's limit (Ray's memory_monitor, cgroup v1)."""
    stat = dict(line.split() for line in lab.sh(host, "cat /sys/fs/cgroup/memory/memory.stat").stdout.splitlines()
                if len(line.split()) == 2)
    limit, _usage = host_memory(lab, host)
    used = int(stat["total_rss"]) + int(stat["total_cache"]) - int(stat["total_inactive_file"])
    return used / float(limit)


def ray_kill_limit_gib(line):
    """The host memory limit (GiB) that a kill line of Ray's memory monitor names, else None. Ray 2.60: "OOM kill
    reason: Memory usage 2229645312B exceeded threshold of 1717986816B (32.0% of 5368709120B limit)"; Ray 2.53 (the
    Sparks' image's): "Memory on the node (IP: ...) ... was 1.83GB / 5.00GB (0.366397), which exceeds the memory usage
    threshold of 0.32" (its GB are GiB, to two decimals)."""
    m = re.search(r"OOM kill reason: Memory usage \d+B exceeded threshold of \d+B \([0-9.]+% of (\d+)B limit\)", line)
    if m:
        return int(m.group(1)) / 2 ** 30
    m = re.search(r"Memory on the node .* was [0-9.]+GB / ([0-9.]+)GB \([0-9.]+\), which exceeds the memory usage "
                  r"threshold", line)
    return float(m.group(1)) if m else None


def capture_kill_journal(lab, since):
    """With SPARKLAB_CAPTURE_DIR set: the unit's journal of the start Ray's memory monitor killed (from its "Starting"
    line to its "Failed with result"), as vllm_wait's fixture real_ray_memory_monitor_lab.log keeps it (CAPTURED.md)."""
    out_dir = os.environ.get("SPARKLAB_CAPTURE_DIR")
    if not out_dir:
        return
    lines = lab.sh(HEAD, "journalctl -u %s --since @%d -o short-iso --no-pager" % (UNIT, since - 1)).stdout.splitlines()
    kill = max(i for i, ln in enumerate(lines) if ray_kill_limit_gib(ln) is not None)
    start = max(i for i, ln in enumerate(lines[:kill]) if "systemd[1]: Starting %s" % UNIT in ln)
    end = next(i for i in range(kill, len(lines)) if "Failed with result" in lines[i])
    with open(os.path.join(out_dir, "real_ray_memory_monitor_lab.log"), "w") as handle:
        handle.write("\n".join(lines[start:end + 1]) + "\n")


@pytest.mark.long
@pytest.mark.fault(name="Ray's memory monitor (real Ray, reading the host's memory as on a Spark, where the engine's"
                        " GPU memory is host memory) on, with a threshold between what a node holds idle and loaded",
                   expected="Ray kills a rank while the engine allocates, the play fails with ray_oom_killed naming"
                            " ray_cluster_memory_monitor, Ray's own words naming the host's limit; with the deploy's"
                            " setting (monitor off) the same threshold serves")
def test_rays_memory_monitor_kills_a_loading_rank_unless_the_deploy_turns_it_off(lab, serving, tmp_path, observe):
    assert lab.serves()
    unit = lab.sh(HEAD, "systemctl cat %s" % UNIT).stdout
    util = float(re.search(r"--gpu-memory-utilization[= ]([0-9.]+)", unit).group(1))
    try:
        # what every node holds with no engine (and no page cache, as the memory gate leaves it before a start)
        lab.systemctl(HEAD, "stop", UNIT)
        # (the bracket keeps pgrep from finding the shell that runs it)
        idle_ranks = lab.wait_for(lambda: not any(lab.sh(h, "pgrep -f 'ray::RayWorke[r]' || true").stdout.strip()
                                                  for h in lab.hosts), 120)
        assert idle_ranks is not None, "the engine's ranks outlived its unit by 120 s"
        for host in lab.hosts:
            lab.sh(host, "sync; echo 3 >/proc/sys/vm/drop_caches")
        idle = {h: ray_used(lab, h) for h in lab.hosts}
        # half the engine's share above what the busiest node holds idle: a load crosses it there, nothing idle does
        threshold = round(max(idle.values()) + util / 2, 2)
        observe("Ray's view with no engine: %s; utilization %.2f; threshold %.2f"
                % (", ".join("%s %.2f" % kv for kv in sorted(idle.items())), util, threshold))
        t_on = time.time()
        r, failures = lab.play(tmp_path / "on", "site.yml", cmdline="--tags ray_cluster,vllm_serve",
                               extravars={"ray_cluster_memory_monitor": True,
                                          "ray_cluster_memory_usage_threshold": threshold})
        assert r["status"] == "failed" and failures, "served with the monitor on at %.2f (now %s)" % (
            threshold, {h: round(ray_used(lab, h), 2) for h in lab.hosts})
        final = lab.messages(failures)
        assert "ray_oom_killed" in final and "ray_cluster_memory_monitor" in final, final[-3000:]
        journal = lab.sh(HEAD, "journalctl -u %s -n 400 -o cat --no-pager" % UNIT).stdout
        # Ray's own account names the host's memory (the lab host's limit), not this machine's
        limit, _usage = host_memory(lab, HEAD)
        reason = [ln for ln in journal.splitlines() if ray_kill_limit_gib(ln) is not None]
        assert reason and abs(ray_kill_limit_gib(reason[-1]) - limit / 2 ** 30) < 0.01, (limit, journal[-3000:])
        observe(reason[-1][reason[-1].index("Memory "):][:200])
        capture_kill_journal(lab, t_on)

        # the deploy's setting: the monitor off, the same threshold: the same load serves
        r, failures = lab.play(tmp_path / "off", "site.yml", cmdline="--tags ray_cluster,vllm_serve",
                               extravars={"ray_cluster_memory_usage_threshold": threshold})
        assert r["status"] == "successful" and not failures, lab.messages(failures)[-3000:]
        assert lab.completion("off")[0] == 200
        peak = {h: ray_used(lab, h) for h in lab.hosts}
        assert max(peak.values()) > threshold, (peak, threshold)   # above the threshold, and not killed
        raylet = lab.sh(HEAD, "docker exec sparkfleet-ray grep -h MemoryMonitor /tmp/ray/session_latest/logs/raylet.out"
                              " | tail -1").stdout
        assert "disabled" in raylet, raylet
        observe("monitor off (RAY_memory_monitor_refresh_ms=0): serving at %s of the host's memory"
                % ", ".join("%s %.2f" % kv for kv in sorted(peak.items())))
    finally:
        r, failures = lab.play(tmp_path / "back", "site.yml", cmdline="--tags ray_cluster,vllm_serve")
    assert r["status"] == "successful" and not failures, lab.messages(failures)[-2000:]


@pytest.mark.fault(name="an engine start that would take more unified memory than the nodes have (utilization 0.95),"
                        " every node set to freeze past its memory (wedge) and Ray's memory monitor off (the deploy's"
                        " setting)",
                   expected="the memory gate refuses the start before the engine allocates, naming the node and GiB"
                            " short; supervision escalates; every node still answers ssh and no node froze")
def test_an_over_use_stops_at_the_gate_not_in_a_wedge(lab, serving, tmp_path, observe, clean_memory):
    assert lab.serves()
    for host in lab.hosts:
        lab.labctl("break", "wedge", host)
    t0 = time.time()
    try:
        r, failures = lab.play(tmp_path / "over", "site.yml", cmdline="--tags vllm_serve",
                               extravars={"vllm_serve_gpu_memory_utilization": 0.95})
        final = lab.messages(failures)
        assert r["status"] == "failed" and failures, final[-3000:]
        m = escalation(lab)
        assert m and m["memory"] is True, (m, final[-3000:])
        assert "supervision_escalated" in final or "ESCALATED" in final, final[-3000:]
        assert all("GiB short for the engine" in n for n in m["nodes"]), m
        observe("refused %.0f s after the start: %s; %s" % (time.time() - t0, m["reason"], "; ".join(m["nodes"])[:240]))
        assert all(reachable(lab).values()), reachable(lab)
        for host in lab.hosts:
            assert "FROZEN" not in lab.labctl("mem", host).stdout, host
        journal = lab.sh(HEAD, "journalctl -u %s --since @%d -o cat --no-pager" % (UNIT, t0 - 1)).stdout
        assert "Loading weights took" not in journal, journal[-3000:]   # the engine never allocated
    finally:
        for host in lab.hosts:
            lab.labctl("fix", "wedge", host, check=False)
        r, failures = lab.play(tmp_path / "back", "site.yml", cmdline="--tags vllm_serve")
    assert r["status"] == "successful" and not failures, lab.messages(failures)[-2000:]
