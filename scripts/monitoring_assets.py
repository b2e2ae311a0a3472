#!/usr/bin/env python3
"""The monitoring role's Prometheus rules and Grafana dashboards, built in code (plain data; no library needed).

    scripts/monitoring_assets.py            # writes roles/monitoring/files/prometheus/alerts.yml and dashboards/*.json
    scripts/monitoring_assets.py --check    # exit 1 when the committed files differ from what this builds

Every alert is a measure (a PromQL expression that returns series whenever its inputs exist) and a condition on it;
the rule's expression is the two together. The lab test (tests/integration/test_monitoring.py) runs every measure and
every panel's query on the lab's Prometheus and fails on any that returns nothing; tests/unit/roles/test_monitoring.py
runs promtool on the rules and checks the committed files equal these.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = os.path.join(ROOT, "roles", "monitoring", "files")
RULES_PATH = os.path.join(FILES, "prometheus", "alerts.yml")
DASHBOARD_DIR = os.path.join(FILES, "dashboards")

# Recording rules: a node's unified memory against its baseline (the memory gate keeps the baseline on the head, by
# node name in baseline_node; the node's own figure comes from its exporter with the target's node label).
RECORDS = [
    ("sparkfleet:memory_baseline_bytes:by_node",
     'max by (node) (label_replace(sparkfleet_memory_baseline_bytes, "node", "$1", "baseline_node", "(.+)"))'),
    ("sparkfleet:memory_above_baseline_bytes:by_node",
     "max by (node) (sparkfleet_memory_used_bytes) - on (node) sparkfleet:memory_baseline_bytes:by_node"),
    ("sparkfleet:generation_tokens:rate1m",
     "sum by (node, model_name) (rate(vllm:generation_tokens_total[1m]))"),
    # What qualify.yml measured (its textfile on the head; each node's figure by node name in fabric_node), by the node
    # and fabric interface it belongs to, to compare with that node's exporter.
    ("sparkfleet:qualified_fabric_link_speed_bytes:by_node",
     'max by (node, device) (label_replace(sparkfleet_qualified_fabric_link_speed_bytes, "node", "$1", "fabric_node", '
     '"(.+)"))'),
    ("sparkfleet:qualified_fabric_bandwidth_bytes:by_node",
     'max by (node, device, transport) (label_replace(sparkfleet_qualified_fabric_bandwidth_bytes, "node", "$1", '
     '"fabric_node", "(.+)"))'),
    # The fabric interface's capacity now: 0 while it is down (no carrier), else its link speed (bytes/s).
    ("sparkfleet:fabric_link_capacity_bytes:by_node",
     "(max by (node, device) (node_network_up) == 0) or max by (node, device) (node_network_speed_bytes)"),
]

# Series that exist only once playbooks/qualify.yml has run (the qualified figures): an alert measure, record or panel
# query naming one returns nothing before; the lab test runs them after a qualification.
QUALIFIED = "qualified"

# name, measure, condition, for, severity, summary, description
ALERTS = [
    ("SparkfleetEngineDown", 'up{job="vllm"}', "== 0", "1m", "critical",
     "vLLM's API on {{ $labels.node }} does not answer /metrics",
     "Prometheus cannot scrape the engine (stopped, paused, wedged or escalated): nothing is served."),
    ("SparkfleetEngineNotGenerating",
     "sum by (node, model_name) (vllm:num_requests_running + vllm:num_requests_waiting)",
     "> 0 unless on (node, model_name) sparkfleet:generation_tokens:rate1m > 0", "2m", "critical",
     "The engine on {{ $labels.node }} holds requests but generates no tokens",
     "{{ $value }} requests are running or waiting while no token was generated for two minutes."),
    # The baseline is a node's memory before the engine starts (what the memory gate waits for): while the engine
    # serves, its own weights and KV cache are above it. So: above the baseline while no engine serves (what would
    # refuse or wedge the next start), and, while it serves, growth beyond the last 10 minutes' low (a creep).
    ("SparkfleetMemoryAboveBaseline", "sparkfleet:memory_above_baseline_bytes:by_node",
     '> scalar(sparkfleet:threshold_memory_above_baseline_bytes) unless on () (max(up{job="vllm"}) == 1)', "2m",
     "warning",
     "{{ $labels.node }} holds {{ $value | humanize1024 }}B more unified memory than before the engine's last start",
     "No engine serves, yet the memory has not come back to its baseline (a leak, a foreign process, tmpfs): the "
     "memory gate will refuse the next start or it will wedge the node. Find the holder (status.yml)."),
    ("SparkfleetMemoryCreeping",
     "max by (node) (sparkfleet_memory_used_bytes) - max by (node) (min_over_time(sparkfleet_memory_used_bytes[10m]))",
     '> scalar(sparkfleet:threshold_memory_above_baseline_bytes) and on () (min_over_time(up{job="vllm"}[10m]) == 1)',
     "1m", "warning",
     "{{ $labels.node }}'s unified memory grew {{ $value | humanize1024 }}B while the engine served",
     "The engine's memory is placed at its start; growth while it serves is another holder (or a leak) taking what "
     "the engine may need: the road to a wedge on GB10."),
    ("SparkfleetPageCacheCrowding",
     "max by (node) (sparkfleet_memory_cache_bytes) / max by (node) (sparkfleet_memory_total_bytes)",
     "> scalar(sparkfleet:threshold_page_cache_fraction) and on (node) "
     "(max by (node) (sparkfleet_memory_free_bytes) / max by (node) (sparkfleet_memory_total_bytes)) < 0.1",
     "5m", "warning",
     "Page cache fills {{ $value | humanizePercentage }} of {{ $labels.node }}'s memory while little is free",
     "On unified memory the page cache is not free for the engine (vLLM 0.17 counts free memory): drop caches or "
     "restart through the gate, which drops them."),
    ("SparkfleetKVCacheNearFull", "max by (node, model_name) (vllm:kv_cache_usage_perc)",
     "> scalar(sparkfleet:threshold_kv_cache_fraction)", "5m", "warning",
     "KV cache {{ $value | humanizePercentage }} full on {{ $labels.node }}",
     "Requests will queue or be preempted; lower concurrency or the context length."),
    ("SparkfleetQueueTimeRising",
     "histogram_quantile(0.95, sum by (le, node, model_name) (rate(vllm:request_queue_time_seconds_bucket[5m])))",
     "> scalar(sparkfleet:threshold_queue_time_seconds)", "5m", "warning",
     "p95 queue time {{ $value | humanizeDuration }} on {{ $labels.node }}",
     "Requests wait before the engine takes them: the engine is saturated."),
    ("SparkfleetRayNodeMissing", 'up{job="ray"}', "== 0", "1m", "critical",
     "Ray on {{ $labels.node }} does not answer",
     "The node's Ray (its metrics export) is gone: the engine's ranks there are lost."),
    ("SparkfleetNodeExporterDown", 'up{job="node"}', "== 0", "2m", "warning",
     "{{ $labels.node }}'s node exporter does not answer",
     "The node is away, or its exporter stopped: nothing of it (memory, supervision) is seen."),
    ("SparkfleetRestarts",
     'sum by (node, unit) (increase(sparkfleet_supervision_events_total{event=~"restart|restart-failed"}[15m]))',
     "> 0", "0s", "warning",
     "Supervision restarted {{ $labels.unit }} on {{ $labels.node }}",
     "The watchdog restarted the unit in the last 15 minutes; sparkfleet top and status.yml say why."),
    ("SparkfleetEscalated", "max by (node, unit) (sparkfleet_escalated)", "== 1", "0s", "critical",
     "{{ $labels.unit }} on {{ $labels.node }} is escalated: supervision stopped it",
     "Starts kept failing (or memory did not come back): the engine stays stopped until a person acts."),
    ("SparkfleetModelDiskNearFull",
     "min by (node, path) (sparkfleet_model_filesystem_avail_bytes / sparkfleet_model_filesystem_size_bytes)",
     "< scalar(sparkfleet:threshold_disk_free_fraction)", "10m", "warning",
     "The model's filesystem on {{ $labels.node }} is {{ $value | humanizePercentage }} free",
     "A sync or a download will fail for lack of space."),
    # Issue 42: the fabric against what qualify.yml measured. A link that renegotiated slower or lost its carrier carries
    # less than the qualified bandwidth (the all-reduce between the ranks crawls or stops); the node exporter sees it.
    ("SparkfleetFabricBelowQualified",
     "(sparkfleet:fabric_link_capacity_bytes:by_node and on (node, device) "
     "sparkfleet:qualified_fabric_link_speed_bytes:by_node)",
     "< on (node, device) sparkfleet:qualified_fabric_link_speed_bytes:by_node", "1m", "critical",
     "The fabric interface {{ $labels.device }} of {{ $labels.node }} carries {{ $value | humanize }}B/s at most, "
     "below its qualified link speed",
     "The link is down or came back slower than when qualify.yml measured it: the engine's all-reduce (NCCL) between "
     "the nodes runs slower or not at all. Check the cable and both twins (status.yml), then run qualify.yml again."),
    ("SparkfleetSupervisionMetricsStale", "max by (node) (time() - sparkfleet_textfile_timestamp_seconds)",
     "> 120", "2m", "warning",
     "{{ $labels.node }}'s supervision metrics are {{ $value | humanizeDuration }} old",
     "The sparkfleet-monitoring-textfile timer stopped writing them."),
]


def alert_rules():
    rules = [{"record": name, "expr": expr} for name, expr in RECORDS]
    alerts = []
    for name, measure, condition, for_, severity, summary, description in ALERTS:
        rule = {"alert": name, "expr": "%s %s" % (measure, condition)}
        if for_ != "0s":
            rule["for"] = for_
        rule["labels"] = {"severity": severity}
        rule["annotations"] = {"summary": summary, "description": description}
        alerts.append(rule)
    return {"groups": [{"name": "sparkfleet-records", "rules": rules},
                       {"name": "sparkfleet-alerts", "rules": alerts}]}


def _yaml_scalar(value, indent=0):
    """A JSON string is a valid YAML double-quoted scalar; a long one is a folded block (lines under 120 characters:
    ansible-lint's yaml rule), which YAML reads back as the same one-line string."""
    if isinstance(value, str):
        if len(value) > 80 and "  " not in value and value == value.strip() and "\n" not in value:
            lines = textwrap.wrap(value, width=max(40, 116 - indent), break_long_words=False,
                                  break_on_hyphens=False)
            return ">-\n" + "\n".join(" " * (indent + 2) + line for line in lines)
        return json.dumps(value)
    return str(value)


def to_yaml(data, indent=0):
    """A small YAML writer (stable output, strings double-quoted) for the rules file; yaml.safe_dump would fold lines."""
    pad = " " * indent
    out = []
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, (dict, list)) and value:
                out.append("%s%s:" % (pad, key))
                out.append(to_yaml(value, indent + 2))
            else:
                out.append("%s%s: %s" % (pad, key, _yaml_scalar(value, indent)))
    else:
        for item in data:
            if isinstance(item, dict):
                inner = to_yaml(item, indent + 2).splitlines()
                out.append("%s- %s" % (pad, inner[0].lstrip()))
                out.extend(inner[1:])
            else:
                out.append("%s- %s" % (pad, _yaml_scalar(item)))
    return "\n".join(out)


