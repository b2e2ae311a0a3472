# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The options of the modules whose action plugin polls them (plugins/plugin_utils/_poll.py)."""

    DOCUMENTATION = r"""
options:
  wait_polls:
    description:
      - Read by the module's action plugin, which then runs the module again and again (at most this many times,
        O(wait_delay) seconds apart) until the wait is over, and shows one line per poll (the time, the host, the
        result's C(summary) and C(poll N of M)) in the terminal and, under ansible-runner (AWX), as a C(verbose) event.
        Use it instead of C(until)/C(retries), whose every retry AWX prints as "FAILED - RETRYING".
      - A wait that runs out of polls fails with C(wait_timed_out), keeping the last poll's result.
      - The result has C(polls) (how many times the module ran, each a round trip to the node) and C(attempts).
      - Unset, the module runs once and shows nothing.
    type: int
  wait_delay:
    description: Read by the action plugin. Seconds between two polls.
    type: float
    default: 0
"""
