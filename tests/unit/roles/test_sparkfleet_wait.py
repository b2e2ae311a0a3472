"""roles/sparkfleet/files/sparkfleet-wait: a timeout is never exit 1 (the Ray unit's SuccessExitStatus=1)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "roles" / "sparkfleet" / "files" / "sparkfleet-wait"


def wait(*args):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False)


def closed_port():
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def test_tcp_ready_exits_0():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        r = wait("tcp", "127.0.0.1", str(s.getsockname()[1]), "5")
    assert r.returncode == 0, r.stderr


def test_tcp_timeout_exits_3_and_says_what_did_not_answer():
    port = closed_port()
    r = wait("tcp", "127.0.0.1", port, "1")
    assert r.returncode == 3
    assert "127.0.0.1:%s did not answer within 1 s" % port in r.stderr


def test_gpus_timeout_exits_3(tmp_path):
    # a docker that knows no container: the container is not running
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    r = subprocess.run(["bash", str(SCRIPT), "gpus", "sparkfleet-ray", "2", "1"], capture_output=True, text=True,
                       timeout=60, check=False, env={"PATH": "%s:/usr/bin:/bin" % tmp_path})
    assert r.returncode == 3
    assert "sparkfleet-ray not running or its Ray cluster short of 2 GPUs after 1 s" in r.stderr


@pytest.mark.parametrize("args", [(), ("tcp", "h", "1"), ("tcp", "h", "1", "soon"), ("udp", "h", "1", "5")])
def test_bad_arguments_exit_2_never_1(args):
    r = wait(*args)
    assert r.returncode == 2 and "usage: sparkfleet-wait" in r.stderr
