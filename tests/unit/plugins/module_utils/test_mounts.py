"""module_utils._mounts: does a running container's bind mount still show the host's directory?"""

from __future__ import annotations

import os
import subprocess

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.image._mounts import STALE, bind_state, parse_stat

PATH, CTR = "/models/m", "sparkfleet-ray"


def _stat(path, cwd_fd=None):
    """What `stat -c %i:%h -- PATH` prints, as docker exec returns it (run from the directory cwd_fd holds)."""
    chdir = (lambda: os.fchdir(cwd_fd)) if cwd_fd is not None else None
    return subprocess.run(["stat", "-c", "%i:%h", "--", path], capture_output=True, text=True, check=True,
                          pass_fds=(cwd_fd,) if cwd_fd is not None else (), preexec_fn=chdir).stdout


def test_same_inode_is_not_stale(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    state, msg = bind_state(PATH, CTR, os.stat(d).st_ino, True, parse_stat(_stat(str(d))))
    assert (state, msg, STALE[state]) == ("same", "", False)


def test_a_directory_removed_and_created_again_is_stale_removed(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    held = os.open(d, os.O_RDONLY)  # what the running container's bind holds
    try:
        d.rmdir()
        d.mkdir()
        seen = parse_stat(_stat(".", cwd_fd=held))  # the old directory, as the container's bind resolves it
        assert seen[1] == 0  # a removed directory has no links left
        state, msg = bind_state(PATH, CTR, os.stat(d).st_ino, True, seen)
    finally:
        os.close(held)
    assert state == "removed" and STALE[state]
    assert msg == "/models/m was removed after sparkfleet-ray started (the container still holds the old directory)"


def test_removed_wins_even_when_the_inode_number_was_reused():
    assert bind_state(PATH, CTR, 42, True, (42, 0))[0] == "removed"


def test_another_directory_is_stale_other_inode(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "other").mkdir()
    host = os.stat(tmp_path / "m").st_ino
    seen = parse_stat(_stat(str(tmp_path / "other")))
    state, msg = bind_state(PATH, CTR, host, True, seen)
    assert state == "other_inode" and STALE[state]
    assert msg == "/models/m is inode %d in the container sparkfleet-ray, %d on the host" % (seen[0], host)


def test_not_visible_absent_and_not_running():
    state, msg = bind_state(PATH, CTR, 7, True, None)
    assert state == "not_visible" and STALE[state] and msg == "/models/m is not visible in the running container sparkfleet-ray"
    assert bind_state(PATH, CTR, None, True, (7, 2)) == ("absent", "")  # nothing on the host: nothing to compare
    assert bind_state(PATH, CTR, 7, False, None) == ("not_running", "")
    assert not STALE["absent"] and not STALE["not_running"]


@pytest.mark.parametrize("text, expected", [
    ("1835009:2\n", (1835009, 2)), ("12:0", (12, 0)), ("", None), ("stat: cannot statx", None), ("12", None),
    ("a:b", None),
])
def test_parse_stat(text, expected):
    assert parse_stat(text) == expected
