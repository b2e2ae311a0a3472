"""Issue 19.6: the `sparkfleet` command line: subcommands with their own help, vault options, errors on stderr without
colour when it is not a terminal, no traceback for any bad argument, its own exit code for a bad inventory."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

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
    ["deploy", "-i", "x", "-K"],                          # asks with no terminal to ask on
    ["deploy", "-i", "x", "-K", "--become-password-file", "/etc/hostname"],   # both
    ["deploy", "-i", "x", "--private-key", "/nonexistent/key"],
    ["deploy", "-i", "x", "--become-password-file", "/nonexistent"],
    ["deploy", "-i", "x", "-u", ""],                      # empty user
    ["deploy", "-i", "x", "-t", " "],                     # empty tags
    ["deploy", "-i", "x", "--check=yes"],                 # a flag with a value
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


@pytest.mark.parametrize("action", ["prepare", "deploy", "status", "restart", "stop"])
def test_each_subcommand_has_its_own_help(tmp_path, action):
    from sparkfleet_cli import cli
    p = sparkfleet([action, "--help"], str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: sparkfleet %s " % action)
    assert cli.ACTIONS[action].help in " ".join(p.stdout.split())
    for option in ("--inventory", "--vault-password-file", "--ask-vault-pass", "--reports", "--limit", "--check",
                   "--diff", "--ask-become-pass", "--become-password-file", "--tags", "--skip-tags", "--user",
                   "--private-key", "-C,", "-D,", "-K,", "-t TAGS,", "-u REMOTE_USER,"):
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
    # Issue 41.3: a vault error is exit 4 (the help's code for a vault password) with the vault named, not 5 and
    # "give -i the inventory of your Sparks".
    assert p.returncode == 4, p.stderr[-2000:]
    assert "FAILED: vault" in p.stderr and "is encrypted with ansible-vault and was not opened" in p.stderr
    assert "hint: give the inventory's vault password" in p.stderr and "give -i" not in p.stderr
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
    from sparkfleet_cli.view import PREPARE_REFUSAL_TASK
    with open(os.path.join(ROOT, "roles", "prepare", "tasks", "main.yml"), encoding="utf-8") as f:
        assert PREPARE_REFUSAL_TASK in [t["name"] for t in yaml.safe_load(f)]


def test_a_node_prepare_cannot_reach_exits_3():
    """prepare names a node the controller cannot log in to with its ssh-copy-id line; the CLI says unreachable."""
    from sparkfleet_cli.view import EXIT_UNREACHABLE, PREPARE_REFUSAL_TASK, RunView
    view = RunView("prepare")
    view.handle({"event": "runner_on_failed", "event_data": {
        "host": "spark-2", "play": "Prepare the nodes (once, with -K)", "role": "sparkfleet.vllm.prepare",
        "task": PREPARE_REFUSAL_TASK,
        "res": {"msg": "spark-2 (192.168.200.13) cannot be reached through the head spark-1 as aurora: Permission"
                       " denied (publickey). Authorize the controller key once, with aurora's password: ssh-copy-id"}}})
    assert view.exit_code("failed") == EXIT_UNREACHABLE
    assert view.failure["class"] == "unreachable"


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


def test_a_wrong_vault_password_is_a_vault_error(vaulted_inventory, tmp_path):
    tmp, inv, _pw = vaulted_inventory
    wrong = tmp_path / "wrong"
    wrong.write_text("not it\n")
    p = sparkfleet(["deploy", "-i", str(inv), "--vault-password-file", str(wrong), "--reports", str(tmp_path / "r")],
                   ROOT)
    assert p.returncode == 4, p.stdout[-2000:] + p.stderr[-2000:]
    assert "FAILED: vault" in p.stderr and "Traceback" not in p.stdout + p.stderr


def test_a_limit_on_a_missing_inventory_is_no_success(tmp_path):
    """Issue 41.1: `-l spark-1` removed the controller's inventory check; deploy said 'done' and exited 0."""
    p = sparkfleet(["deploy", "-i", str(tmp_path / "nonexistent"), "-l", "spark-1", "--reports", str(tmp_path / "r")],
                   ROOT)
    assert p.returncode == 5, p.stdout[-2000:] + p.stderr[-2000:]
    assert "FAILED: inventory" in p.stderr and "--limit spark-1 matches nothing" in p.stderr
    assert "hint: give -i the inventory of your Sparks" in p.stderr
    assert "done in" not in p.stdout + p.stderr and not (tmp_path / "r" / "latest").exists()


