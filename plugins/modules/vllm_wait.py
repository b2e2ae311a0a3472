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
  - Reads a vLLM server's log (a file, a systemd unit's journal or a container's log) and tells where the
    startup is - C(starting), C(engine_init), C(placement), C(loading_weights), C(profiling), C(cuda_graphs),
    C(api_starting), C(ready) - or that it C(failed), with the failure's class, the log lines that show it and
    a hint naming the settings to change (by the names in I(setting_names)).
  - 'Understands vLLM 0.6 to 0.33 logs, V0 and V1 engines, Ray worker prefixes such as
    "(RayWorkerWrapper pid=860, ip=192.168.200.13)" and "(RayWorkerProc ...) (Worker_DP0_TP1_EP1 ...)",
    Ray''s "[repeated 2x across cluster]" suffixes, ANSI colour codes and tqdm bars redrawn with carriage returns.'
  - Weight-loading progress is tracked per rank (keyed by the Ray C(ip pid) prefix); the slowest rank sets the
    reported shard count, percentage, seconds per shard and ETA.
  - 'Known benign warnings, for example "Tensor parallel size (2) exceeds available GPUs (1)" and
    "tensor_parallel_size=2 is bigger than a reserved number of GPUs (1 GPUs) in a node", never count as failures.'
  - When a specific cause and the generic C(Engine core initialization failed) both appear, the specific cause
    wins. The module fails within one I(poll_interval) of a failing line appearing.
  - "Ready means: with I(url), C(/v1/models) lists I(model) and a one-token completion succeeds; without I(url),
    the log shows C(Application startup complete)."
  - "Design for progress while waiting: a module cannot stream to the terminal, so call it in a loop with a short
    I(timeout) (for example C(timeout: 10), C(until: result is failed or result.ready), C(retries)). Each call re-reads the log of
    this startup from I(since_offset) (file), I(cursor) or I(since) (journal, container), so it always sees the whole
    startup and returns C(phase), C(progress), C(ranks), C(phase_times) and a one-line C(summary). Record C(offset)
    (or C(cursor)) from a call made B(before) restarting the server and pass it back so an older run in the same
    log is not read."
  - Read-only; it changes nothing and runs the same in check mode.
