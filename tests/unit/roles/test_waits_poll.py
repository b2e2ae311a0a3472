# -*- coding: utf-8 -*-
"""The roles' waits poll themselves (issue 41 item 14): no task of a role or playbook retries with `until` (AWX's
stdout callback prints every retry as "FAILED - RETRYING", tests/unit/extensions/test_awx_display.py), and each wait
that did is bounded as before: its action plugin's polls and delay are the old `retries` + 1 tries and `delay`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            if key in node:
                yield from _tasks(node[key])


def _files():
    return sorted(list((REPO / "roles").glob("*/tasks/*.yml")) + list((REPO / "roles").glob("*/handlers/*.yml"))
                  + list((REPO / "playbooks").glob("*.yml")))


def test_no_role_or_playbook_task_retries_with_until():
    retrying = ["%s: %s" % (path.relative_to(REPO), task.get("name")) for path in _files()
                for task in _tasks(yaml.safe_load(path.read_text()) or []) if "until" in task or "retries" in task]
    assert not retrying, retrying


def _task(path, name):
    for task in _tasks(yaml.safe_load((REPO / path).read_text())):
        if str(task.get("name", "")).startswith(name):
            return task
    raise AssertionError("no task %r in %s" % (name, path))


# (task file, task name, module, the old retries, the old delay): the bounds the roles used with `until`
WAITS = [
    ("roles/ray_cluster/tasks/main.yml", "Wait until every node has joined Ray", "ray_cluster_check",
     "{{ (ray_cluster_join_timeout | int / 2) | round(0, 'ceil') | int }}", "1"),
    ("roles/vllm_serve/tasks/wait.yml", "Wait for vLLM to load the weights and serve", "vllm_wait",
     "{{ (vllm_serve_ready_timeout | int / vllm_serve_poll_interval | int) | round(0, 'ceil') | int }}", "0"),
    ("roles/sparkfleet/tasks/image_wait.yml", "Show the transfer's progress until it ends", "transfer_progress",
     "{{ (_sparkfleet_runtime_image.runtime_image_sync_timeout | int / "
     "_sparkfleet_runtime_image.runtime_image_progress_interval | int) | round(0, 'ceil') | int }}",
     "{{ _sparkfleet_runtime_image.runtime_image_progress_interval }}"),
    ("roles/model_sync/tasks/download.yml", "Wait for the model download", "download_progress",
     "{{ ((model_sync_download_timeout | int + 120) / model_sync_download_poll | int) | round(0, 'ceil') | int }}",
     "{{ model_sync_download_poll | int }}"),
]


def _norm(text):
    return " ".join(str(text).split())


@pytest.mark.parametrize("path, name, module, retries, delay", WAITS, ids=[w[2] for w in WAITS])
def test_each_wait_polls_within_its_old_bound(path, name, module, retries, delay):
    task = _task(path, name)
    args = task["sparkfleet.vllm." + module]
    # until with `retries: R` runs the module R + 1 times (ansible-core's TaskExecutor)
    assert _norm(args["wait_polls"]) == _norm(retries).replace("| int }}", "| int + 1 }}"), args["wait_polls"]
    assert _norm(args["wait_delay"]) == _norm(delay)
    assert (REPO / "plugins" / "action" / ("%s.py" % module)).is_file()


def test_the_image_transfers_result_is_read_once_after_its_wait():
    task = _task("roles/sparkfleet/tasks/image_wait.yml", "Collect the transfer's result")
    assert "until" not in task and task["ansible.builtin.async_status"]
