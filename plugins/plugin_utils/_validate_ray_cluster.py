# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ray_cluster role's variables, and the `ray start` flags its extra args may not set.

Every option of roles/ray_cluster/meta/argument_specs.yml has its check here (CHECKS: variable -> check, None where
_validate.settings_errors checks it with its context); tests/unit/plugins/plugin_utils/test_validate_specs.py holds
the two together. Private to the collection, pure functions, no I/O.
"""

from __future__ import annotations

import ipaddress

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate_values import (
    SECONDS_MAX,
    check_plain_version,
    check_bool,
    check_choice,
    check_count,
    check_fraction,
    check_gpu_args,
    check_image,
    check_nft_table,
    check_optional_count,
    check_optional_secret,
    check_port,
    check_port_range,
    check_read_path,
    check_seconds,
    check_whole,
    check_written_file,
    is_string,
    unsafe_problem,
)


# Flags of `ray start` the collection sets itself (flag -> what to set instead); the extra args may never set them.
RAY_PINNED = {
    "--node-ip-address": "set sparkfleet_fabric_ip (Ray registers every node on its fabric IP)",
    "--address": "remove it (every worker joins the head's fabric IP at sparkfleet_ray_port)",
    "--port": "set sparkfleet_ray_port instead",
    "--head": "remove it (the spark_head group decides the head)",
    "--block": "remove it (the unit runs Ray in the foreground already)",
    "--num-gpus": "set ray_cluster_num_gpus instead",
    "--num-cpus": "set ray_cluster_num_cpus instead",
    "--temp-dir": "set sparkfleet_ray_tmp_dir instead",
    "--disable-usage-stats": "remove it (usage stats are always off)",
    "--gcs-server-port": "set sparkfleet_ray_port instead",
    "--worker-port-list": "set ray_cluster_min_worker_port / ray_cluster_max_worker_port instead",
}
# Port flags: pinned by the ray_cluster_*_port variables, which the node firewall names.
RAY_PORT_FLAGS = {
    "--node-manager-port": "ray_cluster_node_manager_port", "--object-manager-port": "ray_cluster_object_manager_port",
    "--runtime-env-agent-port": "ray_cluster_runtime_env_agent_port",
    "--dashboard-agent-grpc-port": "ray_cluster_dashboard_agent_grpc_port",
    "--dashboard-agent-listen-port": "ray_cluster_dashboard_agent_listen_port",
    "--metrics-export-port": "ray_cluster_metrics_export_port", "--min-worker-port": "ray_cluster_min_worker_port",
    "--max-worker-port": "ray_cluster_max_worker_port", "--ray-client-server-port": "ray_cluster_client_server_port",
    "--dashboard-port": "ray_cluster_dashboard_port",
}
RAY_PINNED.update((f, "set %s instead (the node firewall names it)" % var) for f, var in RAY_PORT_FLAGS.items())
# Flags that expose Ray beyond the fabric: refused unless sparkfleet_allow_ray_exposure is true.
RAY_EXPOSING = {
    "--dashboard-host": "the dashboard runs code for anyone who reaches it (set ray_cluster_dashboard: true for"
                        " 127.0.0.1)",
    "--include-dashboard": "set ray_cluster_dashboard instead (the dashboard listens on 127.0.0.1 only)",
    "--ray-debugger-external": "it binds Ray's debugger to every interface",
}


def ray_extra_args_problems(value, allow_exposure=False):
    """Every problem of ray_cluster_extra_args (a list of `ray start` words). Never raises."""
    if value is None:
        return []
    if not isinstance(value, list):
        return ["must be a list of `ray start` arguments, e.g. ['--object-store-memory', '10000000000']"]
    problems = []
    for word in value:
        if isinstance(word, bool) or not isinstance(word, (str, int, float)) or (is_string(word) and not word):
            problems.append("must hold only non-empty strings or numbers, got %r" % (word,))
            continue
        word = str(word)
        problem = unsafe_problem(word)
        if problem:
            problems.append("%r %s" % (word, problem))
            continue
        if not word.startswith("-"):
            continue
        flag = word.split("=", 1)[0]
        # click reads only the exact long names; '_' spellings are not Ray's, so they are refused as unknown to it
        norm = flag.replace("_", "-")
        if norm in RAY_PINNED:
            problems.append("%s is pinned by this deployment; %s" % (flag, RAY_PINNED[norm]))
        elif norm in RAY_EXPOSING and not allow_exposure:
            problems.append("%s would expose Ray beyond the fabric: %s; or set sparkfleet_allow_ray_exposure: true"
                            " to accept that" % (flag, RAY_EXPOSING[norm]))
        elif flag != norm:
            problems.append("%s is not a ray start flag (ray spells its flags with '-': %s)" % (flag, norm))
    return problems


def firewall_allow_problems(nets, subnet, allow_exposure):
    """Networks of ray_cluster_firewall_allow that reach beyond the fabric subnet (refused without the opt-in)."""
    if allow_exposure is True:
        return []
    try:
        fabric = ipaddress.ip_network(str(subnet), strict=False)
    except ValueError:
        return []  # the inventory check names a bad subnet
    wide = [str(n) for n in nets if n.version != fabric.version or not n.subnet_of(fabric)]
    if not wide:
        return []
    return ["ray_cluster_firewall_allow %s reaches beyond the fabric subnet %s: anyone there could run code through"
            " Ray's ports (CVE-2023-48022); list only the fabric subnet (or parts of it), or set"
            " sparkfleet_allow_ray_exposure: true to accept that" % (", ".join(wide), fabric)]


CHECKS = {
    "ray_cluster_image": check_image,
    "ray_cluster_gpu_args": check_gpu_args,
    "ray_cluster_num_gpus": check_whole(0, "a whole number of GPUs"),
    "ray_cluster_num_cpus": check_optional_count,
    "ray_cluster_dashboard": check_bool,
    "ray_cluster_memory_monitor": check_bool,
    "ray_cluster_memory_usage_threshold": check_fraction,
    "ray_cluster_auth": check_bool,
    "ray_cluster_auth_token_path": check_written_file,
    "ray_cluster_auth_token": check_optional_secret,
    "ray_cluster_auth_min_ray_version": lambda v: check_plain_version(v, "2.52.0"),
    "ray_cluster_rdma": check_bool,
    "ray_cluster_env": None,
    "ray_cluster_extra_args": None,
    "ray_cluster_join_timeout": check_seconds,
    "ray_cluster_probe_object_mb": check_count,
    "ray_cluster_probe_timeout": check_seconds,
    "ray_cluster_restart_sec": check_whole(0, "a whole number of seconds", SECONDS_MAX),
    "ray_cluster_restart_max_delay": check_seconds,
    "ray_cluster_gcs_wait_timeout": check_seconds,
    "ray_cluster_watchdog": check_bool,
    "ray_cluster_watchdog_interval": check_seconds,
    "ray_cluster_watchdog_grace": check_whole(0, "a whole number of seconds", SECONDS_MAX),
    "ray_cluster_watchdog_checks": check_count,
    "ray_cluster_watchdog_pg_stuck": check_whole(0, "a whole number of seconds (0: off)", SECONDS_MAX),
    "ray_cluster_watchdog_pg_stuck_leak": check_whole(0, "a whole number of seconds (0: off)", SECONDS_MAX),
    "ray_cluster_firewall": check_bool,
    "ray_cluster_firewall_allow": None,
    "ray_cluster_firewall_table": check_nft_table,
    "ray_cluster_firewall_ephemeral_range": check_port_range,
    "ray_cluster_firewall_foreign_listeners": check_choice("warn", "fail"),
    "ray_cluster_firewall_ephemeral": check_bool,
    "ray_cluster_firewall_nft": check_read_path,
}
CHECKS.update((var, check_port) for var in RAY_PORT_FLAGS.values())
