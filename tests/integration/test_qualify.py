"""`sparkfleet qualify` (playbooks/qualify.yml) on the deployed lab: the report and its chart, a figure or a reason on
every line, and nothing about serving changed while the API kept answering."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._qualify import VERDICTS

pytestmark = pytest.mark.lab

# What the lab cannot measure honestly: no RDMA tool or device, no GPU. These lines must say so.
NOT_HERE = ("RDMA write bandwidth", "RDMA write latency", "RoCE path MTU in use", "NCCL all-reduce bus bandwidth",
            "NCCL transport", "inter-token latency")


def sparkfleet(lab, reports, *args, timeout=600):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(PYTHONPATH=str(lab.repo / "cli"), PATH="%s:%s" % (lab.repo / ".venv" / "bin", env.get("PATH", "")))
    return subprocess.run([str(lab.repo / "lab" / "labctl"), "ctl", "--", str(lab.repo / ".venv" / "bin" / "python"),
                           "-m", "sparkfleet_cli", *args, "--plain", "--reports", str(reports)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=str(lab.repo))


def leftovers(lab, host):
    """Anything of a qualification still running on a host: listeners on its ports, its tools, its processes in the
    Ray container."""
    ports = lab.sh(host, "ss -Hltn | awk '{print $4}' | grep -E ':(2964[0-9]|296[5-9][0-9])$' || true").stdout.split()
    procs = lab.sh(host, "ps -eo args | grep -E 'fabric_bench|allreduce_bench|disk_bench|serving_bench|iperf3|ib_write'"
                         " | grep -v grep || true").stdout.split("\n")
    inside = lab.sh(host, "docker exec sparkfleet-ray ps -eo args | grep SPARKFLEET_ALLREDUCE | grep -v grep || true")
    return [p for p in ports + procs + inside.stdout.split("\n") if p.strip()]


def temp_files(lab, host):
    """The names in /tmp and /var/tmp on the host and in /tmp of its Ray container (Ray's own /tmp/ray aside). runc's
    `runc-process*` files are left out: runc writes one for the length of each `docker exec` (the watchdogs' checks
    run every 15 s), so a listing can catch one in passing (CI J, 2 Dec)."""
    host_side = [n for n in lab.sh(host, "ls -A /tmp /var/tmp").stdout.split() if not n.startswith("runc-process")]
    inside = lab.sh(host, "docker exec sparkfleet-ray ls -A /tmp").stdout
    return sorted(set(host_side) | set("container:" + n for n in inside.split() if n != "ray"))


def test_qualify_reports_every_figure_and_changes_nothing(lab, serving, tmp_path):
    before = {h: lab.services(h) for h in lab.hosts}
    files = {h: temp_files(lab, h) for h in lab.hosts}
    answers = []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            t0 = time.time()
            answers.append(lab.completion("still there?", max_tokens=2, timeout=30)[0])
            stop.wait(max(1.0 - (time.time() - t0), 0.1))

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        p = sparkfleet(lab, tmp_path / "reports", "qualify", "-i", str(lab.inventory))
    finally:
        stop.set()
        poller.join(60)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]

    # The API answered a real completion throughout the load test (the poller's requests queue behind the test's).
    assert len(answers) >= 5 and all(code == 200 for code in answers), answers
    # Nothing about serving changed: unit files, units, the same containers; no task changed anything but the one
    # that leaves the qualified figures for Prometheus on the head (issue 42: a new measurement each run).
    assert {h: lab.services(h) for h in lab.hosts} == before
    log = p.stdout.strip().splitlines()[-1]
    assert log.startswith("events: ")
    events = [json.loads(line) for line in open(log[len("events: "):])]
    stats = [e for e in events if e["event"] == "playbook_on_stats"][-1]["event_data"]
    assert not stats.get("failures"), stats
    changed = [(e["event_data"].get("host"), e["event_data"].get("task")) for e in events
               if e["event"] == "runner_on_ok" and (e["event_data"].get("res") or {}).get("changed")]
    assert changed == [(lab.hosts[0], "Leave the qualified figures for Prometheus on the head")], changed
    for host in lab.hosts:
        assert leftovers(lab, host) == [], host
        assert sorted(set(temp_files(lab, host)) - set(files[host])) == [], host   # no file left behind

    # The report: report.json's qualify section, its table and chart, through the report callback.
    latest = tmp_path / "reports" / "latest"
    report = json.loads((latest / "report.json").read_text())
    section = report["qualify"]
    assert report["playbook"] == "qualify.yml" and report["status"] == "successful"
    assert (latest / "qualify.png").stat().st_size > 10000
    table = (latest / "qualify.txt").read_text()
    assert table.startswith("qualify: ") and "sources:" in table and table.rstrip() in p.stdout
    lines = section["lines"]
    assert {ln["group"] for ln in lines} == {"fabric", "nccl", "disk", "serving"}
    for ln in lines:
        assert ln["verdict"] in VERDICTS and ln["verdict"] not in ("failed", "not run"), ln
        if ln["value"] is not None:
            assert ln["value"] > 0, ln                                   # every lab figure is a real, non-zero one
        if ln["verdict"] == "not measurable here":
            assert ln["value"] is None and ln["note"], ln                # and says why
        if ln["verdict"] == "below":
            assert ln["note"], ln                                        # with the likely cause
    for figure in NOT_HERE:
        found = [ln for ln in lines if ln["figure"].startswith(figure)]
        assert found and all(ln["verdict"] == "not measurable here" for ln in found), (figure, found)

    def one(figure, where=""):
        found = [ln for ln in lines if ln["figure"].startswith(figure) and where in ln["where"]]
        assert found, (figure, where)
        return found

    assert one("TCP bandwidth", "spark-1 -> spark-2")[0]["tool"] == "python"   # no iperf3 on the lab's hosts
    assert one("TCP latency", "spark-1 -> spark-2")[0]["value"] > 0
    gloo = one("gloo all-reduce")[0]
    assert gloo["value"] > 0 and gloo["tool"] == "torch.distributed (gloo)"
    for host in lab.hosts:
        assert one("cold sequential read", host)[0]["value"] > 0
        assert one("MTU of the fabric interface", host)[0]["value"] == 9000
    levels = section["serving"]
    assert [lv["concurrency"] for lv in levels] == [1, 4, 16, 64]
    assert all(lv["ok"] == lv["requests"] > 0 and lv["output_tok_s"] > 0 and lv["ttft_ms"]["p50"] > 0
               for lv in levels)
    assert section["serving_tool"] == "client"                        # the stand-in has no `vllm bench serve`
    # The API key is never logged, nor written into the report.
    key = lab.api_key()
    assert key not in p.stdout and key not in open(log[len("events: "):]).read()
    assert not any(key in f.read_text(errors="replace") for f in latest.iterdir() if f.suffix in (".json", ".txt"))


def test_every_step_can_be_skipped_and_says_so(lab, serving, tmp_path):
    p = sparkfleet(lab, tmp_path / "reports", "qualify", "-i", str(lab.inventory),
                   "--skip-tags", "fabric,nccl,disk,serving")
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    section = json.loads((tmp_path / "reports" / "latest" / "report.json").read_text())["qualify"]
    not_run = {ln["group"] for ln in section["lines"] if ln["verdict"] == "not run"}
    assert not_run == {"fabric", "nccl", "disk", "serving"}, section["lines"]
    assert all("--skip-tags" in ln["note"] for ln in section["lines"] if ln["verdict"] == "not run")
    # What needs no measurement is still reported: each node's MTU.
    assert [ln["value"] for ln in section["lines"] if ln["figure"] == "MTU of the fabric interface"] == [9000, 9000]
