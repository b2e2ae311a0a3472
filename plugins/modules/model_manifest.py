#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_manifest
short_description: Record what a model directory holds on this node, so every engine start can tell it changed
version_added: 0.3.0
description:
  - Writes a manifest of the model directory O(path) on this node into O(manifest) (JSON, through a temporary file
    and a rename, so never half written). It holds every file's relative path, size, mtime_ns, ctime_ns and inode, the content
    hash (SHA-256) of the files whose hash M(sparkfleet.vllm.model_sync) already computed (with O(hashes=true)), and
    the head's hashes of the model (O(head_hashes)).
  - Run it on every node right after the sync. Afterwards a stat of every file against the manifest (no byte read)
    tells whether anything wrote to the model since the sync. A write moves the ctime even when the size is kept and
    the mtime is set back, and a replaced file has a new inode. vLLM's memory gate refuses an engine start on such a
    node, and C(playbooks/status.yml) names it. The scrub timer hashes every file against the head's hashes, for
    what no write made.
  - Writes only when what it would record differs from the manifest in place (the time it was written aside), so a
    second run with nothing changed reports no change. Reads no file's content.
  - The files are those model_sync sends, symlinks followed only inside O(path) (or into a Hugging Face snapshot's
    C(blobs)), without the sync's C(.sparkfleet-sync) staging directory and C(.sparkfleet-model) marker.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  path:
    description:
      - The model directory on this node. It must exist and hold at least one file.
    type: path
    required: true
  manifest:
    description:
      - Where the manifest is written (its directory is created when missing). Outside the model directory, so the
        sync never sends it and a worker's sync user cannot rewrite it.
    type: path
    default: /var/lib/sparkfleet/model-manifest.json
  node:
    description:
      - This node's name as the operator knows it (the inventory name); the sentences that name a change use it.
    type: str
    required: true
  hashes:
    description:
      - Record this node's content hash of each file from model_sync's hash cache (under the home directory of the
        user running this module, as model_sync keeps it on the source) when the cache's entry was taken from the
        file as it is now (same size, mtime, inode and ctime). Nothing is hashed here.
      - With O(head_hashes) empty, these hashes are also recorded as the head's (run it so on the head).
    type: bool
    default: false
  head_hashes:
    description:
      - The head's content hashes of the model (RV(head_hashes) of this module's run on the head), recorded for the
        scrub, which compares every file's hash on this node with them.
    type: dict
    default: {}
notes:
  - The on-node checks read the manifest with the same code, installed by the model_sync role as
    C(/usr/local/lib/sparkfleet_model.py).
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
- name: Record what the sync left on the head, with the hashes it computed
  sparkfleet.vllm.model_manifest:
    path: /models/Qwen3.5-122B-A10B-FP8
    node: "{{ inventory_hostname }}"
    hashes: true
  register: head_manifest

- name: Record what the sync left on a worker, with the head's hashes for the scrub
  sparkfleet.vllm.model_manifest:
    path: /models/Qwen3.5-122B-A10B-FP8
    node: "{{ inventory_hostname }}"
    head_hashes: "{{ hostvars['spark-1'].head_manifest.head_hashes }}"
"""

RETURN = r"""
manifest:
  description: Where the manifest is.
  returned: always
  type: str
  sample: /var/lib/sparkfleet/model-manifest.json
files:
  description: Files recorded.
  returned: always
  type: int
  sample: 47
bytes:
  description: Their total size in bytes.
  returned: always
  type: int
  sample: 119000000000
hashed:
  description: Files recorded with this node's own content hash (O(hashes=true)).
  returned: always
  type: int
  sample: 47
head_hashes:
  description: The head's hashes this manifest records (relative path to SHA-256), for the workers' runs.
  returned: always
  type: dict
  sample: {"config.json": "5f0c...", "model-00001-of-00039.safetensors": "a17e..."}
changes:
  description:
    - What moved since the manifest in place was written (by stat), one entry per file with C(file), C(change)
      (missing, extra, changed) and C(detail); empty on a first record. After a sync, what the sync replaced.
  returned: always
  type: list
  elements: dict
  sample: [{file: model-00002-of-00039.safetensors, change: changed, detail: "ctime moved (written, or its metadata set); size and mtime kept"}]
msg:
  description: One line for a person.
  returned: always
  type: str
  sample: "spark-2: recorded 47 files (119.0 GB) of /models/m in /var/lib/sparkfleet/model-manifest.json"
"""

import os
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._content_hash import cache_file
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_manifest import (
    build,
    cached_hashes,
    compare,
    load,
    model_files,
    same_record,
    write_atomic,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            manifest=dict(type="path", default="/var/lib/sparkfleet/model-manifest.json"),
            node=dict(type="str", required=True),
            hashes=dict(type="bool", default=False),
            head_hashes=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    root, path = os.path.normpath(p["path"]), os.path.normpath(p["manifest"])
    if not os.path.isabs(root) or not os.path.isabs(path):
        module.fail_json(msg="%s: path and manifest must be absolute paths, got %s and %s; nothing was written"
                             % (p["node"], p["path"], p["manifest"]))
    if not p["node"].strip():
        module.fail_json(msg="node is empty: give this node's inventory name; nothing was written")
    if path == root or path.startswith(root.rstrip("/") + "/"):
        module.fail_json(msg="%s: the manifest %s lies inside the model directory %s: the sync would send it; set it "
                             "outside (the default is /var/lib/sparkfleet/model-manifest.json)" % (p["node"], path, root))
    bad = sorted(k for k, v in p["head_hashes"].items() if not isinstance(v, str) or len(v) != 64
                 or any(c not in "0123456789abcdef" for c in v))
    if bad:
        module.fail_json(msg="%s: head_hashes must map each file to its SHA-256 in hex; not so for %s; nothing was "
                             "written" % (p["node"], ", ".join(bad[:3])))
    if not os.path.isdir(root):
        module.fail_json(msg="%s: the model directory %s does not exist; nothing was recorded" % (p["node"], root),
                         hint="Run the sync first (site.yml), then this.")
    stats = model_files(root)
    if not stats:
        module.fail_json(msg="%s: the model directory %s holds no file; nothing was recorded" % (p["node"], root),
                         hint="Run the sync first (site.yml), then this.")
    own = cached_hashes(cache_file(root, pwd.getpwuid(os.getuid()).pw_dir), root, stats) if p["hashes"] else {}
    head = p["head_hashes"] or (own if p["hashes"] else {})
    new = build(root, p["node"], own, head)
    old = load(path)
    changes = compare(old, root) if old and old.get("model_dir") == root else []
    changed = not same_record(old, new)
    if changed and not module.check_mode:
        try:
            write_atomic(path, new)
        except OSError as exc:
            module.fail_json(msg="%s: cannot write the model manifest %s: %s" % (p["node"], path, exc),
                             hint="Free space under %s or fix its permissions, then run again." % os.path.dirname(path))
    nbytes = sum(st.st_size for st in stats.values())
    module.exit_json(changed=changed, manifest=path, files=len(stats), bytes=nbytes, hashed=len(own),
                     head_hashes=head, changes=changes,
                     msg="%s: %s %d files (%.1f GB) of %s in %s" % (
                         p["node"], ("would record" if module.check_mode else "recorded") if changed else "kept",
                         len(stats), nbytes / 1e9, root, path))


if __name__ == "__main__":
    main()
