#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_lock
short_description: Keep two deployments from changing the same cluster at once
version_added: 0.2.0
description:
  - Takes or releases a lock file on the head for the length of one C(ansible-playbook) run. C(site.yml) takes it
    right after preflight and releases it in its last play, so a second run started meanwhile (another terminal, another
    AWX job) stops before it changes anything, naming the controller, process and start time of the holder.
  - The lock records the controller's host name, the C(ansible-playbook) process and the TTL it promises (O(ttl)).
    While that process lives, a process the task leaves on the controller refreshes the lock's time on the head (its
    heartbeat) every O(ttl)/6 seconds, over the run's own connection. When the run ends without reaching its
    release (a task failed, a node went away, the run was interrupted or killed), that process releases the lock
    itself, so the next run from any controller finds it free.
  - A lock left behind anyway is taken over, with a warning that names its holder, since when, and why that is
    safe. From the same controller it is taken once the holder's process has ended; from another controller, once
    the lock has had no heartbeat for longer than the TTL its holder stated (the holder's controller died or lost the
    head). A lock written before heartbeats (no TTL) is taken over from another controller only when older than O(timeout).
  - A live holder (its process runs, or its heartbeat is younger than its TTL) still makes the task fail, naming
    the controller, process, playbook and start time of the holder. Taking over, refreshing and releasing are
    serialized on the head with C(flock) where it exists, and a takeover is a compare-and-swap, so two controllers
    never both hold the lock.
  - The lock lives under C(/run), so a reboot of the head clears it.
  - Taking and releasing the lock is bookkeeping and never reports C(changed), so a re-run stays C(changed=0).
  - This is an action plugin; it runs on the controller and uses shell commands on the target.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  state:
    description:
      - V(acquired) takes the lock or fails when a live run holds it; V(released) removes it when this run holds it.
    type: str
    choices: [acquired, released]
    default: acquired
  path:
    description:
      - The lock file on the target.
    type: path
    default: /run/sparkfleet/deploy.lock
  timeout:
    description:
      - Seconds after which a lock taken by another controller that states no TTL (a run from before lock heartbeats)
        counts as abandoned.
    type: int
    default: 3600
  ttl:
    description:
      - Seconds without a heartbeat after which another controller may take this run's lock over. This run refreshes
        the lock every O(ttl)/6 seconds (at least every 5) while its C(ansible-playbook) process lives.
      - At least 30. Larger values ride out a longer loss of the head's ssh, smaller ones free the lock of a dead
        controller sooner.
    type: int
    default: 300
notes:
  - Needs C(become) (root) on the target to write under C(/run).
  - Supports check mode; nothing is written then, but a live holder still fails the task.
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
- name: Take the deployment lock on the head
  sparkfleet.vllm.run_lock:
    state: acquired

- name: Release it at the end of the run
  sparkfleet.vllm.run_lock:
    state: released

- name: Take it, letting another controller take it over 2 minutes after this one died
  sparkfleet.vllm.run_lock:
    state: acquired
    ttl: 120
"""

RETURN = r"""
path:
  description: The lock file.
  returned: always
  type: str
  sample: /run/sparkfleet/deploy.lock
token:
  description: This run's identity in the lock (controller host name, process ID, random part).
  returned: always
  type: str
  sample: ctl-host-4242-1f2e3d4c5b6a
acquired:
  description: Whether this task took the lock.
  returned: when O(state=acquired) and not in check mode
  type: bool
reason:
  description: Why the lock could be taken (V(free), or why the previous holder counts as gone).
  returned: when O(state=acquired)
  type: str
  sample: "the run that held it (pid 4242 on ctl-host) has ended: its ansible-playbook process is gone"
previous:
  description: The record of the holder this run took over from.
  returned: when a stale lock was taken over
  type: dict
took_over:
  description: The warning of a takeover, naming the holder, since when, and why taking its lock over is safe.
  returned: when a lock of another run was taken over
  type: str
  sample: "spark-1: took over the deployment lock /run/sparkfleet/deploy.lock from awx-2 (pid 9, site.yml, since
    21:10 UTC): no heartbeat from awx-2 for 900 s, longer than the 300 s its run promised ..."
released:
  description: Whether this task removed the lock (false when another run holds it).
  returned: when O(state=released) and not in check mode
  type: bool
"""
