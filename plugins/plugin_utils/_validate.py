# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Validation of every role's variables: the entry points preflight and vllm_serve call (settings_errors,
serving_errors, node_paths) over each role's table of checks.

Each role's checks live in their own module, along the roles' argument specs: _validate_<role>.py holds CHECKS
(variable -> check) for every option of roles/<role>/meta/argument_specs.yml, and what is particular to the role
(vLLM's and Ray's flags); the value checks they are made of are in _validate_values.py. A test ties each table to its
role's argument spec (names, types, bounds, choices): tests/unit/plugins/plugin_utils/test_validate_specs.py.
The names of those modules that callers use are re-exported here, so callers import this module only.

Private to the collection, pure functions, no I/O. A check never raises: it returns (normalised value, None) or
(None, problem), the problem saying what is wrong and how to fix it.
"""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import (
    _validate_gpu_cleanup,
    _validate_healthcheck,
    _validate_model_sync,
    _validate_monitoring,
    _validate_preflight,
    _validate_prepare,
    _validate_ray_cluster,
    _validate_runtime_image,
    _validate_sparkfleet,
    _validate_vllm_serve,
)
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate_ray_cluster import (
    RAY_EXPOSING,
    RAY_PINNED,
    RAY_PORT_FLAGS,
    firewall_allow_problems,
    ray_extra_args_problems,
)
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate_values import (
    COUNT_MAX,
    FABRIC_ENV,
    INCIDENTS_MAX,
    INT_CARRIED_MAX,
    OWNED_ENV,
    SECONDS_MAX,
    UNSAFE,
    UNSAFE_ENV,
    check_api_key,
    check_bool,
    check_calendar,
    check_cidr_list,
    check_command_globs,
    check_controller_dir,
    check_env,
    check_fraction,
    check_host,
    check_int,
    check_load_command,
    check_max_model_len,
    check_min_version,
    check_model_dir,
    check_names,
    check_parallel_size,
    check_port,
    check_string,
    check_url,
    check_user,
    env_problems,
    is_host_name,
    is_loopback,
    is_string,
    unsafe_problem,
)
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate_vllm_serve import (
    ALWAYS_PINNED,
    KEY_FLAGS,
    MTP_TOKENS_MAX,
    SERVING_PINNED,
    VLLM_BOOLEAN_FLAGS,
    VLLM_SERVE_FLAGS,
    VLLM_SHORT_ALIASES,
    extra_args_argv,
    flag_problem,
    normalize_flag,
    pinned_flags,
    resolve_flag,
)

# What callers read from here: the entry points and tables, and the names re-exported from the role modules.
__all__ = (
    "ROLE_TABLES", "SERVING_CHECKS", "ROLE_CHECKS", "SECRET_NAMES", "HEAD_ONLY_PREFIXES", "WRITTEN_PATHS",
    "serving_errors", "settings_errors", "node_paths", "ALWAYS_PINNED", "COUNT_MAX", "FABRIC_ENV", "INCIDENTS_MAX",
    "INT_CARRIED_MAX", "KEY_FLAGS", "MTP_TOKENS_MAX", "OWNED_ENV", "RAY_EXPOSING", "RAY_PINNED", "RAY_PORT_FLAGS",
    "SECONDS_MAX", "SERVING_PINNED", "UNSAFE", "UNSAFE_ENV", "VLLM_BOOLEAN_FLAGS", "VLLM_SERVE_FLAGS",
    "VLLM_SHORT_ALIASES", "check_api_key", "check_bool", "check_calendar", "check_cidr_list", "check_command_globs",
    "check_controller_dir", "check_env", "check_fraction", "check_host", "check_int", "check_load_command",
    "check_max_model_len", "check_min_version", "check_model_dir", "check_names", "check_parallel_size", "check_port",
    "check_string", "check_url", "check_user", "env_problems", "extra_args_argv", "firewall_allow_problems", "flag_problem", "is_host_name",
    "is_loopback", "is_string", "normalize_flag", "pinned_flags", "ray_extra_args_problems", "resolve_flag",
    "unsafe_problem",
)

# Each role's table, by role (the roles preflight checks; qualify checks its own variables when it runs).
ROLE_TABLES = {
    "sparkfleet": _validate_sparkfleet.CHECKS,
    "preflight": _validate_preflight.CHECKS,
    "runtime_image": _validate_runtime_image.CHECKS,
    "gpu_cleanup": _validate_gpu_cleanup.CHECKS,
    "model_sync": _validate_model_sync.CHECKS,
    "ray_cluster": _validate_ray_cluster.CHECKS,
    "vllm_serve": _validate_vllm_serve.CHECKS,
    "healthcheck": _validate_healthcheck.CHECKS,
    "monitoring": _validate_monitoring.CHECKS,
    "prepare": _validate_prepare.CHECKS,
}
# The serving check (serving_errors, vllm_serve's own check and the vllm_serve_args filter): vllm_serve's variables
# and the floor settings it reads.
SERVING_CHECKS = dict(_validate_vllm_serve.CHECKS)
SERVING_CHECKS.update((name, _validate_sparkfleet.CHECKS[name]) for name in _validate_sparkfleet.SERVING_FLOOR)
# Every other role variable preflight checks.
ROLE_CHECKS = dict((name, check) for table in ROLE_TABLES.values() for name, check in table.items()
                   if name not in SERVING_CHECKS)


# Secrets: their value never appears in a message.
SECRET_NAMES = frozenset(("vllm_serve_api_key", "healthcheck_api_key", "ray_cluster_auth_token", "model_sync_hf_token",
                          "monitoring_webhook_url"))


def _shown(name, value):
    """The value as a message shows it: never a secret, and an env dict by its names only (values may be tokens)."""
    if name in SECRET_NAMES:
        return "(hidden)"
    if name.endswith("_env") and isinstance(value, dict):
        return "{%s}" % ", ".join("%s: ..." % (k,) for k in sorted(value, key=str))
    return repr(value)


def serving_errors(settings, host="head", template_errors=None, gpus=None):
    """Every problem with the vllm_serve variables of one host, each naming host, variable, value and fix.

    settings: variable -> templated value (a missing variable is not checked); template_errors: variable ->
    the templating error (a Jinja error in an inventory value); gpus: the GPUs the inventory declares, which
    tensor x pipeline parallel must equal. Never raises.
    """
    errors = []
    if not isinstance(settings, dict):
        return ["%s: the serving settings must be a dict of variables, got %s" % (host, type(settings).__name__)]
    failed = dict(template_errors or {})
    for name in sorted(failed):
        reason = str(failed[name]).strip()
        errors.append("%s: %s cannot be templated: %s%s" % (
            host, name, reason, "" if "in the inventory" in reason else "; fix the expression in the inventory"))
    good = {}
    for name in sorted(settings, key=str):
        if name in failed:
            continue
        value = settings[name]
        if name == "vllm_serve_extra_args":
            words, problems = extra_args_argv(value, SERVING_PINNED)
            errors.extend("%s: vllm_serve_extra_args: %s" % (host, p) for p in problems)
            continue
        check = SERVING_CHECKS.get(name)
        if check is None:
            continue
        if name == "vllm_serve_env":
            normal, problem = check_env(value, settings.get("sparkfleet_allow_unsafe_env"))
        else:
            normal, problem = check(value)
        if problem:
            errors.append("%s: %s %s %s" % (host, name, _shown(name, value), problem))
        else:
            good[name] = normal
    tp, pp = good.get("vllm_serve_tensor_parallel_size"), good.get("vllm_serve_pipeline_parallel_size")
    if isinstance(gpus, int) and not isinstance(gpus, bool) and tp is not None and pp is not None and tp * pp != gpus:
        errors.append("%s: vllm_serve_tensor_parallel_size (%d) x vllm_serve_pipeline_parallel_size (%d) = %d, but the"
                      " inventory declares %d GPU(s) (sparkfleet_gpus_per_node over the nodes); make them equal"
                      % (host, tp, pp, tp * pp, gpus))
    key, addr = good.get("vllm_serve_api_key"), good.get("sparkfleet_api_host")
    if key == "" and addr is not None and not is_loopback(addr) and good.get("vllm_serve_allow_open_api") is not True:
        errors.append("%s: vllm_serve_api_key is empty, so the API on %s:%s would be open to anyone who reaches it;"
                      " set vllm_serve_api_key (keep it in a vault), or set vllm_serve_allow_open_api: true to serve"
                      " without a key" % (host, addr, good.get("sparkfleet_api_port", "?")))
    return errors


# ---------------------------------------------------------------- every role's variables (preflight)

# The variables checked on the head only (the API, the engine, the model state and the checks of the served API are
# the head's).
HEAD_ONLY_PREFIXES = ("vllm_serve_", "healthcheck_", "sparkfleet_api_", "sparkfleet_model_state_file")


def _ports_problems(good):
    """Two of Ray's ports (or the API's) on one number, and a worker range upside down."""
    problems = []
    names = (["sparkfleet_ray_port", "sparkfleet_api_port"] + sorted(RAY_PORT_FLAGS.values())
             + ["monitoring_prometheus_port", "monitoring_alertmanager_port", "monitoring_node_exporter_port"])
    seen = {}
    lo, hi = good.get("ray_cluster_min_worker_port"), good.get("ray_cluster_max_worker_port")
    for name in names:
        port = good.get(name)
        if port is None:
            continue
        if port in seen:
            problems.append("%s and %s are both %d; give each its own port" % (seen[port], name, port))
        seen.setdefault(port, name)
        if lo is not None and hi is not None and lo <= port <= hi and name not in (
                "ray_cluster_min_worker_port", "ray_cluster_max_worker_port"):
            problems.append("%s %d lies in Ray's worker port range %d-%d (ray_cluster_min_worker_port /"
                            " ray_cluster_max_worker_port); move one of them" % (name, port, lo, hi))
    if lo is not None and hi is not None and lo > hi:
        problems.append("ray_cluster_min_worker_port %d is above ray_cluster_max_worker_port %d" % (lo, hi))
    return problems


def settings_errors(settings, host="head", template_errors=None, head=True, gpus=None, sources=None):
    """Every problem with every role's variables on one host, each naming host, variable, value and fix.

    settings: variable -> value as the roles would read it (sparkfleet.vllm.role_settings); template_errors:
    variable -> templating error; head: whether host is the head (vllm_serve_* and healthcheck_* are checked
    there only); sources: for a variable whose value is its role's default, the variables that default is made of
    (a problem of a source is named once, not again in each value made from it). Never raises. The serving variables
    go through serving_errors (the rule vllm_serve applies).
    """
    if not isinstance(settings, dict):
        return ["%s: the settings must be a dict of variables, got %s" % (host, type(settings).__name__)]
    failed = dict(template_errors) if isinstance(template_errors, dict) else {}
    scope = [n for n in list(settings) + list(failed) if is_string(n)
             and (head or not n.startswith(HEAD_ONLY_PREFIXES))]
    errors = []
    if head:
        serving = dict((n, settings[n]) for n in settings if n in SERVING_CHECKS)
        errors += serving_errors(serving, host, dict((n, e) for n, e in failed.items() if n in SERVING_CHECKS), gpus)
    good = {}
    for name in sorted(set(scope)):
        if name in SERVING_CHECKS and head:
            continue
        if name in failed:
            reason = str(failed[name]).strip()
            errors.append("%s: %s cannot be templated: %s%s" % (
                host, name, reason, "" if "in the inventory" in reason else "; fix the expression in the inventory"))
            continue
        value = settings[name]
        check = ROLE_CHECKS.get(name) or SERVING_CHECKS.get(name)
        if check is None:
            continue
        normal, problem = check(value)
        if problem:
            errors.append("%s: %s %s %s" % (host, name, _shown(name, value), problem))
        else:
            good[name] = normal
    for name in ("sparkfleet_ray_port", "sparkfleet_api_port") if head else ("sparkfleet_ray_port",):
        if name not in good and name in settings and check_port(settings[name])[1] is None:
            good[name] = check_port(settings[name])[0]
    errors += ["%s: %s" % (host, p) for p in _ports_problems(good)]
    exposure = settings.get("sparkfleet_allow_ray_exposure") is True
    if "ray_cluster_env" in settings and "ray_cluster_env" not in failed:
        errors += ["%s: ray_cluster_env %s" % (host, p)
                   for p in env_problems(settings["ray_cluster_env"], settings.get("sparkfleet_allow_unsafe_env"))]
    if "ray_cluster_extra_args" in settings and "ray_cluster_extra_args" not in failed:
        errors += ["%s: ray_cluster_extra_args: %s" % (host, p)
                   for p in ray_extra_args_problems(settings["ray_cluster_extra_args"], exposure)]
    if "ray_cluster_firewall_allow" in settings and "ray_cluster_firewall_allow" not in failed:
        nets, problem = check_cidr_list(settings["ray_cluster_firewall_allow"])
        if problem:
            errors.append("%s: ray_cluster_firewall_allow %r %s" % (host, settings["ray_cluster_firewall_allow"],
                                                                    problem))
        else:
            errors += ["%s: %s" % (host, p) for p in firewall_allow_problems(
                nets, settings.get("sparkfleet_fabric_subnet"), exposure)]
    if settings.get("ray_cluster_firewall") is False and not exposure:
        errors.append("%s: ray_cluster_firewall is false, which leaves Ray's ports (they run code for anyone who reaches"
                      " them) open to every network the nodes are on; keep it true, or set sparkfleet_allow_ray_exposure:"
                      " true as well to accept that" % host)
    if settings.get("ray_cluster_dashboard") is True and settings.get("ray_cluster_auth") is False and not exposure:
        errors.append("%s: ray_cluster_dashboard is true while ray_cluster_auth is false: the dashboard (which runs"
                      " code) would answer anyone on the node without a token; turn auth on, or set"
                      " sparkfleet_allow_ray_exposure: true to accept that" % host)
    named = set(e.split(" ", 2)[1].rstrip(":") for e in errors if e.startswith(host + ": ") and " " in e[len(host) + 2:])
    sources = sources if isinstance(sources, dict) else {}
    seen, unique = set(), []
    for e in errors:
        name = e[len(host) + 2:].split(" ", 1)[0].rstrip(":")
        derived_from = sources.get(name) if isinstance(sources.get(name), list) else []
        if e in seen or any(src in named for src in derived_from if src != name):
            continue
        seen.add(e)
        unique.append(e)
    return unique


# Every path variable the roles write on a node: name -> (kind, where: "all" | "head" | "workers", ssh user var).
# The node module (path_guard) resolves each on the node: symbolic links, existing files, the node's homes.
WRITTEN_PATHS = {
    "sparkfleet_config_dir": ("directory", "all", None),
    "sparkfleet_ray_tmp_dir": ("directory", "all", None),
    "sparkfleet_cache_dir": ("directory", "all", None),
    "sparkfleet_model_state_file": ("state file", "head", None),
    "sparkfleet_model_dir": ("model directory", "all", None),
    "vllm_serve_model": ("model directory", "head", None),
    "model_sync_src": ("model directory", "head", None),
    "model_sync_dest": ("model directory", "workers", None),
    "model_sync_key": ("key file", "head", None),
    "model_sync_known_hosts": ("ssh file", "all", "model_sync_user"),
    "model_sync_forced_command": ("file", "workers", None),
    "model_sync_allowed_commands": ("file", "workers", None),
    "ray_cluster_auth_token_path": ("file", "head", None),
    "runtime_image_sync_key": ("key file", "head", None),
    "runtime_image_known_hosts": ("file", "head", None),
    "runtime_image_loader": ("file", "workers", None),
    "runtime_image_progress_file": ("file", "head", None),
}


def node_paths(settings, head=True, worker=False):
    """The written paths of one node for the path_guard module: [{name, path, kind, user}], only values that are
    strings (the controller's checks report the others)."""
    out = []
    if not isinstance(settings, dict):
        return out
    for name in sorted(WRITTEN_PATHS):
        kind, where, user_var = WRITTEN_PATHS[name]
        if where == "head" and not head or where == "workers" and not worker:
            continue
        value = settings.get(name)
        if not is_string(value) or not value:
            continue
        user = settings.get(user_var) if user_var else None
        if kind == "ssh file" and not value.startswith("~/"):
            kind = "file"
        out.append(dict(name=name, path=value, kind=kind, user=user if is_string(user) else None))
    return out