def _command(reports):
    """The ansible-playbook command line ansible-runner ran (its artifacts' `command` file)."""
    (path,) = [os.path.join(d, "command") for d, _dirs, files in os.walk(reports) if "command" in files]
    with open(path, encoding="utf-8") as f:
        return json.load(f)["command"]


def test_ansible_playbook_options_pass_through(tmp_path):
    """Issue 41.4: --check, --diff, -t, -u, --private-key and --become-password-file reach ansible-playbook."""
    key = tmp_path / "key"
    key.write_text("not a key\n")
    become = tmp_path / "become"
    become.write_text("sudo-secret\n")
    p = sparkfleet(["status", "-i", str(tmp_path / "nonexistent"), "-C", "-D", "-t", "inventory_check", "-u", "bob",
                    "--private-key", str(key), "--become-password-file", str(become), "--reports",
                    str(tmp_path / "r")], ROOT)
    assert p.returncode == 5, p.stderr[-2000:]
    cmd = _command(tmp_path / "r")
    for expected in (["--check"], ["--diff"], ["-u", "bob"], ["--private-key", str(key)], ["--tags", "inventory_check"],
                     ["--become-password-file", str(become)]):
        assert any(cmd[i:i + len(expected)] == expected for i in range(len(cmd))), (expected, cmd)


def _asked_for_the_sudo_password(tmp_path, subcommand, password):
    """Run `sparkfleet SUBCOMMAND -K` on a terminal, answer the prompt with ``password``; check it stays off every file
    the run wrote and off the command line; return the ansible-playbook command the run recorded."""
    pexpect = pytest.importorskip("pexpect")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SPARKFLEET_"))}
    env.update(PYTHONPATH=os.path.join(ROOT, "cli"), PATH=BIN + os.pathsep + env.get("PATH", ""))
    child = pexpect.spawn(sys.executable, ["-m", "sparkfleet_cli", subcommand, "-i", str(tmp_path / "nonexistent"),
                                           "-K", "--plain", "--reports", str(tmp_path / "r")], cwd=ROOT, env=env,
                          encoding="utf-8", timeout=180)
    child.expect("BECOME password: ")
    child.sendline(password)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 5, child.before[-2000:]
    cmd = _command(tmp_path / "r")
    assert "--become-password-file" in cmd and password not in " ".join(cmd)
    for dirpath, _dirs, files in os.walk(tmp_path / "r"):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                assert password.encode() not in f.read(), os.path.join(dirpath, name)
    return cmd


def test_ask_become_pass_asks_and_keeps_the_password_off_disk(tmp_path):
    _asked_for_the_sudo_password(tmp_path, "status", "sudo-secret-41")


