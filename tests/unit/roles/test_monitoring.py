"""The monitoring role's rules, dashboards and textfile collector: promtool checks and unit-tests the alert rules
(synthetic series), every dashboard query parses, the committed files are what scripts/monitoring_assets.py builds,
and the supervision metrics are valid exposition text that counts only up."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import types
from pathlib import Path

import jinja2
import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "monitoring"
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool (Debian's prometheus package, lab/requirements-apt.txt) missing")


def _assets():
    spec = importlib.util.spec_from_file_location("monitoring_assets", REPO / "scripts" / "monitoring_assets.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _textfile():
    path = ROLE / "files" / "sparkfleet_textfile.py"
    mod = types.ModuleType("sparkfleet_textfile")
    mod.__file__ = str(path)
    exec(compile(path.read_text(), str(path), "exec"), mod.__dict__)     # no __pycache__ in the role's files/
    return mod


def _thresholds(**overrides):
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values.update(overrides)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    return env.from_string((ROLE / "templates" / "thresholds.yml.j2").read_text()).render(**values)


def _promtool(*args, cwd):
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, check=False)


def test_committed_rules_and_dashboards_are_the_generated_ones():
    for path, text in _assets().generated().items():
        assert Path(path).read_text() == text, "%s is stale: run scripts/monitoring_assets.py" % path


def test_the_rules_file_reads_back_as_the_rules_built():
    assets = _assets()
    assert yaml.safe_load(assets.rules_text()) == assets.alert_rules()
    assert max(len(line) for line in assets.rules_text().splitlines()) <= 120


def test_every_alert_named_in_the_issue_exists():
    names = {a[0] for a in _assets().ALERTS}
    assert {"SparkfleetEngineNotGenerating", "SparkfleetMemoryAboveBaseline", "SparkfleetPageCacheCrowding",
            "SparkfleetKVCacheNearFull", "SparkfleetQueueTimeRising", "SparkfleetRayNodeMissing",
            "SparkfleetRestarts", "SparkfleetEscalated", "SparkfleetModelDiskNearFull"} <= names


@needs_promtool
def test_promtool_accepts_the_rules_and_the_thresholds(tmp_path):
    (tmp_path / "thresholds.yml").write_text(_thresholds())
    run = _promtool("check", "rules", str(REPO / "roles/monitoring/files/prometheus/alerts.yml"),
                    str(tmp_path / "thresholds.yml"), cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


@needs_promtool
def test_every_dashboard_query_is_valid_promql(tmp_path):
    rules = {"groups": [{"name": "panels", "rules": [
        {"record": "panel:query_%d" % i, "expr": expr} for i, (_f, _t, expr) in enumerate(_assets().panel_queries())]}]}
    (tmp_path / "panels.yml").write_text(yaml.safe_dump(rules))
    run = _promtool("check", "rules", "panels.yml", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


def test_dashboards_are_import_ready_grafana_json():
    for name, board in _assets().dashboards().items():
        assert board["uid"].startswith("sparkfleet-") and board["panels"], name
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), name
        for panel in board["panels"]:
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"] and all(t["expr"] for t in panel["targets"])
        json.loads((ROLE / "files" / "dashboards" / name).read_text())


# promtool test rules: synthetic series, 1-minute steps; each case names the alerts expected at a time
_NODE = 'job="node",instance="10.99.1.11:9100",node="spark-1"'
_NODE2 = 'job="node",instance="10.99.1.12:9100",node="spark-2"'
_HEAD = 'job="node",instance="10.99.1.11:9100",node="spark-1",baseline_node="%s",unit="sparkfleet-vllm"'
_VLLM = 'job="vllm",instance="10.99.0.11:30000",node="spark-1",engine="0",model_name="tiny"'
GiB = 1 << 30


def _case(series, alerts, at="10m"):
    return {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series],
            "alert_rule_test": [{"eval_time": at, "alertname": name, "exp_alerts": exp} for name, exp in alerts]}


def _run_rule_tests(tmp_path, cases, annotations=False):
    """promtool compares annotations too: cases about when an alert fires leave them out (annotations=False)."""
    (tmp_path / "thresholds.yml").write_text(_thresholds())
    rules = yaml.safe_load((REPO / "roles/monitoring/files/prometheus/alerts.yml").read_text())
    if not annotations:
        for group in rules["groups"]:
            for rule in group["rules"]:
                rule.pop("annotations", None)
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(rules))
    (tmp_path / "tests.yml").write_text(yaml.safe_dump({
        "rule_files": ["alerts.yml", "thresholds.yml"], "evaluation_interval": "1m", "tests": cases}))
    return _promtool("test", "rules", "tests.yml", cwd=tmp_path)


@needs_promtool
def test_memory_above_baseline_fires_while_no_engine_serves_for_the_node_that_grew_only(tmp_path):
    def series(engine_up):
        return [
            ("up{%s}" % _VLLM, ("%d+0x15" % engine_up)),
            ("sparkfleet_memory_used_bytes{%s}" % _NODE, "%d+0x15" % (10 * GiB)),
            ("sparkfleet_memory_used_bytes{%s}" % _NODE2, "%d+%dx15" % (10 * GiB, GiB)),  # +1 GiB a minute
            ("sparkfleet_memory_baseline_bytes{%s}" % (_HEAD % "spark-1"), "%d+0x15" % (10 * GiB)),
            ("sparkfleet_memory_baseline_bytes{%s}" % (_HEAD % "spark-2"), "%d+0x15" % (10 * GiB)),
        ]
    exp = [{"exp_labels": {"node": "spark-2", "severity": "warning"}}]
    run = _run_rule_tests(tmp_path, [_case(series(0), [("SparkfleetMemoryAboveBaseline", [])], at="3m"),
                                     _case(series(0), [("SparkfleetMemoryAboveBaseline", exp)], at="8m"),
                                     # a serving engine's own memory is above the baseline: no alert for it
                                     _case(series(1), [("SparkfleetMemoryAboveBaseline", [])], at="8m")])
    assert run.returncode == 0, run.stdout + run.stderr


@needs_promtool
def test_memory_creeping_while_the_engine_serves(tmp_path):
    series = [("up{%s}" % _VLLM, "1x30"),
              ("sparkfleet_memory_used_bytes{%s}" % _NODE, "%dx30" % (90 * GiB)),
              # flat for 15 minutes, then a foreign holder takes 8 GiB
              ("sparkfleet_memory_used_bytes{%s}" % _NODE2, "%dx15 %dx15" % (90 * GiB, 98 * GiB))]
    exp = [{"exp_labels": {"node": "spark-2", "severity": "warning"}}]
    run = _run_rule_tests(tmp_path, [_case(series, [("SparkfleetMemoryCreeping", [])], at="14m"),
                                     _case(series, [("SparkfleetMemoryCreeping", exp)], at="18m")])
    assert run.returncode == 0, run.stdout + run.stderr
    # the engine restarted within the window (its own memory placed again): no creep
    restarted = [("up{%s}" % _VLLM, "1x12 0 1x17")] + series[1:]
    run = _run_rule_tests(tmp_path, [_case(restarted, [("SparkfleetMemoryCreeping", [])], at="18m")])
    assert run.returncode == 0, run.stdout + run.stderr


@needs_promtool
def test_memory_threshold_is_the_variable(tmp_path):
    series = [("up{%s}" % _VLLM, "0x15"),
              ("sparkfleet_memory_used_bytes{%s}" % _NODE, "%d+0x15" % (14 * GiB)),
              ("sparkfleet_memory_baseline_bytes{%s}" % (_HEAD % "spark-1"), "%d+0x15" % (10 * GiB))]
    run = _run_rule_tests(tmp_path, [_case(series, [("SparkfleetMemoryAboveBaseline", [])])])   # 4 GiB: not above
    assert run.returncode == 0, run.stdout + run.stderr
    (tmp_path / "thresholds.yml").write_text(_thresholds(monitoring_alert_memory_above_baseline_mb=2048))
    run = _promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert run.returncode != 0, "a 2 GiB threshold must fire on 4 GiB above baseline"


@needs_promtool
def test_engine_down_and_ray_node_missing_and_exporter_down(tmp_path):
    series = [('up{%s}' % _VLLM, "1 1 0x10"),
              ('up{job="ray",instance="10.99.1.12:6385",node="spark-2"}', "1x3 0x10"),
              ('up{job="ray",instance="10.99.1.11:6385",node="spark-1"}', "1x13"),
              ('up{%s}' % _NODE2, "1x13")]
    run = _run_rule_tests(tmp_path, [_case(series, [
        ("SparkfleetEngineDown", [{"exp_labels": {"job": "vllm", "instance": "10.99.0.11:30000", "node": "spark-1",
                                                  "engine": "0", "model_name": "tiny", "severity": "critical"}}]),
        ("SparkfleetRayNodeMissing", [{"exp_labels": {"job": "ray", "instance": "10.99.1.12:6385", "node": "spark-2",
                                                      "severity": "critical"}}]),
        ("SparkfleetNodeExporterDown", [])])])
    assert run.returncode == 0, run.stdout + run.stderr


@needs_promtool
def test_engine_not_generating_only_while_requests_wait_without_tokens(tmp_path):
    series = [("vllm:num_requests_running{%s}" % _VLLM, "1x20"),
              ("vllm:num_requests_waiting{%s}" % _VLLM, "3x20"),
              ("vllm:generation_tokens_total{%s}" % _VLLM, "0+100x5 500x15")]   # tokens stop after 5 minutes
    exp = [{"exp_labels": {"node": "spark-1", "model_name": "tiny", "severity": "critical"},
            "exp_annotations": {
                "summary": "The engine on spark-1 holds requests but generates no tokens",
                "description": "4 requests are running or waiting while no token was generated for two minutes."}}]
    run = _run_rule_tests(tmp_path, [_case(series, [("SparkfleetEngineNotGenerating", [])], at="4m"),
                                     _case(series, [("SparkfleetEngineNotGenerating", exp)], at="10m")],
                          annotations=True)
    assert run.returncode == 0, run.stdout + run.stderr


@needs_promtool
def test_kv_cache_queue_time_disk_page_cache(tmp_path):
    buckets = [("0.3", "0+1x20"), ("5.0", "0+1x20"), ("10.0", "0+10x20"), ("+Inf", "0+10x20")]
    series = [("vllm:kv_cache_usage_perc{%s}" % _VLLM, "0.95x20")]
    series += [('vllm:request_queue_time_seconds_bucket{%s,le="%s"}' % (_VLLM, le), v) for le, v in buckets]
    series += [('sparkfleet_model_filesystem_avail_bytes{%s,path="/models"}' % _NODE, "%dx20" % (5 * GiB)),
               ('sparkfleet_model_filesystem_size_bytes{%s,path="/models"}' % _NODE, "%dx20" % (100 * GiB)),
               ("sparkfleet_memory_cache_bytes{%s}" % _NODE2, "%dx20" % (70 * GiB)),
               ("sparkfleet_memory_free_bytes{%s}" % _NODE2, "%dx20" % (5 * GiB)),
               ("sparkfleet_memory_total_bytes{%s}" % _NODE2, "%dx20" % (100 * GiB))]
    run = _run_rule_tests(tmp_path, [_case(series, [
        ("SparkfleetKVCacheNearFull", [{"exp_labels": {"node": "spark-1", "model_name": "tiny",
                                                       "severity": "warning"}}]),
        ("SparkfleetQueueTimeRising", [{"exp_labels": {"node": "spark-1", "model_name": "tiny",
                                                       "severity": "warning"}}]),
        ("SparkfleetModelDiskNearFull", [{"exp_labels": {"node": "spark-1", "path": "/models",
                                                         "severity": "warning"}}]),
        ("SparkfleetPageCacheCrowding", [{"exp_labels": {"node": "spark-2", "severity": "warning"}}])],
        at="15m")])
    assert run.returncode == 0, run.stdout + run.stderr


@needs_promtool
def test_restarts_and_escalation(tmp_path):
    lab = 'job="node",instance="10.99.1.11:9100",node="spark-1",unit="sparkfleet-vllm"'
    series = [('sparkfleet_supervision_events_total{%s,event="restart"}' % lab, "0x5 1x10"),
              ('sparkfleet_supervision_events_total{%s,event="escalated"}' % lab, "0x15"),
              ("sparkfleet_escalated{%s}" % lab, "0x8 1x7")]
    exp_restart = [{"exp_labels": {"node": "spark-1", "unit": "sparkfleet-vllm", "severity": "warning"}}]
    exp_esc = [{"exp_labels": {"node": "spark-1", "unit": "sparkfleet-vllm", "severity": "critical"}}]
    run = _run_rule_tests(tmp_path, [
        _case(series, [("SparkfleetRestarts", []), ("SparkfleetEscalated", [])], at="4m"),
        _case(series, [("SparkfleetRestarts", exp_restart), ("SparkfleetEscalated", exp_esc)], at="10m")])
    assert run.returncode == 0, run.stdout + run.stderr


# ---------------------------------------------------------------------------------------- textfile collector
def _entries(*rows):
    return [{"time": t, "unit": u, "event": e, "cause": c} for t, u, e, c in rows]


def test_supervision_counts_only_grow_when_the_log_is_trimmed():
    tf = _textfile()
    units = ["sparkfleet-vllm", "sparkfleet-ray"]
    state = tf.count_events(_entries((10, "sparkfleet-vllm", "restart", "stalled"),
                                     (20, "sparkfleet-vllm", "restart", "stalled again")), {}, units)
    assert state["counts"]["sparkfleet-vllm"]["restart"] == 2
    # the watchdog trims its log: the old lines are gone, one new line came
    state = tf.count_events(_entries((30, "sparkfleet-vllm", "escalated", "3 starts did not serve")), state, units)
    assert state["counts"]["sparkfleet-vllm"] == {"restart": 2, "escalated": 1}
    assert state["last"]["sparkfleet-vllm"]["event"] == "escalated"
    # nothing new: nothing counted twice; a foreign unit is not counted
    state = tf.count_events(_entries((30, "sparkfleet-vllm", "escalated", "x"), (40, "other", "restart", "x")),
                            state, units)
    assert state["counts"]["sparkfleet-vllm"] == {"restart": 2, "escalated": 1}


def test_rendered_metrics_hold_memory_baselines_and_escalation(tmp_path):
    tf = _textfile()
    units = ["sparkfleet-ray", "sparkfleet-vllm"]
    state = tf.count_events(_entries((10, "sparkfleet-vllm", "restart", 'a "quoted"\ncause ' + "x" * 400)), {}, units)
    memory = {"total": 5 * GiB, "free": GiB, "available": 2 * GiB, "cache": GiB, "shmem": 0, "used": 3 * GiB,
              "unaccounted": 0, "source": "cgroup v2"}
    text = tf.render(state, units, memory, {"10.99.1.12": ("sparkfleet-vllm", 2 * GiB)},
                     {"10.99.1.12": "spark-2"}, ["sparkfleet-vllm"], {"path": "/models", "avail": 1, "size": 2}, now=5)
    assert 'sparkfleet_supervision_events_total{event="restart",unit="sparkfleet-vllm"} 1' in text
    assert 'sparkfleet_escalated{unit="sparkfleet-vllm"} 1' in text
    assert 'sparkfleet_escalated{unit="sparkfleet-ray"} 0' in text
    # a unit without an event yet still has its series (the dashboards and sparkfleet top show "none")
    assert 'sparkfleet_supervision_last_event_timestamp_seconds{cause="",event="none",unit="sparkfleet-ray"} 0.0' in text
    assert "sparkfleet_memory_used_bytes %d" % (3 * GiB) in text
    assert 'sparkfleet_memory_baseline_bytes{baseline_node="spark-2",unit="sparkfleet-vllm"} %d' % (2 * GiB) in text
    cause_line = [ln for ln in text.splitlines() if ln.startswith("sparkfleet_supervision_last_event")
                  and "sparkfleet-vllm" in ln][0]
    assert '\\"quoted\\"\\ncause' in cause_line and len(cause_line) < 300    # escaped, cut to CAUSE_MAX
    if shutil.which("promtool"):
        run = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                             check=False)
        assert run.returncode == 0, run.stdout + run.stderr


def test_the_script_writes_the_file_atomically_from_the_units_state(tmp_path):
    tf = _textfile()
    wd, run_dir, out = tmp_path / "wd", tmp_path / "run", tmp_path / "textfile"
    for d in (wd, run_dir, out):
        d.mkdir()
    (wd / "supervision.log").write_text(
        json.dumps({"time": 1.0, "unit": "sparkfleet-ray", "event": "restart", "cause": "raylet gone"}) + "\nnot json\n")
    # as a lab head kept it after a start that served
    (wd / "memory-baseline-sparkfleet-vllm.json").write_text(
        '{"nodes": {"10.99.1.11": 821383168, "10.99.1.12": 492290048}, "time": 1796443063.3}')
    (run_dir / "escalated-sparkfleet-vllm").write_text("{}")
    args = ["--dir", str(out), "--state", str(tmp_path / "state" / "s.json"), "--unit", "sparkfleet-ray",
            "--unit", "sparkfleet-vllm", "--node", "spark-1=10.99.1.11", "--node", "spark-2=10.99.1.12",
            "--watchdog-dir", str(wd), "--run-dir", str(run_dir),
            "--memory-lib", str(REPO / "roles/sparkfleet/files/sparkfleet_memory.py"), "--model-dir", str(tmp_path)]
    assert tf.main(args) == 0
    text = (out / "sparkfleet.prom").read_text()
    assert 'sparkfleet_supervision_events_total{event="restart",unit="sparkfleet-ray"} 1' in text
    assert 'sparkfleet_memory_baseline_bytes{baseline_node="spark-2",unit="sparkfleet-vllm"} 492290048' in text
    assert 'sparkfleet_memory_baseline_bytes{baseline_node="spark-1",unit="sparkfleet-vllm"} 821383168' in text
    assert 'sparkfleet_escalated{unit="sparkfleet-vllm"} 1' in text
    assert "sparkfleet_memory_total_bytes " in text and "sparkfleet_model_filesystem_size_bytes{" in text
    assert sorted(p.name for p in out.iterdir()) == ["sparkfleet.prom"]      # no temporary file left
    assert tf.main(args) == 0          # a second run counts nothing twice
    assert 'sparkfleet_supervision_events_total{event="restart",unit="sparkfleet-ray"} 1' in \
        (out / "sparkfleet.prom").read_text()


def _qualified_series(speed_mbps=10000, tcp_gbps=8.0):
    """The qualified figures as the head's exporter serves them: the text qualify writes (its filter, on a lab-like
    run), each sample with the head's target labels."""
    from ansible_collections.sparkfleet.vllm.plugins.filter.qualify import qualify_report, qualify_textfile
    item = {"client": "spark-1", "server": "spark-2", "where": "spark-1 -> spark-2", "transport": "tcp",
            "test": "bandwidth", "tool": "python", "streams": 4}
    nodes = {h: {"fabric": {"interface": "enp1s0f1np1", "mtu": 9000, "speed_mbps": speed_mbps, "hca": [],
                            "rdma_char_devices": []},
                 "fabric_results": [dict({"item": item, "role": "client" if h == "spark-1" else "server"},
                                         **({"gbps": tcp_gbps} if h == "spark-1" else {}))]}
             for h in ("spark-1", "spark-2")}
    text = qualify_textfile(nodes, qualify_report(nodes, None, {"head": "spark-1"}), 1764900000)
    series = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name_labels, value = line.rsplit(" ", 1)
            name, _brace, labels = name_labels.partition("{")
            labels = (labels.rstrip("}") + "," if labels else "") + _NODE
            series.append(("%s{%s}" % (name, labels), "%sx30" % value))
    return series


