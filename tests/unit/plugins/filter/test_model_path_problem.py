"""sparkfleet.vllm.model_path_problem: the role-side guard before a model directory is created or chowned."""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.filter.model_path_problem import FilterModule

F = FilterModule().filters()["model_path_problem"]


def test_system_and_empty_paths_are_named():
    assert F("/", "model_sync_dest") == "the model_sync_dest '/' is the system directory /"
    assert F("", "model_sync_src") == "the model_sync_src is empty"


def test_a_model_directory_gives_an_empty_string():
    assert F("/models/Qwen3.5-122B-A10B-FP8") == ""