def rules_text():
    return ("---\n# Generated by scripts/monitoring_assets.py: edit that, then run it. The thresholds are the\n"
            "# sparkfleet:threshold_* series of thresholds.yml (the monitoring_alert_* variables).\n"
            + to_yaml(alert_rules()) + "\n")


# ------------------------------------------------------------------------------------------------- dashboards
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _panel(pid, title, targets, x, y, w=12, h=8, unit=None, kind="timeseries", description=""):
    panel = {"id": pid, "type": kind, "title": title, "datasource": DATASOURCE,
             "gridPos": {"x": x, "y": y, "w": w, "h": h},
             "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend, "datasource": DATASOURCE}
                         for i, (expr, legend) in enumerate(targets)],
             "fieldConfig": {"defaults": {"unit": unit or "short"}, "overrides": []},
             "options": {}}
    if description:
        panel["description"] = description
    return panel


def _dashboard(uid, title, rows):
    panels = []
    y = 0
    for row in rows:
        x = 0
        w = 24 // len(row)
        for spec in row:
            title_, targets, unit = spec[:3]
            panels.append(_panel(len(panels) + 1, title_, targets, x, y, w=w, unit=unit,
                                 description=spec[3] if len(spec) > 3 else ""))
            x += w
        y += 8
    return {
        "uid": uid, "title": title, "tags": ["sparkfleet"], "timezone": "browser", "schemaVersion": 39,
        "version": 1, "editable": True, "refresh": "30s", "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus",
                                 "label": "Prometheus", "current": {}, "hide": 0}]},
        "annotations": {"list": []}, "links": [], "panels": panels,
    }


