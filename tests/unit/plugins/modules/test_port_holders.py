"""port_holders on this machine: a real listener is named, ours is accepted, arguments are checked."""

from __future__ import annotations

import os
import socket

import pytest

from ansible_collections.sparkfleet.vllm.plugins.modules import port_holders


@pytest.fixture
def listener():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


def test_a_foreign_listener_fails_the_task_naming_pid_and_port(run_module, listener):
    res = run_module(port_holders, {"ports": [listener], "ours": ["sparkfleet-vllm"]}, check_mode=True)
    assert res["failed"] is True
    assert "port %d (127.0.0.1): pid %d" % (listener, os.getpid()) in res["msg"]
    assert "nothing was changed" in res["hint"]
    assert res["holders"][0]["ours"] is False


def test_report_only(run_module, listener):
    res = run_module(port_holders, {"ports": [listener], "fail_on_foreign": False})
    assert res.get("failed") is not True and res["changed"] is False
    assert len(res["foreign"]) == 1


def test_free_ports_pass(run_module, listener):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    free = sock.getsockname()[1]
    sock.close()
    res = run_module(port_holders, {"ports": [free]})
    assert res.get("failed") is not True and res["holders"] == []


@pytest.mark.parametrize("ports", [[0], [70000], []])
def test_bad_ports_are_refused(run_module, ports):
    res = run_module(port_holders, {"ports": ports})
    assert res["failed"] is True and "ports must be 1-65535" in res["msg"]
