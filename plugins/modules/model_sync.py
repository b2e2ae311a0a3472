#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_sync
short_description: Push a model directory from this node to other nodes over the fabric, fast and verified
version_added: 0.1.0
description:
  - Runs on the node that holds the model (the source) and pushes O(src) to O(dest) on every host in
    O(destinations), addressed by their fabric IPs. The controller never carries model bytes.
  - Before a byte moves, O(src) and O(dest) must be model directories (see O(dest)), the source must be complete
    (C(config.json) parses; every shard the index names exists, its safetensors header parses, its data offsets cover
    the file exactly, it holds the tensors the index puts there) and every destination must have room for what
    differs. A symlink in O(src) is followed only inside it (or a Hugging Face snapshot's C(blobs)); a link out of it
    stops the run. O(destinations) and O(ssh_user) that ssh would read as an option (C(-oProxyCommand=...)), a
    C(user@) or a space are refused; every ssh command ends its options with C(--). One host written two ways
    (C(10.99.1.12) and C(10.99.1.12.), case, IPv6 forms, a name and its address) is synced once.
  - Sends only files that differ (size and modification time from one listing of each destination, read with the
    O(dest) check; an rsync dry run with O(checksum=true)), in O(streams) parallel streams packed largest-first. The
    run's control commands to a destination share one ssh connection; data never goes through it.
  - The C(tcp) transport (tried first) moves the bytes over plain TCP on the fabric. A receiver started through ssh
    for this run only listens on the fabric IP the ssh connection reached; a connection must answer a challenge with
    an HMAC of a per-run secret only the ssh channel carries; each challenge runs with a deadline, a few unanswered
    connections per source at most, so wrong secrets or silent peers never end the receiver nor delay the run, and no
    input gives a traceback. The listener closes once every stream is in; the receiver exits when the run ends or
    ssh drops, or after O(timeout) seconds without data. The sender reads each file once (C(O_DIRECT) where
    allowed), hashes it (SHA-256, with O(verify_content=true)) and sends it from the same buffer (C(sendfile(2)) when
    its hash is cached); after its bytes comes a trailer with that hash and an HMAC over name, size and hash. Each
    file lands in C(DEST/.sparkfleet-sync) (written with C(O_DIRECT) where the filesystem allows), hashed as it
    arrives, and gets its name only once size and hash check out; otherwise it is deleted. The checked hashes go into
    both ends' caches. A disk that fills is reported with the bytes still needed
    and free (no fallback into the same disk). With C(ssh) (the fallback when the receiver cannot start or no stream
    connects) the bytes go through rsync over ssh, C(--whole-file), no compression.
  - Resumable, one run at a time. A killed run never leaves a partial file under its final name; a partial file of
    the same version is continued (tcp). A run locks O(dest) on the source (under C(~/.cache/sparkfleet/)) and stops
    a transfer an earlier run left running (its controller killed), with a warning; one receiver per O(dest).
  - Each destination's copy is recorded in C(DEST/.sparkfleet-model) (key=value lines C(copy) complete|incomplete,
    C(verified) yes|no, C(fingerprint), C(updated), C(reason)), incomplete before its first byte moves and complete
    only once this run checked it.
  - Several destinations fan out as a tree (holders double each round). Over C(tcp) a finished destination runs the
    fixed sender on its copy; with O(transport=ssh) it runs rsync through a per-run ssh-agent holding only
    O(ssh_key) (forwarded for the transfer, with a lifetime); a fallback to ssh sends from the source. No key file is
    copied to a worker, and no destination follows a symlink out of O(dest).
  - In check mode, lists per destination what would be transferred or deleted and the space needed; changes nothing.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  src:
    description:
      - Model directory on this (the source) node. It must be a model directory (C(config.json), a weight index
        or C(*.safetensors) at its top); empty, relative, system and home directories are refused.
    type: path
    required: true
  dest:
    description:
      - Directory path on every destination. Created if missing.
      - Refused before anything is copied when it is empty, relative, V(/), a system or home directory (also
        after following symlinks on the destination), not a directory, or a non-empty directory that is not
        a model directory (no C(config.json), no weight index, no C(.sparkfleet-model) marker). The module
        writes that marker into every directory it fills; O(delete=true) never removes it.
    type: path
    required: true
  destinations:
    description:
      - Hosts to push to, as reachable from this node and from each other (fabric IPs or host names). Each is a host
        name or an IP address only (no C(user@), no spaces, not starting with C(-)); one host given twice, in any
        spelling, is synced once.
    type: list
    elements: str
    required: true
  ssh_user:
    description:
      - Remote user on the destinations. Defaults to the ssh client's default (the current user). Letters, digits,
        C(_), C(.) and C(-), not starting with C(-).
    type: str
  ssh_key:
    description:
      - Private key authorized on every destination for O(ssh_user). Also loaded into the per-run agent used
        by destination-to-destination hops. Without it, the ssh client's default identities are used.
    type: path
  ssh_opts:
    description:
      - Extra ssh arguments, one list element per argument (for example V(["-p", "2222"])), for every hop.
    type: list
    elements: str
    default: []
  ssh_cipher:
    description:
      - Cipher list for ssh (C(-c)). AES-GCM is fast on CPUs with AES instructions (GB10 has them).
    type: str
    default: aes128-gcm@openssh.com,chacha20-poly1305@openssh.com
  streams:
    description:
      - Parallel rsync processes per destination. One stream over ssh is CPU bound at about 0.4-0.65 GB/s.
    type: int
    default: 4
  bwlimit:
    description:
      - Bandwidth limit per destination link in KiB/s, split evenly over the streams. V(0) means none; a
        negative value is refused.
    type: int
    default: 0
  checksum:
    description:
      - Decide what differs by full-file checksum instead of size and modification time. Reads every
        file on both ends. With O(verify=true), also re-checks every file by checksum after the sync.
    type: bool
    default: false
  drop_cache:
    description:
      - When done, drop the model's files (those of O(src), nothing else under O(dest)) from the page cache on
        the source and on every destination
        (per file, C(posix_fadvise DONTNEED) after a data sync; never a global C(drop_caches)). On GB10 the
        GPU shares that memory, and weights load faster from a cold cache.
    type: bool
    default: false
  delete:
    description:
      - Delete files under O(dest) that are not in O(src).
    type: bool
    default: false
  verify:
    description:
      - After the sync, check on every destination that every source file exists with the source's size
        (so every shard the index names is there).
    type: bool
    default: true
  verify_content:
    description:
      - Compare a content hash (SHA-256) of every file between the source and each destination, and send the files
        whose content differs even when their size and modification time match (a same-size corruption with
        its mtime restored). After the sync, the files sent are hashed again on the destination.
      - Hashes are cached per file under the home directory of the user on each node
        (C(~/.cache/sparkfleet/)), keyed by size, modification time, inode and change time, so an unchanged
        file is read once; any write moves the change time, so a repaired or damaged file is read again.
      - Needs C(python3) on the destinations.
    type: bool
    default: true
  timeout:
    description:
      - Seconds for an ssh connection to be set up, and for rsync or the TCP receiver to wait on a stalled
        transfer.
    type: int
    default: 60
  transport:
    description:
      - How the bytes move. V(auto) tries V(tcp) on every destination and falls back to V(ssh) (with a warning
        naming why) when the receiver cannot start there or no stream can connect; files the TCP transfer
        could not deliver are then sent over ssh. V(tcp) fails instead of falling back. V(ssh) uses rsync over
        ssh only (every byte encrypted on the wire).
      - The feeder-to-target hops of the fan-out use the same transport.
    type: str
    choices: [auto, tcp, ssh]
    default: auto
    version_added: 0.2.0
