"""Issue 39.3: the API key goes into an ansible-vault file made once (never in clear, never shown); a file this run's
vault password cannot open, or one in clear, is refused with the fix."""

from __future__ import annotations

import yaml

from ansible.parsing.vault import VaultLib, VaultSecret

from ansible_collections.sparkfleet.vllm.plugins.action.api_key_vault import argument_problem, new_key, plan, render
from ansible_collections.sparkfleet.vllm.tests.unit.support.playbook import run_playbook

NAME = "vault_vllm_serve_api_key"


def _vault(password):
    return VaultLib([("default", VaultSecret(password.encode()))])


def test_a_missing_file_is_made():
    assert plan(None, NAME, _vault("p").decrypt) == ("create", {}, None)


def test_a_vault_with_the_key_is_kept_and_one_without_gets_it():
    v = _vault("p")
    kept = v.encrypt(render({NAME: "k" * 43}))
    assert plan(kept, NAME, v.decrypt) == ("keep", {NAME: "k" * 43}, None)
    other = v.encrypt(render({"vault_other": "x"}))
    assert plan(other, NAME, v.decrypt) == ("add", {"vault_other": "x"}, None)


def test_a_clear_file_is_refused():
    action, _data, problem = plan(b"vault_vllm_serve_api_key: secret\n", NAME, _vault("p").decrypt)
    assert action is None and "not an ansible-vault file" in problem and "ansible-vault encrypt FILE" in problem


def test_another_password_is_refused_naming_the_options():
    blob = _vault("made-with-this").encrypt(render({NAME: "k" * 43}))
    action, _data, problem = plan(blob, NAME, _vault("not-this").decrypt)
    assert action is None and "does not open it" in problem and "--vault-password-file" in problem


def test_an_empty_key_is_refused():
    v = _vault("p")
    action, _data, problem = plan(v.encrypt(render({NAME: ""})), NAME, v.decrypt)
    assert action is None and "empty" in problem


def test_a_new_key_is_random_long_and_plain_in_yaml():
    keys = {new_key(32) for _n in range(50)}
    assert len(keys) == 50
    for key in keys:
        assert len(key) == 43 and key.replace("-", "").replace("_", "").isalnum()
        assert yaml.safe_load(render({NAME: key})) == {NAME: key}


def test_bad_arguments_are_named():
    assert "not a variable name" in argument_problem({"name": "1x", "length": 32, "path": "/x"})
    assert "at least 16" in argument_problem({"name": NAME, "length": 8, "path": "/x"})
    assert argument_problem({"name": NAME, "length": 32, "path": "/x/vault.yml"}) is None


# ------------------------------------------------------------------ through ansible-playbook (the action, end to end)
PLAY = """- name: Vault
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The API key in a vault file
      sparkfleet.vllm.api_key_vault:
        path: "{{ vault_file }}"
"""


def _play(tmp_path, *args):
    (tmp_path / "play.yml").write_text(PLAY)
    p = run_playbook(tmp_path / "play.yml", "-e", "vault_file=%s" % (tmp_path / "vault.yml"), *args, local=True,
                     cwd=tmp_path)
    return p, " ".join(p.stdout.split())


def test_the_playbook_makes_the_file_once_and_never_shows_the_key(tmp_path):
    password = tmp_path / "vault-pass"
    password.write_text("unit-vault-39\n")
    p, out = _play(tmp_path)
    assert p.returncode == 2 and "has no vault password" in out and "--ask-vault-pass (-J)" in out, out[-1500:]
    assert not (tmp_path / "vault.yml").exists()
    p, out = _play(tmp_path, "--vault-password-file", str(password), "--check")
    assert p.returncode == 0 and "changed=1" in out, out[-1500:]
    assert not (tmp_path / "vault.yml").exists()
    p, out = _play(tmp_path, "--vault-password-file", str(password))
    assert p.returncode == 0 and "changed=1" in out, out[-1500:]
    blob = (tmp_path / "vault.yml").read_bytes()
    assert blob.startswith(b"$ANSIBLE_VAULT;") and oct((tmp_path / "vault.yml").stat().st_mode & 0o777) == "0o600"
    key = yaml.safe_load(_vault("unit-vault-39").decrypt(blob))[NAME]
    assert len(key) == 43 and key not in p.stdout + p.stderr
    p, out = _play(tmp_path, "--vault-password-file", str(password))
    assert p.returncode == 0 and "changed=0" in out, out[-1500:]
    assert (tmp_path / "vault.yml").read_bytes() == blob
    other = tmp_path / "other-pass"
    other.write_text("not-this-one\n")
    p, out = _play(tmp_path, "--vault-password-file", str(other))
    assert p.returncode == 2 and "does not open it" in out, out[-1500:]
