#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_wait
short_description: Follow a vLLM startup to ready, reporting phase, shard progress and the cause of a failure
version_added: 0.1.0
description:
  - Reads a vLLM server's log (a file, a systemd unit's journal or a container's log) and tells where the startup
    is - C(starting), C(engine_init), C(placement), C(loading_weights), C(profiling), C(cuda_graphs), C(api_starting),
    C(ready) - or that it C(failed), with the class, the log lines that show it and a hint naming the settings to
    change (as I(setting_names) says).
  - 'Understands vLLM 0.6 to 0.33 (V0 and V1), Ray worker prefixes ("(RayWorkerWrapper pid=860, ip=192.168.200.13)"),
    "[repeated 2x across cluster]", ANSI colours, tqdm redraws, NCCL_DEBUG lines (at NCCL''s own level: an INFO or
    WARN line never ends a startup; a WARN line names the cause of a failure other lines end) and Ray''s own logs.'
  - Shard progress is tracked per rank; the slowest rank sets the shard count, percentage, s/shard and ETA.
  - A specific cause wins over C(Engine core initialization failed); the call fails within one I(poll_interval) of
    a failing line.
  - Ready means C(/v1/models) lists I(model) and a one-token completion answers (with I(url)), else the log's
    C(Application startup complete).
  - 'Logs are read from their end, bounded whatever their size: at most I(max_bytes) and 100000 lines a read
    (C(journalctl -n), C(docker logs --tail), then C(tail -c)); every command and API call gets the time left of
    I(timeout) (at least 5 s), so a slow journal cannot hold the call.'
  - 'Call it as a wait of short calls (C(timeout: 10), O(wait_polls): its action plugin runs it again until the server
    is ready or has failed, a line per poll) to show progress: each call reads this startup from I(since_offset),
    I(cursor) or I(since).'
  - Read-only; it changes nothing and runs the same in check mode.
options:
  log_file:
    description:
      - A regular file the server logs to. Mutually exclusive with I(unit) and I(container).
      - 'Missing: class C(log_missing), at once with I(timeout=0), else after three reads over two seconds. A file
        replaced under the same name (another inode, a smaller size, other bytes before the offset) is read again
        from its start.'
    type: path
  unit:
    description:
      - A systemd unit whose journal holds the log (C(journalctl -u UNIT -o cat)). A unit no longer active with no
        known failure in its log is C(engine_exited).
      - With I(container) (a unit running C(docker run --rm)), the container's log is followed; once the container
        is gone the unit's journal of its latest run is read, so a server that died at once is still classified.
    type: str
  container:
    description:
      - A Docker container whose log holds the output (C(docker logs --timestamps)). Exited or restarting with no
        known failure is C(engine_exited); without I(unit), missing for half of I(timeout) (15 s at most) too.
    type: str
  since_offset:
    description:
      - With I(log_file), the byte offset where this startup begins (the C(offset) of a call made before the
        restart). A shorter or replaced file is read from its start.
    type: int
    default: 0
  cursor:
    description:
      - With I(unit), read only entries after this journal cursor (the C(cursor) an earlier call returned).
    type: str
  since:
    description:
      - 'With I(unit) or I(container), read only entries since this time: C(2026-11-29 10:55:00) (local time),
        systemd''s C(Sun 2026-11-29 10:55:00 UTC), C(@1764413700) (epoch) or C(10m) (ago). Ignored with I(cursor).'
    type: str
  url:
    description:
      - Base URL of the API, for example C(http://192.168.200.12:30000) (a trailing C(/v1) is accepted; a port
        outside 1-65535 is refused). Without a log source the module only polls the API.
    type: str
  api_key:
    description:
      - Bearer token for the API (vLLM C(--api-key)); visible ASCII only, anything else is refused at once.
    type: str
  model:
    description:
      - Served model name C(/v1/models) must list; when omitted, the first listed model takes the completion.
    type: str
  validate_certs:
    description:
      - Verify TLS certificates when I(url) is https.
    type: bool
    default: true
  timeout:
    description:
      - 'Seconds to wait for ready (0 to 604800). C(0) reads the log once. When it runs out the module returns
        C(ready: false), C(timed_out: true) and the phase, unless I(fail_on_timeout).'
    type: int
    default: 900
  fail_on_timeout:
    description:
      - Fail when I(timeout) runs out before the server is ready.
    type: bool
    default: false
  stall_timeout:
    description:
      - Fail with C(stalled) after this many seconds without progress (no new phase, shard, graph or informational
        line), measured across calls from the log's timestamps and its last write. A placement-group wait longer than
        this or 300 s is a stall too. C(0) disables it.
    type: int
    default: 900
  poll_interval:
    description:
      - Seconds between reads while waiting, above 0 and at most 3600; not a number (C(nan), C(inf)) is refused.
    type: float
    default: 5
  max_bytes:
    description:
      - The most bytes of log one read holds (65536 to 268435456). The first read starts at most this far (and
        100000 lines) before the end, see C(skipped_bytes) / C(skipped_chars); later reads take only what is new.
        Lines are cut at 16384 characters; parsing stops at the deadline and resumes on the next poll.
    type: int
    default: 8388608
  rank_names:
    description:
      - 'Names for ranks, keyed by Ray node IP or rank key (C(local): the API server''s node), for example
        C({"192.168.200.13": "spark-2", "local": "spark-1"}).'
    type: dict
    default: {}
