#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_facts
short_description: Find this node's RoCE fabric interface, address and HCAs
version_added: 0.1.0
description:
  - Reads the RDMA devices from sysfs (C(<sysfs_root>/class/infiniband)) and the kernel's interface
    table (C(ip -j addr show)), and reports every RDMA device with its netdev, port state, rate,
    MTU, IPv4 addresses and RoCE v2 GID index.
  - Picks this node's fabric interface (the socket interface NCCL, Gloo, Ray and vLLM bind to)
    by O(interface), by O(subnet), or automatically, and lists every ACTIVE twin of the same
    physical port as HCAs. On a DGX Spark (GB10) each QSFP port shows up as two netdevs and two
    RDMA devices, for example C(rocep1s0f1) <-> C(enp1s0f1np1) and C(roceP2p1s0f1) <-> C(enP2p1s0f1np1);
    both twins belong in C(NCCL_IB_HCA) for full bandwidth.
  - Returns an environment block ready for a systemd C(EnvironmentFile) or C(docker run --env-file).
  - Interface names can differ between nodes (whichever port was cabled), so run it on every node
    and never copy one node's result to another.
  - Fails, naming the interfaces and the fix, when no port is ACTIVE, when the ACTIVE port has only
    a link-local 169.254 address, when two candidates sit in one subnet, when O(ip) is on no
    interface, or when O(interface) is not an ACTIVE RDMA netdev.
  - Warns (does not fail) when the MTU is below O(min_mtu); stock DGX Spark links run MTU 1500,
    which works at lower bandwidth. A mismatch between the two ends of a link is checked across
    nodes by the C(ray_cluster) role.
  - Lists the RDMA character devices under O(dev_dir) that a container needs for RDMA (NCCL falls
    back to TCP sockets silently without them).
  - Changes nothing.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  sysfs_root:
    description:
      - Root of the sysfs tree to read C(class/infiniband) from.
      - V(/sys) on a real node; the lab's fixture tree is V(/opt/sparklab/sysfs).
    type: path
    default: /sys
  interface:
    description:
      - Pin the socket interface by netdev name (for example V(enp1s0f1np1)).
      - It must be an RDMA netdev whose port is ACTIVE and that carries a routable IPv4 address.
      - Leave unset to detect per node; names differ between nodes cabled into different ports.
    type: str
  subnet:
    description:
      - The fabric subnet in CIDR form (for example V(192.168.200.0/24)).
      - The ACTIVE RDMA interface with an address in this subnet is chosen.
      - Without O(subnet) and O(interface), the ACTIVE interfaces with a non-link-local IPv4 are the
        candidates; twins of one port in different subnets resolve to the domain-0 twin
        (C(enp1s0f...)), several cabled ports are ambiguous and fail.
    type: str
  ip:
    description:
      - The address this node is expected to use on the fabric (for example from the inventory).
      - Fails when no ACTIVE RDMA interface carries it.
    type: str
  min_mtu:
    description:
      - Warn when the chosen interface or any of its HCA twins has a smaller MTU, naming what it
        costs (the RoCE path MTU drops from 4096 to 1024 bytes at MTU 1500).
      - Full RoCE bandwidth needs jumbo frames; the MTU must match on both ends of a link.
      - Between 68 (the smallest IPv4 MTU) and 65535.
    type: int
    default: 9000
  dev_dir:
    description:
      - Directory of the RDMA character devices (C(uverbs*), C(rdma_cm)) returned in RV(rdma_char_devices).
    type: path
    default: /dev/infiniband
notes:
  - Runs C(ip -j addr show); needs iproute2 on the node.
  - Check mode is supported and behaves exactly like a normal run.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.attributes.facts
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Detect the fabric on each node
  sparkfleet.vllm.rdma_facts:
    subnet: 192.168.200.0/24

- name: Detect the fabric in the lab (fixture sysfs) and check the inventory's address
  sparkfleet.vllm.rdma_facts:
    sysfs_root: /opt/sparklab/sysfs
    subnet: 10.99.1.0/24
    ip: "{{ sparkfleet_fabric_ip }}"

- name: Render the fabric environment for the vLLM unit
  ansible.builtin.copy:
    dest: /etc/sparkfleet/fabric.env
    content: "{{ ansible_facts.sparkfleet_fabric.env | sparkfleet.vllm.systemd_env_lines }}"
    mode: "0644"
"""

RETURN = r"""
ansible_facts:
  description: Facts set on the host.
  returned: success
  type: dict
  contains:
    sparkfleet_fabric:
      description: The same dict as the top-level keys below (interface, ip, prefix, subnet, mtu, speed_mbps, hca, gid_index, rdma_char_devices, devices,
        env).
      returned: success
      type: dict
