"""module_utils/host/_access.py on real `sshd -T` output (OpenSSH 9.2, captured on a lab host) and real command messages."""

from __future__ import annotations

import os

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.host import _access

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "modules", "fixtures", "access_check")
KEY = "runtime_image's image key"


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


def test_default_sshd_lets_a_key_run_its_command():
    config = _access.parse_sshd_config(fixture("sshd_T_default.txt"))
    assert config["authorizedkeysfile"] == [".ssh/authorized_keys", ".ssh/authorized_keys2"]
    assert _access.sshd_problems(config, "aurora", ["aurora", "sudo"], "/home/aurora", "192.168.200.12", KEY,
                                 agent_forwarding=True) == []


def test_restricted_sshd_names_each_setting_and_its_fix():
    # AllowUsers admin@10.99.0.* spark@10.99.2.0/24, and for 10.99.1.0/24: ForceCommand, AllowAgentForwarding no
    config = _access.parse_sshd_config(fixture("sshd_T_restricted.txt"))
    problems = _access.sshd_problems(config, "spark", ["spark"], "/home/spark", "10.99.1.11", KEY, agent_forwarding=True)
    text = "\n".join(problems)
    assert "ForceCommand /usr/bin/false" in text and "replaces runtime_image's image key's" in text
    assert "AllowUsers admin@10.99.0.* spark@10.99.2.0/24, not spark from 10.99.1.11: add spark@10.99.1.11" in text
    assert "forbids agent forwarding" in text
    assert all("sudo systemctl reload ssh" in p for p in problems if "sshd_config" in p)
    # The same sshd from the address AllowUsers names lets spark in (the CIDR form of the host part).
    ok = [p for p in _access.sshd_problems(config, "spark", ["spark"], "/home/spark", "10.99.2.5", KEY)
          if "AllowUsers" in p]
    assert ok == []


@pytest.mark.parametrize("lines, user, groups, expect", [
    (["pubkeyauthentication no"], "u", ["u"], "PubkeyAuthentication no"),
    (["authenticationmethods publickey,password"], "u", ["u"], "AuthenticationMethods publickey,password"),
    (["denyusers u*"], "u", ["u"], "DenyUsers u*"),
    (["denygroups wheel"], "u", ["u", "wheel"], "denies the groups wheel"),
    (["allowgroups ssh-users"], "u", ["u"], "AllowGroups ssh-users, and u is in none of them"),
    (["permitrootlogin no"], "root", ["root"], "PermitRootLogin no"),
    (["authorizedkeysfile /etc/ssh/keys/%u"], "u", ["u"], "does not read /home/u/.ssh/authorized_keys"),
    (["authorizedkeysfile none"], "u", ["u"], "does not read /home/u/.ssh/authorized_keys"),
])
def test_each_sshd_setting_that_stops_a_key(lines, user, groups, expect):
    config = _access.parse_sshd_config("\n".join(lines))
    problems = _access.sshd_problems(config, user, groups, "/home/u" if user == "u" else "/root", "10.0.0.1", KEY)
    assert any(expect in p for p in problems), problems


def test_authorized_keys_tokens_expand():
    config = _access.parse_sshd_config("authorizedkeysfile %h/.ssh/authorized_keys /etc/keys/%u %%x")
    expected = ["/home/u/.ssh/authorized_keys", "/etc/keys/u", "/home/u/%x"]
    assert _access.authorized_keys_paths(config, "u", "/home/u") == expected
    assert _access.sshd_problems(config, "u", ["u"], "/home/u", "10.0.0.1", KEY) == []


def test_login_shell_and_modes():
    assert "usermod -s /bin/bash svc" in _access.shell_problem("svc", "/usr/sbin/nologin", KEY)
    assert _access.shell_problem("u", "/bin/bash", KEY) is None
    entries = [("/home/u", 1000, 0o40775), ("/home/u/.ssh", 0, 0o40700), ("/home/u/.ssh/authorized_keys", 1001, 0o100600)]
    problems = _access.mode_problems("u", 1000, entries, KEY)
    assert problems[0].endswith("sudo chmod go-w /home/u") and "mode 0775" in problems[0]
    assert problems[1].endswith("sudo chown u /home/u/.ssh/authorized_keys")
    assert len(problems) == 2


def test_the_sudoers_rule_for_a_sudo_command():
    which = {"docker": "/usr/bin/docker"}.get
    assert _access.sudo_rule("aurora", "sudo -n docker load", which) == "aurora ALL=(root) NOPASSWD: /usr/bin/docker load"
    assert _access.sudo_rule("root", "docker load", which) is None
    # The image key's load command gets --name IMAGE --content ID at each use: sudoers matches arguments exactly.
    load = "sudo -n /usr/bin/python3 /usr/local/sbin/sparkfleet-image-load"
    assert _access.sudo_rule("aurora", load, which, any_arguments=True) == (
        "aurora ALL=(root) NOPASSWD: /usr/bin/python3 /usr/local/sbin/sparkfleet-image-load *")
    assert _access.sudo_rule("root", load.replace("sudo -n ", ""), which, any_arguments=True) is None


def _said(name):
    text = fixture(name)
    out, rc = text.rsplit("rc=", 1)
    return int(rc), out


def test_forced_command_outcomes_from_real_messages():
    rule = "spark ALL=(root) NOPASSWD: /usr/bin/docker load"
    rc, err = _said("sudo_docker_load_ok.txt")   # docker refused the empty stream: it ran as root
    assert _access.forced_command_problem("spark", "sudo -n docker load", KEY, rc, err, rule) is None
    rc, err = _said("sudo_docker_load_password.txt")
    problem = _access.forced_command_problem("spark", "sudo -n docker load", KEY, rc, err, rule)
    assert "sudo: a password is required" in problem
    assert "echo 'spark ALL=(root) NOPASSWD: /usr/bin/docker load' | sudo tee /etc/sudoers.d/sparkfleet-spark" in problem
    rc, err = _said("docker_load_as_user.txt")
    assert "cannot reach docker as spark" in _access.forced_command_problem("spark", "docker load", KEY, rc, err, None)
    rc, err = _said("sudo_docker_load_no_daemon.txt")
    said = _access.forced_command_problem("spark", "sudo -n docker load", KEY, rc, err, rule)
    assert "systemctl enable --now docker" in said
    load = "sudo -n /usr/bin/python3 /usr/local/sbin/sparkfleet-image-load"
    load_rule = "spark ALL=(root) NOPASSWD: /usr/bin/python3 /usr/local/sbin/sparkfleet-image-load *"
    # Tried with a content it refuses: whether it is installed yet or not, sudo let python3 run it.
    for ran in ("sudo_image_load_refuses_arguments.txt", "sudo_image_load_not_installed.txt"):
        rc, err = _said(ran)
        assert rc == 2 and _access.forced_command_problem("spark", load, KEY, rc, err, load_rule) is None, ran
    rc, err = _said("sudo_image_load_password.txt")
    problem = _access.forced_command_problem("spark", load, KEY, rc, err, load_rule)
    assert problem.startswith("%s's command `%s` cannot run as spark: sudo: a password is required; " % (KEY, load))
    assert ("echo '%s' | sudo tee /etc/sudoers.d/sparkfleet-spark" % load_rule) in problem
    said = _access.forced_command_problem("u", "sudo -n docker load", KEY, 127, "/bin/sh: 1: sudo: not found", rule)
    assert "sudo: not found" in said and "is not there for u" in said and "sudoers" not in said
