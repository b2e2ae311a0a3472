# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: progress
type: aggregate
short_description: Show what long waits are doing while they retry
version_added: 0.1.0
author: sparkfleet.vllm contributors (@sparkfleet)
description:
  - Tasks that wait by retrying (C(until)/C(retries)) print only "FAILED - RETRYING" by default. When a retried
    result carries a C(summary) (as M(sparkfleet.vllm.vllm_wait) and M(sparkfleet.vllm.ray_cluster_check) return),
    this callback prints it on every retry, e.g. shard progress with ETA while vLLM loads weights.
  - The collection's own waits do not retry any more (they poll themselves with O(sparkfleet.vllm.vllm_wait#module:wait_polls)
    and print a line per poll with any stdout callback); this callback serves a user's own C(until) task.
  - Enable it with C(callbacks_enabled = sparkfleet.vllm.progress) in C(ansible.cfg); it works beside any stdout callback.
  - The stdout callback C(sparkfleet.vllm.default) prints the summary in place of the default's "FAILED - RETRYING"
    line; with it, this callback prints nothing.
requirements:
  - enabled in callbacks_enabled
"""

import os
import time

from ansible import constants as C
from ansible.plugins.callback import CallbackBase


def _stdout_callback():
    """The stdout callback in use (ansible-runner puts the one it wraps in ORIGINAL_STDOUT_CALLBACK)."""
    return os.environ.get("ORIGINAL_STDOUT_CALLBACK") or C.config.get_config_value("DEFAULT_STDOUT_CALLBACK")


class CallbackModule(CallbackBase):
    """Print the summary of retried results."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sparkfleet.vllm.progress"
    CALLBACK_NEEDS_ENABLED = True

    def v2_runner_retry(self, result):
        summary = result._result.get("summary")
        if not summary or _stdout_callback() == "sparkfleet.vllm.default":   # it prints the summary itself
            return
        host = result._host.get_name()
        self._display.display("  [%s] %s %s" % (time.strftime("%H:%M:%S"), host, summary), color="cyan")
