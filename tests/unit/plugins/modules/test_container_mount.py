"""container_mount: a fake docker whose `exec ... stat` runs the real stat on what the container would see."""

from __future__ import annotations

import os
import subprocess

import pytest

from ansible_collections.sparkfleet.vllm.plugins.modules import container_mount

CTR = "sparkfleet-ray"


@pytest.fixture
def node(run_module, node_commands, tmp_path):
    """run(view=None|path|fd, running=True, docker=True): the container sees `view` at the host path."""
    host = tmp_path / "models"
    host.mkdir()
    calls = []

    def _run(view=None, running=True, docker=True, path=None, check_mode=False, hung=False):
        def answer(cmd):
            assert fake.kwargs[-1].get("environ_update", {}).get("LC_ALL") == "C"
            assert cmd[:4] == ["/usr/bin/timeout", "-k", "5", "30"]  # bounded
            cmd = cmd[4:]
            calls.append(cmd)
            if hung:
                return 124, "", ""
            if cmd[1] == "inspect":
                assert cmd[2:] == ["-f", "{{.State.Running}}", CTR]
                return (0, "true\n" if running else "false\n", "") if running is not None else \
                    (1, "", "Error: No such object: %s" % CTR)
            assert cmd[1:6] == ["exec", CTR, "stat", "-c", "%i:%h"] and cmd[6:] == ["--", str(host)]
            if view is None:
                return 1, "", "stat: cannot statx '%s': No such file or directory" % host
            fd = view if isinstance(view, int) else None
            target = "." if fd is not None else str(view)
            p = subprocess.run(["stat", "-c", "%i:%h", "--", target], capture_output=True, text=True, check=False,
                               pass_fds=(fd,) if fd is not None else (),
                               preexec_fn=(lambda: os.fchdir(fd)) if fd is not None else None)
            return p.returncode, p.stdout, p.stderr

        fake = node_commands(answer, unwrap=False, missing=() if docker else ("docker",))
        return run_module(container_mount, {"path": str(path or host), "container": CTR}, check_mode=check_mode)

    _run.host, _run.calls = host, calls
    return _run


def test_same_directory(node):
    res = node(view=node.host)
    assert not res.get("failed") and res["changed"] is False
    assert res["state"] == "same" and res["stale"] is False
    assert res["host_inode"] == res["container_inode"] == os.stat(node.host).st_ino and res["container_links"] >= 2


def test_removed_and_created_again(node):
    held = os.open(node.host, os.O_RDONLY)  # the running container's bind keeps the old directory
    try:
        old = os.fstat(held).st_ino
        node.host.rmdir()
        node.host.mkdir()
        res = node(view=held, check_mode=True)
    finally:
        os.close(held)
    assert res["state"] == "removed" and res["stale"] is True and res["changed"] is False
    assert res["container_inode"] == old and res["container_links"] == 0
    assert res["msg"] == "%s was removed after %s started (the container still holds the old directory)" % (node.host, CTR)


def test_other_directory(node, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    res = node(view=other)
    assert res["state"] == "other_inode" and res["stale"] is True
    assert res["msg"] == "%s is inode %d in the container %s, %d on the host" % (
        node.host, os.stat(other).st_ino, CTR, os.stat(node.host).st_ino)


def test_not_visible_in_the_container(node):
    res = node(view=None)
    assert res["state"] == "not_visible" and res["stale"] is True
    assert res["container_inode"] is None and "is not visible in the running container" in res["msg"]


@pytest.mark.parametrize("running", [False, None])
def test_a_container_that_does_not_run_binds_the_current_directory_when_it_starts(node, running):
    res = node(view=node.host, running=running)
    assert res["state"] == "not_running" and res["stale"] is False
    assert [c[1] for c in node.calls] == ["inspect"]


def test_no_directory_on_the_host_or_no_docker_runs_nothing(node, tmp_path):
    res = node(path=tmp_path / "missing")
    assert res["state"] == "absent" and res["stale"] is False and node.calls == []
    res = node(view=node.host, docker=False)
    assert res["state"] == "not_running" and node.calls == []


def test_empty_container_name_is_refused(run_module, tmp_path):
    res = run_module(container_mount, {"path": str(tmp_path), "container": " "})
    assert res["failed"] is True and "container must be a container name or ID" in res["msg"]


def test_a_docker_that_does_not_answer_fails_naming_it(node):
    res = node(view=node.host, hung=True)
    assert res["failed"] is True and res["msg"].startswith("docker did not answer within 30 s")
    assert "docker daemon" in res["hint"]
