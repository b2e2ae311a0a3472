#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: download_progress
short_description: Follow a model download that runs in the background (bytes so far of the total, rate, time left)
version_added: 0.3.0
description:
  - Measures the bytes of a model download that runs in the background (C(hf download ... --local-dir PATH) run with
    C(async)), that is the model's weight files under O(path), finished or still being written (C(hf) writes them under
    C(PATH/.cache/huggingface/download) as C(*.incomplete) until each is complete), against the total the model's
    index names (C(model.safetensors.index.json)'s C(metadata.total_size)) once it has come.
  - Returns one line for a person in RV(summary) and whether the background job has ended; once it has, the job's
    own result (RV(rc), RV(stdout), RV(stderr)), as C(ansible.builtin.async_status) would return it, so a failed
    download can be named (the filter P(sparkfleet.vllm.download_failure#filter)).
  - With O(wait_polls), its action plugin runs it again every O(wait_delay) seconds until the job ends, showing a line
    per poll with the rate and the time left (measured between the polls), in a terminal and in AWX alike; no
    C(until) is needed, so nothing prints "FAILED - RETRYING".
  - Changes nothing.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  path:
    description: The download's target directory (C(hf download --local-dir)).
    type: path
    required: true
  job_file:
    description:
      - The background job's status file (the C(results_file) that a task run with C(async) and C(poll) 0
        registers). The job has ended once that file holds its result.
    type: path
    required: true
notes:
  - Check mode is supported and behaves exactly like a normal run.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.wait_polls
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Start the download in the background
  ansible.builtin.command:
    argv: [hf, download, Qwen/Qwen3-235B-A22B-FP8, --local-dir, /srv/models/qwen3]
  async: 14520
  poll: 0
  register: download_job

- name: Follow it to its end, a line every 30 s (at most 14520 s)
  sparkfleet.vllm.download_progress:
    path: /srv/models/qwen3
    job_file: "{{ download_job.results_file }}"
    wait_polls: 485
    wait_delay: 30
  register: download
  failed_when: false

- name: Name why it failed
  ansible.builtin.fail:
    msg: "{{ (download.stderr_lines + download.stdout_lines) | sparkfleet.vllm.download_failure('Qwen/Qwen3-235B-A22B-FP8') }}"
  when: not download.finished or download.rc != 0
"""

RETURN = r"""
finished:
  description: Whether the background job has ended (its result is then in RV(rc), RV(stdout) and RV(stderr)).
  returned: always
  type: bool
summary:
  description: What the download is doing, for a person; the action plugin adds the rate and the time left.
  returned: always
  type: str
  sample: "41.3 of 119.0 GB (35%) in /srv/models/qwen3, 9.8 MB/s, ETA 2h12m"
bytes:
  description: Bytes of the model's weight files under O(path) so far, finished or being written.
  returned: always
  type: int
  sample: 41312411648
total:
  description: The weights' total size from the model's index (C(metadata.total_size)); null until the index came.
  returned: always
  type: int
  sample: 119034556416
files:
  description: Weight files finished so far.
  returned: always
  type: int
rc:
  description: The background command's exit status (C(timeout) gives 124 when it ran out of time).
  returned: when RV(finished)
  type: int
stdout:
  description: Its output (the last 64 KiB).
  returned: when RV(finished)
  type: str
stderr:
  description: Its errors (the last 64 KiB), where C(hf download) names why it failed.
  returned: when RV(finished)
  type: str
mb_per_s:
  description: Set by the action plugin. The rate between the first poll and the last.
  returned: with O(wait_polls), from the second poll
  type: float
polls:
  description: Set by the action plugin. How many times the module ran (each a round trip to the node).
  returned: with O(wait_polls)
  type: int
wait_timed_out:
  description: Set by the action plugin when the job had not ended after O(wait_polls) polls.
  returned: when the wait ran out of polls
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json

STATUS_MAX_BYTES = 16 * 1024 * 1024   # an async job's status file holds one module result
INDEX_MAX_BYTES = 64 * 1024 * 1024    # a model index names every tensor: a few MB for the largest models
TAIL = 64 * 1024
INDEX = "model.safetensors.index.json"


def weight_bytes(path):
    """(bytes, finished files) of the weight files under ``path``: *.safetensors and the *.incomplete files hf writes
    them as under .cache/huggingface/download (a download in progress). Links are not followed."""
    size = files = 0
    for root, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        for name in names:
            if not (name.endswith(".safetensors") or (".safetensors." in name and name.endswith(".incomplete"))):
                continue   # the index, the config, the tokenizer: small, and not in the index's total
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue   # renamed from .incomplete while we looked
            size += st.st_size
            if name.endswith(".safetensors"):
                files += 1
    return size, files


def index_total(path):
    """The weights' total size the model's index names, None until it came (or when it has none)."""
    try:
        data = _json.load_file(os.path.join(path, INDEX), "the model's index", limit=INDEX_MAX_BYTES)
    except (OSError, ValueError):
        return None
    total = (data.get("metadata") or {}).get("total_size") if isinstance(data, dict) else None
    return int(total) if isinstance(total, (int, float)) and total > 0 else None


def job_result(job_file):
    """(ended, result): an async job's status file holds {"started": 1, "finished": 0, ...} until its result replaces
    it; a file that is gone ended with no result."""
    if not os.path.exists(job_file):
        return True, {"rc": None, "stderr": "the download's job file %s is gone (no result)" % job_file}
    try:
        data = _json.load_file(job_file, "the async job's status file", limit=STATUS_MAX_BYTES)
    except (OSError, ValueError):
        return False, {}   # being written
    if not isinstance(data, dict) or "started" in data:
        return False, {}
    return True, data


def size(n):
    return "%.1f GB" % (n / 1e9) if n >= 1e9 else "%.1f MB" % (n / 1e6)


def summary(done, total, files, path):
    if total:
        return "%s of %s (%d%%) in %s" % (size(done), size(total), min(100, int(100.0 * done / total)), path)
    return "%s so far in %s (%d weight files; the total comes with the model's index)" % (size(done), path, files)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            job_file=dict(type="path", required=True),
            wait_polls=dict(type="int"),
            wait_delay=dict(type="float", default=0),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"]
    ended, job = job_result(module.params["job_file"])
    done, files = weight_bytes(path)
    total = index_total(path)
    result = dict(changed=False, finished=ended, bytes=done, total=total, files=files,
                  summary=summary(done, total, files, path))
    if ended:
        result["rc"] = job.get("rc")
        for key in ("stdout", "stderr"):
            result[key] = str(job.get(key) or "")[-TAIL:]
        if job.get("msg") and not result["stderr"]:
            result["stderr"] = str(job["msg"])[-TAIL:]   # the async wrapper's own failure (a timeout, a crash)
        result["summary"] = "ended (rc %s): %s" % (result["rc"], result["summary"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
