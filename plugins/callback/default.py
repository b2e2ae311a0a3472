# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: default
type: stdout
short_description: Ansible's default output, with the progress of a wait instead of "FAILED - RETRYING"
version_added: 0.3.0
author: sparkfleet.vllm contributors (@sparkfleet)
description:
  - Ansible's default stdout callback (C(ansible.builtin.default)), the same in every respect but one.
  - A task that waits by retrying (C(until)/C(retries)) makes the default print "FAILED - RETRYING ... (N retries
    left)" at every poll, although nothing failed. When the retried result carries a C(summary) (as
    M(sparkfleet.vllm.vllm_wait) and M(sparkfleet.vllm.ray_cluster_check) return), this callback prints that summary
    instead, with the attempt and the limit, for example
    C([12:01:07] spark-1 - loading_weights 5/8 shards (62%), ETA 3 s (poll 14 of 120)).
  - A poll of a background task (C(async_status) while its job runs) prints that it is still running.
  - The collection's own waits do not retry any more (they poll themselves with O(sparkfleet.vllm.vllm_wait#module:wait_polls)
    and print the same line per poll with any stdout callback, AWX's included); this applies to a user's own C(until) task.
  - Any other retried result is printed as the default prints it.
  - Set it with C(stdout_callback = sparkfleet.vllm.default) in C(ansible.cfg); C(sparkfleet.vllm.progress) then
    prints nothing of its own (it would print the same line twice).
extends_documentation_fragment:
  - ansible.builtin.default_callback
  - ansible.builtin.result_format_callback
requirements:
  - set as stdout in configuration
"""

import time

from ansible import constants as C
from ansible.plugins.callback.default import CallbackModule as DefaultCallback

NAME = "sparkfleet.vllm.default"


def retry_line(host, result, now=None):
    """The line printed for a retried result with a summary; None when it has none."""
    if not isinstance(result, dict):
        return None
    summary = result.get("summary")
    if not summary and result.get("ansible_job_id") and not result.get("finished"):
        summary = "still running (job %s)" % result["ansible_job_id"]   # an async_status poll of a background task
    if not summary:
        return None
    line = "  [%s] %s - %s" % (time.strftime("%H:%M:%S", time.localtime(now)), host, " ".join(str(summary).split()))
    if isinstance(result.get("attempts"), int) and isinstance(result.get("retries"), int):
        line += " (poll %d of %d)" % (result["attempts"], result["retries"])
    return line


class CallbackModule(DefaultCallback):
    """ansible.builtin.default, with the waits' progress instead of FAILED - RETRYING."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = NAME

    def v2_runner_retry(self, result):
        line = retry_line(result._host.get_name(), result._result)
        if line is None:
            super(CallbackModule, self).v2_runner_retry(result)
            return
        self._display.display(line, color=C.COLOR_DEBUG)