notes:
  - 'Failure classes, from the one that wins when several show in a log to the most generic: C(supervision_escalated)
    (the unified memory of a node short or silent; nothing restarts the engine), C(ray_oom_killed), C(cuda_oom),
    C(gpu_arch_unsupported) (the image has no kernels for this GPU), C(insufficient_memory), C(ray_object_store_full)
    (Ray could neither store nor spill an object), C(port_in_use), C(dependency_missing), C(worker_env_mismatch) (a
    Ray worker runs other packages than the driver), C(model_unsupported), C(tokenizer_error), C(weights_corrupt),
    C(ray_auth_failed) (the Ray token is missing or wrong), C(raylet_died) (the Ray of a node died under the engine),
    C(ray_unreachable), C(nccl_duplicate_gpu) (two ranks on one GPU), C(nccl_no_interface) (NCCL_SOCKET_IFNAME names
    no interface), C(nccl_net_unavailable) (RDMA forced without a usable device), C(collective_failed) (a collective
    stopped by the NCCL watchdog or a GPU fault), C(rendezvous_failed), C(nccl_error), C(placement_group),
    C(worker_died), C(stalled) (no progress for I(stall_timeout)), C(engine_exited) (process or unit gone without a
    failure in the log), C(engine_init_failed) (generic, only when nothing more specific is in the log) and
    C(log_missing) (I(log_file) does not exist).'
  - After startup complete, an engine that dies at its first request (a worker that cannot import what the driver
    sends, a collective the NCCL watchdog stops) is still a failure; ordinary request errors are not.
  - A log holding a failed run and a restarted one reports the restart; while it is not ready, the earlier failure
    (a crash loop). Returned text is valid UTF-8 (undecodable bytes become U+FFFD).
  - With I(log_file) a server killed without a word is only seen as C(stalled); prefer I(unit) or I(container).
author:
  - sparkfleet.vllm contributors (@sparkfleet)
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.setting_names
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
- name: Wait for the server, one call per 10 s so progress shows
  sparkfleet.vllm.vllm_wait:
    container: sparkfleet-vllm
    unit: sparkfleet-vllm
    since: "{{ _unit.status.InactiveExitTimestamp }}"  # from ansible.builtin.systemd_service
    url: "http://{{ sparkfleet_fabric_ip }}:{{ sparkfleet_api_port }}"
    model: "{{ sparkfleet_model_id }}"
    timeout: 10
    rank_names: {"192.168.200.13": "spark-2", "local": "spark-1"}
    wait_polls: 180  # until ready or failed (a failure is final), a line per poll
  register: _vllm_wait

- name: Diagnose a captured log once
  sparkfleet.vllm.vllm_wait:
    log_file: /var/log/vllm/serve.log
    timeout: 0
  register: _vllm_state
  failed_when: false
"""

RETURN = r"""
phase:
  description: Where the startup is, or C(failed).
  returned: always
  type: str
  sample: loading_weights
