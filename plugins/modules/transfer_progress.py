#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: transfer_progress
short_description: Follow a transfer that runs in the background (bytes sent, rate, time left)
version_added: 0.2.0
description:
  - Reads the progress file that M(sparkfleet.vllm.image_sync) writes while it streams an image to a node (run
    with C(async)) and returns one line for a person in RV(summary) - destination, bytes sent of the total, rate and
    time left - and whether the background job has ended.
  - With O(wait_polls), its action plugin runs it again every O(wait_delay) seconds until RV(finished) and shows
    RV(summary) at every poll, so a transfer of minutes shows its progress instead of a silent wait (and, unlike a
    C(until) loop, prints no "FAILED - RETRYING" in AWX).
  - Changes nothing.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  path:
    description:
      - The progress file (the O(sparkfleet.vllm.image_sync#module:progress_file) of the running job). A missing file
        means the job has not started a destination yet, or has ended.
    type: path
    required: true
  job_file:
    description:
      - The background job's status file (the C(results_file) that a task run with C(async) and C(poll) 0
        registers). The job has ended once that file holds the module's result.
      - Unset, the job counts as ended when the progress file is gone.
    type: path
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
- name: Move the image in the background
  sparkfleet.vllm.image_sync:
    image: hellohal2064/vllm-qwen3.5-gb10:latest
    destinations: "{{ workers }}"
    ssh_user: nvidia
    ssh_key: /etc/sparkfleet/image-sync_ed25519
    progress_file: /run/sparkfleet/image-sync.progress
  async: 3600
  poll: 0
  register: sync_job

- name: Show its progress until it ends
  sparkfleet.vllm.transfer_progress:
    path: /run/sparkfleet/image-sync.progress
    job_file: "{{ sync_job.results_file }}"
    wait_polls: 720
    wait_delay: 5

- name: Collect the transfer's result (it has ended)
  ansible.builtin.async_status:
    jid: "{{ sync_job.ansible_job_id }}"
  register: sync
"""

RETURN = r"""
finished:
  description: Whether the background job has ended (its result is then ready for C(async_status)).
  returned: always
  type: bool
summary:
  description: What the transfer is doing, for a person.
  returned: always
  type: str
  sample: "spark-2 (1/1): 8.4 of 21.3 GB (39%), 520 MB/s, about 25 s left"
name:
  description: The destination being sent to now.
  returned: when a destination is under way
  type: str
bytes:
  description: Bytes sent to that destination so far.
  returned: when a destination is under way
  type: int
total:
  description: Bytes to send to it (the image's size).
  returned: when a destination is under way
  type: int
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json
from ansible_collections.sparkfleet.vllm.plugins.module_utils.image._image import parse_progress, progress_summary

# An async job's status file holds a module result: far below this.
STATUS_MAX_BYTES = 16 * 1024 * 1024


def _job_ended(path):
    """An async job's status file holds {"started": 1, "finished": 0, ...} until the module's result replaces it."""
    try:
        data = _json.load_file(path, "the async job's status file", limit=STATUS_MAX_BYTES)
    except (OSError, ValueError):
        return False  # not written yet, or being written
    return isinstance(data, dict) and "started" not in data


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            job_file=dict(type="path"),
            wait_polls=dict(type="int"),  # read by the action plugin (plugins/action/transfer_progress.py)
            wait_delay=dict(type="float", default=0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    text = ""
    try:
        with open(p["path"], errors="replace") as handle:
            text = handle.read()
    except FileNotFoundError:
        pass
    except OSError as exc:
        module.fail_json(msg="cannot read the progress file %s: %s" % (p["path"], exc))
    state = parse_progress(text)
    if p["job_file"]:
        finished = _job_ended(p["job_file"]) or not os.path.exists(p["job_file"])
    else:
        finished = not os.path.exists(p["path"])
    summary = "done" if finished and not state else progress_summary(state)
    result = dict(changed=False, finished=finished, summary=summary)
    for key in ("name", "bytes", "total"):
        if key in state:
            result[key] = state[key]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
