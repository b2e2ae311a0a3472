# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sparkfleet.vllm.download_progress (documented in plugins/modules/download_progress.py): with
wait_polls, it follows the background download to its end, a line per poll with bytes, rate and time left
(plugins/plugin_utils/_poll.py)."""

from __future__ import annotations

import time

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._poll import PollingAction


def _fmt_s(seconds):
    seconds = max(0, int(round(seconds)))
    if seconds < 120:
        return "%d s" % seconds
    if seconds < 7200:
        return "%dm%02ds" % (seconds // 60, seconds % 60)
    return "%dh%02dm" % (seconds // 3600, seconds % 3600 // 60)


def rate_and_eta(first, now, total):
    """(MB/s, seconds left or None) between the first poll ``first`` and this one ``now``, each (time, bytes);
    (None, None) before bytes have moved."""
    seconds, moved = now[0] - first[0], now[1] - first[1]
    if seconds <= 0 or moved <= 0:
        return None, None
    per_s = moved / seconds
    left = (total - now[1]) / per_s if total and total > now[1] else None
    return round(per_s / 1e6, 1), left


class ActionModule(PollingAction):
    MODULE = "sparkfleet.vllm.download_progress"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._first = None
        self._clock = time.monotonic

    def done(self, result):
        return bool(result.get("finished")) or bool(result.get("failed"))

    def summary(self, result, n):
        text = result.get("summary")
        if not isinstance(result.get("bytes"), int) or result.get("finished"):
            return text
        now = (self._clock(), result["bytes"])
        if self._first is None:
            self._first = now
            return text
        per_s, left = rate_and_eta(self._first, now, result.get("total"))
        if per_s is None:
            return "%s, nothing new since the first poll" % text
        result["mb_per_s"] = per_s
        text += ", %.1f MB/s" % per_s
        if left is not None:
            text += ", ETA %s" % _fmt_s(left)
        return text