interface:
  description: The socket interface (netdev) that carries the fabric address.
  returned: success
  type: str
  sample: enp1s0f1np1
ip:
  description: This node's fabric IPv4 address.
  returned: success
  type: str
  sample: 192.168.200.12
prefix:
  description: Prefix length of O(ip)'s subnet.
  returned: success
  type: int
  sample: 24
subnet:
  description: The fabric subnet the address is in, in CIDR form.
  returned: success
  type: str
  sample: 192.168.200.0/24
mtu:
  description: MTU of the socket interface.
  returned: success
  type: int
  sample: 9000
speed_mbps:
  description: The socket interface's link speed in Mb/s as the kernel reports it (C(/sys/class/net/IF/speed)); null
    when it reports none (no carrier).
  returned: success
  type: int
  sample: 200000
hca:
  description: RDMA devices for C(NCCL_IB_HCA), the chosen one first, then its ACTIVE twins.
  returned: success
  type: list
  elements: str
  sample: [rocep1s0f1, roceP2p1s0f1]
gid_index:
  description: Index of the RoCE v2 GID that maps O(ip) on the chosen device, null when none does.
  returned: success
  type: int
  sample: 3
rdma_char_devices:
  description:
    - The RDMA character devices under O(dev_dir) (C(uverbs*) and C(rdma_cm)), for C(docker run --device).
    - Empty when the node has none (then NCCL can only use TCP sockets).
  returned: success
  type: list
  elements: str
  sample: [/dev/infiniband/rdma_cm, /dev/infiniband/uverbs0, /dev/infiniband/uverbs1]
devices:
  description: Every RDMA device port found.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: RDMA device name.
      type: str
      sample: rocep1s0f1
    port:
      description: Port number on the device.
      type: int
      sample: 1
    netdev:
      description: The Ethernet netdev behind the port.
      type: str
      sample: enp1s0f1np1
    state:
      description: Logical port state (C(ACTIVE), C(DOWN), C(INIT), ...).
      type: str
      sample: ACTIVE
    phys_state:
      description: Physical port state (C(LinkUp), C(Disabled), C(Polling), ...).
      type: str
      sample: LinkUp
    link_layer:
      description: C(Ethernet) for RoCE, C(InfiniBand) for native IB.
      type: str
      sample: Ethernet
    rate:
      description: Port rate as the kernel reports it.
      type: str
      sample: 200 Gb/sec (4X HDR)
    rate_gbps:
      description: Port rate in Gb/s.
      type: float
      sample: 200
    mtu:
      description: Netdev MTU, null when the netdev is not in the interface table.
      type: int
      sample: 9000
    operstate:
      description: Netdev operational state from the interface table.
      type: str
      sample: UP
    ipv4:
      description: IPv4 addresses on the netdev, with prefix.
      type: list
      elements: str
      sample: [192.168.200.12/24]
    gid_index:
      description: RoCE v2 GID index of the first routable IPv4 address, null if none.
      type: int
      sample: 3
    twin_key:
      description: Name shared by both twins of one physical port (the netdev without its PCI domain).
      type: str
      sample: enp1s0f1np1
    gids:
      description: Used GID table entries (C(index), C(gid), C(type), C(ndev)).
      type: list
      elements: dict
env:
  description:
    - Environment for systemd units and containers; every value is a string.
    - C(NCCL_IB_GID_INDEX) is left out when the HCAs disagree on the index (NCCL then picks per device).
  returned: success
  type: dict
  sample:
    VLLM_HOST_IP: 192.168.200.12
    NCCL_SOCKET_IFNAME: enp1s0f1np1
    GLOO_SOCKET_IFNAME: enp1s0f1np1
    TP_SOCKET_IFNAME: enp1s0f1np1
    NCCL_IB_HCA: rocep1s0f1,roceP2p1s0f1
    NCCL_IB_GID_INDEX: "3"
    UCX_NET_DEVICES: rocep1s0f1:1,roceP2p1s0f1:1
    OMPI_MCA_btl_tcp_if_include: enp1s0f1np1
hint:
  description: On failure, what to do about it.
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric._rdma import fabric_options, fabric_params, gather_fabric


def main():
    module = AnsibleModule(argument_spec=fabric_options(), supports_check_mode=True)
    fabric = gather_fabric(module, Runner(module), **fabric_params(module.params))
    result = dict(fabric)
    result.update(changed=False, ansible_facts=dict(sparkfleet_fabric=fabric))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
