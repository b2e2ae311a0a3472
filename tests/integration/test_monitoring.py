"""Monitoring on the lab's real Prometheus: every alert's measure and every dashboard query returns series after a
deploy, every rule evaluates without error, our supervision metrics come from every node, and three alerts fired with
lab knobs (a paused engine, a memory hog on a node, a Ray node gone) reach a webhook through Alertmanager."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
WEBHOOK_PORT = 19095


def _assets():
    spec = importlib.util.spec_from_file_location("monitoring_assets", REPO / "scripts" / "monitoring_assets.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def prom(lab, path, **params):
    """Prometheus's HTTP API from the control namespace: the decoded JSON, or None when nothing answered."""
    # the head's management address (the API's), as an operator reaches it
    url = lab.api_url.rsplit(":", 1)[0] + ":9090" + path + ("?" + urllib.parse.urlencode(params) if params else "")
    p = lab.ctl("curl", "-sS", "-m", "20", url, timeout=60)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return None


def ready(lab):
    """Whether Prometheus answers /-/ready (200) from the control namespace."""
    url = lab.api_url.rsplit(":", 1)[0] + ":9090/-/ready"
    return lab.ctl("curl", "-sS", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}", url, timeout=60).stdout == "200"


def query(lab, expr):
    """(series returned, error or None)."""
    answer = prom(lab, "/api/v1/query", query=expr)
    if not answer:
        return [], "no answer from Prometheus"
    if answer.get("status") != "success":
        return [], answer.get("error", "status %s" % answer.get("status"))
    return answer["data"]["result"], None


@pytest.fixture(scope="module")
def monitored(lab, serving, tmp_path_factory):
    """A lab that serves with the monitoring deployed (a lab deployed before the role existed gets it now), and a
    few real completions, so the engine's counters and histograms have moved."""
    if not ready(lab):
        r, failures = lab.play(tmp_path_factory.mktemp("monitoring"), "playbooks/monitoring.yml")
        assert r["status"] == "successful" and not failures, lab.messages(failures)
    for i in range(5):
        assert lab.completion("monitor %d" % i, max_tokens=4)[0] == 200
    return lab


def test_every_target_is_up(monitored):
    want = {(job, host) for job in ("node", "ray") for host in monitored.hosts} | {("vllm", monitored.hosts[0]),
                                                                                  ("prometheus", monitored.hosts[0])}

    def up():
        series, _err = query(monitored, "up == 1")
        return want <= {(s["metric"]["job"], s["metric"].get("node")) for s in series}
    assert monitored.wait_for(up, 120, step=5) is not None, query(monitored, "up")


def test_every_alert_measure_and_panel_query_returns_series(monitored):
    """After a deploy every expression the rules and the dashboards use returns series on the real Prometheus (two
    scrapes at least for the rates): a metric name wrong in the stand-in, the exporters or the rules fails here."""
    assets = _assets()
    exprs = [(what, expr) for what, expr in _expressions(assets) if not assets.needs_qualification(expr)]
    missing = []

    def all_return():
        missing[:] = []
        for what, expr in exprs:
            series, err = query(monitored, expr)
            if err or not series:
                missing.append("%s: %s (%s)" % (what, expr, err or "no series"))
        return not missing
    monitored.wait_for(all_return, 180, step=15)
    assert not missing, "\n".join(missing)


def _expressions(assets):
    """Every expression the rules and the dashboards use: (what, expr)."""
    exprs = [("alert " + name, expr) for name, expr in assets.alert_measures()]
    exprs += [("panel %s / %s" % (board, title), expr) for board, title, expr in assets.panel_queries()]
    exprs += [("record " + name, name) for name, _expr in assets.RECORDS]
    return exprs


def firing_alerts(lab):
    """(alertname, node) of every alert Prometheus has firing."""
    answer = prom(lab, "/api/v1/alerts") or {}
    return {(a["labels"]["alertname"], a["labels"].get("node")) for a in (answer.get("data") or {}).get("alerts", [])
            if a.get("state") == "firing"}


@pytest.mark.long
@pytest.mark.fault(name="the head's fabric link down after a qualification",
                   expected="qualify.yml leaves its figures on the head; every rule and panel reading them returns "
                            "series; SparkfleetFabricBelowQualified fires for the head only, and clears with the link")
