#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: disk_bench
short_description: Measure the cold sequential read of a model directory
version_added: 0.3.0
description:
  - "Reads the files of O(path) (largest first: the weights) sequentially with O(threads) readers in O(block)-byte
    reads, until every file is read, O(max_bytes) are read or O(seconds) have passed, and reports GB/s (10^9 bytes/s)."
  - "Cold: before reading, each file's pages are dropped from the page cache (C(posix_fadvise DONTNEED) on that file
    only; never the machine's whole cache), and the pages read are dropped again as the reading goes, so the run
    neither measures the cache nor leaves the model in memory (on unified-memory GB10 the page cache takes from the GPU's
    pool). Pages a running process maps or holds dirty stay; C(cold) then overstates nothing but the cache hits count."
  - Reads only; changes no file.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  path:
    description: The model directory.
    type: path
    required: true
  max_bytes:
    description: Stop after reading this many bytes.
    type: int
    default: 34359738368
  seconds:
    description: Stop after this many seconds.
    type: float
    default: 60
  threads:
    description: Files read at once (a deeper queue, as a loader reading several shards).
    type: int
    default: 4
  block:
    description: Bytes per read.
    type: int
    default: 8388608
  drop_cache:
    description: Drop the files' pages before and while reading (a cold read). False measures what the cache holds.
    type: bool
    default: true
notes:
  - Check mode is supported and behaves exactly like a normal run (a measurement changes nothing).
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
- name: Cold read of the model
  sparkfleet.vllm.disk_bench:
    path: /models/Qwen3.5-122B-A10B-FP8
    seconds: 60
"""

RETURN = r"""
gbps:
  description: Read rate in GB/s (10^9 bytes per second).
  returned: always
  type: float
  sample: 4.8
bytes_read:
  description: Bytes read.
  returned: always
  type: int
seconds:
  description: Wall time of the reading.
  returned: always
  type: float
files_read:
  description: Files read (whole or in part).
  returned: always
  type: int
files_total:
  description: Regular files under O(path).
  returned: always
  type: int
bytes_total:
  description: Their total size.
  returned: always
  type: int
stopped_by:
  description: C(end) (all read), C(max_bytes) or C(seconds).
  returned: always
  type: str
cold:
  description: Whether the pages were dropped before reading (O(drop_cache)).
  returned: always
  type: bool
"""

import os
import threading
import time

from ansible.module_utils.basic import AnsibleModule

REFUSED = ("/", "/usr", "/etc", "/var", "/home", "/root", "/boot", "/proc", "/sys", "/dev")


def model_files(path):
    """(path, size) of the regular files under path, largest first (symlinks to files followed, directories not)."""
    out = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            try:
                st = os.stat(full)
            except OSError:
                continue
            if os.path.isfile(full) and st.st_size > 0:
                out.append((full, st.st_size))
    out.sort(key=lambda f: (-f[1], f[0]))
    return out


def _drop(fd, offset=0, length=0):
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def read_files(files, max_bytes, seconds, threads, block, drop_cache, clock=time.monotonic):
    """Read files with `threads` readers; returns (bytes, seconds, files_read, stopped_by, errors)."""
    lock = threading.Lock()
    state = {"bytes": 0, "next": 0, "files": 0, "stopped": "end", "errors": []}
    if drop_cache:
        for path, _size in files:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError as e:
                state["errors"].append("%s: %s" % (path, e.strerror))
                continue
            try:
                _drop(fd)
            finally:
                os.close(fd)
    start = clock()
    deadline = start + seconds

    def worker():
        buf = bytearray(block)
        view = memoryview(buf)
        while True:
            with lock:
                if state["stopped"] != "end" or state["next"] >= len(files):
                    return
                path = files[state["next"]][0]
                state["next"] += 1
                state["files"] += 1
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError as e:
                with lock:
                    state["errors"].append("%s: %s" % (path, e.strerror))
                continue
            try:
                offset = 0
                while True:
                    n = os.readv(fd, [view])
                    if not n:
                        break
                    if drop_cache:
                        _drop(fd, offset, n)
                    offset += n
                    with lock:
                        state["bytes"] += n
                        if state["bytes"] >= max_bytes and state["stopped"] == "end":
                            state["stopped"] = "max_bytes"
                        elif clock() >= deadline and state["stopped"] == "end":
                            state["stopped"] = "seconds"
                        if state["stopped"] != "end":
                            return
            except OSError as e:
                with lock:
                    state["errors"].append("%s: %s" % (path, e.strerror))
            finally:
                os.close(fd)

    workers = [threading.Thread(target=worker) for _i in range(max(1, min(threads, len(files) or 1)))]
    for w in workers:
        w.daemon = True
        w.start()
    for w in workers:
        w.join()
    return state["bytes"], clock() - start, state["files"], state["stopped"], state["errors"]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            max_bytes=dict(type="int", default=32 << 30),
            seconds=dict(type="float", default=60),
            threads=dict(type="int", default=4),
            block=dict(type="int", default=8 << 20),
            drop_cache=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = os.path.realpath(p["path"])
    if path in REFUSED:
        module.fail_json(msg="path %s is a system directory, not a model directory" % p["path"],
                         hint="pass the model directory (sparkfleet_model_dir)")
    if not os.path.isdir(path):
        module.fail_json(msg="path %s is not a directory on this node" % p["path"],
                         hint="pass the model directory (sparkfleet_model_dir); site.yml puts the model there")
    for name, low in (("max_bytes", 1), ("seconds", 0.1), ("threads", 1), ("block", 4096)):
        if p[name] < low:
            module.fail_json(msg="%s=%s is below %s" % (name, p[name], low))
    if p["threads"] > 64:
        module.fail_json(msg="threads=%d is above 64" % p["threads"])
    files = model_files(path)
    if not files:
        module.fail_json(msg="path %s holds no file to read" % p["path"])
    got, seconds, nfiles, stopped, errors = read_files(files, p["max_bytes"], p["seconds"], p["threads"], p["block"],
                                                       p["drop_cache"])
    if errors and not got:
        module.fail_json(msg="reading %s failed: %s" % (p["path"], "; ".join(errors[:3])))
    module.exit_json(changed=False, gbps=round(got / seconds / 1e9, 3) if seconds > 0 else None, bytes_read=got,
                     seconds=round(seconds, 3), files_read=nfiles, files_total=len(files),
                     bytes_total=sum(f[1] for f in files), stopped_by=stopped, cold=p["drop_cache"],
                     threads=p["threads"], errors=errors[:5])


if __name__ == "__main__":
    main()