ready:
  description: The server is ready (API checked when I(url) is set, else the log's startup-complete marker).
  returned: always
  type: bool
failed_phase:
  description: The phase the startup was in when it failed.
  returned: always
  type: str
failure:
  description: Why the startup failed (C(class), C(evidence) lines most telling first, C(hint)); null if it has not.
  returned: always
  type: dict
  sample: {"class": "nccl_no_interface", "evidence": ["[rank0]: Bootstrap : no socket interface found"], "hint": ""}
summary:
  description: One line for people.
  returned: always
  type: str
  sample: "loading_weights 17/39 shards (44%), 2.1 s/shard, ETA 46 s; slowest rank spark-2"
progress:
  description: The slowest rank's progress in the current phase (shards, or CUDA graphs).
  returned: always
  type: dict
  sample: {"unit": "shards", "n": 17, "total": 39, "percent": 44, "s_per_shard": 2.1, "eta_s": 46}
ranks:
  description: Shard progress per rank, keyed by the Ray C(ip pid=N) prefix (or the local process name).
  returned: always
  type: dict
phase_times:
  description: Seconds spent in each phase, from the log's timestamps.
  returned: always
  type: dict
  sample: {"starting": 14, "engine_init": 1, "placement": 20, "loading_weights": 707}
offset:
  description: With I(log_file), the byte offset read up to; pass it as I(since_offset).
  returned: when log_file is set
  type: int
bytes_read:
  description: With I(log_file), bytes this call read.
  returned: when log_file is set
  type: int
skipped_bytes:
  description: With I(log_file), bytes before the first read's start (beyond I(max_bytes) or 100000 lines).
  returned: when log_file is set
  type: int
replaced:
  description: With I(log_file), how often the file was found replaced and read again from its start.
  returned: when log_file is set
  type: int
skipped_chars:
  description: With I(unit) or I(container), characters of what was read that were not parsed (a cut line, lines
    beyond 100000); what C(journalctl -n) / C(docker logs --tail) / C(tail -c) left out is not counted.
  returned: when unit or container is set
  type: int
read_error:
  description: With I(unit) or I(container), why the last read gave nothing (the command did not answer in time).
  returned: when a read failed
  type: str
log_source:
  description: C(file), C(journal) or C(docker); C(journal) with I(container) when the unit's journal was read.
  returned: when log_file, unit or container is set
  type: str
cursor:
  description: With I(unit), the journal cursor after the last entry read; pass it as I(cursor).
  returned: when unit is set and the journal returned entries
  type: str
timed_out:
  description: I(timeout) ran out before ready.
  returned: always
  type: bool
elapsed:
  description: Seconds this call took.
  returned: always
  type: float
placement_wait_s:
  description: Longest placement-group wait the log reported, in seconds.
  returned: always
  type: int
vllm_version:
  description: vLLM version the log announced.
  returned: always
  type: str
api:
  description: What the API check saw (models listed, completion result), when I(url) is set.
  returned: when url is set
  type: dict
attempts:
  description: Server runs seen in the log (restarts add one).
  returned: always
  type: int
previous_failure:
  description: The failure of an earlier run in the same log, when the server was restarted after it.
  returned: always
  type: dict
api_address:
  description: Address the API server announced in the log.
  returned: always
  type: str
lines:
  description: Log lines read.
  returned: always
  type: int
benign_warnings:
  description: Known harmless warnings that were seen and ignored (first few).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import setting_names_option
from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine._vllm_wait import finish, refuse_unreadable, run

ARGUMENT_SPEC = dict(
    log_file=dict(type="path"),
    unit=dict(type="str"),
    container=dict(type="str"),
    since_offset=dict(type="int", default=0),
    cursor=dict(type="str"),
    since=dict(type="str"),
    url=dict(type="str"),
    api_key=dict(type="str", no_log=True),
    model=dict(type="str"),
    validate_certs=dict(type="bool", default=True),
    timeout=dict(type="int", default=900),
    fail_on_timeout=dict(type="bool", default=False),
    stall_timeout=dict(type="int", default=900),
    poll_interval=dict(type="float", default=5),
    rank_names=dict(type="dict", default={}),
    max_bytes=dict(type="int", default=8388608),
    wait_polls=dict(type="int"),  # read by the action plugin (plugins/action/vllm_wait.py)
    wait_delay=dict(type="float", default=0),
    **setting_names_option()
)


def main():
    try:
        module = AnsibleModule(
            argument_spec=ARGUMENT_SPEC,
            mutually_exclusive=[("log_file", "unit"), ("log_file", "container")],
            required_one_of=[("log_file", "unit", "container", "url")],
            supports_check_mode=True,
        )
    except (OverflowError, ValueError):
        refuse_unreadable(AnsibleModule, ARGUMENT_SPEC)
    finish(module, run(module))


if __name__ == "__main__":
    main()
