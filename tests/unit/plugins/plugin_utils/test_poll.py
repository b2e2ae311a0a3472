# -*- coding: utf-8 -*-
"""The waits that poll themselves (issue 41 item 14): the loop, its options, the result after it, and when each
wait is over (plugins/plugin_utils/_poll.py and the action plugins that use it)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.sparkfleet.vllm.plugins.action import download_progress as download_action
from ansible_collections.sparkfleet.vllm.plugins.action import ray_cluster_check as ray_action
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _poll


def _run(results, polls, delay=2):
    seq, shown, slept = list(results), [], []
    got = _poll.poll(lambda: seq.pop(0), lambda r: r.get("done", False), polls, delay,
                     lambda r, n: shown.append(n), sleep=slept.append)
    return got, shown, slept


def test_it_polls_until_done_showing_each_poll_and_sleeping_between_only():
    (result, n, finished), shown, slept = _run([{}, {}, {"done": True, "x": 1}, {}], polls=10)
    assert (result, n, finished) == ({"done": True, "x": 1}, 3, True)
    assert shown == [1, 2, 3] and slept == [2, 2]


def test_it_stops_at_its_bound_without_a_last_sleep():
    (result, n, finished), shown, slept = _run([{"a": 1}, {"a": 2}, {"a": 3}], polls=3)
    assert (result, n, finished) == ({"a": 3}, 3, False)
    assert shown == [1, 2, 3] and slept == [2, 2]


def test_a_wait_that_ran_out_fails_keeping_the_last_poll_and_its_message():
    out = _poll.finish({"summary": "spark-2 missing"}, 5, 5, False, 61.2, "ray_cluster_check on spark-1")
    assert out["failed"] and out["wait_timed_out"] and (out["polls"], out["attempts"]) == (5, 5)
    assert out["msg"] == "ray_cluster_check on spark-1: not done after 5 polls (61 s)"
    kept = _poll.finish({"msg": "vLLM not ready", "ready": False}, 5, 5, False, 1, "w")
    assert kept["msg"] == "vLLM not ready"
    done = _poll.finish({"ready": True}, 2, 5, True, 1, "w")
    assert not done.get("failed") and done["polls"] == 2 and "wait_timed_out" not in done
    failed = _poll.finish({"failed": True, "msg": "engine died", "failure": {"class": "cuda_oom"}}, 3, 9, True, 1, "w")
    assert failed["msg"] == "engine died" and failed["failure"] == {"class": "cuda_oom"} and "wait_timed_out" not in failed


def test_the_options_are_taken_out_of_the_module_arguments():
    args = {"path": "/m", "wait_polls": "12", "wait_delay": "0.5"}
    assert _poll.poll_options("download_progress", args) == (12, 0.5)
    assert args == {"path": "/m"}
    assert _poll.poll_options("x", {}) == (None, 0.0)


@pytest.mark.parametrize("polls, delay, words", [
    (0, 1, "wait_polls must be 1 or more"),
    ("many", 1, "wait_polls must be a whole number"),
    (3, -1, "wait_delay must be 0 or more seconds"),
])
def test_bad_options_are_refused_naming_them(polls, delay, words):
    with pytest.raises(AnsibleActionFail, match=words):
        _poll.poll_options("vllm_wait", {"wait_polls": polls, "wait_delay": delay})


def test_the_line_is_the_default_callbacks_retry_line():
    from ansible_collections.sparkfleet.vllm.plugins.callback.default import retry_line

    now = 1700000000
    mine = _poll.line("spark-1", "loading_weights 5/8 shards (62%),\n ETA 3 s", 14, 120, now=now)
    assert mine == retry_line("spark-1", {"summary": "loading_weights 5/8 shards (62%),\n ETA 3 s", "attempts": 14,
                                          "retries": 120}, now=now)
    assert mine.endswith("spark-1 - loading_weights 5/8 shards (62%), ETA 3 s (poll 14 of 120)")


# (what a try of ray_cluster_check returned, whether the join wait ends there): what the role's `until` said before
RAY_CASES = [
    ("whole and proven", {"missing": [], "mismatched": [], "error": None, "probed": True}, True),
    ("whole", {"missing": [], "mismatched": [], "error": None}, True),
    ("a node missing", {"missing": ["spark-2"], "mismatched": [], "error": None}, False),
    ("a wrong IP ends it at once", {"missing": [], "mismatched": ["spark-2"], "error": None}, True),
    # Ray's container restarting under systemd: the module fails, its result has no `missing`
    ("a failed try", {"failed": True, "msg": "spark-1: container sparkfleet-ray is not running"}, False),
    ("a driver that did not connect", {"missing": [], "error": "ray.init() did not return within 20.0 s"}, False),
]


@pytest.mark.parametrize("result, ends", [c[1:] for c in RAY_CASES], ids=[c[0] for c in RAY_CASES])
def test_the_ray_join_wait_ends_when_the_cluster_is_whole_or_wrong(result, ends):
    assert ray_action.joined(result) is ends


def test_the_download_rate_and_time_left_come_from_the_polls():
    assert download_action.rate_and_eta((100.0, 0), (110.0, 50_000_000), 1_050_000_000) == (5.0, 200.0)
    assert download_action.rate_and_eta((100.0, 10), (110.0, 10), 1000) == (None, None)   # nothing moved
    assert download_action.rate_and_eta((100.0, 0), (110.0, 50_000_000), None) == (5.0, None)   # no index yet
    assert download_action._fmt_s(7925) == "2h12m" and download_action._fmt_s(200) == "3m20s"
