"""path_guard: on the node, where each written path leads (links), what is already there, whose home it is in.

The rules themselves are module_utils/sync/_paths.py's (tests/unit/plugins/module_utils/test_paths.py). Here the module
runs on this machine's real filesystem: pytest's tmp_path lies under /tmp, which the rule refuses as world-writable,
so the tests that need a tree of their own take /tmp out of that list for their duration (monkeypatch).
"""

from __future__ import annotations

import os
import pwd

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync import _paths
from ansible_collections.sparkfleet.vllm.plugins.modules import path_guard

PROPS = settings(max_examples=150, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A node tree under tmp_path with /tmp allowed (the rule's other trees stay)."""
    monkeypatch.setattr(_paths, "WORLD_WRITABLE_TREES", tuple(t for t in _paths.WORLD_WRITABLE_TREES if t != "/tmp"))
    return tmp_path


def _run(run_module, *entries):
    return run_module(path_guard, {"paths": [dict(e) for e in entries]})


@pytest.mark.bad_input(name="path_guard: a written path that leads through a symbolic link out",
                       expected="refused naming the variable, the path, where it leads and why")
@pytest.mark.parametrize("target, kind, why", [
    pytest.param("/etc", "directory", "is the system directory /etc", id="dir link -> /etc"),
    pytest.param("/usr/lib", "directory", "is the system directory /usr/lib", id="dir link -> /usr/lib"),
    pytest.param("/root", "model directory", "system directory /root", id="model dir link -> /root"),
    pytest.param("/proc/self", "directory", "under /proc", id="dir link -> /proc/self"),
])
def test_a_link_out_of_the_allowed_places_is_refused(run_module, tree, target, kind, why, observe):
    link = tree / "cache"
    link.symlink_to(target)
    res = _run(run_module, {"name": "sparkfleet_cache_dir", "path": str(link), "kind": kind})
    assert res["failed"] is True
    problem = res["problems"][0]
    assert problem.startswith("sparkfleet_cache_dir %s leads through a symbolic link to " % link) and why in problem
    assert problem.endswith(path_guard.FIX[kind])  # the fix
    observe(problem)


def test_a_link_into_a_home_dot_directory_is_refused(run_module, tree, monkeypatch):
    home = tree / "home" / "aurora"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setattr(path_guard, "node_homes", lambda: [str(home)])
    link = tree / "ray"
    link.symlink_to(home / ".ssh")
    res = _run(run_module, {"name": "sparkfleet_ray_tmp_dir", "path": str(link)})
    assert res["failed"] is True and "dot-directory %s/.ssh of a home" % home in res["problems"][0]
    # the home itself (from the node's passwd, not only /home/*) is refused too
    res = _run(run_module, {"name": "sparkfleet_cache_dir", "path": str(home)})
    assert "is the home directory %s itself" % home in res["problems"][0]


def test_a_link_to_an_allowed_place_passes(run_module, tree):
    real = tree / "data" / "models" / "m"
    real.mkdir(parents=True)
    (real / "config.json").write_text("{}")
    link = tree / "models"
    link.symlink_to(tree / "data" / "models")
    res = _run(run_module, {"name": "sparkfleet_model_dir", "path": str(link / "m"), "kind": "model directory"})
    assert res["failed"] is False if "failed" in res else True
    assert res["problems"] == [] and res["paths"][0]["resolved"] == str(real)


@pytest.mark.bad_input(name="path_guard: what exists is not what the role writes there",
                       expected="refused before the role overwrites or chowns it")
@pytest.mark.parametrize("case", ["file as directory", "directory as file", "linked file", "foreign state file",
                                  "linked .pub", "foreign model directory"])
def test_what_exists_must_be_what_the_role_writes(run_module, tree, case, observe):
    path = tree / "thing"
    entry = {"name": "v", "path": str(path), "kind": "directory"}
    if case == "file as directory":
        path.write_text("x")
        words = "exists and is not a directory"
    elif case == "directory as file":
        path.mkdir()
        entry["kind"], words = "file", "is not a plain file"
    elif case == "linked file":
        (tree / "real").write_text("x")
        path.symlink_to(tree / "real")
        entry["kind"], words = "file", "is a symbolic link"
    elif case == "foreign state file":
        path.write_text("root:x:0:0:root:/root:/bin/bash\n")
        entry["kind"], words = "state file", "holds no model state"
    elif case == "linked .pub":
        (tree / "thing.pub").symlink_to(tree / "elsewhere")
        entry["kind"], words = "key file", "thing.pub is a symbolic link"
    else:
        path.mkdir()
        for name in ("Documents", "photo.jpg", ".bashrc"):
            (path / name).write_text("x")
        entry["kind"], words = "model directory", "none of a model"
    res = _run(run_module, entry)
    assert res["failed"] is True and words in res["problems"][0], res
    observe(res["problems"][0])


def test_our_own_files_pass(run_module, tree):
    state = tree / "model.state"
    state.write_text("fingerprint=abc\nchanged=never\n")
    (tree / "model.state.served").write_text("fingerprint=abc\nchanged=never\n")
    model = tree / "m"
    model.mkdir()
    for name in ("config.json", "model-00001-of-00002.safetensors", ".cache", "tokenizer.json"):
        (model / name).write_text("x")
    res = _run(run_module, {"name": "s", "path": str(state), "kind": "state file"},
               {"name": "m", "path": str(model), "kind": "model directory"},
               {"name": "k", "path": str(tree / "key"), "kind": "key file"},
               {"name": "d", "path": str(tree / "new" / "dir"), "kind": "directory"})
    assert res["problems"] == [], res


def test_an_ssh_file_lives_in_the_users_own_ssh_directory(run_module):
    me = pwd.getpwuid(os.getuid()).pw_name
    ok = _run(run_module, {"name": "model_sync_known_hosts", "path": "~/.ssh/sparkfleet_known_hosts", "kind": "ssh file",
                           "user": me})
    assert ok["problems"] == [], ok
    bad = _run(run_module, {"name": "model_sync_known_hosts", "path": "~/.ssh/authorized_keys", "kind": "ssh file",
                            "user": me})
    assert "never one ssh reads" in bad["problems"][0]
    gone = _run(run_module, {"name": "model_sync_known_hosts", "path": "~/.ssh/x", "kind": "ssh file",
                             "user": "no-such-user-here"})
    assert "the user no-such-user-here" in gone["problems"][0] and "does not exist on this node" in gone["problems"][0]


def test_every_problem_at_once_and_nothing_changed(run_module, tree):
    (tree / "f").write_text("x")
    before = sorted(os.listdir(tree))
    res = _run(run_module, {"name": "a", "path": "/etc/ssl"}, {"name": "b", "path": str(tree / "f")},
               {"name": "c", "path": "/proc/1", "kind": "file"})
    assert res["failed"] is True and len(res["problems"]) == 3
    assert [p.split(" ")[0] for p in res["problems"]] == ["a", "b", "c"]
    assert sorted(os.listdir(tree)) == before


def test_check_mode_is_the_same_read(run_module):
    res = run_module(path_guard, {"paths": [{"name": "a", "path": "/etc/ssl"}]}, check_mode=True)
    assert res["failed"] is True and "a /etc/ssl" in res["problems"][0]


@PROPS
@given(path=st.text(max_size=40) | st.sampled_from(["/", "//etc", "/etc/../", "~/.ssh/x", "~", "/dev/null", "/proc/self/fd"]),
       kind=st.sampled_from(path_guard.KINDS), user=st.none() | st.text(max_size=8))
@example(path="~/x", kind="directory", user="\x00")  # getpwnam() raises ValueError on a NUL byte
def test_no_input_gives_a_traceback(run_module, path, kind, user):
    res = _run(run_module, {"name": "v", "path": path, "kind": kind, "user": user})
    assert isinstance(res.get("problems", []), list)
    for problem in res.get("problems", []):
        assert problem.startswith("v ") or problem.startswith("v:")


def _statvfs_with(free_bytes):
    real = os.statvfs

    def fake(path):
        got = real(path)
        return os.statvfs_result((got.f_bsize, got.f_frsize, got.f_blocks, got.f_bfree, free_bytes // got.f_frsize,
                                  got.f_files, got.f_ffree, got.f_favail, got.f_flag, got.f_namemax))
    return fake


def test_a_filesystem_under_the_floor_is_named_with_its_variables_and_warned(run_module, tree, monkeypatch):
    # 50 MiB left where the watchdogs write (a full head's disk switched self-healing off): warned, never refused
    monkeypatch.setattr(path_guard.os, "statvfs", _statvfs_with(50 << 20))
    said = []
    monkeypatch.setattr(path_guard.AnsibleModule, "warn", lambda self, text: said.append(text))
    (tree / "state").mkdir()
    res = run_module(path_guard, {"paths": [
        {"name": "sparkfleet_state_dir", "path": str(tree / "state" / "watchdog")},     # not there yet: its parent
        {"name": "sparkfleet_config_dir", "path": str(tree / "etc-sparkfleet")},
        {"name": "model_sync_dest", "path": str(tree / "models" / "m"), "kind": "model directory"}]})
    assert not res.get("failed") and res["problems"] == []
    assert len(res["low_space"]) == 1
    fs = res["low_space"][0]
    assert fs["free_mb"] == 50 and fs["names"] == ["sparkfleet_state_dir", "sparkfleet_config_dir"]
    assert fs["path"] == str(tree / "state")
    warned = " ".join(said)
    assert "50 MiB free" in warned and "sparkfleet_state_dir, sparkfleet_config_dir" in warned
    assert "1024 MiB floor" in warned


def test_room_enough_or_a_floor_of_zero_warns_nothing(run_module, tree, monkeypatch):
    entry = {"name": "sparkfleet_state_dir", "path": str(tree / "state")}
    said = []
    monkeypatch.setattr(path_guard.AnsibleModule, "warn", lambda self, text: said.append(text))
    monkeypatch.setattr(path_guard.os, "statvfs", _statvfs_with(5 << 30))
    res = run_module(path_guard, {"paths": [entry]})
    assert res["low_space"] == [] and not said
    monkeypatch.setattr(path_guard.os, "statvfs", _statvfs_with(1 << 20))
    res = run_module(path_guard, {"paths": [entry], "min_free_mb": 0})
    assert res["low_space"] == [] and not said