notes:
  - Needs rsync (3.2.3 or newer, for C(--mkpath)) on the source and on every destination, and GNU coreutils
    C(dd) on the destinations for O(drop_cache).
  - The feeder-to-target hop uses C(StrictHostKeyChecking=accept-new).
seealso:
  - name: rsync manual
    description: The options this module builds on (--whole-file, --temp-dir, --files-from).
    link: https://download.samba.org/pub/rsync/rsync.1
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
- name: Push the model from the head to the workers over the fabric
  sparkfleet.vllm.model_sync:
    src: /models/Qwen3.5-122B-A10B-FP8
    dest: /models/Qwen3.5-122B-A10B-FP8
    destinations: "{{ groups['spark_workers'] | map('extract', hostvars, 'fabric_ip') | list }}"
    ssh_user: spark
    ssh_key: /home/spark/.ssh/sparkfleet_sync
    streams: 4
    drop_cache: true
  delegate_to: "{{ groups['spark_head'][0] }}"

- name: What would move (changes nothing)
  sparkfleet.vllm.model_sync:
    src: /models/m
    dest: /models/m
    destinations: [10.99.1.12]
  check_mode: true
"""

RETURN = r"""
files_total:
  description: Files in the source model directory.
  returned: always
  type: int
  sample: 47
