"""inventories/sparks holds the operators' facts (issue 16.4): user aurora, the head's management address, the fabric.

Rendering only (ansible-inventory): nothing here connects to these addresses."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def test_the_operators_user_and_addresses():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-inventory"), "-i",
                          os.path.join(ROOT, "inventories", "sparks"), "--list"], capture_output=True, text=True,
                         check=True, env=env, cwd=ROOT)
    hostvars = json.loads(out.stdout)["_meta"]["hostvars"]
    assert {h: v["ansible_user"] for h, v in hostvars.items()} == {"spark-1": "aurora", "spark-2": "aurora"}
    assert hostvars["spark-1"]["ansible_host"] == hostvars["spark-1"]["sparkfleet_mgmt_ip"] == "10.1.230.180"
    assert (hostvars["spark-1"]["sparkfleet_fabric_ip"], hostvars["spark-2"]["sparkfleet_fabric_ip"]) == \
        ("192.168.200.12", "192.168.200.13")
    # The worker is reached through the head (no management address of its own).
    assert "10.1.230.180" in hostvars["spark-2"]["ansible_ssh_common_args"] or \
        "sparkfleet_mgmt_ip" in hostvars["spark-2"]["ansible_ssh_common_args"]
