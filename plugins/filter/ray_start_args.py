# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.ray_start_args (documented in ray_start_args.yml)."""

from __future__ import annotations

import ipaddress

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.vllm.plugins.module_utils._validate import check_int


def _count(name, value, minimum):
    # The check preflight runs on the same variables, so both accept the same values.
    number, problem = check_int(value, minimum)
    if problem:
        raise AnsibleFilterError("ray_start_args: %s %s, got %r" % (name, problem, value))
    return number


def ray_start_args(node_ip, head, head_ip, port=6379, num_gpus=1, num_cpus=None, dashboard=False, extra=None):
    """The words after `ray start` for one node, every address pinned to its fabric IP."""
    for name, value in (("node_ip", node_ip), ("head_ip", head_ip)):
        try:
            ipaddress.ip_address(str(value))
        except ValueError:
            raise AnsibleFilterError("ray_start_args: %s %r is not an IP address; Ray must register the node's"
                                     " fabric IP (sparkfleet_fabric_ip)" % (name, value))
    port = _count("port", port, 1)
    if port > 65535:
        raise AnsibleFilterError("ray_start_args: port %d is out of range" % port)
    if head:
        args = ["--head", "--port", str(port)]
        # The dashboard runs code for anyone who reaches it: off, or on loopback only.
        args += ["--include-dashboard=true", "--dashboard-host=127.0.0.1"] if dashboard else ["--include-dashboard=false"]
    else:
        args = ["--address", "%s:%d" % (head_ip, port)]
    args += ["--node-ip-address", str(node_ip), "--num-gpus", str(_count("num_gpus", num_gpus, 0))]
    if num_cpus not in (None, ""):
        args += ["--num-cpus", str(_count("num_cpus", num_cpus, 1))]
    extra = list(extra or [])
    if any(str(word).startswith("--node-ip-address") for word in extra):
        raise AnsibleFilterError("ray_start_args: extra arguments must not override --node-ip-address; set the"
                                 " node's fabric IP (sparkfleet_fabric_ip) instead")
    return args + ["--disable-usage-stats", "--block"] + [str(word) for word in extra]


class FilterModule:
    """Ray start command lines."""

    def filters(self):
        return {"ray_start_args": ray_start_args}
