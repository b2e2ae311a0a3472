"""Issue 39.3: the lab's login user like the operators' `aurora` (sudo asks for a password), and the one-time
preparation (playbooks/prepare.yml with the password) after which site.yml runs without -K.

How the lab models aurora: `labctl break sudo-password HOST` on both hosts, only for these tests (every other lab test
assumes the lab's NOPASSWD sudo, and a reboot restores it). The fixture turns the knob on for both hosts and, at the
end, removes what prepare wrote (its sudoers file) and turns the knob off again.
The sudo password reaches ansible-playbook only through --become-password-file (a 0600 file), never a command line
that ps would show.

CI runs the fast test (refusal naming prepare, prepare's check mode, prepare, its second run changed=0, preflight
without -K); the whole site.yml without -K is `long`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

# The image is pinned from the head and site.yml deploys after prepare.
pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("staged")]

PASSWORD = "sparklab-become"   # lab/labctl's SUDO_PASSWORD
SUDOERS = "/etc/sudoers.d/sparkfleet"   # roles/prepare/defaults/main.yml: prepare_sudoers_file
VAULT_PASSWORD = "sparklab-vault-39"
LOAD_RULE = "spark ALL=(root) NOPASSWD: /usr/bin/python3 /usr/local/sbin/sparkfleet-image-load *"
REPO = Path(__file__).resolve().parents[2]
_LAB_NAME = os.environ.get("SPARKLAB_NAME") or "sfl"
# The controller's key of this lab instance (tests/integration/conftest.py's SSH_KEY), authorized on every host by up.
SSH_KEY = Path("/var/tmp/sparklab/lab" + ("" if _LAB_NAME == "sfl" else "-" + _LAB_NAME)) / "ssh" / "id_ed25519"


@pytest.fixture
def aurora(lab, tmp_path):
    """Both lab hosts' sudo asks `spark` for a password, as aurora's does; what prepare wrote is removed after."""
    hosts = ["spark-1", "spark-2"]
    for host in hosts:
        assert lab.host_exec(host, "test", "!", "-e", SUDOERS).returncode == 0, "%s left on %s" % (SUDOERS, host)
    try:
        for host in hosts:
            lab.labctl("break", "sudo-password", host)
        secrets = tmp_path / "secrets"
        secrets.mkdir(mode=0o700)
        become = secrets / "become"
        become.write_text(PASSWORD + "\n")
        become.chmod(0o600)
        vault = secrets / "vault"
        vault.write_text(VAULT_PASSWORD + "\n")
        vault.chmod(0o600)
        yield dict(hosts=hosts, become=str(become), vault=str(vault), vault_file=str(tmp_path / "vault.yml"))
    finally:
        for host in hosts:
            lab.host_exec(host, "rm", "-f", SUDOERS)
            lab.labctl("fix", "sudo-password", host)


def _msg(failures):
    said = []
    for f in failures:
        msg = (f["res"] or {}).get("msg")
        said.extend(str(m) for m in msg) if isinstance(msg, list) else said.append(str(msg))
    return " ".join(" ".join(said).split())


def _prepare(lab, data_dir, secrets, check=False):
    cmdline = "--become-password-file %s --vault-password-file %s%s" % (
        secrets["become"], secrets["vault"], " --check" if check else "")
    return lab.play(data_dir, "playbooks/prepare.yml", cmdline=cmdline,
                    extravars={"prepare_api_key_vault_file": secrets["vault_file"],
                               "prepare_controller_key": str(SSH_KEY)})


def _key_in_vault(lab, secrets):
    """The API key prepare made, read with ansible-vault (never printed by the run)."""
    p = lab.run([REPO / ".venv" / "bin" / "ansible-vault", "view", "--vault-password-file", secrets["vault"],
                 secrets["vault_file"]], timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def _everything_said(data_dir):
    """Every byte the runs wrote under their ansible-runner directory (stdout, events)."""
    out = []
    for dirpath, _dirs, files in os.walk(data_dir):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                out.append(f.read().decode("utf-8", "replace"))
    return "\n".join(out)


def _refused_without_password(lab, data_dir):
    r, failures = lab.play(data_dir, "site.yml")
    refused = [f for f in failures if "assertion" in (f["res"] or {})]
    assert r["status"] == "failed" and sorted(f["host"] for f in refused) == ["spark-1", "spark-2"], failures
    msg = _msg(refused)
    assert "become (sudo) fails for spark: Task failed: Missing sudo password." in msg, msg
    assert "run playbooks/prepare.yml with -K once (sparkfleet prepare -i INVENTORY -K" in msg, msg
    assert lab.changed_total(r) == 0, r["stats"]
    # preflight stopped it: no play after preflight ran a task (the deployment lock, the image, the GPU)
    assert not [e for e in r["events"] if e["event"] == "runner_on_ok" and "lock" in json.dumps(e.get("res") or {})]
    return msg


@pytest.mark.fault(name="the login user's sudo asks for a password on both nodes (aurora), site.yml without -K",
                   expected="preflight refuses before anything changes, naming prepare.yml -K; prepare with the "
                            "password (a file) writes the sudoers and the vault file, the key never shown; prepare "
                            "again: changed=0")
def test_refused_naming_prepare_then_prepare_once(lab, tmp_path, aurora, observe):
    msg = _refused_without_password(lab, tmp_path / "refused")
    observe(msg[:240])
    vault_text = _prepared(lab, tmp_path, aurora)
    # The second run changes nothing (the key stays the same).
    r, failures = _prepare(lab, tmp_path / "again", aurora)
    assert r["status"] == "successful" and not failures, failures
    assert lab.changed_total(r) == 0, r["stats"]
    assert _key_in_vault(lab, aurora) == vault_text


def _prepared(lab, tmp_path, aurora):
    """prepare with the password: the sudoers file on every node, the vault file made; returns the vault's text."""
    r, failures = _prepare(lab, tmp_path / "prepare", aurora)
    assert r["status"] == "successful" and not failures, failures
    assert lab.changed_total(r) > 0
    for host in aurora["hosts"]:
        rules = lab.host_exec(host, "cat", SUDOERS).stdout
        assert "spark ALL=(ALL) NOPASSWD: ALL" in rules, (host, rules)
        # the image key's line on the worker only (the head loads nothing through the key)
        assert (LOAD_RULE in rules) == (host == "spark-2"), (host, rules)
        mode = lab.host_exec(host, "stat", "-c", "%a %U", SUDOERS).stdout.split()
        assert mode == ["440", "root"], (host, mode)
        # the login user's sudo without a password, as site.yml uses it
        assert lab.ssh(host, "sudo -n true").returncode == 0, host
    with open(aurora["vault_file"], encoding="utf-8") as f:
        assert f.read().startswith("$ANSIBLE_VAULT;"), "the vault file is not encrypted"
    vault_text = _key_in_vault(lab, aurora)
    key = vault_text.split("vault_vllm_serve_api_key:", 1)[1].strip()
    assert len(key) >= 40 and key not in _everything_said(tmp_path / "prepare"), "the API key was shown"
    return vault_text


