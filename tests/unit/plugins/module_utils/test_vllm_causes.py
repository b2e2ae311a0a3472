"""The cause table: one entry per failure class, everything else derived from it."""

from __future__ import annotations

import re

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine._vllm_causes import (
    CAUSE,
    CAUSES,
    FAILURE_CLASSES,
    HINTS,
    LINE_CAUSES,
    PRIORITY,
    Cause,
    doc_note,
    render_hint,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import SETTINGS, render_text, unknown_settings


def test_one_entry_per_class_with_its_own_priority():
    assert len(set(FAILURE_CLASSES)) == len(CAUSES) == len(CAUSE)
    assert len(set(PRIORITY.values())) == len(PRIORITY), "two classes with one priority: the winner would be arbitrary"
    assert set(HINTS) == set(FAILURE_CLASSES)


def test_every_hint_names_only_known_settings_and_every_setting_is_used():
    used = set()
    for c in CAUSES:
        assert c.hint.strip(), c.name
        assert set(c.settings) <= set(SETTINGS), (c.name, sorted(set(c.settings) - set(SETTINGS)))
        used.update(c.settings)
    # api_key and served_model_name are named by vllm_wait's own API hints, cleanup_* by the GPU cleanup's plan
    # (_gpu_plan) (tests/unit/plugins/module_utils/test_settings.py holds every setting to a user).
    assert sorted(set(SETTINGS) - used) == ["api_key", "cleanup_commands", "cleanup_containers", "cleanup_foreign",
                                            "cleanup_protect", "cleanup_system", "cleanup_units", "served_model_name"]


def test_line_causes_keep_the_table_order_and_have_a_pattern():
    assert [c.name for c in LINE_CAUSES] == [c.name for c in CAUSES if c.strong or c.weak]
    for c in LINE_CAUSES:
        assert c.strong is not None or c.weak is not None


def test_generic_hints_name_no_collection_variable():
    for name, hint in HINTS.items():
        assert "{" not in hint and "}" not in hint, name
        assert not re.search(r"\b(?:vllm_serve|ray_cluster|model_sync|gpu_cleanup|sparkfleet)_\w+", hint), (name, hint)


def test_render_uses_the_callers_names_and_falls_back_per_setting():
    names = {"gpu_memory_utilization": "vllm_serve_gpu_memory_utilization"}
    hint = render_hint("cuda_oom", names)
    assert "Lower vllm_serve_gpu_memory_utilization or --max-model-len" in hint
    assert render_hint("cuda_oom") == HINTS["cuda_oom"]
    assert render_hint("worker_died", names) == HINTS["worker_died"]  # names no setting
    assert render_text("Pass it as api_key ({api_key}).", {"api_key": "k"}) == "Pass it as api_key (k)."
    assert render_text("Pass it as api_key ({api_key}).") == "Pass it as api_key (VLLM_API_KEY)."


def test_unknown_settings_are_reported_sorted():
    assert unknown_settings({"port": "p", "zz": 1, "aa": 2}) == ["aa", "zz"]
    assert unknown_settings(None) == []


def test_doc_note_orders_classes_by_priority():
    note = doc_note()
    listed = re.findall(r"C\((\w+)\)", note)
    assert listed == sorted(FAILURE_CLASSES, key=PRIORITY.get)
    assert "(I(log_file) does not exist)" in note


def test_a_cause_compiles_its_patterns_and_lists_its_settings():
    c = Cause("x", 1, strong=r"boom \d+", weak=None, hint="Set {port} and {image}.")
    assert c.strong.search("a boom 12") and c.weak is None
    assert c.settings == ("port", "image")


@pytest.mark.parametrize("cls", FAILURE_CLASSES)
def test_every_hint_renders_with_every_setting_named(cls):
    names = dict((k, "<%s>" % k) for k in SETTINGS)
    text = render_hint(cls, names)
    for s in CAUSE[cls].settings:
        assert "<%s>" % s in text
