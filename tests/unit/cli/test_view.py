"""The `sparkfleet` command's live view, fed ansible-runner events recorded on the lab.

Fixtures (events.jsonl of real runs, trimmed to the fields the view reads; no secret was in them):
- deploy_ok: `sparkfleet deploy -i <lab inventory>` on a deployed 2-node lab (a re-run that restarts vLLM);
- deploy_preflight_failed: the same with `-e vllm_serve_gpu_memory_utilization=1.5`;
- status_unreachable: `sparkfleet status` with the head's address pointing nowhere;
- restart_progress: `sparkfleet restart -e vllm_serve_poll_interval=2` (shard progress while loading, then a 401:
  the server had been deployed with another key).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "cli"))

from sparkfleet_cli import cli  # noqa: E402  pylint: disable=wrong-import-position
from sparkfleet_cli.view import (EXIT_ANSIBLE, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK,  # noqa: E402
                                 EXIT_UNREACHABLE, EXIT_USAGE, RunView)

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def events(name):
    with gzip.open(os.path.join(FIXTURES, name + ".jsonl.gz"), "rt") as f:
        return [json.loads(line) for line in f]


class Clock(object):
    """The recorded events' own times (created), so ETAs and durations are those of the run."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def replay(name, action="deploy", each=None):
    from datetime import datetime
    clock = Clock()
    evs = events(name)
    first = datetime.fromisoformat(evs[0]["created"]).timestamp()
    clock.t = first
    view = RunView(action, now=clock)
    for ev in evs:
        clock.t = datetime.fromisoformat(ev["created"]).timestamp()
        view.handle(ev)
        if each:
            each(view)
    return view


def render_text(view, width=120):
    from rich.console import Console
    console = Console(file=io.StringIO(), width=width, force_terminal=False, color_system=None)
    console.print(view.render())
    return console.file.getvalue()


def test_deploy_phases_in_site_order_per_node():
    view = replay("deploy_ok")
    assert view.exit_code("successful") == EXIT_OK
    # One phase per play, named after the role it runs; the image check borrowed from vllm_serve stays in
    # runtime_image, and the lock plays (no role) carry their play's name.
    assert view.phase_order == ["preflight", "Deployment lock on the head", "runtime_image", "gpu_cleanup",
                                "model_sync", "ray_cluster", "vllm_serve", "healthcheck"]
    assert set(view.hosts) == {"spark-1", "spark-2"}
    assert all(row["state"] == "ok" and row["failed"] == 0 for row in view.hosts.values())
    assert view.stats["changed"] == {"spark-1": 2}
    assert view.failure is None


def test_deploy_shows_model_sync_and_the_graph_progress_then_ready():
    seen = []
    view = replay("deploy_ok", each=lambda v: seen.append(v.progress_text()))
    progress = [s for s in seen if s and not s.startswith("vLLM: ready")]
    assert progress and progress[0].startswith("cuda_graphs 12/51 graphs")
    assert view.progress_text().startswith("vLLM: ready")
    assert view.sync_text() == "model_sync: every worker already has the model (nothing sent)"
    lines = view.summary_lines("successful")
    assert lines[0].startswith("deploy: done in 3m")
    assert "  spark-1 ok=83 changed=2 failed=0 unreachable=0" in lines


def test_restart_shows_a_shard_bar_with_eta_then_the_failure_and_its_hint():
    """The recorded restart ran with a key the server did not have (a deploy with another key had run meanwhile)."""
    frames = []

    def grab(v):
        p = v.progress
        if p and not p.get("done") and p.get("phase") == "loading_weights" and not frames:
            frames.append(render_text(v))

    view = replay("restart_progress", action="restart", each=grab)
    assert frames, "no loading_weights progress in the recorded restart"
    shard_line = next(ln for ln in frames[0].splitlines() if "shards" in ln)
    assert "loading_weights 1/8 shards, ETA 7 s, slowest spark-2" in shard_line
    assert "\u2501" in shard_line  # rich's bar glyph
    assert view.exit_code("failed") == EXIT_FAILED
    assert view.failure["msg"] == "The API at http://10.99.0.11:30000 refused the key (HTTP 401)"
    assert view.failure["hint"] == "Pass the server's --api-key as api_key (vllm_serve_api_key)."
    assert view.failure["phase"] == "vllm_serve"


def as_poll_lines(evs):
    """The recorded run as the waits that poll themselves show it: each retry of a wait becomes a `verbose` event with
    the poll's line (plugins/plugin_utils/_poll.py line()) made of the retry's own summary."""
    sys.path.insert(0, os.path.join(ROOT, "collections"))
    from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._poll import line  # pylint: disable=import-outside-toplevel
    out = []
    for ev in evs:
        data = ev.get("event_data") or {}
        res = data.get("res") or {}
        if ev.get("event") != "runner_retry" or not res.get("summary"):
            out.append(ev)
            continue
        out.append({"event": "verbose", "created": ev["created"], "event_data": {},
                    "stdout": line(data["host"], res["summary"], res.get("attempts") or 1, res.get("retries") or 1)})
    return out


