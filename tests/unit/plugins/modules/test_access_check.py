"""access_check: docker as root and the keys' forced commands, with the commands' real outputs (lab captures)."""

from __future__ import annotations

import os
import pwd
import types

import pytest

from ansible_collections.sparkfleet.vllm.plugins.modules import access_check

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "access_check")
# runtime_image's forced command (roles/runtime_image/defaults/main.yml) and what preflight adds when it tries it.
LOAD = "sudo -n /usr/bin/python3 /usr/local/sbin/sparkfleet-image-load"
ARGUMENTS = "--name hellohal2064/vllm-qwen3.5-gb10:latest --content sha256:access-check"


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


@pytest.fixture
def node(monkeypatch, run_module, node_commands, tmp_path):
    """A node whose commands answer from fixtures: docker, sshd -T and the forced command tried as the key's user."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    os.chmod(home, 0o755)
    calls = []
    answers = {"docker": (0, "28.2.2\n", ""), "sshd": (0, fixture("sshd_T_default.txt"), ""),
               "runuser": (2, "", fixture("sudo_image_load_refuses_arguments.txt").rsplit("rc=", 1)[0])}

    def answer(cmd):
        assert os.path.basename(cmd[0]) == "timeout" and cmd[1] == "30", cmd   # every command is bounded
        calls.append(cmd[2:])
        return answers[os.path.basename(cmd[2])]
    node_commands(answer, unwrap=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    entry = types.SimpleNamespace(pw_name="aurora", pw_uid=os.getuid(), pw_gid=os.getgid(), pw_dir=str(home),
                                  pw_shell="/bin/bash")

    def getpwnam(name):
        if name != "aurora":
            raise KeyError(name)
        return entry

    monkeypatch.setattr(pwd, "getpwnam", getpwnam)

    def run(keys=None, check_mode=False, **extra):
        args = dict(keys=keys if keys is not None else [
            {"name": "runtime_image's image key", "user": "aurora", "source": "192.168.200.12",
             "command": LOAD, "arguments": ARGUMENTS, "interpreter": "/bin/sh"},
            {"name": "model_sync's sync key", "user": "aurora", "source": "192.168.200.12",
             "interpreter": "/bin/sh", "agent_forwarding": True}])
        args.update(extra)
        return run_module(access_check, args, check_mode=check_mode)

    return types.SimpleNamespace(run=run, answers=answers, calls=calls, entry=entry, home=home)


def test_everything_in_order_passes_and_tries_the_command_with_empty_input(node):
    result = node.run()
    assert not result.get("failed"), result
    assert result["docker_version"] == "28.2.2" and result["problems"] == []
    tried = [c for c in node.calls if c[0].endswith("runuser")]
    assert tried == [["/usr/bin/runuser", "-u", "aurora", "--", "/bin/sh", "-c",
                      "%s %s </dev/null" % (LOAD, ARGUMENTS)]]
    assert ["/usr/bin/sshd", "-T", "-C", "user=aurora,host=192.168.200.12,addr=192.168.200.12"] in node.calls


def test_same_in_check_mode(node):
    assert node.run(check_mode=True)["problems"] == []


def test_the_load_command_not_installed_yet_passes(node):
    """runtime_image installs the load command later in the run: python3 saying so proves sudo let it run."""
    node.answers["runuser"] = (2, "", fixture("sudo_image_load_not_installed.txt").rsplit("rc=", 1)[0])
    assert node.run()["problems"] == []


def test_sudo_that_asks_for_a_password_is_named_with_the_sudoers_line(node):
    node.answers["runuser"] = (1, "", fixture("sudo_image_load_password.txt").rsplit("rc=", 1)[0])
    result = node.run()
    assert result["failed"]
    # Any arguments after the load command (sudoers matches them exactly; the key adds --name IMAGE --content ID).
    assert result["problems"] == [
        "runtime_image's image key's command `%s` cannot run as aurora: sudo: a password is required; allow it once: "
        "echo 'aurora ALL=(root) NOPASSWD: /usr/bin/python3 /usr/local/sbin/sparkfleet-image-load *' | sudo tee "
        "/etc/sudoers.d/sparkfleet-aurora && sudo chmod 440 /etc/sudoers.d/sparkfleet-aurora (playbooks/prepare.yml "
        "run once with -K writes it)" % LOAD]


def test_a_command_without_arguments_is_allowed_exactly(node):
    node.answers["runuser"] = (1, "", fixture("sudo_docker_load_password.txt").rsplit("rc=", 1)[0])
    result = node.run(keys=[{"name": "k", "user": "aurora", "source": "10.0.0.1", "command": "sudo -n docker load"}])
    assert "echo 'aurora ALL=(root) NOPASSWD: /usr/bin/docker load' | sudo tee" in result["problems"][0]
    assert [c[-1] for c in node.calls if c[0].endswith("runuser")] == ["sudo -n docker load </dev/null"]


def test_every_problem_at_once(node):
    node.answers["docker"] = (1, "", fixture("sudo_docker_load_no_daemon.txt").rsplit("rc=", 1)[0])
    node.answers["sshd"] = (0, fixture("sshd_T_restricted.txt"), "")
    node.entry.pw_shell = "/usr/sbin/nologin"
    os.chmod(node.home, 0o777)
    result = node.run()
    text = "\n".join(result["problems"])
    assert "docker does not answer as root" in text and "systemctl enable --now docker" in text
    assert "login shell is /usr/sbin/nologin" in text and "sudo chmod go-w %s" % node.home in text
    assert "ForceCommand /usr/bin/false" in text and "AllowUsers" in text and "agent forwarding" in text
    # The command cannot run through a nologin shell: it is not tried (the shell is the problem named).
    assert not [c for c in node.calls if c[0].endswith("runuser")]


def test_unknown_user_and_missing_interpreter(node):
    result = node.run(keys=[{"name": "k", "user": "nobody-here", "source": "10.0.0.1"},
                            {"name": "k2", "user": "aurora", "source": "10.0.0.1", "interpreter": "/nonexistent/python3"}])
    assert any("nobody-here, which has no account" in p for p in result["problems"])
    assert any("needs /nonexistent/python3" in p for p in result["problems"])


def test_refuses_to_run_unprivileged(node, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    result = node.run()
    assert result["failed"] and "runs as root (become: true)" in result["msg"]


def test_bad_timeout_is_refused(node):
    result = node.run(timeout=0)
    assert result["failed"] and result["msg"] == "timeout must be at least 1 second, got 0"
