# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark callback (not shipped): where a playbook run spends its time, per role and per task.

Enabled by bench/noop_rerun.sh through ANSIBLE_CALLBACK_PLUGINS=bench/callback_plugins and
ANSIBLE_CALLBACKS_ENABLED=timetable. A task's time is the wall time from its start to the next task's start (the
controller waits for the slowest host; that is what a user waits for), like ansible.posix's profile_tasks.
Handlers and fact gathering are tasks too. Writes JSON to $SPARKFLEET_TIMETABLE (or prints a table when unset).
"""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: timetable
type: aggregate
short_description: Per-role and per-task wall time of a playbook run (bench only)
description:
  - Records each task's wall time and changed/ok counts, grouped by role, and writes them as JSON to the file named by
    E(SPARKFLEET_TIMETABLE) at the end of the run.
requirements:
  - enable it in callbacks_enabled
"""


# Actions that run on the controller only (no round trip to a node).
CONTROLLER_ONLY = {"set_fact", "debug", "assert", "fail", "meta", "set_stats", "include_tasks", "import_tasks",
                   "include_role", "import_role", "add_host", "group_by", "validate_argument_spec", "include_vars"}


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "timetable"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._t0 = time.monotonic()
        self._tasks = []          # [{play, role, task, start, seconds, changed, hosts}]
        self._current = None
        self._play = ""
        self._load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else []

    def _close(self):
        now = time.monotonic()
        if self._current is not None:
            self._current["seconds"] = now - self._current.pop("start")
            self._tasks.append(self._current)
            self._current = None

    def _start(self, task, kind="task"):
        self._close()
        role = task._role.get_name(include_role_fqcn=False) if getattr(task, "_role", None) else ""
        self._current = {"play": self._play, "role": role, "task": task.name or task.action, "kind": kind,
                         "start": time.monotonic(), "changed": 0, "hosts": 0, "host_names": []}

    def v2_playbook_on_play_start(self, play):
        self._close()
        self._play = play.get_name()

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._start(task, "handler")

    def _result(self, result, *args, skipped=False, **kwargs):
        if self._current is not None:
            self._current["hosts"] += 1
            self._current["host_names"].append(result._host.get_name())
            if result._result.get("changed"):
                self._current["changed"] += 1
            if not skipped:
                self._count(result)

    @staticmethod
    def _calls(result):
        """Module runs on a node this result stands for (0 for a task that runs on the controller only, one per
        item of a loop that ran): what a no-op re-run pays one ssh round trip for, whatever the machine's load."""
        if result._task.action.split(".")[-1] in CONTROLLER_ONLY:
            return 0
        res = result._result
        if result._task.loop is not None and isinstance(res.get("results"), list):
            return sum(1 for item in res["results"] if isinstance(item, dict) and not item.get("skipped"))
        if res.get("skipped"):
            return 0
        polls = res.get("polls")  # a wait that polls itself ran its module this many times (plugins/plugin_utils/_poll.py)
        return polls if isinstance(polls, int) and not isinstance(polls, bool) and polls > 0 else 1

    def _count(self, result):
        """Add the result's module runs to the task, in all and per host (bench/noop_floor.py replays them)."""
        n = self._calls(result)
        self._current["calls"] = self._current.get("calls", 0) + n
        if n:
            by_host = self._current.setdefault("calls_by_host", {})
            host = result._host.get_name()
            by_host[host] = by_host.get(host, 0) + n

    def v2_runner_retry(self, result):
        if self._current is not None:  # every retry of an until loop ran the module once more
            self._count(result)

    v2_runner_on_ok = _result
    v2_runner_on_failed = _result

    def v2_runner_on_skipped(self, result, *args, **kwargs):
        self._result(result, skipped=True)
    v2_runner_on_unreachable = _result

    def v2_playbook_on_stats(self, stats):
        self._close()
        total = time.monotonic() - self._t0
        changed = sum(stats.summarize(h).get("changed", 0) for h in stats.processed)
        data = {"total_seconds": total, "changed": changed, "hosts": sorted(stats.processed), "tasks": self._tasks,
                "load": self._load}
        path = os.environ.get("SPARKFLEET_TIMETABLE")
        if path:
            with open(path, "w") as f:
                json.dump(data, f, indent=1)
        else:
            self._display.display("total %.1f s, changed=%d, %d tasks" % (total, changed, len(self._tasks)))
