"""roles/sparkfleet/files/sparkfleet_memory.py and the watchdog's memory gate, escalation and return (unified memory:
on a GB10 the GPU's memory is the host's). Kernel files are captured ones (fixtures/memory: this machine's
/proc/meminfo and a lab host's cgroup v1 memory.stat while it served); commands and the clock are faked."""

from __future__ import annotations

import json
import os
import types
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine import _vllm_log

FILES = Path(__file__).resolve().parents[3] / "roles" / "sparkfleet" / "files"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "memory"
GiB = 1 << 30


def load(name, tmp_path=None, monkeypatch=None):
    path = FILES / name
    mod = types.ModuleType(path.stem)
    mod.__file__ = str(path)
    exec(compile(path.read_text(), str(path), "exec"), mod.__dict__)     # no __pycache__ in the role's files/
    return mod


@pytest.fixture
def mem():
    return load("sparkfleet_memory.py")


@pytest.fixture
def wd(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_WATCHDOG_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SPARKFLEET_WATCHDOG_RUN_DIR", str(tmp_path / "run"))
    mod = load("sparkfleet_watchdog.py")
    mod.calls = []
    return mod


def lab_cgroup(tmp_path, limit=4 * GiB, usage=None, stat=None):
    """A lab host's cgroup v1 memory directory: the captured memory.stat, a limit, a usage."""
    d = tmp_path / "cg" / "memory"
    d.mkdir(parents=True)
    (d / "memory.limit_in_bytes").write_text("%d\n" % limit)
    captured = (FIXTURES / "v1-spark-1-memory.usage_in_bytes").read_text()
    (d / "memory.usage_in_bytes").write_text("%d\n" % usage if usage is not None else captured)
    (d / "memory.stat").write_text(stat if stat is not None else (FIXTURES / "v1-spark-1-memory.stat").read_text())
    return tmp_path / "cg"


def fake_proc(tmp_path, meminfo=None, procs=((1, "systemd", 12000), (812, "python3", 2400000), (77, "kthreadd", None))):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text(meminfo if meminfo is not None else (FIXTURES / "meminfo-lab-machine.txt").read_text())
    for pid, name, rss_kb in procs:
        (proc / str(pid)).mkdir()
        lines = ["Name:\t%s" % name, "State:\tS (sleeping)"] + (["VmRSS:\t%8d kB" % rss_kb] if rss_kb else [])
        (proc / str(pid) / "status").write_text("\n".join(lines) + "\n")
    return proc


# --------------------------------------------------------------------------- reading a node
def test_meminfo_as_captured(mem):
    mi = mem.parse_meminfo((FIXTURES / "meminfo-lab-machine.txt").read_text())
    assert mi["MemTotal"] > 20 * GiB and 0 < mi["MemFree"] <= mi["MemAvailable"] <= mi["MemTotal"]
    assert mem.parse_meminfo("MemTotal: lots kB\nJunk\n: 1\nMemFree: 99999999999999999999999 kB\n") == {}


def test_a_real_sparks_root_cgroup_has_no_limit(mem, tmp_path):
    # v1 prints "no limit" as 9223372036854771712; v2's root has no memory.max at all
    assert mem.read_cgroup(str(lab_cgroup(tmp_path, limit=9223372036854771712))) is None
    assert mem.read_cgroup(str(tmp_path / "nothing")) is None


def test_a_lab_host_is_its_cgroup(mem, tmp_path):
    cg = mem.read_cgroup(str(lab_cgroup(tmp_path)))
    stat = mem.parse_flat((FIXTURES / "v1-spark-1-memory.stat").read_text())
    assert cg["limit"] == 4 * GiB and cg["version"] == 1
    assert cg["reclaimable"] == stat["total_active_file"] + stat["total_inactive_file"]   # hierarchical, not its own
    assert cg["cache"] == stat["total_cache"] and cg["shmem"] == stat["total_shmem"]


def test_cgroup_v2(mem, tmp_path):
    d = tmp_path / "v2"
    d.mkdir()
    (d / "memory.max").write_text("%d\n" % (8 * GiB))
    (d / "memory.current").write_text("%d\n" % (3 * GiB))
    (d / "memory.stat").write_text("anon 1073741824\nfile 2147483648\nactive_file 1000\ninactive_file 2000\nshmem 5\n")
    assert mem.read_cgroup(str(d)) == {"limit": 8 * GiB, "usage": 3 * GiB, "cache": 2 * GiB, "shmem": 5,
                                       "reclaimable": 3000, "version": 2}
    (d / "memory.max").write_text("max\n")
    assert mem.read_cgroup(str(d)) is None


def test_measure_counts_the_page_cache_as_not_free(mem, tmp_path):
    # vLLM 0.17's startup check on GB10 reads free memory: the page cache of a 119 GB sync is not free
    usage = 3 * GiB
    r = mem.measure(str(fake_proc(tmp_path)), str(lab_cgroup(tmp_path, usage=usage)))
    assert r["source"] == "cgroup v1" and r["total"] == 4 * GiB and r["free"] == 1 * GiB
    assert r["available"] > r["free"]                       # the file cache can be reclaimed, the check ignores it
    assert r["used"] == r["total"] - r["available"]
    assert [h["name"] for h in r["holders"]] == ["python3", "systemd"]          # kernel threads have no VmRSS
    assert r["holders"][0]["rss"] == 2400000 * 1024


def test_measure_without_a_limit_reads_meminfo(mem, tmp_path):
    r = mem.measure(str(fake_proc(tmp_path)), str(tmp_path / "none"))
    mi = mem.parse_meminfo((FIXTURES / "meminfo-lab-machine.txt").read_text())
    assert r["source"] == "meminfo" and r["total"] == mi["MemTotal"] and r["free"] == mi["MemFree"]


def test_drop_file_cache_opens_regular_files_only(mem, tmp_path):
    model = tmp_path / "model"
    (model / "sub" / "deeper" / "deepest").mkdir(parents=True)
    for name in ("model-00001-of-00002.safetensors", "config.json", "sub/a.bin", "sub/deeper/b.bin",
                 "sub/deeper/deepest/too-deep.bin"):
        (model / name).write_bytes(b"x" * 4096)
    os.mkfifo(model / "fifo")                   # opening it would block: never opened
    (model / "elsewhere").symlink_to(tmp_path)  # a linked directory is not walked
    assert mem.drop_file_cache(str(model)) == 4
    assert mem.drop_file_cache(str(tmp_path / "absent")) == 0
    assert mem.drop_file_cache(str(model), max_files=2) == 2


# --------------------------------------------------------------------------- the verdict on one node
def report(total=4 * GiB, free=3 * GiB, available=3.5 * GiB, used=None, t=1000.0, engine=False, **kw):
    used = total - available if used is None else used
    return dict(dict(total=total, free=free, available=available, used=used, cache=available - free, shmem=0,
                     unaccounted=0, holders=[{"pid": 4242, "name": "hog", "rss": GiB}], time=t, engine=engine), **kw)


@pytest.mark.parametrize("rep, baseline, state, words", [
    (report(), None, "ok", "3.0 GiB free of 4.0 GiB, the engine takes 2.1 GiB"),
    (report(free=1 * GiB), None, "drop", "once the page cache (2.5 GiB) is dropped"),
    (report(free=1 * GiB, available=1.5 * GiB), None, "short", "0.6 GiB short for the engine"),
    # back at its baseline within the tolerance (5 % of 4 GiB): ok; a leak above it: short, even with memory free
    (report(), 0.4 * GiB, "ok", "free"),
    (report(used=1.5 * GiB), 0.5 * GiB, "short", "holds 1.0 GiB more than at its last healthy start"),
    (report(engine=True), None, "busy", "a rank of the last engine still runs there"),
    (report(t=900.0), None, "silent", "last memory report is 100 s old"),
    (None, None, "silent", "no memory report"),
])
def test_node_verdict(mem, rep, baseline, state, words):
    v = mem.node_verdict("spark-2", "10.99.1.12", rep, 1000.0, 0.5, 0.02, baseline, 0.05, 60)
    assert v["state"] == state and words in v["why"] and v["why"].startswith("spark-2")


def test_a_short_node_names_its_biggest_holders_and_memory_no_process_holds(mem):
    rep = report(free=0.5 * GiB, available=0.6 * GiB, unaccounted=int(0.1 * GiB), shmem=int(1.2 * GiB))
    v = mem.node_verdict("spark-2", "10.99.1.12", rep, 1000.0, 0.5, 0.02, None, 0.05, 60)
    assert "1.0 GiB hog (pid 4242)" in v["why"]
    assert "1.3 GiB held by no process (tmpfs 1.2 GiB" in v["why"]
    assert mem.human_step([v]) == "reboot spark-2 (unified memory held that no restart frees), then run site.yml"


# --------------------------------------------------------------------------- the gate, escalation and return
class Cluster:
    """Two nodes' memory as the gate reads it (head measured, worker from the GCS), systemd's calls recorded."""

    def __init__(self, wd, monkeypatch):
        self.wd, self.clock = wd, 1000.0
        self.reports = {"10.99.1.11": report(t=self.clock), "10.99.1.12": report(t=self.clock)}
        self.kv_puts = []
        monkeypatch.setattr(wd, "now", lambda: self.clock)
        monkeypatch.setattr(wd.time, "monotonic", lambda: self.clock)
        monkeypatch.setattr(wd.time, "sleep", self.sleep)
        monkeypatch.setattr(wd, "run", self.run)
        monkeypatch.setattr(wd, "cluster_memory", self.cluster_memory)
        self.dropped = 0
        monkeypatch.setattr(wd.MEM, "drop_caches", self.drop_caches)

    def sleep(self, s):
        self.clock += s
        for r in self.reports.values():
            r["time"] = self.clock

    def drop_caches(self):
        self.dropped += 1
        return True

    def run(self, argv, timeout=60, stdin=None):
        self.wd.calls.append(argv)
        return 0, "", ""

    def cluster_memory(self, a, ops=None):
        if ops:
            self.kv_puts.append(ops)
        return self.wd.parse_nodes(a.node), json.loads(json.dumps(self.reports)), {"ok": True}


def gate_args(wd, tmp_path, **kw):
    ns = dict(unit="sparkfleet-vllm", node=["spark-1=10.99.1.11", "spark-2=10.99.1.12"], ray_container="sparkfleet-ray",
              address="10.99.1.11:6379", gcs_timeout=20, model_dir="/models/m", utilization=0.5, margin=0.02,
              tolerance=0.05, max_age=60, timeout=30, poll=5, starts=3, window=3600,
              notify_file=str(tmp_path / "notify"))
    ns.update(kw)
    return wd.main.__globals__["argparse"].Namespace(**ns)


def vllm_args(wd, **kw):
    ns = dict(unit="sparkfleet-vllm", container="sparkfleet-vllm", url="http://127.0.0.1:30000", model="m", ray_unit="sparkfleet-ray",
              env_file="/nonexistent", timeout=20, failures=2, start_grace=1800,
              node=["spark-1=10.99.1.11", "spark-2=10.99.1.12"], ray_container="sparkfleet-ray",
              address="10.99.1.11:6379", gcs_timeout=20, model_dir="/models/m", utilization=0.5, margin=0.02,
              tolerance=0.05, max_age=60, incidents_keep=0, incident_wait=45, incident_node=[])
    ns.update(kw)
    return wd.main.__globals__["argparse"].Namespace(**ns)


def events(tmp_path):
    path = tmp_path / "state" / "supervision.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def marker(tmp_path):
    path = tmp_path / "run" / "sparkfleet" / "escalated-sparkfleet-vllm"
    return json.loads(path.read_text()) if path.exists() else None


def test_the_gate_passes_and_records_the_start(wd, monkeypatch, tmp_path, capsys):
    Cluster(wd, monkeypatch)
    assert wd.gate(gate_args(wd, tmp_path)) == 0
    runs = json.loads((tmp_path / "run" / "sparkfleet" / "starts-sparkfleet-vllm.json").read_text())
    assert runs["starts"] == [1000.0] and set(runs["pending"]) == {"10.99.1.11", "10.99.1.12"}
    assert "memory gate: spark-1: 3.0 GiB free" in capsys.readouterr().out


def test_the_gate_drops_caches_on_every_node_once_and_starts(wd, monkeypatch, tmp_path):
    c = Cluster(wd, monkeypatch)
    c.reports["10.99.1.12"] = report(free=1 * GiB, t=c.clock)         # the page cache of the sync fills spark-2

    def sleep(s):
        Cluster.sleep(c, s)
        if c.kv_puts:                                                  # spark-2 obeyed the request at its next check
            c.reports["10.99.1.12"]["free"] = 3 * GiB
    monkeypatch.setattr(wd.time, "sleep", sleep)
    assert wd.gate(gate_args(wd, tmp_path)) == 0
    assert [list(p["put"]) for p in c.kv_puts] == [["drop-caches"]]    # asked once
    assert c.dropped == 0                                              # the head needed nothing


def test_memory_that_does_not_come_back_escalates_with_the_human_step(wd, monkeypatch, tmp_path):
    c = Cluster(wd, monkeypatch)
    c.reports["10.99.1.12"] = report(free=0.5 * GiB, available=0.6 * GiB, t=c.clock)     # leaked by crashed engines
    (tmp_path / "notify").write_text('echo "$SPARKFLEET_ESCALATION_STEP" >> %s/notified\n' % tmp_path)
    assert wd.gate(gate_args(wd, tmp_path)) == 3
    m = marker(tmp_path)
    assert m["memory"] is True and m["reason"] == "the memory did not come back within 30 s"
    assert m["step"] == "reboot spark-2 (unified memory held that no restart frees), then run site.yml"
    assert m["nodes"][0].startswith("spark-2: 1.5 GiB short for the engine")
    assert [e["event"] for e in events(tmp_path)] == ["escalated"]
    assert (tmp_path / "notified").read_text().splitlines() == [m["step"]]     # once
    assert not any(argv[:2] == ["systemctl", "start"] for argv in wd.calls)


def test_a_silent_node_is_never_started_into_and_not_escalated(wd, monkeypatch, tmp_path, capsys):
    c = Cluster(wd, monkeypatch)
    del c.reports["10.99.1.12"]
    assert wd.gate(gate_args(wd, tmp_path)) == 3
    assert marker(tmp_path) is None
    assert "spark-2 (10.99.1.12): no memory report" in capsys.readouterr().err


def test_starts_that_do_not_serve_escalate_after_k(wd, monkeypatch, tmp_path):
    c = Cluster(wd, monkeypatch)
    a = gate_args(wd, tmp_path)
    for _start in range(3):                        # three starts pass the gate, none serves (crash loop)
        assert wd.gate(a) == 0
        c.clock += 40
        for r in c.reports.values():
            r["time"] = c.clock
    assert wd.gate(a) == 3
    m = marker(tmp_path)
    assert m["reason"] == "3 start(s) in 60 min did not serve" and m["memory"] is False
    assert "journalctl -u sparkfleet-vllm" in m["step"]


def test_starts_outside_the_window_do_not_count(wd, monkeypatch, tmp_path):
    c = Cluster(wd, monkeypatch)
    a = gate_args(wd, tmp_path, window=100)
    for _start in range(5):
        assert wd.gate(a) == 0
        c.clock += 60
        for r in c.reports.values():
            r["time"] = c.clock


def test_a_report_older_than_the_last_start_is_waited_for(wd, monkeypatch, tmp_path, capsys):
    # the last engine lived less than one check of spark-2's watchdog: its report predates what that engine left
    c = Cluster(wd, monkeypatch)
    a = gate_args(wd, tmp_path, timeout=0)
    assert wd.gate(a) == 0
    c.clock += 5
    c.reports["10.99.1.11"]["time"] = c.clock
    assert wd.gate(a) == 3 and marker(tmp_path) is None
    assert "spark-2 (10.99.1.12): no memory report" in capsys.readouterr().err


def test_escalated_for_memory_starts_once_when_memory_is_back_and_never_loops(wd, monkeypatch, tmp_path):
    c = Cluster(wd, monkeypatch)
    c.reports["10.99.1.12"] = report(free=0.5 * GiB, available=0.6 * GiB, t=c.clock)
    assert wd.gate(gate_args(wd, tmp_path)) == 3
    v = vllm_args(wd)
    wd.check_vllm(v)                                   # still held: nothing started, the marker says what is held now
    assert not any(argv[:2] == ["systemctl", "start"] for argv in wd.calls) and marker(tmp_path)["checked"]
    c.reports["10.99.1.12"] = report(t=c.clock)       # spark-2 rebooted: back
    wd.check_vllm(v)
    assert ["systemctl", "start", "--no-block", "sparkfleet-vllm.service"] in wd.calls
    assert marker(tmp_path) is None and events(tmp_path)[-1]["event"] == "return"
    # that one start passes the gate; it does not serve: the next start escalates at once, not for memory
    assert wd.gate(gate_args(wd, tmp_path)) == 0
    assert wd.gate(gate_args(wd, tmp_path)) == 3
    m = marker(tmp_path)
    assert m["reason"] == "the start after every node's memory came back did not serve" and m["memory"] is False
    wd.calls.clear()
    wd.check_vllm(v)                                   # not for memory: the human step, no start
    assert not any(c[:2] == ["systemctl", "start"] for c in wd.calls) and marker(tmp_path)


def test_an_escalation_lifted_while_the_timer_reads_memory_is_not_written_back(wd, monkeypatch, tmp_path):
    # site.yml removes the marker and restarts the engine; the liveness timer, reading every node's memory over the
    # GCS at that moment, must not write the marker it loaded back (the deploy's restart was skipped on the lab).
    c = Cluster(wd, monkeypatch)
    c.reports["10.99.1.12"] = report(free=0.5 * GiB, available=0.6 * GiB, t=c.clock)
    assert wd.gate(gate_args(wd, tmp_path)) == 3 and marker(tmp_path)
    path = tmp_path / "run" / "sparkfleet" / "escalated-sparkfleet-vllm"
    read = c.cluster_memory

    def lifted_meanwhile(a, ops=None):
        path.unlink(missing_ok=True)                  # site.yml's "Lift an escalation" while the memory is read
        return read(a, ops)
    monkeypatch.setattr(wd, "cluster_memory", lifted_meanwhile)
    wd.check_vllm(vllm_args(wd))
    assert marker(tmp_path) is None
    # the memory back, and lifted while it was read: the deploy starts the engine, not this timer
    c.reports["10.99.1.12"] = report(t=c.clock)
    path.write_text(json.dumps({"time": 1.0, "memory": True, "reason": "r", "step": "s", "nodes": []}))
    wd.calls.clear()
    wd.check_vllm(vllm_args(wd))
    assert marker(tmp_path) is None and not any(argv[:2] == ["systemctl", "start"] for argv in wd.calls)


def test_a_start_that_served_forgets_the_failed_ones_and_keeps_the_baseline(wd, monkeypatch, tmp_path):
    c = Cluster(wd, monkeypatch)
    a = gate_args(wd, tmp_path)
    assert wd.gate(a) == 0 and wd.gate(a) == 0
    wd.mark_served(vllm_args(wd))
    base = json.loads((tmp_path / "state" / "memory-baseline-sparkfleet-vllm.json").read_text())
    assert base["nodes"] == {"10.99.1.11": int(0.5 * GiB), "10.99.1.12": int(0.5 * GiB)}
    assert not (tmp_path / "run" / "sparkfleet" / "starts-sparkfleet-vllm.json").exists()
    c.reports["10.99.1.12"]["used"] = int(0.5 * GiB + 0.3 * GiB)      # 0.3 GiB above: more than 5 % of 4 GiB
    assert wd.gate(gate_args(wd, tmp_path, timeout=0)) == 3
    assert "holds 0.3 GiB more than at its last healthy start" in marker(tmp_path)["nodes"][0]


def test_escalation_survives_a_full_disk(wd, monkeypatch, tmp_path):
    c = Cluster(wd, monkeypatch)
    c.reports["10.99.1.12"] = report(free=0.5 * GiB, available=0.6 * GiB, t=c.clock)

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(wd, "log_event", full)
    assert wd.gate(gate_args(wd, tmp_path)) == 3 and marker(tmp_path)["memory"] is True


# --------------------------------------------------------------------------- "served" by the engine's own counters
def test_served_by_its_counters(wd, monkeypatch):
    monkeypatch.setattr(wd, "http", lambda url, **kw: (200, 'vllm:generation_tokens_total{engine="0",model_name="m"} '
                                                            '12.0\n'))
    assert wd.served(vllm_args(wd), 100.0)
    monkeypatch.setattr(wd, "http", lambda url, **kw: (200, 'vllm:generation_tokens_total{engine="0"} 0.0\n'))
    monkeypatch.setattr(wd, "run", lambda argv, **kw: (0, "", ""))
    assert not wd.served(vllm_args(wd), 100.0)


def test_served_by_its_access_log_while_it_does_not_answer(wd, monkeypatch):
    # measured on main: answered requests, was paused 5 s later, and was left alone for its 30-minute start grace
    monkeypatch.setattr(wd, "http", lambda url, **kw: (None, "timed out"))
    journal = ('(APIServer pid=1) INFO:     10.99.1.11:40312 - "GET /v1/models HTTP/1.1" 200 OK\n'
               '(APIServer pid=1) INFO:     10.99.1.11:40318 - "POST /v1/completions HTTP/1.1" 200 OK\n')
    seen = []
    monkeypatch.setattr(wd, "run", lambda argv, **kw: seen.append(argv) or (0, journal, ""))
    assert wd.served(vllm_args(wd), 100.0)
    assert seen[0][:3] == ["journalctl", "-u", "sparkfleet-vllm.service"] and "--since" in seen[0]


def test_an_engine_that_served_unseen_is_judged_within_its_start_grace(wd, monkeypatch, tmp_path):
    monkeypatch.setattr(wd, "unit_run", lambda unit: (True, 100.0))
    monkeypatch.setattr(wd.time, "monotonic", lambda: 160.0)          # 60 s after its start: deep in the grace
    monkeypatch.setattr(wd, "probe", lambda *a: (False, "no token within 20 s"))
    monkeypatch.setattr(wd, "served", lambda a, start: True)
    calls = []
    monkeypatch.setattr(wd, "run", lambda argv, **kw: calls.append(argv) or (0, "false\n", ""))
    monkeypatch.setattr(wd, "http", lambda url, **kw: (None, "timed out"))
    v = vllm_args(wd, node=[])
    wd.check_vllm(v)
    wd.check_vllm(v)
    assert ["systemctl", "restart", "--no-block", "sparkfleet-vllm.service"] in calls


# --------------------------------------------------------------------------- what status.yml says of it
def test_status_yml_names_the_escalation_the_gate_wrote_and_the_human_step(wd, monkeypatch, tmp_path):
    from ansible_collections.sparkfleet.vllm.plugins.filter.serving_cause import serving_cause
    c = Cluster(wd, monkeypatch)
    c.reports["10.99.1.12"] = report(free=0.5 * GiB, available=0.6 * GiB, t=c.clock)
    assert wd.gate(gate_args(wd, tmp_path)) == 3
    text = (tmp_path / "run" / "sparkfleet" / "escalated-sparkfleet-vllm").read_text()
    head = "\n".join(["1090", "Id=sparkfleet-ray.service", "ActiveState=active", "SubState=running", "",
                      "Id=sparkfleet-vllm.service", "ActiveState=inactive", "SubState=dead", "Result=exit-code",
                      "NRestarts=1", ""])
    worker = "\n".join(["1090", "Id=sparkfleet-ray.service", "ActiveState=active", "SubState=running", ""])
    causes = serving_cause({"spark-1": {"stdout": head + "@@ escalated\n" + text + "\n"},
                            "spark-2": {"stdout": worker}}, "spark-1")
    assert causes == [
        "spark-1: vLLM (sparkfleet-vllm) is inactive/dead, restarted 1 time(s) by systemd and not started again: its"
        " supervision escalated 60 s ago (the memory did not come back within 30 s): spark-2: 1.5 GiB short for the"
        " engine (0.6 GiB available of 4.0 GiB, it takes 2.1 GiB); biggest holders: 1.0 GiB hog (pid 4242); once"
        " every node's memory is back at its baseline the liveness timer starts it once. Human step: reboot spark-2"
        " (unified memory held that no restart frees), then run site.yml"]
    history = serving_cause({"spark-1": {"stdout": head + "@@ events\n" + (tmp_path / "state" / "supervision.log")
                                         .read_text()}}, "spark-1", history=True)
    assert history[0].startswith("spark-1: sparkfleet-vllm ESCALATED (not started again) 60 s ago: the memory")


def test_a_start_that_served_is_known_to_the_gate_from_the_journal_without_the_liveness_timer(wd, monkeypatch, tmp_path):
    c = Cluster(wd, monkeypatch)
    a = gate_args(wd, tmp_path, starts=2)
    assert wd.gate(a) == 0 and wd.gate(a) == 0
    answered = '(APIServer pid=7) INFO:     10.99.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    monkeypatch.setattr(wd, "run", lambda argv, **kw: (0, answered if argv[0] == "journalctl" else "", ""))
    assert wd.gate(a) == 0                              # the last start served: the two before it are forgotten
    assert (tmp_path / "state" / "memory-baseline-sparkfleet-vllm.json").exists()
    monkeypatch.setattr(wd, "run", c.run)
    assert wd.gate(a) == 0 and wd.gate(a) == 3         # then two that did not serve: escalated


# --------------------------------------------------------------------------- a start job that failed on Ray's start
class Stopped:
    """vLLM down, Ray's state and vLLM's journal as the watchdog reads them."""

    def __init__(self, wd, monkeypatch, journal, ray_running=True, enabled="enabled"):
        self.wd, self.journal, self.enabled = wd, journal, enabled
        monkeypatch.setattr(wd, "unit_run", lambda unit: (ray_running, 5.0) if unit == "sparkfleet-ray" else (False, 0))
        monkeypatch.setattr(wd, "run", self.run)

    def run(self, argv, timeout=60, stdin=None):
        self.wd.calls.append(argv)
        if argv[:2] == ["systemctl", "show"]:
            return 0, "ActiveState=inactive\nUnitFileState=%s\n" % self.enabled, ""
        if argv[0] == "journalctl":
            return 0, self.journal, ""
        return 0, "", ""


# systemd 252's words on the lab (captured: `journalctl -u sparkfleet-vllm -n 3 -o cat`), when vLLM's start job was
# queued behind a Ray start its guard refused (port 6379 held)
DEPENDENCY = ("Stopped sparkfleet-vllm.service - sparkfleet vLLM API (sparklab/tiny-moe).\n"
              "Dependency failed for sparkfleet-vllm.service - sparkfleet vLLM API (sparklab/tiny-moe).\n"
              "sparkfleet-vllm.service: Job sparkfleet-vllm.service/start failed with result 'dependency'.\n")


@pytest.mark.parametrize("journal, ray_running, enabled, started", [
    (DEPENDENCY, True, "enabled", True),
    ("Dependency failed for sparkfleet-vllm.service - sparkfleet vLLM API (sparklab/tiny-moe).\n", True, "enabled",
     True),                                                     # an older systemd's single line
    (DEPENDENCY, False, "enabled", False),                       # Ray still down: nothing to start onto
    (DEPENDENCY, True, "disabled", False),                       # stop.yml disables it
    (DEPENDENCY + "Stopped sparkfleet vLLM API (sparklab/tiny-moe).\n", True, "enabled", False),   # stopped on purpose
    ("", True, "enabled", False),
])
def test_a_vllm_whose_start_failed_on_ray_s_is_started_once_ray_runs(wd, monkeypatch, tmp_path, journal, ray_running,
                                                                     enabled, started):
    Stopped(wd, monkeypatch, journal, ray_running, enabled)
    wd.check_vllm(vllm_args(wd))
    starts = [c for c in wd.calls if c[:2] == ["systemctl", "start"]]
    assert starts == ([["systemctl", "start", "--no-block", "sparkfleet-vllm.service"]] if started else [])
    assert [e["event"] for e in events(tmp_path)] == (["restart"] if started else [])


def test_a_node_silent_at_every_start_escalates_after_k_and_starts_once_it_reports(wd, monkeypatch, tmp_path):
    # never started into, but not for ever either: K refusals, then only the liveness timer watches
    c = Cluster(wd, monkeypatch)
    del c.reports["10.99.1.12"]
    a = gate_args(wd, tmp_path, timeout=0)
    assert wd.gate(a) == 3 and wd.gate(a) == 3 and marker(tmp_path) is None
    assert wd.gate(a) == 3
    m = marker(tmp_path)
    assert m["reason"] == "3 start(s) in 60 min found a node without a fresh memory report" and m["memory"] is True
    assert m["step"].startswith("bring spark-2 back")
    c.reports["10.99.1.12"] = report(t=c.clock)      # the worker is back and reports
    wd.check_vllm(vllm_args(wd))
    assert ["systemctl", "start", "--no-block", "sparkfleet-vllm.service"] in wd.calls and marker(tmp_path) is None


def test_a_head_gcs_that_does_not_answer_is_named_not_the_workers(wd, monkeypatch, tmp_path, capsys):
    c = Cluster(wd, monkeypatch)
    del c.reports["10.99.1.12"]
    monkeypatch.setattr(wd, "cluster_memory", lambda a, ops=None: (
        wd.parse_nodes(a.node), json.loads(json.dumps(c.reports)),
        {"ok": False, "error": "no answer from the GCS at 10.99.1.11:6379 within 20 s"}))
    a = gate_args(wd, tmp_path, timeout=0)
    assert wd.gate(a) == 3
    assert "the head's GCS does not answer (no answer from the GCS" in capsys.readouterr().err
    assert wd.gate(a) == 3 and wd.gate(a) == 3
    m = marker(tmp_path)
    assert m["step"] == "check the head's Ray (systemctl status sparkfleet-ray on the head), or run site.yml"


def test_a_marker_beside_a_running_unit_is_stale_and_the_engine_is_judged_again(wd, monkeypatch, tmp_path):
    # the unit runs although a marker is there (started by hand): supervised again, not left unjudged for ever
    c = Cluster(wd, monkeypatch)
    c.reports["10.99.1.12"] = report(free=0.5 * GiB, available=0.6 * GiB, t=c.clock)
    assert wd.gate(gate_args(wd, tmp_path)) == 3 and marker(tmp_path)
    monkeypatch.setattr(wd, "unit_run", lambda unit: (True, 50.0))
    probes = []
    monkeypatch.setattr(wd, "probe", lambda *a: probes.append(a) or (True, ""))
    wd.check_vllm(vllm_args(wd))
    assert marker(tmp_path) is None and probes


# --------------------------------------------------------------------------- the model checked where it is served
CHANGED = {"state": "changed", "changes": [{"file": "model-00002-of-00003.safetensors", "change": "changed"}],
           "msg": "model changed since the sync on spark-2: model-00002-of-00003.safetensors ctime moved (written, or "
                  "its metadata set); size and mtime kept: run site.yml"}


def test_the_gate_refuses_a_start_on_a_worker_whose_model_changed_and_escalates(wd, monkeypatch, tmp_path, capsys):
    c = Cluster(wd, monkeypatch)
    c.reports["10.99.1.12"]["model"] = CHANGED
    assert wd.gate(gate_args(wd, tmp_path)) == 3
    m = marker(tmp_path)
    assert m["memory"] is False and m["reason"] == CHANGED["msg"]
    assert m["step"].startswith("run site.yml")
    err = capsys.readouterr().err
    assert "ESCALATED" in err and "spark-2" in err and "model-00002-of-00003.safetensors" in err and "run site.yml" in err
    assert not (tmp_path / "run" / "sparkfleet" / "starts-sparkfleet-vllm.json").exists()


def test_the_gate_waits_for_a_model_check_made_after_it_began(wd, monkeypatch, tmp_path):
    """A worker's check from before this start (the deploy's repair came after it) is not taken as its word."""
    c = Cluster(wd, monkeypatch)
    c.reports["10.99.1.12"].update(time=c.clock - 10, model=CHANGED)
    fresh = dict(CHANGED, state="ok", changes=[], msg="model on spark-2 as the sync of ... left it")

    def sleep(s):
        c.clock += s
        c.reports["10.99.1.12"].update(time=c.clock, model=fresh)
    monkeypatch.setattr(wd.time, "sleep", sleep)
    assert wd.gate(gate_args(wd, tmp_path)) == 0
    assert marker(tmp_path) is None


def test_a_model_unchecked_on_a_node_never_blocks_a_start(wd, monkeypatch, tmp_path):
    c = Cluster(wd, monkeypatch)
    c.reports["10.99.1.12"]["model"] = {"state": "unrecorded", "changes": [], "msg": "no model manifest"}
    assert wd.gate(gate_args(wd, tmp_path)) == 0


def test_each_node_reports_its_model_check_with_its_memory(wd, monkeypatch, tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "sparkfleet_model", str(FILES.parents[2] / "plugins" / "module_utils" / "sync" / "_model_manifest.py"))
    lib = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lib)
    root = tmp_path / "m"
    root.mkdir()
    (root / "config.json").write_text("{}")
    manifest = str(tmp_path / "manifest.json")
    lib.write_atomic(manifest, lib.build(str(root), "spark-2"))
    monkeypatch.setattr(wd, "MODEL", lib)
    monkeypatch.setattr(wd, "MODEL_MANIFEST", manifest)
    monkeypatch.setattr(wd.MEM, "drop_file_cache", lambda d: 0)
    monkeypatch.setattr(wd.MEM, "measure", lambda: {"total": 1, "available": 1})
    assert wd.memory_report("10.99.1.12", str(root), False)["model"]["state"] == "ok"
    (root / "config.json").write_text('{"x": 1}')
    got = wd.memory_report("10.99.1.12", str(root), False)["model"]
    assert got["state"] == "changed" and got["changes"][0]["file"] == "config.json"
    monkeypatch.setattr(wd, "MODEL", None)
    assert wd.memory_report("10.99.1.12", str(root), False)["model"]["state"] == "unrecorded"


