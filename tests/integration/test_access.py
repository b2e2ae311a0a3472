"""Access checked in preflight before anything changes (issue 16.4), on the lab: sudo that asks for a password.

The lab user `spark` has NOPASSWD sudo; `labctl break sudo-password HOST` makes sudo ask for one (the operators'
Sparks: whether sudo needs a password there is not known). Quick: preflight.yml only, on a lab that is up.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.lab

PASSWORD = "sparklab-become"   # lab/labctl's SUDO_PASSWORD
# runtime_image's forced command for a user other than root, and the sudoers line preflight names for it.
LOAD = "sudo -n /usr/bin/python3 /usr/local/sbin/sparkfleet-image-load"
RULE = "spark ALL=(root) NOPASSWD: /usr/bin/python3 /usr/local/sbin/sparkfleet-image-load *"


@pytest.fixture
def sudo_password(lab):
    broken = []

    def brk(host):
        lab.labctl("break", "sudo-password", host)
        broken.append(host)
    yield brk
    for host in broken:
        lab.labctl("fix", "sudo-password", host)


def _refused(failures):
    """The refusals (the assert that names the fixes), without the ignored become failure that fed it."""
    return [f for f in failures if "assertion" in (f["res"] or {})]


def _msg(failures):
    said = []
    for f in failures:
        msg = (f["res"] or {}).get("msg")
        said.extend(str(m) for m in msg) if isinstance(msg, list) else said.append(str(msg))
    return " ".join(" ".join(said).split())


@pytest.mark.fault(name="become without NOPASSWD on the head (sudo asks for a password)",
                   expected="preflight refuses naming the host, the user and the fix; with the become password it passes")
def test_sudo_password_on_the_head_refused_then_passes_with_the_password(lab, tmp_path, sudo_password, observe):
    sudo_password("spark-1")
    r, failures = lab.play(tmp_path / "a", "playbooks/preflight.yml")
    failures = _refused(failures)
    assert r["status"] == "failed" and [f["host"] for f in failures] == ["spark-1"], failures
    msg = _msg(failures)
    observe(msg[:300])
    assert "spark-1: become (sudo) fails for spark: Task failed: Missing sudo password." in msg, msg
    assert "--ask-become-pass (-K) or ansible_become_password" in msg
    assert "echo 'spark ALL=(ALL) NOPASSWD: ALL' | sudo tee /etc/sudoers.d/spark-nopasswd" in msg
    assert lab.changed_total(r) == 0
    r, failures = lab.play(tmp_path / "b", "playbooks/preflight.yml", extravars={"ansible_become_password": PASSWORD})
    assert r["status"] == "successful" and not _refused(failures), failures


@pytest.mark.long   # three preflight runs (~2 min on the loaded machine); the head's case above runs in CI
@pytest.mark.fault(name="become without NOPASSWD on a worker (the image key's load command cannot run through sudo)",
                   expected="preflight names the worker, the key and the exact sudoers line, before any key is written")
def test_sudo_password_on_a_worker_names_the_image_keys_sudoers_line(lab, tmp_path, sudo_password, observe):
    sudo_password("spark-2")
    before = lab.host_exec("spark-2", "cat", "/home/spark/.ssh/authorized_keys").stdout
    r, failures = lab.play(tmp_path / "a", "playbooks/preflight.yml", extravars={"ansible_become_password": PASSWORD})
    failures = _refused(failures)
    assert r["status"] == "failed" and [f["host"] for f in failures] == ["spark-2"], failures
    msg = _msg(failures)
    observe(msg[:300])
    assert ("spark-2: runtime_image's image key's command `%s` cannot run as spark: sudo: a password is required;"
            " allow it once: echo '%s' | sudo tee /etc/sudoers.d/sparkfleet-spark" % (LOAD, RULE)) in msg, msg
    assert lab.host_exec("spark-2", "cat", "/home/spark/.ssh/authorized_keys").stdout == before
    r, failures = lab.play(tmp_path / "w", "playbooks/preflight.yml", extravars={"ansible_become_password": "wrong"})
    assert "spark-2: become (sudo) fails for spark: Task failed: Incorrect sudo password. the become password given" \
        " for spark is wrong" in _msg(_refused(failures))
    # The fix it names works.
    lab.host_exec("spark-2", "sh", "-c", "echo '%s' > /etc/sudoers.d/sparkfleet-spark"
                  " && chmod 440 /etc/sudoers.d/sparkfleet-spark" % RULE)
    try:
        r, failures = lab.play(tmp_path / "b", "playbooks/preflight.yml",
                               extravars={"ansible_become_password": PASSWORD})
        assert r["status"] == "successful" and not _refused(failures), failures
    finally:
        lab.host_exec("spark-2", "rm", "-f", "/etc/sudoers.d/sparkfleet-spark")
