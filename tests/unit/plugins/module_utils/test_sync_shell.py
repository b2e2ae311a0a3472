"""The sync key's forced command: model_sync's own commands pass, anything else is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync import _sync_shell
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_transports import destination_commands
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_shell import check

DEST = "/models/Qwen3.5-122B-A10B-FP8"
FIXED = set(destination_commands(DEST).values())
RSH = ("'--rsh=ssh -o BatchMode=yes -o Compression=no -o StrictHostKeyChecking=accept-new -o ConnectTimeout=60 "
       "-c aes128-gcm@openssh.com,chacha20-poly1305@openssh.com -o StrictHostKeyChecking=accept-new "
       "-o UserKnownHostsFile=~/.ssh/sparkfleet_known_hosts'")
RELAY = ("rsync --recursive --perms --times --whole-file --mkpath '--out-format=SFL|%i|%l|%n' "
         "--exclude=/.sparkfleet-sync/ --exclude=/.sparkfleet-model " + RSH + " --temp-dir=.sparkfleet-sync "
         "--ignore-times --from0 --files-from=- --timeout=60 {src} spark@10.99.1.13:{dst}")

# rsync 3.2.7's server command lines as model_sync's client sends them (captured through an ssh shim).
ALLOWED = [
    "rsync --server -WtprIRe.iLsfxCIvu --log-format=%i --timeout=60 --bwlimit=100 --temp-dir .sparkfleet-sync "
    "--mkpath . " + DEST + "/",
    "rsync --server -WtprIRe.iLsfxCIvu --log-format=%i --timeout=60 --temp-dir .sparkfleet-sync --mkpath . " + DEST + "/",
    "rsync --server -Wtpre.iLsfxCIvu --log-format=%i --timeout=60 --delete --ignore-existing --existing "
    "--temp-dir .sparkfleet-sync --mkpath . " + DEST + "/",
    "rsync --server -nWtpre.iLsfxCIvu --log-format=%i --timeout=60 --delete --mkpath . " + DEST + "/",
    "rsync --server -nWtpcre.iLsfxCIvu --log-format=%i --timeout=60 --mkpath . " + DEST + "/",
    # rsync 3.5.0 orders the letters differently.
    "rsync --server -nWtprce.iLsfxCIvu --log-format=%i --timeout=60 --delete --mkpath . " + DEST + "/",
    "rsync --server -WtprcIRe.iLsfxCIvu --log-format=%i --timeout=60 --bwlimit=100 --temp-dir .sparkfleet-sync "
    "--mkpath . " + DEST + "/",
    RELAY.format(src=DEST + "/", dst=DEST + "/"),
]

REFUSED = [
    ("", "interactive login"),
    ("id", "only model_sync's own commands"),
    ("sudo -n true", "only model_sync's own commands"),
    ("bash -i", "only model_sync's own commands"),
    (destination_commands(DEST)["prepare"] + "; rm -rf /", "only model_sync's own commands"),
    ("rsync --server --sender -vlogDtpre.iLsfxCIvu . " + DEST + "/", "only receives"),
    ("rsync --server -Wtpre.iLsfxCIvu --log-format=%i --mkpath . /etc/", "only write into"),
    ("rsync --server -Wtpre.iLsfxCIvu --log-file=/etc/cron.d/x --mkpath . " + DEST + "/", "--log-file=/etc/cron.d/x"),
    ("rsync --server -Wtpre.iLsfxCIvu --temp-dir /etc . " + DEST + "/", "--temp-dir"),
    ("rsync --server -Wtpre.iLsfxCIvu --rsync-path=sh . " + DEST + "/", "--rsync-path=sh"),
    (RELAY.format(src="/etc/", dst=DEST + "/"), "may only send " + DEST),
    (RELAY.format(src=DEST + "/", dst="/etc/"), "another node's " + DEST),
    (RELAY.replace(RSH, "'--rsh=sh -c evil'").format(src=DEST + "/", dst=DEST + "/"), "not ssh"),
    (RELAY.replace(RSH, "'--rsh=ssh -o ProxyCommand=evil'").format(src=DEST + "/", dst=DEST + "/"),
     "ProxyCommand is not allowed"),
    ("rsync -e 'sh -c x' " + DEST + "/ h:" + DEST + "/", "-e is not allowed"),
    ("'unbalanced", "unparsable"),
    # The tcp transport's receiver and sender: only for DEST, only the script model_sync ships.
    (destination_commands("/models/other")["receive"], "only model_sync's own commands"),
    (destination_commands(DEST)["receive"].replace("receive", "send", 1) + "x", "only model_sync's own commands"),
    ("python3 -c 'import os; os.system(\"sh\")' receive " + DEST, "only model_sync's own commands"),
    # Issue 17.4: no symlink handling on the receiving side, no link following in a relay.
    ("rsync --server -lWtpre.iLsfxCIvu --log-format=%i --mkpath . " + DEST + "/", "(-l)"),
    ("rsync --server -WtprKe.iLsfxCIvu --log-format=%i --mkpath . " + DEST + "/", "(-K)"),
    ("rsync --server -WtprLe.iLsfxCIvu --log-format=%i --mkpath . " + DEST + "/", "(-L)"),
    ("rsync --server -Wtpre.iLsfxCIvu --copy-links --mkpath . " + DEST + "/", "--copy-links is not allowed"),
    ("rsync --server -Wtpre.iLsfxCIvu --keep-dirlinks --mkpath . " + DEST + "/", "--keep-dirlinks is not allowed"),
    ("rsync --server -Wtpre.iLsfxCIvu --links --mkpath . " + DEST + "/", "--links is not allowed"),
    ("rsync --server -Wtpogre.iLsfxCIvu --mkpath . " + DEST + "/", "(-go)"),
    ("rsync --server -Wtpre.iLsfxCIvu --timeout=1 --timeout=2 --mkpath . " + DEST + "/", "given twice"),
    ("rsync --server -Wtpre.iLsfxCIvu --mkpath . " + DEST + "/../../etc/", "only write into"),
    (RELAY.replace("--recursive", "--recursive --copy-links").format(src=DEST + "/", dst=DEST + "/"),
     "--copy-links is not allowed in a relay"),
    (RELAY.replace("--recursive", "--recursive -L").format(src=DEST + "/", dst=DEST + "/"), "-L is not allowed"),
    (RELAY.replace("--recursive", "--recursive --links").format(src=DEST + "/", dst=DEST + "/"),
     "--links is not allowed"),
    (RELAY.replace("--recursive", "--recursive --copy-unsafe-links").format(src=DEST + "/", dst=DEST + "/"),
     "--copy-unsafe-links is not allowed"),
    (RELAY.format(src=DEST + "/", dst=DEST + "/").replace("spark@10.99.1.13", "-oProxyCommand=x"),
     "-oProxyCommand=x:/models/Qwen3.5-122B-A10B-FP8/ is not allowed"),
    # A newline at the end of a quoted argument matches no pattern ('$' alone would let it through).
    ("rsync --server '-Wtpre.iLsfxCIvu\n' --mkpath . " + DEST + "/", "is not allowed"),
    ("rsync --server -Wtpre.iLsfxCIvu '--timeout=60\n' --mkpath . " + DEST + "/", "is not allowed"),
    (RELAY.format(src=DEST + "/", dst=DEST + "/").replace("spark@10.99.1.13:" + DEST + "/",
                                                          "'spark@10.99.1.13\n:" + DEST + "/'"),
     "another node's " + DEST),
]


@pytest.mark.parametrize("name", sorted(destination_commands(DEST)))
def test_every_fixed_command_of_model_sync_runs_in_a_shell(name):
    cmd = destination_commands(DEST)[name]
    assert check(cmd, DEST, FIXED) == ("shell", cmd)


@pytest.mark.parametrize("command", ALLOWED)
def test_rsync_receiving_into_the_model_and_relays_run_without_a_shell(command):
    verdict, argv = check(command, DEST, FIXED)
    assert verdict == "exec" and argv[0] == "rsync"


@pytest.mark.parametrize("command, why", REFUSED)
def test_everything_else_is_refused(command, why):
    verdict, reason = check(command, DEST, FIXED)
    assert verdict == "refuse" and why in reason, reason


def test_as_a_forced_command_it_refuses_with_status_126(tmp_path):
    allowed = tmp_path / "allowed"
    allowed.write_text(json.dumps(sorted(FIXED)))
    script = os.path.abspath(_sync_shell.__file__)
    env = dict(os.environ, SSH_ORIGINAL_COMMAND="id")
    p = subprocess.run([sys.executable, script, DEST, str(allowed)], env=env, capture_output=True, text=True, check=False)
    assert p.returncode == 126 and "refused" in p.stderr and p.stdout == ""
    env["SSH_ORIGINAL_COMMAND"] = "true" if "true" in FIXED else destination_commands(str(tmp_path))["state"]
    allowed.write_text(json.dumps([env["SSH_ORIGINAL_COMMAND"]]))
    p = subprocess.run([sys.executable, script, str(tmp_path), str(allowed)], env=env, capture_output=True, text=True,
                       input="copy=complete\n", check=False)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / ".sparkfleet-model").read_text() == "copy=complete\n"


def test_the_state_command_never_writes_through_a_planted_symlink(tmp_path):
    """The marker is written as a new file and renamed: a link in its place (or in the temporary's) is replaced."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    dest = tmp_path / "model"
    dest.mkdir()
    os.symlink(str(victim), str(dest / ".sparkfleet-model"))
    os.symlink(str(victim), str(dest / ".sparkfleet-model.new"))
    cmd = destination_commands(str(dest))["state"]
    subprocess.run(["sh", "-c", cmd], input="copy=incomplete\n", text=True, check=True)
    assert victim.read_text() == "keep"
    assert not os.path.islink(str(dest / ".sparkfleet-model"))
    assert (dest / ".sparkfleet-model").read_text() == "copy=incomplete\n"


@pytest.mark.parametrize("host", ["10.99.1.12\n", "spark-2\n", "fe80::1\n"])
def test_a_host_with_a_trailing_newline_is_refused(host):
    assert "not a host name" in _sync_shell.ssh_host_problem(host)


@pytest.mark.parametrize("user", ["spark\n", "0\n"])
def test_a_user_with_a_trailing_newline_is_refused(user):
    assert "ssh_user" in _sync_shell.ssh_user_problem(user)