def dashboards():
    serving = _dashboard("sparkfleet-serving", "sparkfleet: serving", [
        [("Tokens per second", [("sum by (model_name) (rate(vllm:generation_tokens_total[1m]))", "generated"),
                                ("sum by (model_name) (rate(vllm:prompt_tokens_total[1m]))", "prompt")], "short"),
         ("Requests running and waiting", [("sum by (model_name) (vllm:num_requests_running)", "running"),
                                           ("sum by (model_name) (vllm:num_requests_waiting)", "waiting")], "short")],
        [("Time to first token", [
            ("histogram_quantile(0.5, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))", "p50"),
            ("histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))", "p95")], "s"),
         ("Inter-token latency", [
             ("histogram_quantile(0.5, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket[5m])))", "p50"),
             ("histogram_quantile(0.95, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket[5m])))", "p95")],
          "s")],
        [("KV cache use", [("max by (model_name) (vllm:kv_cache_usage_perc)", "{{model_name}}")], "percentunit"),
         ("Queue time and end-to-end latency (p95)", [
             ("histogram_quantile(0.95, sum by (le) (rate(vllm:request_queue_time_seconds_bucket[5m])))", "queue"),
             ("histogram_quantile(0.95, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))", "e2e")],
          "s")],
        [("Preemptions and finished requests", [
            ("sum (rate(vllm:num_preemptions_total[5m]))", "preemptions/s"),
            ("sum by (finished_reason) (rate(vllm:request_success_total[5m]))", "{{finished_reason}}/s")], "short"),
         ("Engine up", [('up{job="vllm"}', "{{node}}")], "short")],
    ])
    memory = _dashboard("sparkfleet-nodes-memory", "sparkfleet: nodes and unified memory", [
        [("Unified memory in use against its baseline", [
            ("max by (node) (sparkfleet_memory_used_bytes)", "{{node}} used"),
            ("sparkfleet:memory_baseline_bytes:by_node", "{{node}} baseline")], "bytes",
          "What the memory gate reads (the memory cgroup where one caps the node) and its baseline, the use at the "
          "engine's last start that served."),
         ("Above baseline", [("sparkfleet:memory_above_baseline_bytes:by_node", "{{node}}")], "bytes")],
        [("Free, page cache and unaccounted", [
            ("max by (node) (sparkfleet_memory_free_bytes)", "{{node}} free"),
            ("max by (node) (sparkfleet_memory_cache_bytes)", "{{node}} page cache"),
            ("max by (node) (sparkfleet_memory_unaccounted_bytes)", "{{node}} unaccounted")], "bytes"),
         ("CPU busy", [('1 - avg by (node) (rate(node_cpu_seconds_total{mode="idle"}[5m]))', "{{node}}")],
          "percentunit")],
        [("Model filesystem free", [
            ("min by (node) (sparkfleet_model_filesystem_avail_bytes / sparkfleet_model_filesystem_size_bytes)",
             "{{node}}")], "percentunit"),
         ("Node exporters up", [('up{job="node"}', "{{node}}")], "short")],
    ])
    fabric = _dashboard("sparkfleet-fabric-ray", "sparkfleet: fabric and Ray", [
        [("Fabric and management traffic received", [
            ('sum by (node, device) (rate(node_network_receive_bytes_total{device!="lo"}[1m]))',
             "{{node}} {{device}}")], "Bps"),
         ("Traffic sent", [
             ('sum by (node, device) (rate(node_network_transmit_bytes_total{device!="lo"}[1m]))',
              "{{node}} {{device}}")], "Bps")],
        [("Fabric traffic against the qualified bandwidth", [
            ("max by (node, device) (rate(node_network_transmit_bytes_total[1m]) and on (node, device) "
             "sparkfleet:qualified_fabric_bandwidth_bytes:by_node)", "{{node}} {{device}} sent"),
            ("max by (node, device) (rate(node_network_receive_bytes_total[1m]) and on (node, device) "
             "sparkfleet:qualified_fabric_bandwidth_bytes:by_node)", "{{node}} {{device}} received"),
            ("sparkfleet:qualified_fabric_bandwidth_bytes:by_node", "{{node}} {{device}} qualified {{transport}}")],
          "Bps",
          "The fabric interface's traffic now beside the bandwidth playbooks/qualify.yml measured on it (TCP, and RDMA "
          "per rail where the nodes have it). Empty until a qualification ran."),
         ("Fabric link against its qualification", [
             ("sparkfleet:fabric_link_capacity_bytes:by_node and on (node, device) "
              "sparkfleet:qualified_fabric_link_speed_bytes:by_node", "{{node}} {{device}} now"),
             ("sparkfleet:qualified_fabric_link_speed_bytes:by_node", "{{node}} {{device}} qualified")], "Bps",
          "The link speed now (0 while the link is down) and when qualified: SparkfleetFabricBelowQualified fires "
          "when it falls under.")],
        [("All-reduce bus bandwidth at qualification", [
            ("max by (backend, message_bytes) (sparkfleet_qualified_allreduce_bus_bandwidth_bytes)",
             "{{backend}} at {{message_bytes}} bytes")], "Bps",
          "NCCL across the nodes at its largest message (gloo on the CPU where the image sees no GPU); two Sparks reach "
          "about 20-24 GB/s. No live figure exists for it: the serving engine exports none."),
         ("Since the last qualification", [("max (time() - sparkfleet_qualified_timestamp_seconds)", "age"),
                                           ("max (sparkfleet_qualified_below_figures)", "figures under two Sparks'")],
          "short")],
        [("Ray nodes up (metrics export)", [('up{job="ray"}', "{{node}}")], "short"),
         ("Ray's series exported", [('scrape_samples_scraped{job="ray"}', "{{node}}")], "short")],
    ])
    supervision = _dashboard("sparkfleet-supervision", "sparkfleet: supervision", [
        [("Restarts and escalations (15 min)", [
            ("sum by (node, unit, event) (increase(sparkfleet_supervision_events_total[15m]))",
             "{{node}} {{unit}} {{event}}")], "short"),
         ("Escalated units", [("max by (node, unit) (sparkfleet_escalated)", "{{node}} {{unit}}")], "short")],
        [("Last supervision event", [
            ("max by (node, unit, event, cause) (sparkfleet_supervision_last_event_timestamp_seconds) * 1000",
             "{{node}} {{unit}} {{event}}: {{cause}}")], "dateTimeAsIso"),
         ("Supervision metrics age", [("max by (node) (time() - sparkfleet_textfile_timestamp_seconds)", "{{node}}")],
          "s")],
    ])
    return {"serving.json": serving, "nodes-memory.json": memory, "fabric-ray.json": fabric,
            "supervision.json": supervision}