files_transferred:
  description: Files sent, summed over destinations (in check mode, that would be sent).
  returned: always
  type: int
  sample: 47
bytes_transferred:
  description: Bytes of the files sent, summed over destinations (in check mode, that would be sent).
  returned: always
  type: int
  sample: 119000000000
seconds:
  description: Wall-clock seconds of the whole run (checks, transfer, verify, cache drop).
  returned: always
  type: float
  sample: 212.4
transfer_seconds:
  description: Wall-clock seconds of the transfer phase alone.
  returned: always
  type: float
  sample: 190.2
phase_seconds:
  description:
    - Wall-clock seconds per phase, where the run's time went. C(checks) the source model's checks, C(plan) the
      destination guard, free space and the listing that decides what differs, C(hash) the source's hashes not
      computed during the transfer (files that would be skipped, files sent over ssh), C(transfer), C(verify)
      and, with O(drop_cache=true), C(drop_cache).
  returned: always
  type: dict
  sample: {checks: 0.05, plan: 0.61, hash: 0.02, transfer: 190.2, verify: 0.4}
  version_added: 0.2.0
mb_per_s:
  description: RV(bytes_transferred) / RV(transfer_seconds) in MB/s (10^6 bytes), 0 when nothing moved.
  returned: always
  type: float
  sample: 625.8
verified:
  description:
    - Whether this run checked every destination's copy (every source file there with the source's size, and with
      O(verify_content=true) its content hash) and found it complete. False when O(verify=false), in check mode and
      when the run failed; a copy this run did not check is never reported verified.
  returned: always
  type: bool
  sample: true
  version_added: 0.2.0
cpu_seconds:
  description:
    - CPU-seconds (user + system) the run spent, per node. C(source) is this module and the processes it waited
      for (the sender, rsync, ssh); each destination's figure is its tcp receiver (and its sender when it fed another
      node), as the receiver measured itself. For the CPU cost per GB of a copy.
  returned: always
  type: dict
  sample: {source: 1.92, 10.99.1.12: 2.41}
  version_added: 0.2.0
fingerprint:
  description:
    - Digest of the source model's content (every file's path, size and content hash). It changes when any
      file of the model changes; null when O(verify_content=false).
  returned: always
  type: str
  sample: 3f9a0c1e5b7d2a4468c0e1f2a3b4c5d6
rounds:
  description:
    - Fan-out as run, each wave a list of [feeder, target] started together; C(source) is this node.
    - In check mode, the plan if every transfer took the same time.
  returned: always
  type: list
  elements: list
  sample: [[["source", "10.99.1.12"]], [["source", "10.99.1.13"], ["10.99.1.12", "10.99.1.14"]]]
destinations:
  description:
    - Per destination details. C(copy) is what the run recorded in C(DEST/.sparkfleet-model) (complete or
      incomplete; absent in check mode and when the run stopped before the transfer).
  returned: always
  type: dict
  sample:
    10.99.1.12: {status: synced, fed_from: source, files_transferred: 47, bytes_transferred: 119000000000,
                 files_deleted: 0, bytes_needed: 119000000000, bytes_available: 3500000000000, seconds: 190.2,
                 mb_per_s: 625.8, streams: 4, transport: tcp, bytes_resumed: 0, verified: true, would_transfer: [],
                 would_delete: [], content_mismatch: [], copy: complete}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync_run import run
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_transports import CHAINS


def main():
    module = AnsibleModule(
        argument_spec=dict(
            src=dict(type="path", required=True),
            dest=dict(type="path", required=True),
            destinations=dict(type="list", elements="str", required=True),
            ssh_user=dict(type="str"),
            ssh_key=dict(type="path", no_log=False),
            ssh_opts=dict(type="list", elements="str", default=[]),
            ssh_cipher=dict(type="str", default="aes128-gcm@openssh.com,chacha20-poly1305@openssh.com"),
            streams=dict(type="int", default=4),
            bwlimit=dict(type="int", default=0),
            checksum=dict(type="bool", default=False),
            drop_cache=dict(type="bool", default=False),
            delete=dict(type="bool", default=False),
            verify=dict(type="bool", default=True),
            verify_content=dict(type="bool", default=True),
            timeout=dict(type="int", default=60),
            # The choices are the registry's (module_utils/sync/_sync_transports.py), in the order documented above.
            transport=dict(type="str", default="auto", choices=list(CHAINS)),
        ),
        supports_check_mode=True,
    )
    run(module)


if __name__ == "__main__":
    main()