options:
  log_file:
    description:
      - Path of a file the vLLM server logs to (stdout and stderr). It must be a regular file.
      - Mutually exclusive with I(unit) and I(container).
      - A file that cannot be found is reported as failure class C(log_missing) at once with I(timeout=0),
        else after three reads over at least two seconds (a server that has just been started may create
        it a moment later). A file this user may not read fails at once.
    type: path
  unit:
    description:
      - A systemd unit whose journal holds the log, read with C(journalctl -u UNIT -o cat).
      - When the unit is no longer active (failed, inactive, restarting) and the log shows no known failure,
        the failure class is C(engine_exited).
      - May be given with I(container) (the unit that runs C(docker run --rm) in the foreground). Then the
        container's log is followed, and once the container is gone the unit's journal of its latest run
        (its systemd invocation, or since I(since)) is read instead, so a server that died within seconds is
        still classified from its own log, not as C(engine_exited). While the unit is active and its
        container is missing (image pull, restart), the module keeps waiting.
    type: str
  container:
    description:
      - A Docker container whose log holds the server's output, read with C(docker logs --timestamps).
      - When the container has exited or is restarting and the log shows no known failure, the failure class is
        C(engine_exited).
      - Without I(unit), a container that does not exist is taken as exited (a C(--rm) container is removed when
        it stops) once it stays missing for half of I(timeout), at most 15 seconds, or at once with I(timeout=0).
      - Mutually exclusive with I(log_file).
    type: str
  since_offset:
    description:
      - With I(log_file), the byte offset where this startup begins; lines before it are ignored.
      - Take it from the C(offset) a previous call returned before the server was (re)started.
      - If the file is now shorter than the offset (rotated or truncated), it is read from the start.
    type: int
    default: 0
  cursor:
    description:
      - With I(unit), a journal cursor; only entries after it are read (C(journalctl --after-cursor)).
      - Take it from the C(cursor) a previous call returned.
    type: str
  since:
    description:
      - With I(unit) or I(container), read only entries since this time (C(journalctl --since) /
        C(docker logs --since) syntax, for example C(2026-11-29 10:55:00) or C(10m)).
      - Ignored for I(unit) when I(cursor) is given.
    type: str
  url:
    description:
      - Base URL of the OpenAI-compatible API, for example C(http://192.168.200.12:30000) (a trailing C(/v1) is
        accepted). When set, ready requires C(/v1/models) to list I(model) and a one-token completion to succeed.
      - With no log source, the module only polls the API and reports C(starting) until it answers.
    type: str
  api_key:
    description:
      - Bearer token for the API (vLLM C(--api-key)).
    type: str
  model:
    description:
      - Served model name that C(/v1/models) must list (the C(--served-model-name), else the model path or id).
      - When omitted, the first listed model is used for the completion test.
    type: str
  validate_certs:
    description:
      - Verify TLS certificates when I(url) is https.
    type: bool
    default: true
  timeout:
    description:
      - Seconds to wait for ready. C(0) reads the log once and returns at once.
      - "When the time runs out the module does not fail (unless I(fail_on_timeout)): it returns C(ready: false),
        C(timed_out: true) and the current phase, so a loop can call it again."
    type: int
    default: 900
  fail_on_timeout:
    description:
      - Fail when I(timeout) runs out before the server is ready.
    type: bool
    default: false
  stall_timeout:
    description:
      - Fail with class C(stalled) when the log shows no progress (no new phase, no shard or CUDA graph step, no new
        informational line; placement-group waiting lines do not count) for this many seconds while waiting.
      - The quiet time is measured across calls, so a loop of short calls (I(timeout=10)) still sees a stall - the
        log's own timestamps tell how long before its last line progress stopped, and the file's modification time,
        the journal or docker's timestamps tell when that last line was written.
      - A placement-group wait that vLLM reports as longer than this or 300 s, whichever is less, is a stall
        too, also on a single read (I(timeout=0)); a healthy cluster places the workers at once.
      - C(0) disables stall detection.
    type: int
    default: 900
  poll_interval:
    description:
      - Seconds between reads while waiting.
    type: float
    default: 5
  max_bytes:
    description:
      - With I(log_file), the most bytes read per poll. The first read starts at most this far before the end
        of the file (the rest of a long serving log is skipped, see C(skipped_bytes)); later reads continue
        from where the last stopped, this much per poll, so a fast-growing or huge file never takes more
        memory or time than this.
      - With I(unit) or I(container), only the last this many characters of the first read are parsed
        (see C(skipped_chars)); later reads fetch only what is new (C(--after-cursor), C(--since) the last
        line's stamp).
      - Lines longer than 16384 characters are cut before they are matched, so the work per line is bounded.
      - Parsing stops at the deadline (I(timeout)) and resumes on the next poll.
    type: int
    default: 8388608
  rank_names:
    description:
      - 'Names to show for ranks, keyed by Ray node IP or by rank key, for example
        C({"192.168.200.13": "spark-2", "local": "spark-1"}).'
      - The key C(local) names ranks on the node that runs the API server, whose lines Ray prints without an IP.
    type: dict
    default: {}
notes:
  - 'Failure classes, from the one that wins when several show in a log to the most generic: C(ray_oom_killed),
    C(cuda_oom), C(gpu_arch_unsupported) (the image has no kernels for this GPU), C(insufficient_memory),
    C(ray_object_store_full) (Ray could neither store nor spill an object), C(port_in_use), C(dependency_missing),
    C(worker_env_mismatch) (a Ray worker runs other packages than the driver), C(model_unsupported),
    C(tokenizer_error), C(weights_corrupt), C(ray_auth_failed) (the Ray token is missing or wrong), C(raylet_died)
    (the Ray of a node died under the engine), C(ray_unreachable), C(nccl_duplicate_gpu) (two ranks on one GPU),
    C(nccl_no_interface) (NCCL_SOCKET_IFNAME names no interface), C(nccl_net_unavailable) (RDMA forced without a
    usable device), C(collective_failed) (a collective stopped by the NCCL watchdog or a GPU fault),
    C(rendezvous_failed), C(nccl_error), C(placement_group), C(worker_died), C(stalled) (no progress for
    I(stall_timeout)), C(engine_exited) (process or unit gone without a failure in the log), C(engine_init_failed)
    (generic, only when nothing more specific is in the log) and C(log_missing) (I(log_file) does not exist).'
  - After the log says the startup completed, an engine that dies at its first request (for example a Ray worker
    that cannot import what the driver sends) is still a failure; ordinary request errors are not.
  - Returned text is always valid UTF-8; undecodable bytes in the log become U+FFFD.
  - A log that holds a failed run followed by a restarted run reports the restarted run; while that run is not
    ready, the earlier failure is reported (a crash loop).
  - Phase times come from timestamps in the log (vLLM, Ray, journal or docker timestamps); lines without one
    count toward the last seen timestamp.
  - A tqdm bar redrawn with carriage returns only reaches the journal or a container log when a newline ends it;
    the module also reads the unfinished last line of a I(log_file), and Ray forwards each worker's redraws, so
    shard progress of Ray ranks shows while it happens.
  - Without a process to watch (I(log_file)), a server killed without a word (for example by the kernel's OOM
    killer) is only seen as no progress, so C(stalled) after I(stall_timeout); prefer I(unit) or I(container).
author:
  - sparkfleet.vllm contributors (@sparkfleet)
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.setting_names
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
    unit: vllm-serve.service
    since: "{{ _vllm_serve_started_at }}"
    url: "http://{{ sparkfleet_fabric_ip }}:{{ sparkfleet_api_port }}"
    api_key: "{{ vllm_serve_api_key | default(omit) }}"
    model: "{{ sparkfleet_model_id }}"
    timeout: 10
    rank_names: {"192.168.200.13": "spark-2", "local": "spark-1"}
  register: _vllm_wait
  # Stop at ready, or at once on a failure (a failed result is final, retrying cannot fix it).
  until: _vllm_wait is failed or _vllm_wait.ready
  retries: 180
  delay: 0

- name: Show where the startup stands
  ansible.builtin.debug:
    msg: "{{ _vllm_wait.summary }}"

- name: Diagnose a captured log once
  sparkfleet.vllm.vllm_wait:
    log_file: /var/log/vllm/serve.log
    timeout: 0
  register: _vllm_state
  failed_when: false

- name: Remember where the log ends before restarting, then follow only the new run
  sparkfleet.vllm.vllm_wait:
    log_file: /var/log/vllm/serve.log
    timeout: 0
  register: _before_restart
  failed_when: false

- name: Follow the new run
  sparkfleet.vllm.vllm_wait:
    log_file: /var/log/vllm/serve.log
    since_offset: "{{ _before_restart.offset }}"
    timeout: 1800
    fail_on_timeout: true
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
  sample: false
failed_phase:
  description: The phase the startup was in when it failed.
  returned: always
  type: str
  sample: cuda_graphs
failure:
  description: Why the startup failed; null when it has not.
  returned: always
  type: dict
  contains:
    class:
      description: One of the failure classes listed in the notes.
      type: str
      sample: ray_oom_killed
    evidence:
      description: The log lines that show the failure, most telling first.
      type: list
      elements: str
    hint:
      description: What to change, naming each setting as I(setting_names) says.
      type: str
summary:
  description: One line for people.
  returned: always
  type: str
  sample: "loading_weights 17/39 shards (44%), 2.1 s/shard, ETA 46 s; slowest rank spark-2"
progress:
  description: Progress of the slowest rank in the current phase (shards while loading, graphs while capturing).
  returned: always
  type: dict
  sample: {"unit": "shards", "n": 17, "total": 39, "percent": 44, "s_per_shard": 2.1, "eta_s": 46,
           "slowest_rank": "spark-2"}
ranks:
  description: Weight-loading progress per rank, keyed by the Ray C(ip pid=N) prefix (or the local process name).
  returned: always
  type: dict
  sample: {"192.168.200.13 pid=861": {"n": 17, "total": 39, "percent": 44, "s_per_shard": 2.1, "eta_s": 46,
           "name": "spark-2"}}
phase_times:
  description: Seconds spent in each phase, from the first line of the phase to the first line of the next
    (or the last line seen), when the log carries timestamps.
  returned: always
  type: dict
  sample: {"starting": 14, "engine_init": 1, "placement": 20, "loading_weights": 707}
offset:
  description: With I(log_file), the byte offset of the end of what was read; pass it as I(since_offset).
  returned: when log_file is set
  type: int
bytes_read:
  description: With I(log_file), bytes this call read from the file.
  returned: when log_file is set
  type: int
skipped_bytes:
  description: With I(log_file), bytes before the last I(max_bytes) of the file that the first read skipped.
  returned: when log_file is set
  type: int
skipped_chars:
  description: With I(unit) or I(container), characters before the last I(max_bytes) of the first read that
    were not parsed.
  returned: when unit or container is set
  type: int
log_source:
  description: Where the answer came from, C(file), C(journal) or C(docker); C(journal) with I(container)
    when the container was gone and the unit's journal was read instead.
  returned: when log_file, unit or container is set
  type: str
  sample: journal
cursor:
  description: With I(unit), the journal cursor after the last entry read; pass it as I(cursor).
  returned: when unit is set and the journal returned entries
  type: str
timed_out:
  description: I(timeout) ran out before ready.
  returned: always
  type: bool
elapsed:
  description: Seconds this call waited.
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
  sample: http://0.0.0.0:30000
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

from ansible_collections.sparkfleet.vllm.plugins.module_utils._vllm_wait import finish, run


def main():
    module = AnsibleModule(
        argument_spec=dict(
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
            setting_names=dict(type="dict", default={}),
        ),
        mutually_exclusive=[("log_file", "unit"), ("log_file", "container")],
        required_one_of=[("log_file", "unit", "container", "url")],
        supports_check_mode=True,
    )
    finish(module, run(module))


if __name__ == "__main__":
    main()
