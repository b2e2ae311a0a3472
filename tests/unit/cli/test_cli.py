"""Issue 19.6: the `sparkfleet` command line: subcommands with their own help, vault options, errors on stderr without
colour when it is not a terminal, no traceback for any bad argument, its own exit code for a bad inventory."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.path.dirname(sys.executable)
ANSI = re.compile(r"\x1b\[")


def sparkfleet(args, cwd, stdin=subprocess.DEVNULL, timeout=180, env=None):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SPARKFLEET_"))}
    base.update(PYTHONPATH=os.path.join(ROOT, "cli"), PATH=BIN + os.pathsep + base.get("PATH", ""), TERM="xterm-256color")
    base.update(env or {})
    # A new session: no controlling terminal, as under cron, CI or AWX.
    return subprocess.run([sys.executable, "-m", "sparkfleet_cli"] + args, cwd=cwd, env=base, stdin=stdin,
                          capture_output=True, text=True, timeout=timeout, check=False, start_new_session=True)


BAD = [
    [],                                                   # no subcommand
    ["upgrade", "-i", "x"],                               # unknown subcommand
    ["-i", "x"],                                          # options before any subcommand
    ["deploy"],                                           # no -i
    ["deploy", "-i"],                                     # -i without a value
    ["deploy", "-i", ""],                                 # empty inventory
    ["deploy", "-i", "x", "--bogus"],                     # unknown option
    ["deploy", "-i", "x", "extra"],                       # stray positional
    ["deploy", "-i", "x", "--reports", "/proc/x"],        # cannot be created
    ["deploy", "-i", "x", "--reports", "/etc/hostname/sub"],   # under a file
    ["deploy", "-i", "x", "--reports", ""],               # empty
    ["deploy", "-i", "x", "-e", "@/nonexistent/vars.yml"],    # missing vars file
    ["deploy", "-i", "x", "-e", "@"],                     # no file name
    ["deploy", "-i", "x", "-e", " "],                     # empty extra vars
    ["deploy", "-i", "x", "-l", ""],                      # empty limit
    ["deploy", "-i", "x", "--vault-password-file", "/nonexistent"],
    ["deploy", "-i", "x", "--vault-password-file", "/tmp"],    # a directory
    ["deploy", "-i", "x", "--vault-password-file", "/etc/hostname", "--ask-vault-pass"],   # both
    ["restart", "-i", "x", "--plain=yes"],                # a flag with a value
    ["status", "-i", "x", "-v=3"],                        # count flag with a value
    ["stop", "-i", "x", "--reports"],                     # option without its value
    ["deploy", "-i", "x", "-J"],                          # asks with no terminal to ask on
]


@pytest.mark.parametrize("args", BAD, ids=[" ".join(a) or "(none)" for a in BAD])
def test_bad_arguments_exit_2_on_stderr_without_traceback_or_colour(tmp_path, args):
    p = sparkfleet(args, str(tmp_path))
    assert p.returncode == 2, (args, p.returncode, p.stdout[-1500:], p.stderr[-1500:])
    assert "Traceback" not in p.stdout + p.stderr, p.stderr
    assert p.stderr.strip() and "error" in p.stderr.lower() or "terminal" in p.stderr, p.stderr
    assert not ANSI.search(p.stdout + p.stderr)
    assert not p.stdout.strip(), p.stdout   # nothing but the error, and that on stderr


def test_bad_argument_count():
    assert len(BAD) >= 20


@pytest.mark.parametrize("action", ["deploy", "status", "restart", "stop"])
def test_each_subcommand_has_its_own_help(tmp_path, action):
    from sparkfleet_cli import cli
    p = sparkfleet([action, "--help"], str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: sparkfleet %s " % action)
    assert cli.ACTIONS[action].help in " ".join(p.stdout.split())
    for option in ("--inventory", "--vault-password-file", "--ask-vault-pass", "--reports", "--limit"):
        assert option in p.stdout
    assert "exit codes:" in p.stdout and "the inventory has no spark group" in p.stdout


def test_the_global_help_lists_every_subcommand(tmp_path):
    from sparkfleet_cli import cli
    p = sparkfleet(["--help"], str(tmp_path))
    assert p.returncode == 0
    for name, action in cli.ACTIONS.items():
        assert re.search(r"^\s+%s\s+%s" % (name, re.escape(action.help[:30])), p.stdout, re.M), (name, p.stdout)


def test_adding_a_subcommand_is_one_entry(monkeypatch, tmp_path, capsys):
    from sparkfleet_cli import cli
    monkeypatch.setitem(cli.ACTIONS, "qualify", cli.Action("sparkfleet.vllm.qualify", "measure the cluster", "More."))
    assert cli.main(["qualify", "--help"]) == 0
    assert "measure the cluster" in capsys.readouterr().out
    assert cli.main(["qualify", "-i", "x", "--reports", str(tmp_path / "nothere" / "\0")]) == 2


def test_a_missing_inventory_has_its_own_exit_code(tmp_path):
    p = sparkfleet(["deploy", "-i", str(tmp_path / "nonexistent"), "--reports", str(tmp_path / "r")], ROOT)
    assert p.returncode == 5, p.stdout[-2000:] + p.stderr[-2000:]
    assert "FAILED: inventory" in p.stderr and "inventory: group 'spark' is missing" in p.stderr
    assert "hint: give -i the inventory of your Sparks" in p.stderr
    assert not ANSI.search(p.stdout + p.stderr)
    assert "Traceback" not in p.stdout + p.stderr


VAULT_PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def vaulted_inventory(tmp_path_factory):
    """An inventory encrypted with ansible-vault: without the password it does not parse (no groups: exit 5); with
    it the run gets past the inventory check to the node, which refuses ssh at once (127.0.0.1 port 1: exit 3)."""
    tmp = tmp_path_factory.mktemp("vault")
    inv = tmp / "hosts.yml"
    inv.write_text("spark:\n  children:\n    spark_head:\n      hosts:\n        n1:\n          ansible_host: 127.0.0.1\n"
                   "          ansible_port: 1\n          ansible_connection: ssh\n    spark_workers: {}\n")
    pw = tmp / "pw"
    pw.write_text(VAULT_PASSWORD + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    subprocess.run([os.path.join(BIN, "ansible-vault"), "encrypt", "--vault-password-file", str(pw), str(inv)],
                   check=True, capture_output=True, env=env)
    assert inv.read_text().startswith("$ANSIBLE_VAULT")
    return tmp, inv, pw


def test_vault_password_file_decrypts_the_inventory(vaulted_inventory):
    tmp, inv, pw = vaulted_inventory
    p = sparkfleet(["status", "-i", str(inv), "--reports", str(tmp / "r1")], ROOT)
    assert p.returncode == 5, p.stderr[-2000:]
    p = sparkfleet(["status", "-i", str(inv), "--vault-password-file", str(pw), "--reports", str(tmp / "r2")], ROOT)
    assert p.returncode == 3, p.stdout[-2000:] + p.stderr[-2000:]
    assert "FAILED: unreachable on n1" in p.stderr


def test_ask_vault_pass_asks_on_the_terminal_and_keeps_the_password_off_disk(vaulted_inventory):
    pexpect = pytest.importorskip("pexpect")
    tmp, inv, _pw = vaulted_inventory
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SPARKFLEET_"))}
    env.update(PYTHONPATH=os.path.join(ROOT, "cli"), PATH=BIN + os.pathsep + env.get("PATH", ""))
    child = pexpect.spawn(sys.executable, ["-m", "sparkfleet_cli", "status", "-i", str(inv), "--ask-vault-pass",
                                           "--plain", "--reports", str(tmp / "r3")], cwd=ROOT, env=env,
                          encoding="utf-8", timeout=180)
    child.expect("Vault password: ")
    child.sendline(VAULT_PASSWORD)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3, child.before[-2000:]
    for dirpath, _dirs, files in os.walk(tmp / "r3"):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                assert VAULT_PASSWORD.encode() not in f.read(), os.path.join(dirpath, name)


def test_events_of_the_inventory_check_stay_out_of_the_node_table(tmp_path):
    from sparkfleet_cli.view import RunView
    view = RunView("deploy")
    play = "Check the inventory has a spark group and exactly one spark_head"
    view.handle({"event": "runner_on_start", "event_data": {"host": "localhost", "play": play, "task": "x"}})
    view.handle({"event": "runner_on_ok", "event_data": {"host": "localhost", "play": play, "task": "x", "res": {}}})
    assert view.hosts == {}
    assert json.dumps(view.summary_lines("successful"))


def test_a_node_preflight_cannot_reach_exits_3():
    """Preflight's access check reports an unreachable node as a failed check (its message names the fix); the CLI
    still says unreachable, exit 3, as for any node ssh cannot reach."""
    from sparkfleet_cli.view import ACCESS_REFUSAL_TASK, EXIT_UNREACHABLE, RunView
    view = RunView("deploy")
    view.handle({"event": "runner_on_failed", "event_data": {
        "host": "spark-2", "play": "Preflight", "role": "sparkfleet.vllm.preflight", "task": ACCESS_REFUSAL_TASK,
        "res": {"msg": ["spark-2 (192.168.200.13) cannot be reached through the head spark-1 as aurora: Permission"
                        " denied (publickey). Authorize the controller key ..."]}}})
    assert view.exit_code("failed") == EXIT_UNREACHABLE
    assert view.failure["class"] == "unreachable" and "Permission denied" in view.failure["msg"]
    # Any other refusal of that task is a failed check (exit 1).
    other = RunView("deploy")
    other.handle({"event": "runner_on_failed", "event_data": {
        "host": "spark-1", "play": "Preflight", "task": ACCESS_REFUSAL_TASK,
        "res": {"msg": ["spark-1: become (sudo) fails for aurora: Missing sudo password."]}}})
    assert other.exit_code("failed") == 1


def test_the_names_the_view_recognises_are_the_playbooks_own():
    import yaml
    from sparkfleet_cli.view import ACCESS_REFUSAL_TASK, INVENTORY_CHECK_PLAY
    with open(os.path.join(ROOT, "roles", "preflight", "tasks", "access.yml"), encoding="utf-8") as f:
        assert ACCESS_REFUSAL_TASK in [t["name"] for t in yaml.safe_load(f)]
    with open(os.path.join(ROOT, "playbooks", "inventory_check.yml"), encoding="utf-8") as f:
        assert yaml.safe_load(f)[0]["name"] == INVENTORY_CHECK_PLAY


def test_the_vault_pipe_hands_the_password_once_and_keeps_it_off_disk(tmp_path):
    from sparkfleet_cli.cli import VaultPipe
    pipe = VaultPipe(str(tmp_path), VAULT_PASSWORD)
    try:
        got = subprocess.run([pipe.script], capture_output=True, text=True, timeout=20, check=True).stdout
        assert got == VAULT_PASSWORD + "\n"   # one copy: ansible takes the whole output as the password
        for name in os.listdir(tmp_path):
            path = os.path.join(tmp_path, name)
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    assert VAULT_PASSWORD.encode() not in f.read()
    finally:
        pipe.close()
    assert os.listdir(tmp_path) == []
