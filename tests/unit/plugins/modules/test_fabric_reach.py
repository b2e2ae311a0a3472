"""fabric_reach against real sockets on the loopback (never another address)."""

from __future__ import annotations

import socket

import pytest

from ansible_collections.sparkfleet.vllm.plugins.modules import fabric_reach


def test_a_listening_peer_passes_and_a_closed_port_is_named(run_module):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    try:
        res = run_module(fabric_reach, {"peers": [{"name": "self", "ip": "127.0.0.1"}], "port": port}, check_mode=True)
        assert res.get("failed") is not True, res
        assert res["peers"][0]["dev"] == "lo" and res["peers"][0]["answer"] == "ok"
    finally:
        sock.close()
    res = run_module(fabric_reach, {"peers": [{"name": "self", "ip": "127.0.0.1"}], "port": port})
    assert res["failed"] is True and "nothing listens on port %d" % port in res["msg"]
    assert "Nothing was changed" in res["hint"]


@pytest.mark.parametrize("args, why", [({"port": 0}, "port must be 1-65535"), ({"timeout": 0}, "timeout must be")])
def test_bad_arguments(run_module, args, why):
    res = run_module(fabric_reach, dict({"peers": [{"name": "x", "ip": "127.0.0.1"}]}, **args))
    assert res["failed"] is True and why in res["msg"]
