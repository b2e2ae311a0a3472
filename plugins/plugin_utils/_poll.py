# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A wait that polls itself (issue 41 item 14): an action plugin runs its module again and again, bounded by the
role's timeout, and shows one line per poll, instead of a task that Ansible retries with ``until``.

Why not ``until``: every retry is a ``v2_runner_retry`` callback, which AWX's stdout callback (ansible-runner's
awx_display) prints as "FAILED - RETRYING ... (N retries left)" whatever this collection's callbacks do. A line
shown with ``Display().display`` in the task's worker is sent to the controller's main process, which prints it
(in a terminal, under the task's banner) and, under ansible-runner, makes it a ``verbose`` event whose stdout is the
line: AWX shows it as it is. No retry event exists, so nothing prints FAILED.

The options every polling action takes (documented in each module's DOCUMENTATION, accepted and ignored by the module):
``wait_polls`` (at most this many module runs; unset: one run, no line, the module as it always was) and
``wait_delay`` (seconds between two runs).
"""

from __future__ import annotations

import time

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

POLL_OPTIONS = ("wait_polls", "wait_delay")


def line(host, summary, n, limit, now=None):
    """The line shown for one poll: the same as the stdout callback sparkfleet.vllm.default prints for a retry."""
    return "  [%s] %s - %s (poll %d of %d)" % (time.strftime("%H:%M:%S", time.localtime(now)), host,
                                               " ".join(str(summary).split()), n, limit)


def poll_options(name, args):
    """(polls, delay) taken out of ``args`` (a copy of the task's arguments); polls None: run once, no wait."""
    polls, delay = args.pop("wait_polls", None), args.pop("wait_delay", None)
    try:
        polls = None if polls in (None, "") else int(polls)
        delay = 0.0 if delay in (None, "") else float(delay)
    except (TypeError, ValueError):
        raise AnsibleActionFail("%s: wait_polls must be a whole number and wait_delay a number of seconds, got %r and "
                                "%r" % (name, polls, delay))
    if polls is not None and polls < 1:
        raise AnsibleActionFail("%s: wait_polls must be 1 or more (the most module runs of the wait), got %d"
                                % (name, polls))
    if delay < 0:
        raise AnsibleActionFail("%s: wait_delay must be 0 or more seconds, got %s" % (name, delay))
    return polls, delay


def poll(run_once, done, polls, delay, show, sleep=time.sleep):
    """Run ``run_once()`` up to ``polls`` times, ``delay`` s apart, until ``done(result)``; ``show(result, n)`` after
    each run. Returns (last result, runs, whether done)."""
    result, n = {}, 0
    for n in range(1, polls + 1):
        result = run_once()
        show(result, n)
        if done(result):
            return result, n, True
        if n < polls:
            sleep(delay)
    return result, n, False


def finish(result, n, polls, finished, waited_s, what):
    """The task's result after the wait: the last poll's, with the number of module runs (``polls``, the report's
    node round trips) and ``attempts`` (as an until loop sets it). A wait that ran out of polls fails, keeping the
    last poll's message when it had one."""
    result = dict(result)
    result["polls"] = n
    result["attempts"] = n
    if not finished and not result.get("failed"):
        result["failed"] = True
        result.setdefault("msg", "%s: not done after %d polls (%d s)" % (what, polls, round(waited_s)))
        result["wait_timed_out"] = True
    return result


class PollingAction(ActionBase):
    """Base of the polling action plugins: MODULE is run until ``done`` holds; ``summary`` gives each poll's line."""

    TRANSFERS_FILES = False
    _requires_connection = True
    MODULE = None

    def done(self, result):
        raise NotImplementedError

    def summary(self, result, n):
        """The text of one poll's line (None: no line)."""
        return result.get("summary")

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        short = self.MODULE.rsplit(".", 1)[-1]
        polls, delay = poll_options(short, args)
        host = task_vars.get("inventory_hostname", "?")
        display = Display()

        def once():
            return self._execute_module(module_name=self.MODULE, module_args=args, task_vars=task_vars)

        def show(res, n):
            text = self.summary(res, n) if polls is not None else None
            if text:
                display.display(line(host, text, n, polls), color=C.COLOR_DEBUG)

        started = time.monotonic()
        try:
            res, n, finished = poll(once, lambda r: bool(r.get("skipped")) or self.done(r), polls or 1, delay, show)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        if polls is None:
            result.update(res)
            return result
        result.update(finish(res, n, polls, finished, time.monotonic() - started, "%s on %s" % (short, host)))
        return result
