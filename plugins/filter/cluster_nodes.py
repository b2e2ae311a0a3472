# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.cluster_nodes (documented in cluster_nodes.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def cluster_nodes(hostvars, hosts, head, ip_var="sparkfleet_fabric_ip"):
    """Return [{host, ip, head}] for the cluster's hosts, the head first, each with its fabric IP."""
    if isinstance(hosts, str) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError("cluster_nodes: hosts must be a list of inventory names, got %r" % (hosts,))
    ordered = [head] + [h for h in hosts if h != head]
    nodes = []
    for host in ordered:
        try:
            ip = hostvars[host].get(ip_var)
        except KeyError:
            raise AnsibleFilterError("cluster_nodes: %s is not in the inventory" % host)
        if not ip:
            raise AnsibleFilterError("cluster_nodes: %s has no %s; set it to the node's fabric address" % (host, ip_var))
        nodes.append({"host": host, "ip": str(ip), "head": host == head})
    return nodes


class FilterModule:
    """Cluster membership helpers."""

    def filters(self):
        return {"cluster_nodes": cluster_nodes}
