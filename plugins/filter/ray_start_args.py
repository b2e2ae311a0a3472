# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.ray_start_args (documented in ray_start_args.yml)."""

from __future__ import annotations

import ipaddress

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate import ray_extra_args_problems
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._checks import fail, port_number, whole_number

_WHERE = "ray_start_args"


# Ray's other listening ports, pinned so a node firewall can name them (Ray picks most at random otherwise).
# Key -> flag; the head-only ones are left out on workers, the dashboard's when it is off.
PORT_FLAGS = (
    ("node_manager_port", "--node-manager-port", False),
    ("object_manager_port", "--object-manager-port", False),
    ("runtime_env_agent_port", "--runtime-env-agent-port", False),
    ("dashboard_agent_grpc_port", "--dashboard-agent-grpc-port", False),
    ("dashboard_agent_listen_port", "--dashboard-agent-listen-port", False),
    ("metrics_export_port", "--metrics-export-port", False),
    ("min_worker_port", "--min-worker-port", False),
    ("max_worker_port", "--max-worker-port", False),
    ("ray_client_server_port", "--ray-client-server-port", True),
    ("dashboard_port", "--dashboard-port", True),
)


def _port_args(ports, head, dashboard):
    if ports in (None, ""):
        return []
    if not isinstance(ports, dict):
        fail(_WHERE, "ports must be a dict of port names to numbers, got %r" % (ports,))
    known = dict((key, (flag, head_only)) for key, flag, head_only in PORT_FLAGS)
    unknown = sorted(set(ports) - set(known))
    if unknown:
        fail(_WHERE, "unknown port name(s) %s; known: %s"
             % (", ".join(unknown), ", ".join(k for k, _f, _h in PORT_FLAGS)))
    numbers = {}
    for key, value in ports.items():
        if value in (None, ""):
            continue
        numbers[key] = port_number(_WHERE, key, value)
    if ("min_worker_port" in numbers) != ("max_worker_port" in numbers):
        fail(_WHERE, "set min_worker_port and max_worker_port together")
    if numbers.get("min_worker_port", 0) > numbers.get("max_worker_port", 65535):
        fail(_WHERE, "min_worker_port %d is above max_worker_port %d"
             % (numbers["min_worker_port"], numbers["max_worker_port"]))
    args = []
    for key, flag, head_only in PORT_FLAGS:
        if key not in numbers or (head_only and not head) or (key == "dashboard_port" and not dashboard):
            continue
        args += [flag, str(numbers[key])]
    return args


def _address(name, value):
    """A node's fabric address: a unicast IP Ray can register and the others can reach."""
    try:
        addr = ipaddress.ip_address(str(value))
    except ValueError:
        fail(_WHERE, "%s %r is not an IP address; Ray must register the node's fabric IP (sparkfleet_fabric_ip)"
             % (name, value))
    if addr.is_unspecified or addr.is_loopback or addr.is_multicast:
        fail(_WHERE, "%s %s is not a node's own address (unspecified, loopback or multicast); Ray must register the"
             " node's fabric IP (sparkfleet_fabric_ip)" % (name, addr))
    return addr


def ray_start_args(node_ip, head, head_ip, port=6379, num_gpus=1, num_cpus=None, dashboard=False, extra=None,
                   ports=None, allow_exposure=False):
    """The words after `ray start` for one node, every address pinned to its fabric IP."""
    node = _address("node_ip", node_ip)
    head_addr = _address("head_ip", head_ip)
    if not isinstance(head, bool) or not isinstance(dashboard, bool) or not isinstance(allow_exposure, bool):
        fail(_WHERE, "head, dashboard and allow_exposure must be true or false, got %r, %r, %r"
             % (head, dashboard, allow_exposure))
    port = port_number(_WHERE, "port", port)
    if head:
        args = ["--head", "--port", str(port)]
        # The dashboard runs code for anyone who reaches it: off, or on loopback only.
        args += ["--include-dashboard=true", "--dashboard-host=127.0.0.1"] if dashboard else ["--include-dashboard=false"]
    else:
        # host:port, with an IPv6 address in brackets (Ray splits the address at its last ':').
        args = ["--address", ("[%s]:%d" if head_addr.version == 6 else "%s:%d") % (head_addr, port)]
    args += ["--node-ip-address", str(node), "--num-gpus", str(whole_number(_WHERE, "num_gpus", num_gpus, 0))]
    if num_cpus not in (None, ""):
        args += ["--num-cpus", str(whole_number(_WHERE, "num_cpus", num_cpus, 1))]
    args += _port_args(ports, head, dashboard)
    extra = [] if extra is None else extra
    problems = ray_extra_args_problems(extra, allow_exposure)
    if problems:
        fail(_WHERE, "extra (ray_cluster_extra_args): " + "; ".join(problems))
    return args + ["--disable-usage-stats", "--block"] + [str(word) for word in extra]


class FilterModule:
    """Ray start command lines."""

    def filters(self):
        return {"ray_start_args": ray_start_args}