def test_the_poll_lines_of_a_wait_give_the_same_shard_bar_and_a_line_each():
    """The waits poll themselves now (no runner_retry event): the same restart, its polls as AWX and the CLI get them."""
    from datetime import datetime
    evs = as_poll_lines(events("restart_progress"))
    polls = [ev for ev in evs if ev.get("event") == "verbose"]
    assert polls and not [ev for ev in evs if ev.get("event") == "runner_retry"]
    clock = Clock()
    view = RunView("restart", now=clock)
    frames = []
    for ev in evs:
        clock.t = datetime.fromisoformat(ev["created"]).timestamp()
        view.handle(ev)
        p = view.progress
        if p and not p.get("done") and p.get("phase") == "loading_weights" and not frames:
            frames.append(render_text(view))
    assert frames, "no loading_weights progress from the poll lines"
    shard_line = next(ln for ln in frames[0].splitlines() if "shards" in ln)
    assert "loading_weights 1/8 shards, ETA 7 s, slowest spark-2" in shard_line
    assert len([c for c in view.changes if "(poll " in c]) == len(polls)
    assert view.exit_code("failed") == EXIT_FAILED


def test_preflight_failure_class_hint_and_exit_code():
    view = replay("deploy_preflight_failed")
    assert view.exit_code("failed") == EXIT_FAILED
    f = view.failure
    assert f["host"] == "spark-1" and f["phase"] == "preflight" and f["class"] == "preflight_failed"
    assert "vllm_serve_gpu_memory_utilization '1.5' must be in (0, 1]" in f["msg"]
    assert f["hint"].startswith("preflight changes nothing")
    lines = view.summary_lines("failed")
    assert lines[0] == "FAILED: preflight_failed on spark-1, phase preflight, task 'Validate the serving settings'"
    assert any(ln.startswith("  hint: ") for ln in lines)


def test_unreachable_head_exit_code_and_hint():
    view = replay("status_unreachable", action="status")
    assert view.exit_code("failed") == EXIT_UNREACHABLE
    assert view.unreachable == ["spark-1"]
    assert view.failure["class"] == "unreachable" and "No route to host" in view.failure["msg"]
    assert view.hosts["spark-1"]["state"] == "unreachable"
    # status's plays run their role through include_role: the phase is the role, not "include_role".
    assert view.failure["phase"] == "healthcheck"


def test_a_vllm_failure_carries_its_class_and_hint():
    view = RunView("deploy")
    view.handle({"event": "runner_on_start", "event_data": {"host": "spark-1", "role": "vllm_serve", "play": "p",
                                                            "task": "Wait", "resolved_action": "sparkfleet.vllm.vllm_wait"}})
    view.handle({"event": "runner_on_failed", "event_data": {
        "host": "spark-1", "role": "vllm_serve", "play": "p", "task": "Wait",
        "resolved_action": "sparkfleet.vllm.vllm_wait",
        "res": {"msg": "vLLM failed in cuda_graphs", "failure": {"class": "ray_oom_killed",
                                                                 "hint": "set ray_cluster_memory_monitor: false"}}}})
    assert view.failure["class"] == "ray_oom_killed" and view.failure["hint"] == "set ray_cluster_memory_monitor: false"
    assert view.exit_code("failed") == EXIT_FAILED


def test_ignored_failures_are_not_the_failure():
    view = RunView("deploy")
    view.handle({"event": "runner_on_failed", "event_data": {"host": "spark-2", "play": "p", "task": "probe",
                                                             "ignore_errors": True, "res": {"msg": "no"}}})
    assert view.failure is None and view.exit_code("successful") == EXIT_OK
    # A run that failed without a failed task: Ansible itself stopped (syntax, inventory, collection not found).
    assert RunView("deploy").exit_code("failed") == EXIT_ANSIBLE
    assert RunView("deploy").exit_code("canceled") == EXIT_INTERRUPTED


def test_live_render_lists_every_node_and_phase():
    view = replay("deploy_ok")
    text = render_text(view)
    assert view.hosts["spark-1"]["phase"] == "Deployment lock on the head"  # the lock is released last
    assert view.hosts["spark-2"]["phase"] == "ray_cluster"                  # the worker's last phase
    for host, row in view.hosts.items():
        assert any(ln.startswith(host) and row["phase"][:20] in ln for ln in text.splitlines()), text
    assert "vLLM: ready" in text


def test_command_line_usage_errors_exit_2(capsys):
    assert cli.main(["deploy"]) == EXIT_USAGE            # no -i
    assert cli.main(["upgrade", "-i", "x"]) == EXIT_USAGE
    assert cli.main(["--help"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "exit codes:" in out and "a node could not be reached over ssh" in out
    assert set(cli.PLAYBOOKS.values()) == {"sparkfleet.vllm.prepare", "sparkfleet.vllm.site", "sparkfleet.vllm.status",
                                           "sparkfleet.vllm.stop", "sparkfleet.vllm.restart", "sparkfleet.vllm.qualify"}


@pytest.mark.parametrize("name", ["prepare", "site", "status", "stop", "restart", "qualify"])
def test_every_playbook_the_command_runs_exists(name):
    assert os.path.isfile(os.path.join(ROOT, "playbooks", name + ".yml"))
