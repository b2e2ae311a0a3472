"""Issue 39.3: the API key goes into an ansible-vault file made once (never in clear, never shown); a file this run's
vault password cannot open, or one in clear, is refused with the fix."""

from __future__ import annotations

import yaml

from ansible.parsing.vault import VaultLib, VaultSecret

from ansible_collections.sparkfleet.vllm.plugins.action.api_key_vault import argument_problem, new_key, plan, render

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
    keys = {new_key(32) for _ in range(50)}
    assert len(keys) == 50
    for key in keys:
        assert len(key) == 43 and key.replace("-", "").replace("_", "").isalnum()
        assert yaml.safe_load(render({NAME: key})) == {NAME: key}


def test_bad_arguments_are_named():
    assert "not a variable name" in argument_problem({"name": "1x", "length": 32, "path": "/x"})
    assert "at least 16" in argument_problem({"name": NAME, "length": 8, "path": "/x"})
    assert argument_problem({"name": NAME, "length": 32, "path": "/x/vault.yml"}) is None
