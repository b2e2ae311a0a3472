# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """Options shared by gpu_holders and gpu_release (their argument spec is shared in module_utils/gpu/_gpu)."""

    DOCUMENTATION = r"""
options:
  nvidia_smi:
    description:
      - How to treat C(nvidia-smi). V(auto) uses it when installed and otherwise reports
        holders from device files only, with a warning. V(required) fails when it is missing or
        fails. V(skip) never runs it.
    type: str
    default: auto
    choices: [auto, required, skip]
  device_glob:
    description:
      - Shell pattern of the device files whose open descriptors make a process a holder.
        C(/dev/nvidiactl) and C(/dev/nvidia-uvm) are left out by default because every NVML
        client opens them without holding GPU memory.
    type: str
    default: /dev/nvidia[0-9]*
  ours:
    description:
      - Names or shell patterns of systemd units, containers or process names that belong to
        this collection. M(sparkfleet.vllm.gpu_holders) reports a matching holder with status C(ours);
        M(sparkfleet.vllm.gpu_release) leaves it running.
      - C(foo) also matches the unit C(foo.service).
    type: list
    elements: str
    default: []
  protect:
    description:
      - Names or shell patterns of units, containers or process names never to touch
        (persistence daemon, DCGM, display managers).
    type: list
    elements: str
    default: [nvidia-persistenced, nvidia-fabricmanager, dcgm*, nv-hostengine, nvidia-dcgm,
              gdm*, lightdm, sddm, display-manager, Xorg, Xwayland, gnome-shell]
  stale_units:
    description:
      - Names or shell patterns of systemd units (and containers) from earlier deployments.
        M(sparkfleet.vllm.gpu_holders) lists them whether or not they hold the GPU now;
        M(sparkfleet.vllm.gpu_release) stops and disables them so they do not come back after a reboot.
      - The containers such a unit starts are stale too, whatever their names. They are read from the unit's
        C(ExecStart*) commands (C(docker run --name N), C(docker start N)), from a shell script those commands
        run, and from a C(docker run) running in the unit now.
      - Units and containers that also match O(ours) or O(protect) are left out.
    type: list
    elements: str
    default: [vllm-cluster, vllm-proxy, vllm-embeddings, vllm-reranker, sglang*]
  stale_containers:
    description:
      - Names or shell patterns of docker containers from earlier deployments, whatever started them (by hand, a
        unit not in O(stale_units), a script). M(sparkfleet.vllm.gpu_release) removes their restart policy and
        stops them whether or not they hold the GPU now, and stops and disables any unit that starts them.
      - Containers that also match O(ours) or O(protect) are left out.
    type: list
    elements: str
    default: [vllm_node, vllm_embeddings, reranker]
  stale_commands:
    description:
      - Shell patterns of the process names and command lines of GPU holders that are engines of an earlier
        deployment (vLLM, Ray's workers and daemons, SGLang), stale whatever unit or container runs them, if any.
        A pattern is matched against the process name (C(comm), for example C(VLLM::EngineCore)) and against the
        whole command line, its words joined by spaces.
      - A GPU holder outside O(ours) and O(protect) that is neither in a stale unit or container nor matched here is
        foreign, see O(stop_foreign).
    type: list
    elements: str
    default: ['VLLM::*', '*vllm serve*', '*vllm.entrypoints*', 'ray::*', raylet, gcs_server,
              '*/ray/_private/workers/default_worker.py*', 'sglang::*', '*sglang.launch_server*']
  stop_foreign:
    description:
      - Also stop GPU holders that are not stale (neither in a stale unit or container nor matched by
        O(stale_commands)), for example a colleague's job started after the last deployment.
      - When false, M(sparkfleet.vllm.gpu_holders) names each in its C(blocking) result (its C(fail_on_foreign)
        fails on them) and M(sparkfleet.vllm.gpu_release) fails naming them before it changes anything.
    type: bool
    default: false
  system:
    description:
      - Names or shell patterns of the services a DGX OS install runs that may open the GPU or hold its memory
        (driver persistence, DCGM, NVSM, the DGX Dashboard, the power daemon, the desktop's display stack).
      - Such a holder is protected (never stopped, not even with O(stop_foreign)) unless O(stale_units) or
        O(stale_containers) name its unit or container; a command-line pattern of O(stale_commands) never stops
        it. M(sparkfleet.vllm.gpu_holders) names each one left running, with how to have it stopped.
    type: list
    elements: str
    default: [nvidia-persistenced, nvidia-fabricmanager, nvidia-dcgm, dcgm*, nv-hostengine, nvsm*, dgx-dashboard*,
              nvidia-powerd, gdm*, display-manager, Xorg, Xwayland, gnome-shell, gnome-remote-desktop]"""
