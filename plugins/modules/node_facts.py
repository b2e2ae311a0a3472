#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_facts
short_description: Answer in one run what a deployment asks a node before it changes anything
version_added: 0.3.0
description:
  - Reads, in one module run on the node, what preflight and the roles would otherwise ask it one task at a time
    (each task one ssh round trip with become and a Python start, even on a re-run that changes nothing) - the
    fabric, whether nft works, the small files the roles read, the image IDs, the systemd version - and returns the
    answers (register them), with the fabric also as the C(sparkfleet_fabric) fact when O(fabric) is asked. The
    roles use these answers instead of asking again, and ask again themselves when run without them.
  - Only reads. A question it cannot answer is answered as such (an absent file, an image the node lacks, nft's
    error); the role decides what that means, with the same messages as before. The fabric is the exception, as a node
    whose fabric cannot be chosen fails here, with the same message and hint as M(sparkfleet.vllm.rdma_facts).
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  fabric:
    description:
      - Read the fabric as M(sparkfleet.vllm.rdma_facts) does, with its options; omit to leave it out.
    type: dict
    suboptions:
      sysfs_root:
        description: Root of the sysfs tree to read C(class/infiniband) from.
        type: path
        default: /sys
      interface:
        description: Pin the socket interface by netdev name.
        type: str
      subnet:
        description: The fabric subnet in CIDR form.
        type: str
      ip:
        description: The address this node is expected to use on the fabric.
        type: str
      min_mtu:
        description: Warn when the fabric interface's MTU is below this.
        type: int
        default: 9000
      dev_dir:
        description: Where the RDMA character devices live.
        type: path
        default: /dev/infiniband
  nft:
    description:
      - Path or name of C(nft); runs C(nft list tables) and reports whether it works (RV(nft)).
    type: str
  nft_tables:
    description:
      - nftables tables to list (C(nft list table FAMILY NAME)), each reported with its rc and text; needs O(nft).
    type: list
    elements: dict
    default: []
    suboptions:
      family:
        description: The table's family.
        type: str
        default: inet
      name:
        description: The table's name.
        type: str
        required: true
  files:
    description:
      - Absolute paths to look at. Each is reported with whether it exists, its type, mode, owner and group, and, for a
        regular file of at most O(max_bytes) that is UTF-8 text, its content. Never ask for a secret here (the answer
        is a fact, shown with C(-v)).
    type: list
    elements: path
    default: []
  max_bytes:
    description:
      - The largest file whose content is returned.
    type: int
    default: 65536
  images:
    description:
      - Container images (tags or IDs) whose ID on this node is reported (empty when the node lacks one, or has no
        docker).
    type: list
    elements: str
    default: []
  systemd_version:
    description:
      - Report the systemd version (C(systemctl --version)).
    type: bool
    default: false
  docker_live_restore:
    description:
      - Report whether this node's docker daemon keeps containers running while it restarts (C(live-restore) in
        C(/etc/docker/daemon.json), as C(docker info) reports it).
    type: bool
    default: false
  units:
    description:
      - systemd units whose state is reported (C(systemctl show)) - whether systemd knows them, runs them, starts them at
        boot, and whether their file changed on disk since systemd last read it (it then needs a C(daemon-reload)).
    type: list
    elements: str
    default: []
  mounts:
    description:
      - Host directories bound at the same path into a container, each reported as M(sparkfleet.vllm.container_mount)
        reports it (whether the running container still sees the host's directory, or holds one deleted since).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The host directory (an absolute path).
        type: path
        required: true
      container:
        description: Name or ID of the container.
        type: str
        required: true
notes:
  - Safe in check mode, as it changes nothing; it reads in check mode as well.
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
- name: Read once what the run asks every node
  sparkfleet.vllm.node_facts:
    fabric:
      sysfs_root: /sys
      subnet: 192.168.200.0/24
      ip: "{{ sparkfleet_fabric_ip }}"
    nft: nft
    files: [/proc/sys/net/ipv4/ip_local_port_range, /root/.ssh/sparkfleet-sync.pub]
    images: ["{{ sparkfleet_image }}"]
    systemd_version: true
  register: node

- name: Use an answer
  ansible.builtin.debug:
    msg: "{{ node.files['/proc/sys/net/ipv4/ip_local_port_range'].content }}"
"""

RETURN = r"""
files:
  description: Per path asked, C(exists), C(type) (V(file), V(directory), V(other)), C(mode) (octal string), C(owner),
    C(group), C(size) and C(content) (None when not returned).
  returned: always
  type: dict
  sample: {"/proc/sys/net/ipv4/ip_local_port_range": {"exists": true, "type": "file", "mode": "0644", "owner": "root",
           "group": "root", "size": 0, "content": "32768\t60999\n"}}
images:
  description: Per image asked, its ID here (empty when absent).
  returned: always
  type: dict
  sample: {"vllm/vllm-openai:v0.17.1": "sha256:4f2a"}
nft:
  description: C(nft list tables) as run (C(usable), C(rc), C(stdout), C(stderr), C(msg)).
  returned: when O(nft) is set
  type: dict
nft_tables:
  description: Per table asked (C(FAMILY NAME)), C(rc) and C(stdout) of C(nft list table).
  returned: when O(nft) is set
  type: dict
systemd_version:
  description: The systemd version (None when it could not be read).
  returned: when O(systemd_version=true)
  type: int
  sample: 252
docker_live_restore:
  description: Whether the docker daemon has live-restore on (None when docker is missing or did not answer).
  returned: when O(docker_live_restore=true)
  type: bool
  sample: false
units:
  description:
    - Per unit asked, C(load_state), C(active_state), C(sub_state), C(unit_file_state), C(need_daemon_reload) (a bool) and
      C(result) (C(success), C(exit-code), C(start-limit-hit), ...), as C(systemctl show) reports them (an unknown unit
      has C(load_state=not-found)).
    - C(InactiveExitTimestamp) and C(InactiveEnterTimestamp), when the unit last started and last stopped (C("") when
      never), under the names M(ansible.builtin.systemd_service) returns them, so one read serves a later wait.
  returned: always
  type: dict
  sample: {"sparkfleet-ray.service": {"load_state": "loaded", "active_state": "active", "sub_state": "running",
           "unit_file_state": "enabled", "need_daemon_reload": false, "result": "success",
           "InactiveExitTimestamp": "Sat 2026-12-05 03:45:57 UTC", "InactiveEnterTimestamp": ""}}
mounts:
  description: Per mount asked (C(CONTAINER:PATH)), what M(sparkfleet.vllm.container_mount) returns (C(state), C(stale),
    C(msg), the inodes).
  returned: always
  type: dict
  sample: {"sparkfleet-ray:/models/tiny": {"state": "same", "stale": false, "msg": "sparkfleet-ray sees this node's
           /models/tiny", "host_inode": 1311, "container_inode": 1311, "container_links": 2}}
ansible_facts:
  description: The fabric, when O(fabric) was asked.
  returned: when O(fabric) is set
  type: complex
  contains:
    sparkfleet_fabric:
      description: The fabric as M(sparkfleet.vllm.rdma_facts) returns it.
      type: dict
"""

import grp
import os
import pwd
import re
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils.image._mounts import read_bind
from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric._rdma import fabric_options, fabric_params, gather_fabric

_SYSTEMD_RE = re.compile(r"^systemd (\d+)", re.M)


def _name(lookup, ident):
    try:
        return lookup(ident)[0]
    except KeyError:
        return str(ident)


def look(path, max_bytes):
    """What a path is: exists, type, mode, owner, group, size, and the text of a small regular file."""
    try:
        st = os.stat(path)
    except OSError:
        return {"exists": False, "type": None, "mode": None, "owner": None, "group": None, "size": None,
                "content": None}
    kind = "directory" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
    content = None
    if kind == "file" and st.st_size <= max_bytes:
        try:
            with open(path, "rb") as handle:
                data = handle.read(max_bytes + 1)
            # /proc files report size 0 and may be read whole; a file that grew past the limit is left out
            content = data.decode("utf-8") if len(data) <= max_bytes else None
        except (OSError, UnicodeDecodeError):
            content = None
    return {"exists": True, "type": kind, "mode": "%04o" % stat.S_IMODE(st.st_mode),
            "owner": _name(pwd.getpwuid, st.st_uid), "group": _name(grp.getgrgid, st.st_gid), "size": st.st_size,
            "content": content}


def image_ids(runner, refs):
    docker = runner.bin("docker", required=False) if refs else None
    found = {}
    for ref in refs:
        if not docker:
            found[ref] = ""
            continue
        res = runner.run([docker, "image", "inspect", "--format", "{{.Id}}", ref])
        found[ref] = res.stdout.strip() if res.ok else ""
    return found


def systemd_version(runner):
    res = runner.run([runner.bin("systemctl"), "--version"])
    m = _SYSTEMD_RE.search(res.stdout or "") if res.ok else None
    return int(m.group(1)) if m else None


def docker_live_restore(runner):
    docker = runner.bin("docker", required=False)
    if not docker:
        return None
    res = runner.run([docker, "info", "--format", "{{json .LiveRestoreEnabled}}"])
    answer = (res.stdout or "").strip() if res.ok else ""
    return {"true": True, "false": False}.get(answer)


UNIT_PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "UnitFileState", "NeedDaemonReload", "Result",
                   "InactiveExitTimestamp", "InactiveEnterTimestamp")


def parse_systemctl_show(text):
    """`systemctl show -p Id,... UNIT...` (a block per unit, blank-line separated) -> {Id: {property: value}}."""
    units = {}
    for block in (text or "").strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if props.get("Id"):
            units[props["Id"]] = props
    return units


def unit_states(module, runner, names):
    if not names:
        return {}
    res = runner.run([runner.bin("systemctl"), "show", "--property=" + ",".join(UNIT_PROPERTIES)] + list(names))
    if not res.ok:
        runner.fail(res, "`systemctl show` failed")
    shown = parse_systemctl_show(res.stdout)
    out = {}
    for name in names:
        key = name if "." in name else name + ".service"
        props = shown.get(key, {})
        out[name] = {"load_state": props.get("LoadState") or "not-found", "active_state": props.get("ActiveState"),
                     "sub_state": props.get("SubState"), "unit_file_state": props.get("UnitFileState") or None,
                     "need_daemon_reload": props.get("NeedDaemonReload") == "yes",
                     # systemd_service's names: a unit's last start and stop as vllm_wait's `since` reads them
                     "result": props.get("Result") or None,
                     "InactiveExitTimestamp": props.get("InactiveExitTimestamp") or "",
                     "InactiveEnterTimestamp": props.get("InactiveEnterTimestamp") or ""}
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            fabric=dict(type="dict", options=fabric_options()),
            nft=dict(type="str"),
            nft_tables=dict(type="list", elements="dict", default=[], options=dict(
                family=dict(type="str", default="inet"),
                name=dict(type="str", required=True),
            )),
            files=dict(type="list", elements="path", default=[]),
            max_bytes=dict(type="int", default=65536),
            images=dict(type="list", elements="str", default=[]),
            systemd_version=dict(type="bool", default=False),
            docker_live_restore=dict(type="bool", default=False),
            units=dict(type="list", elements="str", default=[]),
            mounts=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                container=dict(type="str", required=True),
            )),
        ),
        supports_check_mode=True,
    )
    p = module.params
    relative = [f for f in p["files"] if not os.path.isabs(f)]
    if relative:
        module.fail_json(msg="files must be absolute paths, got %s" % ", ".join(relative))
    if p["nft_tables"] and not p["nft"]:
        module.fail_json(msg="nft_tables needs nft (the path or name of the nft command)")
    blank = [m["path"] for m in p["mounts"] if not m["container"].strip()]
    if blank:
        module.fail_json(msg="mounts: container must name a container, got an empty string for %s" % ", ".join(blank))
    if p["max_bytes"] < 0:
        module.fail_json(msg="max_bytes must be 0 or more, got %d" % p["max_bytes"])
    runner = Runner(module)
    node = {"files": dict((f, look(f, p["max_bytes"])) for f in p["files"]),
            "images": image_ids(runner, p["images"])}
    facts = {}
    if p["nft"]:
        nft = runner.bin(p["nft"], required=False) if "/" not in p["nft"] else p["nft"]
        if not nft or not os.path.exists(nft):
            node["nft"] = {"usable": False, "rc": None, "stdout": "", "stderr": "",
                           "msg": "%s: not found on this node" % p["nft"]}
        else:
            res = runner.run([nft, "list", "tables"])
            node["nft"] = {"usable": res.ok, "rc": res.rc, "stdout": res.stdout, "stderr": res.stderr, "msg": ""}
        node["nft_tables"] = {}
        for table in p["nft_tables"]:
            key = "%s %s" % (table["family"], table["name"])
            if node["nft"]["usable"]:
                res = runner.run([nft, "list", "table", table["family"], table["name"]])
                node["nft_tables"][key] = {"rc": res.rc, "stdout": res.stdout}
            else:
                node["nft_tables"][key] = {"rc": None, "stdout": ""}
    if p["systemd_version"]:
        node["systemd_version"] = systemd_version(runner)
    if p["docker_live_restore"]:
        node["docker_live_restore"] = docker_live_restore(runner)
    node["units"] = unit_states(module, runner, p["units"])
    node["mounts"] = dict(("%s:%s" % (m["container"], m["path"]), read_bind(runner, m["path"], m["container"]))
                          for m in p["mounts"])
    if p["fabric"] is not None:
        f = p["fabric"]
        facts["sparkfleet_fabric"] = gather_fabric(module, runner, **fabric_params(f))
    module.exit_json(changed=False, ansible_facts=facts, **node)


if __name__ == "__main__":
    main()
