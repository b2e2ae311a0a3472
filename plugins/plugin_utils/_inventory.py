# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inventory validation shared by the preflight filter: pure functions, no I/O."""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate import check_int, check_user, is_host_name

# The group names every play and role targets: the one place they are decided (tests/unit checks the plays
# and roles use no others). A play's hosts pattern is fixed when the playbook is parsed, before any inventory
# variable exists, so the names are not variables: name the inventory's groups like this.
ALL_GROUP = "spark"
_IFNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,14}\Z")
HEAD_GROUP = "spark_head"
WORKER_GROUP = "spark_workers"
# A node's inventory name reaches systemd units (the Ray guard's identity, the scrub's --node), shell words, paths on
# the controller (reports, failure logs) and ssh: one conservative rule for all of them. Labels of letters, digits,
# '-' and '_', joined by single dots, each starting and ending with a letter or digit; 63 characters at most.
_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?)*\Z")
NODE_NAME_MAX = 63
# Ansible's own rule for group names (a group of ours holds only such names: the group of a node reaches group_vars
# paths and patterns).
_GROUP_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")

# The node variables only the inventory check reads (inventory_errors): every other role variable is checked by
# plugin_utils/_validate.py's tables (tests/unit/plugins/plugin_utils/test_validate_specs.py).
NODE_VARS = ("sparkfleet_fabric_ip", "sparkfleet_fabric_subnet", "sparkfleet_fabric_interface", "sparkfleet_mgmt_ip")


def _why_not_a_name(name):
    """Why a host name would change meaning in a unit, a shell word or a path, in words; None when it is fine."""
    if not isinstance(name, str):
        return "is not a string"
    if not name:
        return "is empty"
    for bad, what in (("\n", "a newline (it would start a new directive in a systemd unit)"),
                      ("\r", "a carriage return"), ("\0", "a NUL byte"),
                      ("%", "'%' (systemd expands it as a specifier in a unit)"),
                      ("$", "'$' (systemd and the shell expand it)"),
                      ("/", "'/' (it would make a path on the controller leave its directory)")):
        if bad in name:
            return "holds %s" % what
    if any(c.isspace() for c in name):
        return "holds a blank (a unit's command line would split it into two words)"
    if name.startswith("-"):
        return "starts with '-' (ssh and the scripts would read it as an option)"
    if len(name) > NODE_NAME_MAX:
        return "is %d characters long, more than %d (a Linux host name's limit)" % (len(name), NODE_NAME_MAX)
    if not _NODE_NAME_RE.match(name):
        return ("holds a character other than ASCII letters, digits, '-', '_' and single dots between them"
                " (quotes, ';', '@', ':' and the like mean something to a shell, ssh or a unit)")
    return None


def name_errors(groups, head_group=HEAD_GROUP, worker_group=WORKER_GROUP, all_group=ALL_GROUP):
    """The problems with the names of the nodes (the hosts of our groups) and of the groups that hold them.

    Checked before anything else: every other message, and every unit and path, carries these names.
    Messages start with "inventory: " (the inventory check play selects them). Never raises on odd input.
    """
    errors = []
    groups = groups if isinstance(groups, dict) else {}
    nodes = []
    for group in (all_group, head_group, worker_group):
        members = groups.get(group)
        for host in members if isinstance(members, (list, tuple)) else []:
            if host not in nodes:
                nodes.append(host)
    for host in nodes:
        why = _why_not_a_name(host)
        if why:
            errors.append("inventory: the host name %r %s; rename the host in the inventory to a plain host name such"
                          " as spark-1 (letters, digits, '-', '_', '.') and set ansible_host to its address"
                          % (host, why))
    holding = [g for g, members in groups.items()
               if isinstance(members, (list, tuple)) and any(host in nodes for host in members)]
    for group in sorted(holding, key=str):
        if not (isinstance(group, str) and _GROUP_NAME_RE.match(group)):
            errors.append("inventory: the group name %r, which holds a node, is not a group name Ansible keeps as"
                          " written (a letter or '_', then letters, digits and '_'); rename the group" % (group,))
    return errors


def _get(hostvars, host, name, default=None):
    try:
        value = hostvars[host].get(name, default)
    except (KeyError, AttributeError):
        return default
    return default if value is None else value


