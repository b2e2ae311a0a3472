# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one place model_sync's transports are registered and chosen (the interface: _sync_transport.py).

TRANSPORTS names each transport's class; CHAINS maps model_sync's ``transport`` choice to the transports tried in
order for each destination (the next takes what the one before could not deliver, _sync_transport.FALL_THROUGH).
destination_commands is every fixed command model_sync runs on a destination: the run's own and each transport's.
"""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._content_hash import HASH_SCRIPT, cache_file
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import dest_probe_script
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_rsync import RsyncTransport
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_shell import remote_commands
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_tcp import TcpTransport

TRANSPORTS = {
    TcpTransport.name: TcpTransport,
    RsyncTransport.name: RsyncTransport,
}

# model_sync's transport choices (its argument spec's choices are these keys).
CHAINS = {
    "auto": ("tcp", "ssh"),
    "tcp": ("tcp",),
    "ssh": ("ssh",),
}

# The transport the run's own rsync passes use whatever the choice (the checksum plan and re-check, the delete pass).
RSYNC = RsyncTransport.name


def transports(run):
    """{name: instance} of every registered transport for one run (the ModelSync)."""
    return dict((name, cls(run)) for name, cls in TRANSPORTS.items())


def chain(instances, choice):
    """The transports tried in order for the choice."""
    return [instances[name] for name in CHAINS[choice]]


def destination_commands(dest):
    """{name: command} of every fixed command model_sync runs on a destination for dest: the sync key's
    forced command (module_utils/sync/_sync_shell.py) allows exactly these, plus rsync into dest."""
    cmds = remote_commands(dest, HASH_SCRIPT, cache_file(dest, "$HOME"))
    cmds["probe"] = dest_probe_script(dest)
    for cls in TRANSPORTS.values():
        cmds.update(cls.commands(dest))
    return cmds
