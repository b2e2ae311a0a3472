"""model_sync's transport seam (issue 43 item 4): the interface, the registry and the choice made in one place."""

from __future__ import annotations

import os

import yaml

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync import _sync_transport, _sync_transports
from ansible_collections.sparkfleet.vllm.plugins.modules import model_sync
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate_model_sync

ROLE_SPEC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "model_sync", "meta",
                         "argument_specs.yml")


def test_the_module_offers_exactly_the_registered_choices_in_its_documented_order():
    doc = yaml.safe_load(model_sync.DOCUMENTATION)["options"]["transport"]
    assert doc["choices"] == list(_sync_transports.CHAINS)
    assert doc["default"] in _sync_transports.CHAINS


def test_the_role_and_preflight_offer_exactly_the_registered_choices():
    """A transport choice added to CHAINS reaches preflight's check by itself; the role's argument spec (a static file
    ansible-doc reads) must state it too, in the registry's order."""
    with open(ROLE_SPEC, encoding="utf-8") as f:
        spec = yaml.safe_load(f)["argument_specs"]["main"]["options"]["model_sync_transport"]
    assert spec["choices"] == list(_sync_transports.CHAINS)
    check = _validate_model_sync.CHECKS["model_sync_transport"]
    assert check.choices == tuple(_sync_transports.CHAINS)
    assert check("rsync")[1] == "must be one of %s" % ", ".join(_sync_transports.CHAINS)


def test_every_chain_names_registered_transports_and_the_rsync_passes_have_theirs():
    for choice, names in _sync_transports.CHAINS.items():
        assert names, choice
        assert set(names) <= set(_sync_transports.TRANSPORTS), (choice, names)
    assert _sync_transports.RSYNC in _sync_transports.TRANSPORTS


def test_each_transport_is_an_interface_subclass_named_by_its_key_with_known_causes():
    for name, cls in _sync_transports.TRANSPORTS.items():
        assert issubclass(cls, _sync_transport.Transport)
        assert cls.name == name
        assert cls.send is not _sync_transport.Transport.send, name
        assert set(cls.CAUSES) <= set(_sync_transport.CAUSES), (name, cls.CAUSES)


def test_the_forced_command_allows_every_transports_fixed_commands(monkeypatch):
    class Probe(_sync_transport.Transport):
        name = "probe"

        @staticmethod
        def commands(dest):
            return {"probe-recv": "true %s" % dest}

    monkeypatch.setitem(_sync_transports.TRANSPORTS, "probe", Probe)
    cmds = _sync_transports.destination_commands("/models/m")
    assert cmds["probe-recv"] == "true /models/m"
    assert {"receive", "send", "prepare", "hash", "list", "state", "probe"} <= set(cmds)


def test_an_outcome_refuses_a_cause_the_interface_does_not_name():
    try:
        _sync_transport.Outcome("lost")
    except ValueError as exc:
        assert "lost" in str(exc)
    else:
        raise AssertionError("an unknown cause was accepted")
    out = _sync_transport.Outcome("partial", "2 of 3", delivered=["a"], sent=10)
    assert not out.ok and out.files == 1 and out.sent == 10
