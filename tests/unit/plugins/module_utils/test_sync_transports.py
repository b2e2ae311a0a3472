"""model_sync's transport seam (issue 43 item 4): the interface, the registry and the choice made in one place."""

from __future__ import annotations

import yaml

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync import _sync_transport, _sync_transports
from ansible_collections.sparkfleet.vllm.plugins.modules import model_sync


def test_the_module_offers_exactly_the_registered_choices_in_its_documented_order():
    doc = yaml.safe_load(model_sync.DOCUMENTATION)["options"]["transport"]
    assert doc["choices"] == list(_sync_transports.CHAINS)
    assert doc["default"] in _sync_transports.CHAINS


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
