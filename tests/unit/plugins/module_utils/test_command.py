"""The command runner, run for real: C locale, argv as given, missing tools, failures with secrets masked, timeouts."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import MASK, Runner, environ, mask


class Failed(Exception):
    pass


def _fail_json(self, msg, **kwargs):
    kwargs["msg"] = msg
    raise Failed(json.loads(json.dumps(kwargs)))


@pytest.fixture
def module(monkeypatch):
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)
    with patch_module_args({}):
        return basic.AnsibleModule(argument_spec={})


def failure(call, *args, **kwargs):
    with pytest.raises(Failed) as exc:
        call(*args, **kwargs)
    return exc.value.args[0]


def test_commands_run_in_the_c_locale_whatever_the_node_says(module, monkeypatch):
    for name in ("LANG", "LC_ALL", "LC_MESSAGES", "LC_CTYPE"):
        monkeypatch.setenv(name, "de_DE.UTF-8")
    res = Runner(module).run(["/bin/sh", "-c", 'echo "$LANG $LC_ALL $LC_MESSAGES $LC_CTYPE"'])
    assert res.ok and res.stdout == "C C C C\n"
    # A message the tool itself translates comes out in English.
    res = Runner(module).run(["/bin/ls", "/nonexistent-sparkfleet"])
    assert res.rc != 0 and "No such file or directory" in res.stderr
    # The one process that cannot go through run_command (fast copy's LineProc) gets the same locale.
    out = subprocess.run(["/bin/sh", "-c", 'echo "$LC_ALL $HOME"'], env=environ({"HOME": "/h"}), capture_output=True,
                         text=True, check=True).stdout
    assert out == "C /h\n"


def test_extra_environment_adds_to_the_locale(module):
    res = Runner(module, env={"SYSTEMD_COLORS": "0"}).run(["/bin/sh", "-c", 'echo "$LC_ALL $SYSTEMD_COLORS $X"'],
                                                          env={"X": "y"})
    assert res.stdout == "C 0 y\n"


def test_argv_and_stdin_go_through_unchanged(module, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_X", "expanded")
    res = Runner(module).run(["/bin/echo", "$HOME", "~", "$SPARKFLEET_X"])
    assert res.stdout == "$HOME ~ $SPARKFLEET_X\n"
    res = Runner(module).run(["/usr/bin/wc", "-c"], data=b"a\0b")
    assert res.stdout.strip() == "3"  # no newline added, NUL kept


def test_a_missing_tool_names_itself_and_its_package(module, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    runner = Runner(module)
    assert runner.bin("rsync", required=False) is None
    res = failure(runner.bin, "rsync")
    assert res["msg"].startswith("rsync was not found on this node")
    assert res["hint"] == "install rsync on the node"
    res = failure(runner.bin, "no-such-tool-sparkfleet")
    assert "no-such-tool-sparkfleet" in res["msg"] and "put it on the PATH" in res["hint"]
    # /usr/sbin is searched whatever PATH says (ip lives there on some distributions).
    sbin = [n for n in ("ip", "iptables", "sysctl", "ldconfig") if os.path.exists("/usr/sbin/" + n)]
    if sbin:
        assert runner.bin(sbin[0]) in ("/sbin/" + sbin[0], "/usr/sbin/" + sbin[0])


def test_a_failing_command_is_reported_with_rc_and_its_last_lines_secret_masked(module):
    token = "hf_s3cr3tT0ken"
    runner = Runner(module)
    script = 'for i in $(seq 1 30); do echo "line $i"; done; echo "denied for $1" >&2; exit 3'
    res = runner.run(["/bin/sh", "-c", script, "sh", token], secrets=[token])
    assert res.rc == 3 and not res.ok and token in res.stderr  # the caller still sees the real output
    assert res.argv[-1] == MASK
    failed = failure(runner.fail, res, "pushing the model", hint="check the token")
    assert failed["msg"] == "pushing the model (rc 3): denied for %s" % MASK
    assert failed["rc"] == 3 and failed["hint"] == "check the token"
    assert failed["cmd"][:2] == ["/bin/sh", "-c"] and failed["cmd"][-1] == MASK
    assert failed["stderr"] == "denied for %s" % MASK and failed["stdout"].endswith("line 30")
    assert token not in json.dumps(failed)
    # Without words of its own the message names the command; with no stderr it quotes stdout's tail.
    res = runner.run(["/bin/sh", "-c", "echo one; echo two; exit 1"])
    assert res.why() == "`/bin/sh -c echo one; echo two; exit 1` failed (rc 1): one\ntwo"
    assert res.why("x", lines=1) == "x (rc 1): two"


def test_mask_takes_the_longest_secret_first():
    assert mask("key abc and abcdef", ["abc", "abcdef", ""]) == "key %s and %s" % (MASK, MASK)


def test_timeout_stops_a_hung_command(module):
    runner = Runner(module)
    res = runner.run(["/bin/sleep", "30"], timeout=0.3)
    assert res.timed_out and res.rc == 124 and res.argv[0].endswith("timeout")
    res = runner.run(["/bin/sh", "-c", 'trap "" TERM; sleep 30'], timeout=0.3, kill_after=0.3)
    assert res.timed_out and res.rc == -9  # timeout itself gets its SIGKILL
    res = runner.run(["/bin/sh", "-c", "exit 124"])
    assert not res.timed_out  # only a command the runner bounded can have timed out


def test_every_command_goes_through_the_runner():
    """No module or module_utils runs a command past the runner. The exceptions, each for its reason: fast copy's
    LineProc must hold a pipe open; the sync key's forced command (_sync_shell, run by sshd on a worker, not by a
    module) replaces itself with the one command it let through."""
    plugins = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "plugins")
    direct = re.compile(r"\.run_command\(|\.get_bin_path\(|^import subprocess|^from subprocess import|os\.system\("
                        r"|os\.popen\(|os\.exec\w*\(|os\.spawn\w*\(|os\.posix_spawn\w*\(", re.M)
    allowed = {"module_utils/_command.py": {".run_command(", ".get_bin_path("},
               "module_utils/sync/_fast_copy.py": {"import subprocess"},
               "module_utils/sync/_sync_shell.py": {"os.execv(", "os.execvp("}}
    offenders = {}
    for sub in ("modules", "module_utils"):
        names = sorted(os.path.relpath(os.path.join(d, f), os.path.join(plugins, sub))
                       for d, _dirs, files in os.walk(os.path.join(plugins, sub)) for f in files)
        for name in names:
            rel = "%s/%s" % (sub, name)
            if name.endswith(".py"):
                with open(os.path.join(plugins, rel)) as handle:
                    found = set(direct.findall(handle.read())) - allowed.get(rel, set())
                if found:
                    offenders[rel] = sorted(found)
    assert offenders == {}