def test_qualified_figures_reach_prometheus_and_a_fabric_link_down_fires(monitored, tmp_path, observe):
    """Issue 42 item 2: qualify.yml's figures (the textfile collector on the head) against the live fabric."""
    lab = monitored
    head, worker = lab.hosts[0], lab.hosts[-1]
    r, failures = lab.play(tmp_path / "qualify", "playbooks/qualify.yml", cmdline="--skip-tags disk,serving")
    assert r["status"] == "successful" and not failures, lab.messages(failures)
    text = lab.host_exec(head, "cat", "/var/lib/prometheus/node-exporter/sparkfleet-qualified.prom").stdout
    for host in lab.hosts:   # both ends of the pair's TCP test, at each one's fabric interface
        assert 'sparkfleet_qualified_fabric_bandwidth_bytes{device="enp1s0f1np1",fabric_node="%s",pair=' % host in text
    assets = _assets()
    exprs = [(what, expr) for what, expr in _expressions(assets) if assets.needs_qualification(expr)]
    assert any(what == "alert SparkfleetFabricBelowQualified" for what, _e in exprs)
    missing = []

    def all_return():
        missing[:] = []
        for what, expr in exprs:
            series, err = query(lab, expr)
            if err or not series:
                missing.append("%s: %s (%s)" % (what, expr, err or "no series"))
        return not missing
    lab.wait_for(all_return, 180, step=15)
    assert not missing, "\n".join(missing)
    series, err = query(lab, "sparkfleet:qualified_fabric_link_speed_bytes:by_node")
    assert not err and {s["metric"]["node"] for s in series} == set(lab.hosts), series
    assert not {a for a in firing_alerts(lab) if a[0] == "SparkfleetFabricBelowQualified"}

    # The head's link: Prometheus scrapes every exporter at its fabric address, so a worker whose link is down (the
    # lab's switch keeps the head's side up) is seen only as an exporter gone; the head's own exporter answers on its
    # own address and reports its link down (on two Sparks cabled directly both ends lose the carrier). Seen on the
    # lab: firing 79 s after `break fabric-down spark-1`; nothing for spark-2's.
    t0 = time.time()
    lab.labctl("break", "fabric-down", head)
    try:
        fired = lab.wait_for(lambda: ("SparkfleetFabricBelowQualified", head) in firing_alerts(lab), 300, step=5)
        assert fired is not None, firing_alerts(lab)
        assert ("SparkfleetFabricBelowQualified", worker) not in firing_alerts(lab)
        observe("SparkfleetFabricBelowQualified firing for %s %.0f s after its link went down"
                % (head, time.time() - t0))
    finally:
        lab.labctl("fix", "fabric-down", head, check=False)
    cleared = lab.wait_for(lambda: ("SparkfleetFabricBelowQualified", head) not in firing_alerts(lab), 180, step=5)
    assert cleared is not None, firing_alerts(lab)
    if lab.wait_serving(limit=300, fail=False) is None:
        lab.ensure_serving(tmp_path / "serve")


def test_every_rule_evaluates_without_error(monitored):
    answer = prom(monitored, "/api/v1/rules")
    assert answer and answer["status"] == "success", answer
    rules = [r for g in answer["data"]["groups"] for r in g["rules"]]
    names = {r["name"] for r in rules}
    assert {name for name, *_rest in _assets().ALERTS} <= names
    bad = ["%s: %s %s" % (r["name"], r.get("health"), r.get("lastError", "")) for r in rules if r.get("health") != "ok"]
    assert not bad, bad


def test_supervision_metrics_come_from_every_node(monitored):
    series, err = query(monitored, "sparkfleet_memory_used_bytes")
    assert not err and {s["metric"]["node"] for s in series} == set(monitored.hosts), series
    # the head keeps every node's baseline, by node name
    series, err = query(monitored, "sparkfleet:memory_baseline_bytes:by_node")
    assert not err and {s["metric"]["node"] for s in series} == set(monitored.hosts), series
    # the engine's real counters moved with the fixture's completions (5 x 4 tokens): Prometheus has them once it
    # scraped after the last one (a query between scrapes reads the scrape before; that read 10 of them in CI)
    def counted():
        series, err = query(monitored, "vllm:generation_tokens_total")
        return not err and series and float(series[0]["value"][1]) >= 20
    assert monitored.wait_for(counted, 90, step=5) is not None, query(monitored, "vllm:generation_tokens_total")