def panel_queries():
    """Every panel's query: (dashboard file, panel title, expr)."""
    out = []
    for name, board in dashboards().items():
        for panel in board["panels"]:
            for target in panel["targets"]:
                out.append((name, panel["title"], target["expr"]))
    return out


def alert_measures():
    """Every alert's measure: (alert, expr): each must return series on a deployed cluster (those naming a
    qualified figure once playbooks/qualify.yml has run: needs_qualification)."""
    return [(a[0], a[1]) for a in ALERTS]


def needs_qualification(expr):
    """Whether an expression reads a series only a qualification writes (QUALIFIED in a name it uses)."""
    return QUALIFIED in expr


def generated():
    files = {RULES_PATH: rules_text()}
    for name, board in dashboards().items():
        files[os.path.join(DASHBOARD_DIR, name)] = json.dumps(board, indent=2, sort_keys=True) + "\n"
    return files


def main(argv=None):
    p = argparse.ArgumentParser(description="Build the monitoring role's rules and dashboards.")
    p.add_argument("--check", action="store_true", help="only compare with the committed files")
    a = p.parse_args(argv)
    stale = []
    for path, text in generated().items():
        try:
            with open(path) as fh:
                current = fh.read()
        except OSError:
            current = None
        if current != text:
            stale.append(os.path.relpath(path, ROOT))
            if not a.check:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as fh:
                    fh.write(text)
    if a.check and stale:
        sys.stderr.write("out of date (run scripts/monitoring_assets.py): %s\n" % ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
