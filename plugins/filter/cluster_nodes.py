# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.cluster_nodes (documented in cluster_nodes.yml)."""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._checks import fail, host_list, hostvar

_WHERE = "cluster_nodes"


def cluster_nodes(hostvars, hosts, head, ip_var="sparkfleet_fabric_ip"):
    """Return [{host, ip, head}] for the cluster's hosts, the head first, each with its fabric IP."""
    hosts = host_list(_WHERE, hosts)
    ordered = [head] + [h for h in hosts if h != head]
    nodes = []
    for host in ordered:
        ip = hostvar(_WHERE, hostvars, host, ip_var)
        if not ip:
            fail(_WHERE, "%s has no %s; set it to the node's fabric address" % (host, ip_var))
        nodes.append({"host": host, "ip": str(ip), "head": host == head})
    return nodes


class FilterModule:
    """Cluster membership helpers."""

    def filters(self):
        return {"cluster_nodes": cluster_nodes}
