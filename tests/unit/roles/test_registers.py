"""A task that is skipped still registers its result (ansible-core records the skip under the name), so two tasks of
one task file registering one name let the second erase what the first found whenever it is skipped. Seen on main:
runtime_image's "Read the pulled image on the head" (skipped on every run where the head held the image) erased the
first read, and distribute.yml looked for the image on the workers without its content; model_sync's two manifest
records shared a name the same way."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
TASK_FILES = sorted((REPO / "roles").glob("*/tasks/*.yml")) + sorted((REPO / "roles").glob("*/handlers/*.yml"))


def _tasks(items):
    for task in items or []:
        if isinstance(task, dict):
            yield task
            for key in ("block", "rescue", "always"):
                yield from _tasks(task.get(key))


def shared_registers(doc):
    """Names registered by more than one task of a task file, with the tasks' names."""
    by_name = collections.defaultdict(list)
    for task in _tasks(doc):
        if task.get("register"):
            by_name[task["register"]].append(task.get("name", "?"))
    return {name: tasks for name, tasks in by_name.items() if len(tasks) > 1}


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_each_register_name_belongs_to_one_task(path):
    assert shared_registers(yaml.safe_load(path.read_text(encoding="utf-8"))) == {}


def test_the_check_sees_two_tasks_sharing_a_name():
    doc = yaml.safe_load("- name: a\n  ansible.builtin.command: x\n  register: r\n"
                         "- block:\n    - name: b\n      ansible.builtin.command: y\n      register: r\n      when: z\n")
    assert shared_registers(doc) == {"r": ["a", "b"]}