def test_prometheus_answers_only_where_the_firewall_allows(monitored):
    """The head's management network (the control namespace is on it) and the fabric subnet reach the monitoring
    ports; another network (the fabric's B twin, 10.99.2.0/24, in no allow list) is refused by our table."""
    head, worker = monitored.hosts[0], monitored.hosts[-1]
    assert ready(monitored)
    base = "curl -sS -m 5 -o /dev/null -w '%{http_code}' "
    ok = monitored.sh(worker, base + "http://%s:9100/metrics" % monitored.fabric_ip(head))
    assert ok.stdout.strip() == "200", ok.stdout + ok.stderr
    refused = monitored.sh(worker, base + "--interface %s http://%s:9090/-/ready"
                           % (monitored.fabric_ip(worker, "b"), monitored.fabric_ip(head, "b")))
    assert refused.stdout.strip() == "000" and refused.returncode != 0, refused.stdout + refused.stderr
    table = monitored.sh(head, "nft list table inet sparkfleet_monitoring").stdout
    assert "elements = { 9090, 9093, 9100 }" in table, table


# ------------------------------------------------------------------------------------------- alerts to a webhook
WEBHOOK = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        with open(sys.argv[1], "ab") as fh:
            fh.write(body.replace(b"\n", b" ") + b"\n")
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("10.99.0.1", int(sys.argv[2])), H).serve_forever()
"""


@pytest.mark.long
@pytest.mark.fault(name="engine paused, memory hog on a node, a Ray node gone",
                   expected="SparkfleetEngineDown, SparkfleetMemoryAboveBaseline and SparkfleetRayNodeMissing reach the "
                            "webhook, each naming its node")
def test_three_alerts_fired_by_lab_knobs_reach_the_webhook(monitored, tmp_path, observe):
    lab = monitored
    head, worker = lab.hosts[0], lab.hosts[-1]
    received = tmp_path / "webhook.jsonl"
    received.touch()
    # The baseline is each node's memory before the engine starts: a hog of 1 GiB on the worker crosses a 512 MiB
    # threshold once no engine serves; the head, back at its baseline, does not.
    threshold_mb = 512
    labctl = str(lab.repo / "lab" / "labctl")
    hook = subprocess.Popen([labctl, "ctl", "--", "python3", "-c", WEBHOOK, str(received), str(WEBHOOK_PORT)])
    t0 = time.time()
    try:
        r, failures = lab.play(tmp_path / "run", "playbooks/monitoring.yml", extravars={
            "monitoring_webhook_url": "http://10.99.0.1:%d/alerts" % WEBHOOK_PORT,
            "monitoring_alert_memory_above_baseline_mb": threshold_mb})
        assert r["status"] == "successful" and not failures, lab.messages(failures)
        # a fresh notification log: Alertmanager sends an alert it already sent (an earlier run) only after
        # repeat_interval (4 h)
        lab.sh(head, "systemctl stop prometheus-alertmanager && rm -f /var/lib/prometheus/alertmanager/nflog "
                     "&& systemctl start prometheus-alertmanager")

        def firing():
            out = set()
            for line in received.read_text().splitlines():
                for alert in json.loads(line).get("alerts", []):
                    if alert.get("status") == "firing":
                        out.add((alert["labels"]["alertname"], alert["labels"].get("node")))
            return out

        # 1 GiB held on the worker and the engine paused on the head: the watchdog restarts the paused engine, the
        # memory gate refuses the start while the worker holds the hog (and escalates): the engine is down, and no
        # engine serving, the worker is above its baseline; each alert names its node
        lab.labctl("break", "hog", worker, "1024")
        lab.labctl("break", "engine-pause", head)
        want = {("SparkfleetEngineDown", head), ("SparkfleetMemoryAboveBaseline", worker)}
        seen = lab.wait_for(lambda: want <= firing(), 420, step=5)
        assert seen is not None, firing()
        assert ("SparkfleetMemoryAboveBaseline", head) not in firing()
        lab.labctl("fix", "engine-pause", head)
        lab.labctl("fix", "hog", worker)
        # the worker's Ray stopped: its metrics export is gone
        lab.host_exec(worker, "systemctl", "stop", "sparkfleet-ray")
        seen_ray = lab.wait_for(lambda: ("SparkfleetRayNodeMissing", worker) in firing(), 300, step=5)
        assert seen_ray is not None, firing()
        observe("%s reached the webhook in %.0f s" % (", ".join(sorted(a for a, _n in firing())), time.time() - t0))
    finally:
        lab.labctl("fix", "engine-pause", head, timeout=120, check=False)
        lab.labctl("fix", "hog", worker, timeout=120, check=False)
        lab.host_exec(worker, "systemctl", "start", "sparkfleet-ray")
        hook.terminate()
        hook.wait(10)
        # the default configuration again (no webhook, default thresholds), and a cluster that serves
        lab.play(tmp_path / "restore", "playbooks/monitoring.yml")
    if lab.wait_serving(limit=300, fail=False) is None:
        lab.ensure_serving(tmp_path / "serve")