class GpuWait(Cluster):
    """The cluster as above, and sparkfleet-wait gpus answering rc (3: short of GPUs when the wait timed out)."""

    def __init__(self, wd, monkeypatch, rc=0):
        super().__init__(wd, monkeypatch)
        self.rc = rc

    def run(self, argv, timeout=60, stdin=None):
        self.wd.calls.append(argv)
        if argv[:2] == [self.wd.WAIT_BIN, "gpus"]:
            if self.rc:
                return self.rc, "", ("sparkfleet-wait: sparkfleet-ray not running or its Ray cluster short of 2 GPUs"
                                     " after 600 s\n")
            return 0, "cluster GPUs: 2.0 of 2\n", ""
        return 0, "", ""


def test_the_gate_waits_for_the_clusters_gpus_before_the_memory(wd, monkeypatch, tmp_path):
    GpuWait(wd, monkeypatch)
    assert wd.gate(gate_args(wd, tmp_path, gpu_wait=["sparkfleet-ray", "2", "600"])) == 0
    assert [wd.WAIT_BIN, "gpus", "sparkfleet-ray", "2", "600"] in wd.calls


def test_a_gpu_wait_that_ends_short_is_a_bounded_refusal_not_a_start_for_ever(wd, monkeypatch, tmp_path, capsys):
    # A worker away for good: before, the unit's own GPU wait failed and systemd started it again every 600 s, for
    # ever. Now each short wait is a refusal; after K the escalation names the node, and the liveness timer starts
    # the engine once every node reports again.
    c = GpuWait(wd, monkeypatch, rc=3)
    del c.reports["10.99.1.12"]
    a = gate_args(wd, tmp_path, timeout=0, gpu_wait=["sparkfleet-ray", "2", "600"])
    assert wd.gate(a) == 3 and wd.gate(a) == 3 and marker(tmp_path) is None
    err = capsys.readouterr().err
    assert "short of 2 GPUs after 600 s" in err
    # vllm_wait follows a refused start to the next one by these words (plugins/module_utils/engine/_vllm_log.py)
    assert [m.groups() for m in map(_vllm_log.GATE_REFUSED_RE.search, err.splitlines()) if m] == [("1", "3"), ("2", "3")]
    assert wd.gate(a) == 3
    m = marker(tmp_path)
    assert m["reason"].startswith("3 start(s) in 60 min found the cluster did not have the engine's GPUs") and m["memory"]
    assert m["step"].startswith("bring spark-2 back")
    assert json.loads((tmp_path / "run" / "sparkfleet" / "starts-sparkfleet-vllm.json").read_text())["starts"] == []
    c.reports["10.99.1.12"] = report(t=c.clock)
    c.rc = 0
    wd.check_vllm(vllm_args(wd))
    assert ["systemctl", "start", "--no-block", "sparkfleet-vllm.service"] in wd.calls and marker(tmp_path) is None


def test_a_gpu_wait_short_with_every_node_reporting_names_the_heads_ray(wd, monkeypatch, tmp_path):
    GpuWait(wd, monkeypatch, rc=3)
    a = gate_args(wd, tmp_path, timeout=0, gpu_wait=["sparkfleet-ray", "2", "600"])
    assert [wd.gate(a) for attempt in range(3)] == [3, 3, 3]
    assert marker(tmp_path)["step"] == ("check the head's Ray (systemctl status sparkfleet-ray on the head), or run"
                                        " site.yml")
