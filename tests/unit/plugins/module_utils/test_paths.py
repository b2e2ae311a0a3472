"""The model-directory guard: which paths a sync, a chown or a cache drop may touch."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils._paths import (
    looks_like_model_dir,
    model_path_problem,
)

REFUSED = [
    ("", "empty"),
    ("   ", "empty"),
    (None, "empty"),
    ("/", "system directory /"),
    ("//", "system directory /"),
    ("/models/..", "system directory /"),
    ("/models/../etc/", "system directory /etc"),
    ("/etc", "system directory /etc"),
    ("/etc/sparkfleet", "system directory"),
    ("/etc/nginx/models", "inside the system directory /etc"),
    ("/usr", "system directory /usr"),
    ("/usr/lib/models", "inside the system directory /usr/lib"),
    ("/var", "system directory /var"),
    ("/var/lib", "system directory /var/lib"),
    ("/var/lib/docker/volumes/m", "inside the system directory /var/lib/docker"),
    ("/home", "system directory /home"),
    ("/home/spark", "home directory"),
    ("/home/spark/", "home directory"),
    ("/root", "system directory /root"),
    ("/proc/1", "inside the system directory /proc"),
    ("models/qwen", "not an absolute path"),
    ("./models", "not an absolute path"),
    (" /models/m", "whitespace"),
    ("/models/m\n", "whitespace"),
    ("/models/a\nb", "newline"),
]

ALLOWED = ["/models/Qwen3.5-122B-A10B-FP8", "/models", "/home/spark/models/qwen", "/var/lib/models/m",
           "/data/hf/hub/models--Qwen--Qwen3.5", "/srv/sparkfleet-test/model", "/tmp/pytest-1/model",
           "/opt/models/m", "/mnt/nvme/models/m"]


@pytest.mark.parametrize("path, why", REFUSED)
def test_destructive_paths_are_refused_with_the_reason(path, why):
    problem = model_path_problem(path, "dest")
    assert problem is not None and why in problem, problem
    assert "dest" in problem


@pytest.mark.parametrize("path", ALLOWED)
def test_model_directories_are_allowed(path):
    assert model_path_problem(path) is None


@pytest.mark.parametrize("names, expected", [
    (["config.json", "model-00001-of-00002.safetensors"], True),
    (["model.safetensors.index.json"], True),
    ([".sparkfleet-model"], True),
    (["notes.txt", ".bashrc", "photos"], False),
    ([], False),
])
def test_looks_like_model_dir(names, expected):
    assert looks_like_model_dir(names) is expected
