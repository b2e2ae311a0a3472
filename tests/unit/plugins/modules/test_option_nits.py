"""Issue 17.14: option values that meant something else than they said, refused before any command runs.

image_check timeout=0 was "no limit" (coreutils `timeout 0`); image_sync timeout=-1 reached ssh's ConnectTimeout;
run_lock path='' or a directory answered "HELD" (or moved the lock into the directory); container_mount passed
`--help` to docker as a container name. Property tests: no option value gives a traceback, a refusal names the option.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.sparkfleet.vllm.plugins.module_utils.host._run_lock import (
    NOT_A_FILE,
    acquire_script,
    lock_record,
    path_problem,
    takeover_script,
)
from ansible_collections.sparkfleet.vllm.plugins.modules import container_mount, image_check, image_sync

PROPS = settings(max_examples=100, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture
def no_commands(node_commands):
    """Any command a module runs fails the test: these refusals come before the first one."""
    def refuse(cmd):
        raise AssertionError("ran %r before refusing the option" % (cmd,))
    node_commands(refuse, unwrap=False)


@pytest.mark.bad_input(name="a module timeout that would mean no limit",
                       expected="refused naming the option, before any command runs")
@pytest.mark.parametrize("module, args", [
    pytest.param(image_check, {"image": "img:1", "timeout": 0}, id="image_check timeout=0"),
    pytest.param(image_check, {"image": "img:1", "timeout": -5}, id="image_check timeout=-5"),
    pytest.param(image_sync, {"image": "img:1", "destinations": [{"ip": "10.99.1.12"}], "ssh_user": "spark",
                              "ssh_key": "/etc/sparkfleet/k", "timeout": -1}, id="image_sync timeout=-1"),
    pytest.param(image_sync, {"image": "img:1", "destinations": [{"ip": "10.99.1.12"}], "ssh_user": "spark",
                              "ssh_key": "/etc/sparkfleet/k", "timeout": 0}, id="image_sync timeout=0"),
])
def test_a_timeout_below_one_second_is_refused(run_module, no_commands, module, args, observe):
    res = run_module(module, args)
    assert res["failed"] is True and res["msg"].startswith("timeout must be 1 or more seconds")
    observe(res["msg"])


@pytest.mark.bad_input(name="container_mount: a container name docker reads as an option",
                       expected="refused naming the option; docker never runs")
@pytest.mark.parametrize("container", [pytest.param("--help", id="container=--help"),
                                       pytest.param("-f", id="container=-f"),
                                       pytest.param("a b", id="container='a b'")])
def test_container_mount_refuses_an_option_as_name(run_module, no_commands, tmp_path, container, observe):
    res = run_module(container_mount, {"path": str(tmp_path), "container": container})
    assert res["failed"] is True and res["msg"].startswith("container must be a container name or ID")
    observe(res["msg"])


def test_container_mount_refuses_a_relative_path(run_module, no_commands):
    res = run_module(container_mount, {"path": "models", "container": "sparkfleet-ray"})
    assert res["failed"] is True and "path must be the absolute path" in res["msg"]


@pytest.mark.bad_input(name="run_lock: a lock path that is no file", expected="refused naming path and why")
@pytest.mark.parametrize("path, why", [pytest.param("", "empty", id="path=''"),
                                       pytest.param("run/deploy.lock", "not absolute", id="path=relative"),
                                       pytest.param("/run/sparkfleet/", "names a directory", id="path=/run/sparkfleet/"),
                                       pytest.param("/", "names a directory", id="path=/")])
def test_run_lock_refuses_a_path_that_is_no_file(path, why, observe):
    problem = path_problem(path)
    assert problem and why in problem
    observe("run_lock: " + problem)


def _sh(script):
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout


@pytest.mark.bad_input(name="run_lock: the lock path is an existing directory or link",
                       expected="NOT_A_FILE (the action fails naming it), never HELD or ACQUIRED")
@pytest.mark.parametrize("shape", ["directory", "link"])
def test_a_directory_or_link_at_the_lock_path_is_not_a_lock(tmp_path, shape, observe):
    lock = tmp_path / "deploy.lock"
    if shape == "directory":
        lock.mkdir()
    else:
        (tmp_path / "elsewhere").write_text("")
        lock.symlink_to(tmp_path / "elsewhere")
    record = json.dumps(lock_record("ctl", 1, "tok", 1.0))
    assert _sh(acquire_script(str(lock), record)).startswith(NOT_A_FILE)
    assert _sh(takeover_script(str(lock), "", record)).startswith(NOT_A_FILE)
    # nothing was written into the directory or through the link
    assert (lock.is_dir() and not any(lock.iterdir())) or (tmp_path / "elsewhere").read_text() == ""
    observe(NOT_A_FILE)


@PROPS
@given(path=st.text(max_size=30))
def test_run_lock_path_problem_never_raises(path):
    problem = path_problem(path)
    assert problem is None or problem.startswith("path")
    if problem is None:
        assert path.startswith("/") and not path.endswith("/")


@PROPS
@given(timeout=st.integers(-10 ** 6, 0))
def test_every_non_positive_timeout_is_refused(run_module, no_commands, timeout):
    assert run_module(image_check, {"image": "i", "timeout": timeout})["msg"].startswith("timeout must be")


@PROPS
@given(container=st.text(max_size=12), path=st.text(max_size=12) | st.just("/"))
def test_container_mount_options_never_give_a_traceback(run_module, node_commands, container, path):
    ran = node_commands(lambda cmd: (1, "", "Error: No such object: %s" % cmd[-1]), unwrap=False).ran
    res = run_module(container_mount, {"path": path or "/", "container": container})
    if res.get("failed"):
        assert res["msg"].startswith(("container must", "path must")) and not ran
    else:
        # docker only ever sees a name that cannot be an option
        assert all(not cmd[-1].startswith("-") for cmd in ran)
