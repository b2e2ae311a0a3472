"""sparkfleet top: the snapshot and its plain lines from Prometheus's real answers (captured on the lab after a deploy
and a supervision event), the head's ssh from the inventory, and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "cli"))

from sparkfleet_cli import cli, top  # noqa: E402  pylint: disable=wrong-import-position

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "top_answers_lab.json"


def _answers():
    return json.loads(FIXTURE.read_text())


def test_snapshot_of_the_labs_answers():
    snap = top.snapshot(_answers(), now=1796444000)
    assert snap["engine_up"] == 1 and snap["errors"] == []
    assert set(snap["nodes"]) == {"spark-1", "spark-2"}
    for node in snap["nodes"].values():
        assert node["mem_total"] == 5 * (1 << 30) and node["mem_used"] > node["mem_baseline"] > 0
        assert node["ray_up"] == 1
    # the newest event of each node: the head's engine came back, the worker's Ray was stopped by the alert test
    assert snap["nodes"]["spark-1"]["last"]["event"] == "return"
    assert snap["nodes"]["spark-2"]["last"]["event"] == "stopped"
    assert "SparkfleetRestarts (spark-1)" in snap["alerts"]


def test_plain_lines_say_memory_against_baseline_and_why():
    text = top.lines(top.snapshot(_answers(), now=1796444000))
    assert text[0].startswith("engine up  tokens/s ")
    assert "TTFT p50 " in text[0] and "KV cache 0%" in text[0]
    spark2 = [ln for ln in text if ln.startswith("spark-2")][0]
    assert "of 5.00 GiB (+" in spark2 and "vs baseline 0.39 GiB" in spark2 and "ray up" in spark2
    assert "sparkfleet-ray stopped" in spark2 and "exited 1" in spark2
    assert text[-1].startswith("alerts: ") and "SparkfleetRestarts (spark-1)" in text[-1]


def test_the_live_table_says_each_nodes_last_restart_and_why_as_the_plain_lines_do():
    from rich.console import Console  # pylint: disable=import-outside-toplevel

    snap = top.snapshot(_answers(), now=1796444000)
    console = Console(width=200, record=True, color_system=None)
    console.print(top.table(snap))
    rendered = console.export_text()
    plain = [ln for ln in top.lines(snap) if ln.startswith("spark-2")][0]
    why = plain.split("  last ", 1)[1]
    assert why.startswith("sparkfleet-ray stopped ") and " ago: exited 1" in why
    assert why in " ".join(rendered.split()), rendered


def test_missing_series_and_errors_show_as_such():
    answers = {name: {"status": "success", "data": {"resultType": "vector", "result": []}} for name in top.QUERIES}
    answers["kv"] = {"status": "error", "error": "bad_data: parse error"}
    text = top.lines(top.snapshot(answers, now=0))
    assert text[0].startswith("engine ?  tokens/s -") and "KV cache -" in text[0]
    assert text[-2] == "alerts: none firing" and text[-1] == "errors: bad_data: parse error"


def test_nan_quantiles_read_as_no_requests():
    answers = _answers()
    answers["ttft_p95"]["data"]["result"][0]["value"][1] = "NaN"
    assert "p95 -" in top.lines(top.snapshot(answers, now=0))[0]


INVENTORY = {"spark_head": {"hosts": ["spark-1"]}, "_meta": {"hostvars": {"spark-1": {
    "ansible_host": "10.99.0.11", "ansible_user": "spark", "ansible_port": 2222,
    "ansible_ssh_common_args": "-F /lab/ssh/config -o ControlPath=/lab/cp/%C", "monitoring_prometheus_port": 9191}}}}


def test_the_heads_ssh_comes_from_the_inventory():
    calls = []

    def runner(argv, **_kw):
        calls.append(argv)
        return types.SimpleNamespace(returncode=0, stdout=json.dumps(INVENTORY), stderr="")
    ssh, port = top.head_ssh(["inv/a", "inv/b"], runner=runner)
    assert calls == [["ansible-inventory", "--list", "-i", "inv/a", "-i", "inv/b"]]
    assert ssh == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-p", "2222", "-F", "/lab/ssh/config",
                   "-o", "ControlPath=/lab/cp/%C", "spark@10.99.0.11"]
    assert port == 9191


def test_no_single_head_is_refused():
    inv = dict(INVENTORY, spark_head={"hosts": ["a", "b"]})

    def runner(_argv, **_kw):
        return types.SimpleNamespace(returncode=0, stdout=json.dumps(inv), stderr="")
    with pytest.raises(top.TopError, match="exactly one host in spark_head"):
        top.head_ssh(["inv"], runner=runner)


def test_the_remote_program_asks_every_query_and_answers_json(tmp_path):
    """REMOTE, run here against a port where nothing listens: one JSON object, every query with its error."""
    p = subprocess.run(["python3", "-c", top.REMOTE, "1", json.dumps({"a": "up", "b": "vector(1)"})],
                       capture_output=True, text=True, timeout=60, check=False)
    out = json.loads(p.stdout)
    assert set(out) == {"a", "b"} and all(v["status"] == "error" for v in out.values())


def test_top_needs_an_inventory_and_a_sane_interval(capsys):
    assert cli.main(["top"]) == 2
    assert cli.main(["top", "-i", "inv", "--interval", "0.1"]) == 2
    assert "--interval must be at least 1 second" in capsys.readouterr().err
