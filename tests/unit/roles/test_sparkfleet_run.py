"""roles/sparkfleet/files/sparkfleet-run: a unit's container followed past a restart of dockerd (docker faked).

The lab test with a real dockerd and live-restore: tests/integration/test_supervision.py
(test_serving_survives_a_docker_restart_with_live_restore).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "roles" / "sparkfleet" / "files" / "sparkfleet-run"

# A docker CLI whose answers come from files in its directory: `run` exits with run_rc; `version` answers once
# `down` (a count of calls still to fail) is spent; `inspect` prints `running`; `wait` prints the next line of
# `wait` (an empty line: dockerd went away under it), once `logs` has printed, and the container stops running after
# a status.
FAKE_DOCKER = r"""#!/usr/bin/env bash
d=$(dirname "$0")
echo "$*" >> "$d/calls"
case $1 in
  run) echo "engine output"; exit "$(cat "$d/run_rc")" ;;
  version)
    n=$(cat "$d/down" 2>/dev/null || echo 0)
    if [ "$n" -gt 0 ]; then echo $((n - 1)) > "$d/down"; echo "Cannot connect to the Docker daemon" >&2; exit 1; fi
    echo 28.5.1 ;;
  inspect) cat "$d/running" ;;
  logs) echo "engine output after the restart"; touch "$d/logged"; exec sleep 30 ;;
  wait)
    # a real `docker wait` returns when the container ends, long after `logs` began: wait for it (bounded)
    for _ in $(seq 100); do [ -e "$d/logged" ] && break; sleep 0.1; done
    code=$(head -n 1 "$d/wait"); sed -i 1d "$d/wait"
    if [ -z "$code" ]; then echo "error waiting for container: unexpected EOF" >&2; exit 1; fi
    echo false > "$d/running"; echo "$code" ;;
esac
"""


@pytest.fixture
def docker(tmp_path):
    fake = tmp_path / "docker"
    fake.write_text(FAKE_DOCKER)
    fake.chmod(0o755)

    def setup(run_rc, running, wait=(), down=0):
        (tmp_path / "run_rc").write_text("%d\n" % run_rc)
        (tmp_path / "running").write_text("true\n" if running else "false\n")
        (tmp_path / "wait").write_text("".join("%s\n" % w for w in wait))
        (tmp_path / "down").write_text("%d\n" % down)
    setup.calls = lambda: (tmp_path / "calls").read_text().splitlines()
    setup.env = {"PATH": "%s:/usr/bin:/bin" % tmp_path}
    return setup


def run(docker, *args):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False,
                          env=docker.env)


def test_a_container_that_ended_with_its_client_gives_its_status(docker):
    docker(run_rc=143, running=False)               # `docker stop`'s SIGTERM ended it
    r = run(docker, "sparkfleet-vllm", "5", "docker", "run", "--name", "sparkfleet-vllm", "img")
    assert r.returncode == 143, r.stderr
    assert r.stdout == "engine output\n"
    assert not any(c.startswith("wait") for c in docker.calls())


def test_a_container_that_outlived_its_client_is_followed_to_its_end(docker):
    # dockerd restarted with live-restore: the client returned 125 (unexpected EOF), the container runs on; dockerd
    # answers again after two tries
    docker(run_rc=125, running=True, wait=["0"], down=2)
    r = run(docker, "sparkfleet-ray", "10", "docker", "run", "--name", "sparkfleet-ray", "img")
    assert r.returncode == 0, r.stderr
    assert "the docker client returned 125 while the container runs on" in r.stderr
    assert "engine output after the restart" in r.stdout       # its output still reaches the journal
    calls = docker.calls()
    assert "wait sparkfleet-ray" in calls
    assert any(c.startswith("logs --follow --since ") and c.endswith(" sparkfleet-ray") for c in calls)


def test_followed_again_when_dockerd_restarts_under_docker_wait(docker):
    docker(run_rc=125, running=True, wait=["", "137"])
    r = run(docker, "sparkfleet-vllm", "5", "docker", "run", "img")
    assert r.returncode == 137, r.stderr
    assert [c for c in docker.calls() if c.startswith("wait")] == ["wait sparkfleet-vllm"] * 2


def test_dockerd_not_back_in_time_ends_with_the_client_status(docker):
    docker(run_rc=125, running=True, down=1000)
    r = run(docker, "sparkfleet-vllm", "1", "docker", "run", "img")
    assert r.returncode == 125
    assert "sparkfleet-vllm: dockerd did not answer within 1 s of the client's end (status 125)" in r.stderr


@pytest.mark.parametrize("args", [(), ("sparkfleet-ray", "90"), ("sparkfleet-ray", "soon", "docker", "run")])
def test_bad_arguments_exit_2_never_1(docker, args):
    r = run(docker, *args)
    assert r.returncode == 2 and "usage: sparkfleet-run" in r.stderr
