"""The floors B3 and B6 print beside their figures (bench/noop_floor.py, bench/results.py): their shape, not timings."""

from __future__ import annotations

import importlib.util
import os

import yaml

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench")


def _load(name):
    spec = importlib.util.spec_from_file_location("bench_" + name, os.path.join(BENCH, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


floor = _load("noop_floor")
results = _load("results")

# A recorded re-run as bench/callback_plugins/timetable.py writes it (trimmed from a lab run).
RUN = {"total_seconds": 130.4, "changed": 0, "hosts": ["spark-1", "spark-2"], "tasks": [
    {"play": "Preflight", "role": "preflight", "task": "Validate the inventory", "host_names": ["spark-1"],
     "calls": 0},
    {"play": "Preflight", "role": "preflight", "task": "Check every node answers",
     "host_names": ["spark-1", "spark-2"], "calls": 2, "calls_by_host": {"spark-1": 1, "spark-2": 1}},
    {"play": "Preflight", "role": "ray_cluster", "task": "Check the ports", "host_names": ["spark-1", "spark-2"],
     "calls": 1, "calls_by_host": {"spark-1": 1}},
    {"play": "Run Ray", "role": "ray_cluster", "task": "Wait until every node has joined Ray",
     "host_names": ["spark-1", "spark-2"], "calls": 3, "calls_by_host": {"spark-1": 3}},
    {"play": "Run Ray", "role": "ray_cluster", "task": "Apply changed Ray configuration", "host_names": [],
     "calls": 0},
    {"play": "Serve", "role": "vllm_serve", "task": "Enable and start vLLM", "host_names": ["spark-1"], "calls": 1,
     "calls_by_host": {"spark-1": 1}},
]}


def _tasks(book):
    return [(play["hosts"], task) for play in book for task in play["tasks"]]


def test_empty_floor_has_one_empty_task_per_task_on_its_hosts():
    book = yaml.safe_load(floor.render(RUN, "empty"))
    tasks = _tasks(book)
    # the task no host ran has no floor task; the others keep their order and hosts
    assert [h for h, _t in tasks] == ["spark-1", "spark-1:spark-2", "spark-1:spark-2", "spark-1:spark-2", "spark-1"]
    assert all(set(t) == {"name", "ansible.builtin.debug"} for _h, t in tasks)
    assert all(p["gather_facts"] is False for p in book)


def test_ping_floor_replays_every_node_round_trip_on_its_host():
    tasks = _tasks(yaml.safe_load(floor.render(RUN, "ping")))
    assert "ansible.builtin.debug" in tasks[0][1]  # no round trip: stays empty
    assert "ansible.builtin.ping" in tasks[1][1] and "when" not in tasks[1][1] and "loop" not in tasks[1][1]
    assert tasks[2][1]["when"] == "inventory_hostname in [\"spark-1\"]"  # one host of two
    assert tasks[3][1]["vars"]["_floor_calls"] == {"spark-1": 3}  # retries: as many pings as module runs
    assert "_floor_calls[inventory_hostname]" in tasks[3][1]["loop"]
    replayed = sum(sum(t["vars"]["_floor_calls"].values()) if "vars" in t else
                   (1 if "when" in t else len(h.split(":"))) for h, t in tasks if "ansible.builtin.ping" in t)
    assert replayed == sum(t["calls"] for t in RUN["tasks"])


def test_floor_rejects_an_unknown_kind():
    try:
        floor.render(RUN, "nothing")
    except SystemExit as exc:
        assert "empty or ping" in str(exc)
    else:
        raise AssertionError("an unknown kind was accepted")


B3 = {"bench": "B3", "date": "2026-12-01 17:41 UTC", "labels": ["baseline-450296a", "current"],
      "runs": [[60.0, 62.0], [30.0, 31.0]], "median_s": [62.0, 31.0], "changed": [0, 0], "tasks": [117, 80],
      "round_trips": [66, 30], "load": [[["20.1"], ["22.0"]], [["19.0"], ["21.0"]]],
      "roles": [[["preflight", 8.3]], [["preflight", 4.0]]], "slowest": [],
      "floors": [{"label": "empty", "runs": [10.0, 10.4], "load": [["20.0"], ["21.0"]], "median_s": 10.2,
                  "tasks": 79, "round_trips": 0}]}


def test_b3_section_shows_the_ratio_to_its_floor_first():
    lines = [x for x in results.b3_section(B3, dated=True) if x]
    assert lines[1].startswith("Ratio to floor: current 31.0 s (median) = **3.04x** its empty floor (10.2 s")
    assert "| floor: empty | 10.0 (20.0), 10.4 (21.0) | 10.2 | 0 | 79 | 0 |" in lines
    target = results.b3_target(B3)
    assert "0.50x of baseline-450296a side by side (met" in target and "over 15 s" in target


B6 = {"bench": "B6", "hosts": 2, "label": None, "start": "oldstack", "date": "2026-12-01 18:00 UTC",
      "total_s": 200.0, "load_s": 31.6, "load_configured_s": 11.5, "load_measured_s": 31.6, "net_s": 168.4,
      "phases": {"preflight": {"spark-1": 4.0, "spark-2": 3.0}}, "commit": "abc"}


def test_b6_section_shows_the_ratio_to_the_measured_load_first():
    lines = [x for x in results.b6_section(B6, dated=True) if x]
    assert "from the operators' old stack" in lines[0]
    assert lines[1].startswith("Ratio to floor: site.yml 200.0 s = **6.33x** the stand-in's own load, measured")
    pair = {"bench": "B6-start", "rounds": 1, "oldstack_net_s": 130.0, "clean_net_s": 100.0, "ratio": 1.3,
            "oldstack": [[160.0, 30.0, 130.0]], "clean": [[131.0, 31.0, 100.0]]}
    assert "**1.30x** the same from clean hosts" in results.b6_start_section(pair)[2]
    assert "(met;" in results.b6_start_target(pair)