# prepare --check, prepare and a whole site.yml re-run without -K: not yet seen to the end (2026-12-05, load average
# 100-200: its site.yml passed preflight, the lock, the image and gpu_cleanup without -K, then met the runner's 560 s)
@pytest.mark.long
@pytest.mark.fault(name="site.yml without -K after prepare on a password-sudo lab",
                   expected="prepare --check changes nothing; after prepare the whole deployment runs and serves "
                            "without the sudo password")
def test_site_without_k_after_prepare(lab, tmp_path, aurora, observe):
    _refused_without_password(lab, tmp_path / "refused")
    # --check: says what it would change, changes nothing (no sudoers file, no vault file)
    r, failures = _prepare(lab, tmp_path / "check", aurora, check=True)
    assert r["status"] == "successful" and not failures, failures
    assert lab.changed_total(r) > 0
    for host in aurora["hosts"]:
        assert lab.host_exec(host, "test", "!", "-e", SUDOERS).returncode == 0, host
    assert not os.path.exists(aurora["vault_file"])
    _prepared(lab, tmp_path, aurora)
    # site.yml without any password: preflight's become, docker as root and the image key's `sudo -n` load command,
    # then every step that needs root.
    # preflight's answer timeout raised: its 30 s read of each node timed out twice here with a load average of 100-180
    # (other labs beside this one); it is not what this test proves.
    r = lab.site(tmp_path / "site", cmdline="-e preflight_ping_timeout=120")
    assert lab.serves(timeout=60), "the API does not answer after site.yml without -K"
    observe("site.yml without -K after prepare: successful, changed=%d" % lab.changed_total(r))
