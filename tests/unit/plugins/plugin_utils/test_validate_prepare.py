"""plugins/plugin_utils/_validate_prepare.py: prepare's settings, checked before it writes a sudoers file."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate as v


@pytest.mark.parametrize("value", ["/etc/sudoers.d/sparkfleet", "/etc/sudoers.d/zz-sparkfleet_1"])
def test_a_sudoers_file_sudo_reads_is_taken(value):
    assert v.ROLE_TABLES["prepare"]["prepare_sudoers_file"](value) == (value, None)


@pytest.mark.parametrize("value", [
    "/etc/sudoers.d/sparkfleet.conf",   # sudo never reads a name with a '.' (sudoers(5), #includedir)
    "/etc/sudoers.d/sparkfleet~",       # nor one ending in '~'
    "/etc/sudoers",                     # the system's own file
    "/etc/sudoers.d/../sudoers",
    "/etc/sudoers.d/a b",
    "/etc/sudoers.d/x\nroot ALL=(ALL) NOPASSWD: ALL",
    "/tmp/sparkfleet",
    "",
    None,
])
def test_a_sudoers_file_sudo_would_not_read_or_another_file_is_refused(value):
    checked, problem = v.ROLE_TABLES["prepare"]["prepare_sudoers_file"](value)
    assert checked is None and "/etc/sudoers.d/" in problem


@pytest.mark.parametrize("name, value, ok", [
    ("prepare_image_tag", "latest", True),
    ("prepare_image_tag", "26.03-py3", True),
    ("prepare_image_tag", "la test", False),
    ("prepare_image_tag", "-x", False),
    ("prepare_image_tag", "x" * 129, False),
    ("prepare_api_key_vault_file", "", True),
    ("prepare_api_key_vault_file", "inventories/sparks/group_vars/spark/vault.yml", True),
    ("prepare_api_key_vault_file", "vault.yml\n", False),
    ("prepare_image_vars_file", " group_vars/spark/image.yml", False),
    ("prepare_controller_key", "~/.ssh/id_ed25519", True),
    ("prepare_controller_key", "key\x00", False),
    ("prepare_passwordless_sudo", "maybe", False),
])
def test_the_other_settings(name, value, ok):
    checked, problem = v.ROLE_TABLES["prepare"][name](value)
    assert (problem is None) is ok, (name, value, problem)


def test_a_bad_sudoers_file_is_named_with_the_host_and_variable():
    errors = v.settings_errors({"prepare_sudoers_file": "/etc/sudoers.d/sparkfleet.conf"}, "spark-1")
    assert errors and all("spark-1" in e and "prepare_sudoers_file" in e for e in errors), errors
