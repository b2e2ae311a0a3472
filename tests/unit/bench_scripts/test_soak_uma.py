"""bench/soak.py's unified memory model: its pure functions on outputs captured from a named lab (labctl mem, the
head's journal of sparkfleet-vllm, the supervision log and its escalation marker) and on the watchdog's own wording."""

from __future__ import annotations

import importlib.util
import os

HERE = os.path.dirname(__file__)
ROOT = os.path.join(HERE, "..", "..", "..")
FIX = os.path.join(HERE, "fixtures", "soak-uma")


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


soak = _load("bench_soak", os.path.join(ROOT, "bench", "soak.py"))
memory = _load("sparkfleet_memory_for_soak",
               os.path.join(ROOT, "roles", "sparkfleet", "files", "sparkfleet_memory.py"))


def fixture(name):
    with open(os.path.join(FIX, name)) as fh:
        return fh.read()


def test_an_idle_host_reads_as_its_numbers():
    m = soak.parse_mem(fixture("mem-spark-2-idle.txt"))
    assert m["limit"] == 5368709120
    assert m["usage"] + m["free"] == m["limit"]
    assert m["page_cache"] > 0 and m["rss"] > 0
    assert m["wedge"] == "off" and m["leak"] is False and m["page_cache_knob"] is False
    assert m["leaked_files"] == 0 and m["leaked_bytes"] == 0


def test_a_host_without_a_limit_reads_as_limit_0():
    text = fixture("mem-spark-2-idle.txt").replace(
        [ln for ln in fixture("mem-spark-2-idle.txt").splitlines() if "limit:" in ln][0], "  limit: none")
    m = soak.parse_mem(text)
    assert m["limit"] == 0 and m["usage"] > 0


def test_an_error_is_no_report():
    assert soak.parse_mem("[labctl] ERROR: spark-3 is not running\n") is None
    assert soak.parse_mem("") is None


def test_the_step_the_watchdog_names_gives_the_node_to_reboot():
    hosts = ["spark-1", "spark-2", "spark-3"]
    one = memory.human_step([{"name": "spark-2", "state": "short"}, {"name": "spark-1", "state": "ok"}])
    assert soak.reboot_targets(one, hosts) == ["spark-2"]
    two = memory.human_step([{"name": "spark-1", "state": "short"}, {"name": "spark-3", "state": "short"}])
    assert soak.reboot_targets(two, hosts) == ["spark-1", "spark-3"]
    # a silent node or a failed engine: nothing to reboot, site.yml only
    assert soak.reboot_targets(memory.human_step([{"name": "spark-2", "state": "silent"}]), hosts) == []
    assert soak.reboot_targets(memory.human_step([{"name": "spark-2", "state": "ok"}]), hosts) == []
    assert soak.reboot_targets("reboot spark-9, then run site.yml", hosts) == []


def test_starts_in_windows():
    assert soak.per_window([1, 2, 5, 9, 10], [(0, 5), (5, 10), (10, 11)]) == [2, 2, 1]
    assert soak.per_window([], [(0, 5)]) == [0]


def test_outcomes():
    assert soak.outcome({"human": [], "escalation": None}) == "healed by itself"
    assert soak.outcome({"human": [["site.yml", 90, 0, 1]], "escalation": None}) == "needed a human step"
    step = memory.human_step([{"name": "spark-2", "state": "short"}])
    assert soak.outcome({"human": [["site.yml", 90, 0, 1]], "escalation": {"step": step}}) == \
        "escalated, human step named: " + step


def test_plan_draws_the_memory_kinds_like_the_others():
    import random
    kinds = list(soak.KINDS)
    faults = soak.plan(kinds, len(kinds) + 1, random.Random(18))
    assert sorted(faults[:len(kinds)]) == sorted(kinds)
    assert set(soak.UMA_KINDS) <= set(faults)


def test_the_engines_starts_in_a_captured_journal():
    """A smoke soak on a named lab: the deploy's start, a page-cache fault (one start), then a leak fault (two kills,
    a third start refused at the gate and escalated, a start skipped by the marker, the return's one start)."""
    seen = soak.engine_starts(fixture("journal-sparkfleet-vllm.txt"))
    assert [k for _t, k in seen].count("start") == 5
    assert [k for _t, k in seen].count("gate") == 4
    assert seen == sorted(seen)
    # the start the gate refused (escalated) has no gate line; the skipped one is no start
    escalated_at = 1796421430.9
    before = [k for t, k in seen if 1796421384 <= t < escalated_at]
    assert before == ["start"]
    # per fault window: the deploy, the page-cache fault, the leak fault
    windows = [(0, 1796421240), (1796421240, 1796421360), (1796421360, 1796421500)]
    assert soak.per_window([t for t, k in seen if k == "start"], windows) == [1, 1, 3]
    assert soak.per_window([t for t, k in seen if k == "gate"], windows) == [1, 1, 2]


def test_the_supervision_log_names_the_step_the_soak_does():
    events = soak.supervision_events(fixture("supervision-spark-1.log"))
    assert [e["event"] for e in events].count("escalated") == 1
    esc = next(e for e in events if e["event"] == "escalated")
    assert soak.reboot_targets(esc["step"], ["spark-1", "spark-2"]) == ["spark-2"]
    assert any("more than at its last healthy start" in n for n in esc["nodes"])
    # one start when the memory came back, after the escalation, never a loop
    returns = [e for e in events if e["event"] == "return"]
    assert len(returns) == 1 and returns[0]["time"] > esc["time"]
    assert soak.supervision_events(fixture("supervision-spark-1.log"), unit="sparkfleet-ray") == []
    assert soak.supervision_events("not json\n{}\n[1]\n") == []


def test_wedge_states_as_labctl_prints_them():
    assert soak.parse_mem(fixture("mem-spark-2-wedge-on.txt"))["wedge"] == "on"
    # no frozen host was captured: the FROZEN line as lab/labctl's mem_report writes it
    with open(os.path.join(ROOT, "lab", "labctl")) as fh:
        frozen = [ln for ln in fh if "FROZEN" in ln and "echo" in ln]
    assert frozen, "lab/labctl's mem_report no longer prints FROZEN"
    line = frozen[0].split('echo "', 1)[1].split('"', 1)[0]
    text = fixture("mem-spark-2-wedge-on.txt").replace("  wedge:      on", line)
    assert soak.parse_mem(text)["wedge"] == "frozen"
