#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_firewall
short_description: Find the node's own firewall, and let the fabric subnet through it when asked
version_added: 0.3.0
description:
  - Ray and NCCL open connections between the nodes on many ports (Ray's pinned ports, its worker range, and ports
    the kernel picks), so the fabric subnet must reach every port of every node. A host firewall that drops
    incoming traffic - ufw (active with C(default deny incoming), as operators often enable it on DGX OS),
    firewalld, or an nftables or iptables input policy that drops - also drops that traffic, whatever an accept
    in another table says (each is its own netfilter base chain; a packet dropped by any is dropped).
  - With O(state=check) (the default) it reports which firewall is active, whether it lets O(allow) in on every
    port, and the exact commands that would (RV(fix)). It changes nothing.
  - With O(state=present) it adds the narrow allow through the host's own tool where it would drop the fabric -
    the subnet only (and only on O(interface), when given) - C(ufw allow in on IF from SUBNET comment 'sparkfleet
    fabric'), or firewalld's C(trusted) zone for the subnet (runtime and permanent). It records what it added in
    O(state_file). A plain nftables or iptables policy is not changed (no tool of the host owns it); the module
    fails naming the commands.
  - With O(state=absent) it removes what O(state=present) added (and any ufw rule with its comment).
  - With O(ports) (and the node's ephemeral range with O(ephemeral)), it also names every TCP listener in those ports
    that is not ours and not on a loopback address (RV(listeners)) - the services our own Ray table would close to
    every non-fabric source. Listeners of what the run stops before the table applies (O(stale)) are listed apart
    (RV(stale_listeners)).
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  allow:
    description:
      - The fabric subnet (CIDR) that must reach every port of the node.
    type: str
    required: true
  interface:
    description:
      - The node's fabric interface. The ufw allow is limited to it; firewalld places traffic by it.
    type: str
  state:
    description:
      - V(check) reports, V(present) adds the narrow allow where needed, V(absent) removes it.
    type: str
    choices: [check, present, absent]
    default: check
  ports:
    description:
      - Ports and C(LOW-HIGH) ranges our own table closes to non-fabric sources; listeners there are named.
    type: list
    elements: str
    default: []
  ephemeral:
    description:
      - Add the node's ephemeral port range (C(net.ipv4.ip_local_port_range), read here) to O(ports), as our table
        closes it too unless a fixed range is set. The ranges checked are in RV(ports).
    type: bool
    default: false
  ours:
    description:
      - Container or systemd unit names whose listeners are ours (not named).
    type: list
    elements: str
    default: []
  stale:
    description:
      - Container or systemd unit names the run stops before our table applies (an older deployment the GPU cleanup
        stops). Their listeners are in RV(stale_listeners), not in RV(listeners).
    type: list
    elements: str
    default: []
  state_file:
    description:
      - Where O(state=present) records what it added (read by O(state=absent)).
    type: path
    default: /etc/sparkfleet/host-firewall.json
notes:
  - Reads C(ufw status verbose), C(firewall-cmd --state) and C(--list-all-zones), C(nft -j list ruleset) and
    C(iptables -S INPUT) where those tools exist. Run as root.
  - Check mode is supported; V(present) and V(absent) report what they would change.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Does the node's firewall let the fabric in?
  sparkfleet.vllm.host_firewall:
    allow: 192.168.200.0/24
    interface: enp1s0f1np1
    ports: ["6379-6385", "10001-19999"]
    ephemeral: true
    ours: [sparkfleet-ray, sparkfleet-vllm]
    stale: [vllm-cluster.service, vllm_node]
  register: fw

- name: Let the fabric subnet through ufw or firewalld
  sparkfleet.vllm.host_firewall:
    allow: 192.168.200.0/24
    interface: enp1s0f1np1
    state: present
"""

RETURN = r"""
firewall:
  description: The firewall that decides - C(ufw), C(firewalld), C(nftables), C(iptables) or C(none).
  returned: always
  type: str
admits_fabric:
  description: Whether the fabric subnet reaches every port (after the change, with O(state=present)).
  returned: always
  type: bool
why:
  description: What was found, in words.
  returned: always
  type: str
  sample: ufw is active with default deny (incoming) and no rule lets 192.168.200.0/24 in on every port
fix:
  description: The exact commands that let the fabric in through that firewall (empty when it already does).
  returned: always
  type: list
  elements: str
  sample: ["sudo ufw allow in on enp1s0f1np1 from 192.168.200.0/24 comment 'sparkfleet fabric'"]
manageable:
  description: Whether O(state=present) can add the allow itself (ufw and firewalld).
  returned: always
  type: bool
listeners:
  description: Listeners in O(ports) that are not ours and not on loopback, one line each.
  returned: always
  type: list
  elements: str
  sample: ["port 12345 (0.0.0.0): pid 812 python3 of unit sparklab-foreign.service [python3 -m http.server 12345]"]
stale_listeners:
  description: Listeners in those ports held by a container or unit in O(stale), one line each.
  returned: always
  type: list
  elements: str
  sample: ["port 6379 (::): pid 593 gcs_server in container vllm_node [/opt/venv/lib/python3.11/site-packages/ray/..."]
ports:
  description: The ports and ranges whose listeners were checked (O(ports) and, with O(ephemeral), the node's range).
  returned: always
  type: list
  elements: str
  sample: ["6379", "10002-19999", "32768-60999"]
"""

import ipaddress
import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json
from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils.host._firewall import (
    UFW_COMMENT, expand_ports, firewalld_admits, firewalld_zone_for, fix_commands, iptables_input_drops,
    nft_input_drops, outside_listeners, parse_firewalld_zones, parse_ufw_status, ufw_admits, ufw_allow_argv,
    ufw_our_rules)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu._gpu import parse_docker_inspect
from ansible_collections.sparkfleet.vllm.plugins.module_utils.host._ports import describe, ephemeral_range, is_ours, listeners

OUR_TABLE = "sparkfleet"
# Our state file records a few rules; more than this is not ours.
STATE_MAX_BYTES = 1024 * 1024


class Firewall(object):
    def __init__(self, module, runner):
        self.module = module
        self.runner = runner
        self.p = module.params
        self.ufw = runner.bin("ufw", required=False)
        self.fwcmd = runner.bin("firewall-cmd", required=False)
        self.nft = runner.bin("nft", required=False)
        self.iptables = runner.bin("iptables", required=False)

    def read(self):
        """(tool, admits, why, extra) of the firewall that decides for the fabric."""
        subnet, iface = self.p["allow"], self.p["interface"]
        if self.ufw:
            res = self.runner.run([self.ufw, "status", "verbose"])
            status = parse_ufw_status(res.stdout)
            if res.ok and status["active"]:
                admits, why = ufw_admits(status, subnet, iface)
                return "ufw", admits, why, status
        if self.fwcmd:
            state = self.runner.run([self.fwcmd, "--state"])
            if state.ok and state.stdout.strip() == "running":
                res = self.runner.run([self.fwcmd, "--list-all-zones"])
                if not res.ok:
                    self.runner.fail(res, "cannot read firewalld's zones")
                zones = parse_firewalld_zones(res.stdout)
                admits, why = firewalld_admits(zones, subnet, iface)
                return "firewalld", admits, why, zones
        if self.nft:
            res = self.runner.run([self.nft, "-j", "list", "ruleset"])
            drops = nft_input_drops(res.stdout, subnet, iface, ignore_tables=(OUR_TABLE,)) if res.ok else []
            for chain, admits, why in drops:
                if not admits:
                    return "nftables", False, why, chain
            if drops:
                return "nftables", True, "; ".join(d[2] for d in drops), None
        if self.iptables:
            res = self.runner.run([self.iptables, "-S", "INPUT"])
            if res.ok:
                drops, admits, why = iptables_input_drops(res.stdout, subnet, iface)
                if drops:
                    return "iptables", admits, why, None
        return "none", True, "no host firewall drops incoming traffic", None

    def checked_ports(self):
        ports = list(self.p["ports"])
        if self.p["ephemeral"]:
            found = ephemeral_range()
            if found is None:
                self.module.warn("cannot read this node's ephemeral port range (/proc/sys/net/ipv4/"
                                 "ip_local_port_range): its listeners were not checked")
            elif found not in ports:
                ports.append(found)
        return ports

    def listeners(self, ports):
        """(listeners, stale_listeners) in ports: not ours, not on loopback; those of O(stale) apart."""
        ports = expand_ports(ports)
        if not ports:
            return [], []
        found = outside_listeners(listeners(ports))
        ids = sorted(set(h["container_id"] for h in found if h["container_id"]))
        names = {}
        docker = self.runner.bin("docker", required=False)
        if ids and docker:
            res = self.runner.run([docker, "inspect"] + ids)
            names = dict((c["id"], c["name"]) for c in parse_docker_inspect(res.stdout or "[]") if c["id"])
        out, old = [], []
        for holder in found:
            holder["container_name"] = names.get(holder["container_id"]) if holder["container_id"] else None
            if is_ours(holder, self.p["ours"]):
                continue
            (old if is_ours(holder, self.p["stale"]) else out).append(describe(holder))
        return out, old

    # ------------------------------------------------------------------ changes
    def add(self, tool, extra):
        subnet, iface = self.p["allow"], self.p["interface"]
        if tool == "ufw":
            argv = [self.ufw] + ufw_allow_argv(subnet, iface)
            record = {"tool": "ufw", "rule": ufw_allow_argv(subnet, iface)[1:]}
        else:
            zone = "trusted"
            current = firewalld_zone_for(extra, subnet, iface)
            if current and current != zone and subnet in extra[current]["sources"]:
                self.module.fail_json(msg="firewalld binds %s to zone %s already; move it to zone trusted yourself "
                                          "(firewall-cmd --zone=%s --change-source=%s)" % (subnet, current, zone, subnet))
            argv = None
            record = {"tool": "firewalld", "zone": zone, "source": subnet}
        if self.module.check_mode:
            return record
        if tool == "ufw":
            res = self.runner.run(argv)
            if not res.ok:
                self.runner.fail(res, "ufw refused the fabric allow")
        else:
            for extra_args in ([], ["--permanent"]):
                res = self.runner.run([self.fwcmd] + extra_args + ["--zone=trusted", "--add-source=%s" % subnet])
                if not res.ok:
                    self.runner.fail(res, "firewalld refused the fabric source in zone trusted")
        self._record(record)
        return record

    def remove(self):
        removed = []
        record = self._recorded()
        if self.ufw:
            res = self.runner.run([self.ufw, "status", "numbered"])
            for num in ufw_our_rules(parse_ufw_status(res.stdout)) if res.ok else []:
                removed.append("ufw rule %d (%s)" % (num, UFW_COMMENT))
                if not self.module.check_mode:
                    done = self.runner.run([self.ufw, "--force", "delete", str(num)])
                    if not done.ok:
                        self.runner.fail(done, "cannot delete ufw rule %d" % num)
        if record and record.get("tool") == "firewalld" and self.fwcmd:
            zone, source = record["zone"], record["source"]
            perm = self.runner.run([self.fwcmd, "--permanent", "--zone=%s" % zone, "--query-source=%s" % source])
            live = self.runner.run([self.fwcmd, "--zone=%s" % zone, "--query-source=%s" % source])
            if perm.ok or live.ok:
                removed.append("firewalld source %s in zone %s" % (source, zone))
                if not self.module.check_mode:
                    for args, present in (([], live.ok), (["--permanent"], perm.ok)):
                        if present:
                            self.runner.run([self.fwcmd] + args + ["--zone=%s" % zone, "--remove-source=%s" % source])
        if record is not None and not self.module.check_mode:
            os.unlink(self.p["state_file"])
        return removed

    def _record(self, record):
        path = self.p["state_file"]
        directory = os.path.dirname(path)
        if directory and not os.path.isdir(directory):
            os.makedirs(directory, 0o750)
        with open(path, "w") as handle:
            json.dump(record, handle, sort_keys=True)

    def _recorded(self):
        try:
            return _json.load_file(self.p["state_file"], limit=STATE_MAX_BYTES)
        except (OSError, IOError, ValueError):
            return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            allow=dict(type="str", required=True),
            interface=dict(type="str"),
            state=dict(type="str", choices=["check", "present", "absent"], default="check"),
            ports=dict(type="list", elements="str", default=[]),
            ephemeral=dict(type="bool", default=False),
            ours=dict(type="list", elements="str", default=[]),
            stale=dict(type="list", elements="str", default=[]),
            state_file=dict(type="path", default="/etc/sparkfleet/host-firewall.json"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        net = ipaddress.ip_network(p["allow"].strip(), strict=False)
    except ValueError:
        module.fail_json(msg="allow must be the fabric subnet as a CIDR (e.g. 192.168.200.0/24), got %r" % p["allow"])
    if net.prefixlen == 0:
        module.fail_json(msg="allow %s would open every port to every address; give the fabric subnet" % net)
    p["allow"] = str(net)
    try:
        expand_ports(p["ports"])
    except ValueError:
        module.fail_json(msg="ports must be port numbers or LOW-HIGH ranges, got %r" % (p["ports"],))
    runner = Runner(module)
    fw = Firewall(module, runner)
    ports = fw.checked_ports()
    found, stale = fw.listeners(ports)
    seen = dict(listeners=found, stale_listeners=stale, ports=ports)

    if p["state"] == "absent":
        removed = fw.remove()
        tool, admits, why, _extra = fw.read()
        module.exit_json(changed=bool(removed), removed=removed, firewall=tool, admits_fabric=admits, why=why,
                         fix=[] if admits else fix_commands(tool, p["allow"], p["interface"]),
                         manageable=tool in ("ufw", "firewalld"), **seen)

    tool, admits, why, extra = fw.read()
    chain = extra if tool == "nftables" and isinstance(extra, str) else None
    result = dict(changed=False, firewall=tool, admits_fabric=admits, why=why,
                  fix=[] if admits else fix_commands(tool, p["allow"], p["interface"], chain),
                  manageable=tool in ("ufw", "firewalld"), added=None, **seen)
    if p["state"] == "present" and not admits:
        if tool not in ("ufw", "firewalld"):
            module.fail_json(msg="%s; sparkfleet adds the fabric allow through ufw or firewalld only. Run on this "
                                 "node: %s" % (why, " ".join(result["fix"])), **result)
        result["added"] = fw.add(tool, extra)
        result["changed"] = True
        if not module.check_mode:
            tool, admits, why, _extra = fw.read()
            result.update(admits_fabric=admits, why=why, fix=[] if admits else result["fix"])
            if not admits:
                module.fail_json(msg="the fabric allow was added but %s" % why, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