def _processes_with(marker):
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if marker.encode() in f.read().replace(b"\0", b" "):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def test_ctrl_c_is_interrupted_not_failed_and_ends_every_child(tmp_path):
    """Issue 41.12: Ctrl-C printed FAILED and left ansible-playbook's workers running."""
    marker = "%d.%d" % (500 + os.getpid() % 97, os.getpid() % 1000)
    (tmp_path / "slow.yml").write_text(
        "- name: Slow\n  hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - name: Wait\n      ansible.builtin.command: sleep %s\n      changed_when: false\n" % marker)
    (tmp_path / "run.py").write_text(
        "import sys\nfrom sparkfleet_cli import cli\n"
        "cli.ACTIONS['deploy'] = cli.Action(%r, 'x', 'x')\nsys.exit(cli.main(sys.argv[1:]))\n"
        % str(tmp_path / "slow.yml"))
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    localhost: {ansible_connection: local, "
                                        "ansible_python_interpreter: %s}\n" % sys.executable)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SPARKFLEET_"))}
    env.update(PYTHONPATH=os.path.join(ROOT, "cli"), PATH=BIN + os.pathsep + env.get("PATH", ""))
    proc = subprocess.Popen([sys.executable, str(tmp_path / "run.py"), "deploy", "-i", "hosts.yml", "--plain",
                             "--reports", str(tmp_path / "r")], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 120
        while not _processes_with("sleep " + marker) and time.time() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        assert _processes_with("sleep " + marker), "the task never started"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        left = _processes_with("sleep " + marker) + _processes_with(str(tmp_path / "slow.yml"))
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _processes_with("sleep " + marker) + _processes_with(str(tmp_path / "slow.yml")):
            os.kill(pid, signal.SIGKILL)   # this test's own processes, whatever happened
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "INTERRUPTED: deploy stopped after" in err and "FAILED" not in out + err, out[-2000:] + err[-2000:]
    assert not left, "ansible-playbook or its task outlived the CLI: %s" % left


# Issue 39.3: `sparkfleet prepare`, the one-time preparation with the sudo password, takes deploy's options and runs
# playbooks/prepare.yml with them; the sudo password reaches ansible-playbook only through a file it names, never its
# command line or the run's files.
def test_prepare_runs_the_prepare_playbook(tmp_path):
    from sparkfleet_cli import cli
    assert cli.ACTIONS["prepare"].playbook == "sparkfleet.vllm.prepare"
    assert os.path.isfile(os.path.join(ROOT, "playbooks", "prepare.yml"))
    # the playbook name the collection resolves (playbooks/NAME.yml), as for every other action
    assert cli.PLAYBOOKS["prepare"].rsplit(".", 1)[1] + ".yml" in os.listdir(os.path.join(ROOT, "playbooks"))


@pytest.mark.parametrize("args", [
    ["prepare"],                                                        # no -i
    ["prepare", "-i", ""],                                              # empty inventory
    ["prepare", "-i", "x", "-K"],                                       # asks with no terminal to ask on
    ["prepare", "-i", "x", "-K", "--become-password-file", "/etc/hostname"],   # both
    ["prepare", "-i", "x", "--become-password-file", "/nonexistent"],
    ["prepare", "-i", "x", "--vault-password-file", "/nonexistent"],
    ["prepare", "-i", "x", "--check=yes"],
], ids=" ".join)
def test_bad_prepare_arguments_exit_2_naming_the_option(tmp_path, args):
    p = sparkfleet(args + ["--reports", str(tmp_path / "r")] if "-i" in args else args, str(tmp_path))
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and p.stderr.strip()
    assert not p.stdout.strip() or "usage:" in p.stdout


def test_prepare_passes_the_become_and_vault_files_and_check(tmp_path):
    become = tmp_path / "become"
    become.write_text("sudo-secret-39\n")
    vault = tmp_path / "vault-pass"
    vault.write_text("vault-secret-39\n")
    p = sparkfleet(["prepare", "-i", str(tmp_path / "nonexistent"), "--check", "--become-password-file", str(become),
                    "--vault-password-file", str(vault), "-e", "prepare_api_key_vault_file=/x/vault.yml",
                    "--reports", str(tmp_path / "r")], ROOT)
    # A missing inventory stops ansible-playbook before any task (exit 5), after the command line was built.
    assert p.returncode == 5, p.stderr[-2000:]
    cmd = _command(tmp_path / "r")
    assert any(c.endswith("sparkfleet.vllm.prepare") for c in cmd), cmd
    for expected in (["--check"], ["--become-password-file", str(become)], ["--vault-password-file", str(vault)],
                     ["-e", "prepare_api_key_vault_file=/x/vault.yml"]):
        assert any(cmd[i:i + len(expected)] == expected for i in range(len(cmd))), (expected, cmd)
    assert "sudo-secret-39" not in " ".join(cmd) and "vault-secret-39" not in " ".join(cmd)


def test_prepare_asks_the_sudo_password_and_keeps_it_off_disk_and_off_the_command_line(tmp_path):
    cmd = _asked_for_the_sudo_password(tmp_path, "prepare", "sudo-secret-393")
    assert any(c.endswith("sparkfleet.vllm.prepare") for c in cmd), cmd
