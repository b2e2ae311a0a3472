"""The model-directory guard: which paths a sync, a chown or a cache drop may touch."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._paths import (
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


# ------------------------------------------------------------------ every written path (issue 17.1)

from hypothesis import given, settings, strategies as st  # noqa: E402

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._paths import (  # noqa: E402
    NEVER_TREES,
    normal_path,
    written_path_problem,
)

PROPS = settings(max_examples=300, deadline=None, database=None)


@pytest.mark.parametrize("path, kind, why", [
    ("/etc/passwd", "file", "under the system directory /etc"),
    ("/etc/ssl", "directory", "under the system directory /etc"),
    ("/etc/sparkfleet/../ssl", "directory", "under the system directory /etc"),
    ("/home/spark/.ssh", "directory", "dot-directory /home/spark/.ssh"),
    ("/home/spark/.docker/config.json", "file", "dot-directory /home/spark/.docker"),
    ("/home/spark", "directory", "home directory /home/spark itself"),
    ("/var/lib/models", "model directory", "under the system directory /var"),
    ("/var/lib/docker/sparkfleet", "directory", "under /var/lib/docker"),
    ("/usr/bin/sparkfleet", "file", "under /usr/bin"),
    ("/tmp/ray", "directory", "under /tmp"),
    ("/dev/shm/x", "directory", "under /dev"),
    ("/root/sparkfleet", "directory", "under /root"),
    ("/sys/class", "directory", "under /sys"),
    ("/boot/efi", "directory", "under /boot"),
    ("/models/q\"x", "model directory", "holds '\"'"),
    ("/models/q x", "model directory", "a space"),
    ("/models/é", "model directory", "only ASCII"),
    ("/etc/sparkfleet/", "file", "must name a file"),
    ("relative", "directory", "not an absolute path"),
    ("", "directory", "empty"),
    ("/", "directory", "root directory"),
])
def test_written_paths_refused(path, kind, why):
    problem = written_path_problem(path, kind)
    assert problem is not None and why in problem, problem


@pytest.mark.parametrize("path", ["/etc/sparkfleet", "/etc/sparkfleet/model.state", "/var/lib/sparkfleet/ray",
                                  "/var/cache/sparkfleet/vllm", "/usr/local/lib/sparkfleet/sync_shell.py",
                                  "/run/sparkfleet/deploy.lock", "/models/m", "/home/spark/models/m", "/srv/x",
                                  "/data/hf/models--Qwen--Qwen3.5", "/opt/models/m", "/var/lib/sparkfleet-models/m"])
def test_written_paths_allowed(path):
    assert written_path_problem(path, "directory") is None


def test_a_home_from_the_nodes_passwd_counts_like_home():
    assert "dot-directory /srv/git/.ssh" in written_path_problem("/srv/git/.ssh/x", "file", homes=["/srv/git", "/"])
    assert written_path_problem("/srv/git/repo", "file", homes=["/srv/git"]) is None


@PROPS
@given(path=st.text(max_size=30), kind=st.sampled_from(["directory", "file", "model directory"]),
       homes=st.lists(st.text(max_size=10) | st.none(), max_size=3))
def test_written_path_problem_never_raises(path, kind, homes):
    problem = written_path_problem(path, kind, homes)
    assert problem is None or isinstance(problem, str)


@PROPS
@given(tree=st.sampled_from(NEVER_TREES), rest=st.from_regex(r"\A(/[a-z0-9.]{1,6}){0,3}\Z"),
       extra=st.sampled_from(["", "/..", "/./", "//"]))
def test_nothing_under_the_system_trees_passes_in_any_spelling(tree, rest, extra):
    path = tree + rest + extra
    if not normal_path(path).startswith(tree):
        return  # climbed out with '..': another path
    assert written_path_problem(path, "directory") is not None


@PROPS
@given(path=st.from_regex(r"\A(/[A-Za-z0-9._-]{1,8}){1,4}\Z"))
def test_the_verdict_is_the_same_for_every_spelling_of_a_path(path):
    assert (written_path_problem(path) is None) == (written_path_problem("/" + path + "/.") is None)