_FABRIC = 'job="node",instance="10.99.1.12:9100",node="spark-2",device="enp1s0f1np1"'
_FABRIC1 = 'job="node",instance="10.99.1.11:9100",node="spark-1",device="enp1s0f1np1"'


@needs_promtool
def test_fabric_below_qualified_when_the_link_drops_or_comes_back_slower(tmp_path):
    exp = [{"exp_labels": {"node": "spark-2", "device": "enp1s0f1np1", "severity": "critical"}}]
    healthy1 = [("node_network_up{%s}" % _FABRIC1, "1x30"),
                ("node_network_speed_bytes{%s}" % _FABRIC1, "1250000000x30")]
    # spark-2's twin loses its carrier at minute 5: the kernel reports no speed, operstate down
    down = healthy1 + [("node_network_up{%s}" % _FABRIC, "1x5 0x25"),
                       ("node_network_speed_bytes{%s}" % _FABRIC, "1250000000x5")]
    run = _run_rule_tests(tmp_path, [_case(_qualified_series() + down, [("SparkfleetFabricBelowQualified", [])],
                                           at="4m"),
                                     _case(_qualified_series() + down, [("SparkfleetFabricBelowQualified", exp)],
                                           at="10m")])
    assert run.returncode == 0, run.stdout + run.stderr
    # a 200G link that renegotiated at 100G after the qualification
    slower = [("node_network_up{%s}" % _FABRIC1, "1x30"),
              ("node_network_speed_bytes{%s}" % _FABRIC1, "25000000000x30"),
              ("node_network_up{%s}" % _FABRIC, "1x30"),
              ("node_network_speed_bytes{%s}" % _FABRIC, "25000000000x5 12500000000x25")]
    run = _run_rule_tests(tmp_path, [_case(_qualified_series(speed_mbps=200000, tcp_gbps=36) + slower,
                                           [("SparkfleetFabricBelowQualified", exp)], at="10m")])
    assert run.returncode == 0, run.stdout + run.stderr


@needs_promtool
def test_fabric_below_qualified_needs_a_qualification_and_its_interface(tmp_path):
    # no qualification yet: a link down is not compared with anything (FabricBelowQualified stays silent)
    down = [("node_network_up{%s}" % _FABRIC, "0x30")]
    run = _run_rule_tests(tmp_path, [_case(down, [("SparkfleetFabricBelowQualified", [])])])
    assert run.returncode == 0, run.stdout + run.stderr
    # the management link going down is not the fabric's
    mgmt = [("node_network_up{%s}" % _FABRIC.replace("enp1s0f1np1", "enP7s7"), "0x30")]
    run = _run_rule_tests(tmp_path, [_case(_qualified_series() + mgmt, [("SparkfleetFabricBelowQualified", [])])])
    assert run.returncode == 0, run.stdout + run.stderr
