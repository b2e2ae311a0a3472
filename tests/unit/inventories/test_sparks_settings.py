"""inventories/sparks: what a user of two Sparks sets lives in one file (settings.yml), set nowhere else."""

from __future__ import annotations

import glob
import os

import yaml

SPARKS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "inventories", "sparks")
USER_SETTINGS = ("ansible_user", "ansible_ssh_private_key_file", "sparkfleet_image", "vllm_serve_api_key")


def _vars(path):
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def test_user_settings_are_in_settings_yml_only():
    settings = _vars(os.path.join(SPARKS, "group_vars", "spark", "settings.yml"))
    assert set(USER_SETTINGS) <= set(settings)
    others = [p for p in glob.glob(os.path.join(SPARKS, "*_vars", "*", "*.yml")) + glob.glob(
        os.path.join(SPARKS, "host_vars", "*.yml")) if not p.endswith(os.sep + "settings.yml")]
    assert others
    for path in others:
        assert not set(USER_SETTINGS) & set(_vars(path)), path


def test_api_key_comes_from_the_vault_and_the_image_is_the_proven_one():
    settings = _vars(os.path.join(SPARKS, "group_vars", "spark", "settings.yml"))
    assert "vault_vllm_serve_api_key" in settings["vllm_serve_api_key"]
    assert settings["sparkfleet_image"].startswith("hellohal2064/vllm-qwen3.5-gb10")
