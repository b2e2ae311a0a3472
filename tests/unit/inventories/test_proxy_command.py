"""Issue 41.12: the hop to a worker (ProxyCommand "ssh -W" through the head) has its own connect timeout and keepalive.

ansible's `timeout` bounds only the outer ssh; without ConnectTimeout the inner `ssh -W` to a head that does not answer
waits for the kernel's TCP timeout (minutes) and outlives the run that started it.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PROXY = re.compile(r"ProxyCommand=\"?(ssh [^\"]*)")


def _proxy_commands():
    found = []
    for path in sorted((REPO / "inventories").rglob("*.yml")) + sorted((REPO / "docs").rglob("*.md")):
        for command in PROXY.findall(path.read_text(encoding="utf-8")):
            found.append((path.relative_to(REPO), command))
    return found


def test_every_shipped_proxy_command_bounds_its_connection():
    commands = _proxy_commands()
    assert any(str(p).startswith("inventories/sample") for p, _c in commands), commands
    for path, command in commands:
        assert "-W" in command, (path, command)
        assert re.search(r"-o ConnectTimeout=\d+", command), "%s: the hop's ssh has no ConnectTimeout: %s" % (
            path, command)
        assert re.search(r"-o ServerAliveInterval=\d+", command), (path, command)