def inventory_errors(hostvars, groups, head_group=HEAD_GROUP, worker_group=WORKER_GROUP, all_group=ALL_GROUP):
    """Return a list of human-readable problems with the inventory (empty when it is usable).

    Every message names the host and the variable, and says how to fix it. Never raises on odd input.
    A node or group name that a unit, a shell or a path would read otherwise is refused first, and alone: every
    other message (and every unit) would carry it.
    """
    groups = groups if isinstance(groups, dict) else {}
    errors = name_errors(groups, head_group, worker_group, all_group)
    if errors:
        return errors
    hostvars = hostvars if hostvars is not None else {}
    heads = list(groups.get(head_group) or [])
    workers = list(groups.get(worker_group) or [])
    members = list(groups.get(all_group) or [])
    if all_group not in groups:
        errors.append("inventory: group '%s' is missing; make it the parent of '%s' and '%s' (the plays that"
                      " clean GPUs and run Ray target it)" % (all_group, head_group, worker_group))
    if head_group not in groups:
        errors.append("inventory: group '%s' is missing; put the node that runs the Ray head and the API in it" % head_group)
    elif len(heads) != 1:
        errors.append("inventory: group '%s' must hold exactly one host, it holds %d (%s)"
                      % (head_group, len(heads), ", ".join(heads) or "none"))
    if worker_group not in groups:
        errors.append("inventory: group '%s' is missing; define it (it may be empty for a single node)" % worker_group)
    for host in sorted(set(heads) & set(workers)):
        errors.append("%s: is in both '%s' and '%s'; a node is either the head or a worker" % (host, head_group, worker_group))
    if all_group in groups:
        for host in sorted(set(members) - set(heads) - set(workers)):
            errors.append("%s: is in '%s' but in neither '%s' nor '%s', so it would get GPU cleanup and Ray but no"
                          " model; put it in '%s' or remove it from '%s'"
                          % (host, all_group, head_group, worker_group, worker_group, all_group))
        for host in sorted((set(heads) | set(workers)) - set(members)):
            group = head_group if host in heads else worker_group
            errors.append("%s: is in '%s' but not in '%s', so it would get no GPU cleanup and no Ray; make '%s' and"
                          " '%s' children of '%s'" % (host, group, all_group, head_group, worker_group, all_group))

    nodes = heads + [w for w in workers if w not in heads]
    subnet = None
    subnet_raw = _get(hostvars, nodes[0], "sparkfleet_fabric_subnet") if nodes else None
    for host in nodes:
        raw = _get(hostvars, host, "sparkfleet_fabric_subnet")
        if raw is None:
            errors.append("%s: sparkfleet_fabric_subnet is not set; set it to the RoCE fabric's CIDR, e.g. 192.168.200.0/24" % host)
            continue
        try:
            net = ipaddress.ip_network(str(raw), strict=False)
        except ValueError:
            errors.append("%s: sparkfleet_fabric_subnet '%s' is not a CIDR network such as 192.168.200.0/24" % (host, raw))
            continue
        if net.version == 6:
            errors.append("%s: sparkfleet_fabric_subnet %s is IPv6; the deployment runs Ray, NCCL and the sync over an"
                          " IPv4 fabric only: give the CX7 ports IPv4 addresses, e.g. 192.168.200.0/24" % (host, raw))
            continue
        if net.prefixlen < 8:
            errors.append("%s: sparkfleet_fabric_subnet %s spans more than a /8; Ray's firewall allows the whole fabric"
                          " subnet, so give the fabric's own network (e.g. 192.168.200.0/24)" % (host, raw))
            continue
        if subnet is None:
            subnet, subnet_raw = net, raw
        elif net != subnet:
            errors.append("%s: sparkfleet_fabric_subnet %s differs from %s on %s; all nodes share one fabric subnet"
                          % (host, raw, subnet_raw, nodes[0]))

    seen = {}
    for host in nodes:
        raw = _get(hostvars, host, "sparkfleet_fabric_ip")
        if raw is None:
            errors.append("%s: sparkfleet_fabric_ip is not set; set it to this node's address on the fabric interface"
                          " (ip -br addr on the node shows it)" % host)
            continue
        try:
            addr = ipaddress.ip_address(str(raw))
        except ValueError:
            errors.append("%s: sparkfleet_fabric_ip '%s' is not an IP address" % (host, raw))
            continue
        if addr.version == 6:
            errors.append("%s: sparkfleet_fabric_ip %s is IPv6; the deployment runs Ray, NCCL and the sync over an IPv4"
                          " fabric only: give the CX7 port an IPv4 address in the fabric subnet" % (host, raw))
            continue
        if addr.is_unspecified or addr.is_loopback or addr.is_multicast:
            errors.append("%s: sparkfleet_fabric_ip %s is not an address of the node (unspecified, loopback or"
                          " multicast); set the node's own address on the fabric interface" % (host, raw))
            continue
        if addr.is_link_local:
            errors.append("%s: sparkfleet_fabric_ip %s is link-local (169.254.x.x); configure a static address in the"
                          " fabric subnet on the CX7 port and use that" % (host, raw))
        if subnet is not None and addr not in subnet:
            errors.append("%s: sparkfleet_fabric_ip %s is not inside sparkfleet_fabric_subnet %s; fix the address or the subnet"
                          % (host, raw, subnet_raw))
        elif subnet is not None and subnet.num_addresses > 2 and addr in (subnet.network_address, subnet.broadcast_address):
            errors.append("%s: sparkfleet_fabric_ip %s is the network or broadcast address of %s" % (host, raw, subnet_raw))
        if str(addr) in seen:
            errors.append("%s: sparkfleet_fabric_ip %s is also used by %s; every node needs its own fabric address"
                          % (host, raw, seen[str(addr)]))
        seen.setdefault(str(addr), host)

    for host in heads[:1]:
        reach = _get(hostvars, host, "ansible_host") or _get(hostvars, host, "sparkfleet_mgmt_ip")
        if not reach:
            errors.append("%s: the head has no reachable address; set ansible_host (or sparkfleet_mgmt_ip) to its"
                          " management address" % host)
    for host in nodes:
        for name in ("ansible_host", "sparkfleet_mgmt_ip"):
            raw = _get(hostvars, host, name)
            if raw is not None and not is_host_name(str(raw)):
                errors.append("%s: %s %r is not an IP address or a host name (letters, digits, '-' and '.'); ssh and"
                              " the roles would read the rest as options or commands" % (host, name, str(raw)))
            elif raw is not None and name == "sparkfleet_mgmt_ip":
                try:
                    ipaddress.ip_address(str(raw))
                except ValueError:
                    errors.append("%s: sparkfleet_mgmt_ip %r is not an IP address" % (host, str(raw)))
        # the login reaches the sudoers line and the ssh-copy-id command preflight prints for a person to paste into a
        # root shell (roles/preflight/tasks/access.yml): a quote or a newline there would run what follows it
        user = _get(hostvars, host, "ansible_user")
        if user is not None and check_user(user)[1]:
            errors.append("%s: ansible_user %r %s; set it to the login user's name, e.g. spark" % (
                host, user, check_user(user)[1]))
        iface = _get(hostvars, host, "sparkfleet_fabric_interface")
        if iface is not None and not (isinstance(iface, str) and _IFNAME_RE.match(iface)):
            errors.append("%s: sparkfleet_fabric_interface %r is not an interface name (1-15 letters, digits, '.', '_',"
                          " '-'), e.g. enp1s0f1np1" % (host, iface))
    # The management network must not be the fabric: Ray's firewall allows the whole fabric subnet, and the API key
    # and Ray's ports would then face the management LAN.
    exposure = _get(hostvars, heads[0], "sparkfleet_allow_ray_exposure") is True if heads else False
    if subnet is not None and not exposure:
        for host in nodes:
            fabric_ip = str(_get(hostvars, host, "sparkfleet_fabric_ip", ""))
            for name in ("sparkfleet_mgmt_ip", "ansible_host"):
                raw = _get(hostvars, host, name)
                try:
                    addr = ipaddress.ip_address(str(raw))
                except ValueError:
                    continue
                if name == "ansible_host" and str(addr) == fabric_ip:
                    continue  # a node reached over the fabric itself (a worker through the head)
                if addr.version == subnet.version and addr in subnet:
                    errors.append("%s: %s %s lies inside sparkfleet_fabric_subnet %s: the fabric subnet overlaps the"
                                  " management network, so Ray's firewall would let the management LAN reach Ray's"
                                  " ports (which run code); give the fabric a subnet of its own, or set"
                                  " sparkfleet_allow_ray_exposure: true to accept that" % (host, name, raw, subnet_raw))
                    break

    # tensor x pipeline parallel = GPUs is checked with the vllm_serve variables (_validate.serving_errors).
    for host in nodes:
        raw = _get(hostvars, host, "sparkfleet_gpus_per_node", 1)
        if check_int(raw, 1)[1]:
            errors.append("%s: sparkfleet_gpus_per_node '%s' must be a whole number >= 1" % (host, raw))
    return errors
