"""Shipped configuration keeps ssh host key checking on (issue 11): ansible.cfg and every inventory under inventories/."""

from __future__ import annotations

import configparser
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# What turns checking off: Ansible's own switch, or ssh options that accept any key or forget every key.
OFF = re.compile(r"(host_key_checking\s*[:=]\s*(false|no|off|0)\b|StrictHostKeyChecking[\s=]+(no|off)\b"
                 r"|UserKnownHostsFile[\s=]+/dev/null)", re.I)


def _inventory_files():
    found = []
    for top, dirs, files in os.walk(os.path.join(ROOT, "inventories")):
        dirs.sort()
        found += [os.path.join(top, f) for f in sorted(files) if not f.startswith(".")]
    return found


def test_ansible_cfg_leaves_host_key_checking_on():
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(os.path.join(ROOT, "ansible.cfg"))
    value = cfg.get("defaults", "host_key_checking", fallback="True")
    assert value.strip().lower() in ("true", "yes", "on", "1"), "ansible.cfg turns host key checking off"
    assert not OFF.search(cfg.get("ssh_connection", "ssh_args", fallback="")), "ssh_args turn host key checking off"


def test_ansible_reads_host_key_checking_on_from_the_shipped_config():
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    env.pop("ANSIBLE_HOST_KEY_CHECKING", None)
    config = os.path.join(os.path.dirname(sys.executable), "ansible-config")
    if not os.path.exists(config):
        pytest.skip("ansible-config not next to this Python")
    p = subprocess.run([config, "dump", "--format", "json"], capture_output=True, text=True, env=env, cwd=ROOT, check=False,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    found = [s for s in json.loads(p.stdout) if isinstance(s, dict) and s.get("name") == "HOST_KEY_CHECKING"]
    assert found and found[0]["value"] is True, found


@pytest.mark.parametrize("path", _inventory_files(), ids=lambda p: os.path.relpath(p, ROOT))
def test_no_inventory_turns_host_key_checking_off(path):
    with open(path, errors="replace") as handle:
        text = handle.read()
    hit = OFF.search(text)
    assert not hit, "%s turns host key checking off: %r" % (os.path.relpath(path, ROOT), hit.group(0))
