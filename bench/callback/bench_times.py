# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark-only callback (not shipped): per host, the seconds each role (phase) and task took; written as JSON to
$BENCH_TIMES_OUT when the playbook ends. bench/cold_deploy.py enables it with ANSIBLE_CALLBACK_PLUGINS."""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: bench_times
type: aggregate
short_description: Per-host role and task times for bench/cold_deploy.py
description:
  - Records when every task starts and when each host's result arrives; writes the table to $BENCH_TIMES_OUT.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_times"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super(CallbackModule, self).__init__()
        self.started = time.time()
        self.task_start = {}
        self.rows = []

    def _start(self, task):
        self.task_start[task._uuid] = time.time()

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._start(task)

    def _done(self, result, status):
        task = result._task
        t0 = self.task_start.get(task._uuid, self.started)
        role = task._role.get_name() if task._role else "(play)"
        self.rows.append({"host": result._host.get_name(), "role": role, "task": task.get_name(),
                          "start": round(t0 - self.started, 2), "seconds": round(time.time() - t0, 2),
                          "status": status})

    def v2_runner_on_ok(self, result):
        self._done(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._done(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._done(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._done(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        out = os.environ.get("BENCH_TIMES_OUT")
        if out:
            with open(out, "w") as fh:
                json.dump({"total": round(time.time() - self.started, 2), "rows": self.rows}, fh)
