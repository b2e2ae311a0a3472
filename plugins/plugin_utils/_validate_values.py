# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The value checks every role's variables are made of (numbers, names, paths, env dicts, docker words).

Private to the collection, pure functions, no I/O. A check never raises: it returns (normalised value, None) or
(None, problem), the problem saying what is wrong and how to fix it. Each role's table of checks is in
_validate_<role>.py; the entry points (settings_errors, serving_errors) in _validate.py.
"""

from __future__ import annotations

import ipaddress
import math
import re
import unicodedata

from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric import _rdma
from ansible_collections.sparkfleet.vllm.plugins.module_utils.image._image import parse_version
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._paths import (
    normal_path,
    written_path_problem,
)

_HUMAN_INT_RE = re.compile(r"^(\d+(?:\.\d+)?)([kmgtKMGT])\Z")
_DECIMAL = {"k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9, "t": 10 ** 12}
_BINARY = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
# systemd rewrites these inside ExecStart even when quoted ($VAR, %specifier, C escapes); newline/NUL break any line.
UNSAFE = (("\n", "a newline"), ("\r", "a carriage return"), ("\0", "a NUL byte"),
          ("$", "'$'"), ("%", "'%'"), ("\\", "a backslash"))


def is_string(value):
    return isinstance(value, str)


def unsafe_problem(text):
    """The reason systemd's ExecStart would mangle text, or None."""
    for bad, name in UNSAFE:
        if bad in text:
            return ("contains %s, which systemd's ExecStart would rewrite or split; remove it (pass the value"
                    " through an environment variable or a config file instead)" % name)
    return None


# The largest number a consumer of ours carries whatever it is (a C int in ssh and systemd's parsers, bash's arithmetic
# after a x1000, Python): 2^31 - 1. Time settings stop at a year (systemd time spans, `date +%s` + it in bash, a Python
# deadline), counts at a million.
INT_CARRIED_MAX = 2 ** 31 - 1
SECONDS_MAX = 365 * 86400
COUNT_MAX = 10 ** 6
INCIDENTS_MAX = 64        # incident directories kept on the head (vllm_serve_incidents_keep)
# The one spelling of a whole number that bash ($((...)): a leading 0 is octal), systemd, argparse and int() all read
# alike: digits without blanks, sign or leading zeros (a minus for the checks that take negatives).
_CAPS = {INT_CARRIED_MAX: "2^31 - 1, the largest number every consumer carries",
         SECONDS_MAX: "a year: systemd's time spans, bash's arithmetic and the scripts' deadlines carry it",
         COUNT_MAX: "a million"}
_CANONICAL_INT_RE = re.compile(r"0|-?[1-9][0-9]*", re.ASCII)


def bounded(check, low, high, kind="int", low_open=False):
    """Mark a numeric check with the bounds it enforces: kind ("int" or "float"), low, high and whether low itself is
    refused. Each role's argument spec states the same bounds ("Preflight takes a whole number from 1 to 31536000");
    tests/unit/plugins/plugin_utils/test_validate_specs.py holds the two together and probes the check at them."""
    check.bounds = (kind, low, high, low_open)
    return check


def check_int(value, low=None, high=None, what="a whole number", strict=True):
    """An integer (or its plain decimal string: digits only, no blanks, sign or leading zeros) within [low, high].

    The value returned is an int: the normalised value every consumer must read. A float, even 30.0, is refused: a
    template would write it as "30.0", which bash's arithmetic and argparse's int refuse. Without a high bound the
    number stops at INT_CARRIED_MAX.

    strict=False is the filters' reading of values Jinja computed (6.0, " 6 "): every value the strict check accepts
    it reads alike, and it sets no upper bound of its own.
    """
    if isinstance(value, bool):
        return None, "must be %s, not a boolean" % what
    if not strict:
        return _loose_int(value, low, high, what)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e18:
            return None, ("must be %s written without a decimal point (%d, not %r): the scripts that read it take"
                          " whole numbers only" % (what, int(value), value))
        return None, "must be %s, not %r" % (what, value)
    if is_string(value):
        if not _CANONICAL_INT_RE.fullmatch(value):
            if re.fullmatch(r"\s*[+-]?\d+\s*", value, re.ASCII):
                return None, ("must be %s written as plain digits (%s, not %r): blanks, a '+' or leading zeros are"
                              " read differently by systemd, bash (a leading 0 is octal) and the scripts"
                              % (what, int(value), value))
            if len(value) > 40:
                return None, "must be %s (got a string of %d characters)" % (what, len(value))
            return None, "must be %s, not %r" % (what, value)
        if len(value) > 20:
            return None, "must be %s of at most 20 digits" % what
        value = int(value)
    if not isinstance(value, int):
        return None, "must be %s" % what
    cap = _CAPS.get(INT_CARRIED_MAX if high is None else high)
    high = INT_CARRIED_MAX if high is None else high
    if low is not None and value < low or value > high:
        if cap is None and low is not None:
            return None, "must be between %d and %d" % (low, high)
        if value > high:
            return None, "must be at most %d (%s)" % (high, cap or "its upper bound")
        return None, "must be at least %d" % low
    return value, None


def _loose_int(value, low, high, what):
    # ASCII: Unicode's \s takes characters int() refuses (U+001F), its \d digits no one means here.
    if is_string(value) and re.fullmatch(r"\s*[+-]?\d+\s*", value, re.ASCII) and len(value.strip()) <= 40:
        value = int(value)
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        return None, "must be %s" % what
    if low is not None and value < low or high is not None and value > high:
        if high is None:
            return None, "must be at least %d" % low
        if low is None:
            return None, "must be at most %d" % high
        return None, "must be between %d and %d" % (low, high)
    return value, None


def check_parallel_size(value):
    n, problem = check_int(value, 1)
    if problem and n is None and "at least" in problem:
        problem += " (1 means no parallelism of that kind)"
    return n, problem


def check_port(value):
    return check_int(value, 1, 65535, "a TCP port number")


def check_seconds(value):
    return check_int(value, 1, SECONDS_MAX, "a whole number of seconds")


def check_count(value):
    return check_int(value, 1, COUNT_MAX, "a whole number")


bounded(check_parallel_size, 1, INT_CARRIED_MAX)
bounded(check_port, 1, 65535)
bounded(check_seconds, 1, SECONDS_MAX)
bounded(check_count, 1, COUNT_MAX)


# The one spelling of a decimal number that Jinja's float, Python, argparse and Prometheus all read alike, and that
# a template writing the value as given writes unchanged: digits, at most one point with digits after it; no blanks,
# sign, exponent, '_' or leading zeros.
_CANONICAL_DECIMAL_RE = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]+)?", re.ASCII)


def _number(value, what):
    """(float, None) or (None, why): a number, or its plain decimal string; never a boolean."""
    if isinstance(value, bool):
        return None, "must be a number, not a boolean"
    if is_string(value):
        if _CANONICAL_DECIMAL_RE.fullmatch(value):
            return float(value), None
        try:
            meant = float(value) if len(value) <= 40 else None
        except ValueError:
            meant = None
        if meant is not None and math.isfinite(meant):
            return None, ("must be written as plain decimal digits (%r, not %r): a template writes the value as"
                          " given, and blanks, a sign, an exponent or '_' are not read alike by every consumer"
                          % (meant, value))
        return None, "must be a number in %s" % what
    if not isinstance(value, (int, float)):
        return None, "must be a number in %s" % what
    try:
        return float(value), None
    except OverflowError:
        return None, "must be a number in %s" % what


def check_fraction(value):
    """gpu_memory_utilization: a number in (0, 1]."""
    f, problem = _number(value, "(0, 1], e.g. 0.80")
    if problem is None and not 0 < f <= 1:
        return None, "must be in (0, 1] (it is a fraction: 0.85 means 85%)"
    return (None, problem) if problem else (f, None)


bounded(check_fraction, 0, 1, "float", low_open=True)


def check_share(high):
    """A share of a node's memory in [0, high] (the memory gate's margin and tolerance)."""
    def check(value):
        f, problem = _number(value, "[0, %g], a share of each node's memory (0.05 means 5%%)" % high)
        if problem is None and not 0 <= f <= high:
            return None, "must be in [0, %g] (a share of each node's memory: 0.05 means 5%%)" % high
        return (None, problem) if problem else (f, None)
    return bounded(check, 0, high, "float")


def parse_human_int(value):
    """vLLM's reading of sizes: 8192, 32k (x1000), 32K (x1024); decimals only with decimal suffixes."""
    s = value.strip()
    m = _HUMAN_INT_RE.match(s)
    if m:
        number, suffix = m.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise ValueError("decimals with a binary suffix")
        return int(number) * _BINARY[suffix]
    if not re.match(r"^\d+\Z", s):
        raise ValueError(s)
    return int(s)


def check_max_model_len(value):
    """A positive number of tokens: 32768, or vLLM's 32k (32000) / 32K (32768)."""
    if isinstance(value, bool):
        return None, "must be a positive integer or a size like '32k', not a boolean"
    if isinstance(value, int):
        n = value
    elif is_string(value):
        if value != value.strip():
            return None, ("must be written without blanks (%r, not %r): the value reaches vLLM's command line as given"
                          % (value.strip(), value))
        try:
            n = parse_human_int(value)
        except ValueError:
            return None, "must be a positive integer or a size like '32k' (32000) or '32K' (32768)"
    else:
        return None, "must be a positive integer or a size like '32k'"
    if n < 1:
        return None, "must be positive"
    if n > INT_CARRIED_MAX:
        return None, "must be at most %d tokens (2^31 - 1, the largest number every consumer carries)" % INT_CARRIED_MAX
    return value, None


bounded(check_max_model_len, 1, INT_CARRIED_MAX)


def check_string(value):
    if not is_string(value) or not value.strip():
        return None, "must be a non-empty string"
    problem = unsafe_problem(value)
    return (None, problem) if problem else (value, None)


def check_null_or_string(value, what):
    """null (vLLM's default) or a non-empty string: the vllm_serve_args filter refuses '' (it would write the flag
    with an empty value), so preflight does too."""
    if value == "":
        return None, "must be null (vLLM's default) or %s, not ''" % what
    return check_optional_string(value)


def check_optional_string(value):
    return (None, None) if value is None or value == "" else check_string(value)


def value_word_problem(word):
    """Why one element of a list-valued option (a value, never a flag) is refused, or None.

    vLLM's multi-value options (nargs='+') stop at the first word that starts with '-' and read it as a flag, so
    `served_model_name: [qwen, --host=0.0.0.0]` would re-set a pinned flag; a value word never starts with '-'.
    """
    problem = check_string(word)[1]
    if problem:
        return problem
    if word.startswith("-"):
        return ("has the element %r, which starts with '-': vllm serve would read it as a flag, not as a value;"
                " remove it" % word)
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in word):
        return "has the element %r, which holds a control character" % word
    return None


def check_names(value):
    """served_model_name: a string or a non-empty list of strings, each a value (never a flag)."""
    names = [value] if is_string(value) else value
    if not isinstance(names, list) or not names:
        return None, "must be a string or a non-empty list of strings"
    for name in names:
        problem = value_word_problem(name) if is_string(name) else "must hold only strings, got %r" % (name,)
        if problem:
            return None, problem
    return names, None


def check_model_dir(value):
    """The model directory: an absolute path (same on every node), in no system or home dot-directory."""
    if not is_string(value) or not value.strip():
        return None, ("must be the absolute path of the model directory (the same on every node); set"
                      " sparkfleet_model_dir")
    problem = unsafe_problem(value)
    if problem:
        return None, problem
    if not value.startswith("/"):
        return None, "must be an absolute path (it is mounted into the container at the same path)"
    if ":" in value or "," in value:
        return None, "must not contain ':' or ',' (docker -v splits on them)"
    if value != value.strip() or any(c.isspace() for c in value):
        return None, "must not contain whitespace"
    # The rule every path the roles write follows (preflight runs it again on each node, through its links).
    problem = written_path_problem(value, "model directory")
    if problem:
        return None, "%s; use the model's own directory, e.g. /models/<name>" % problem
    return normal_path(value), None


_HOSTNAME_RE = re.compile(r"^(?=.{1,253}\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                          r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?\Z")


def is_host_name(value):
    """An IP address or a DNS host name (RFC 1123 labels): nothing a shell, ssh or a URL would read otherwise."""
    if not is_string(value):
        return False
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return bool(_HOSTNAME_RE.match(value)) and not value.replace(".", "").isdigit()


def check_host(value):
    """The listen address: an IP address or a host name."""
    if not is_string(value) or not value.strip():
        return None, "must be the address vLLM listens on (an IP address)"
    if not is_host_name(value):
        return None, ("must be an IP address or a host name (letters, digits, '-' and '.'), e.g. 10.1.230.180 or"
                      " 0.0.0.0")
    return value, None


def is_loopback(host):
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def secret_problem(value):
    """Why a key or token (sent in an HTTP header, written to an env file) is refused, or None. Never shows it."""
    if any(c.isspace() for c in value):
        return ("contains whitespace (a stray newline or space from a file or vault?); clients send the key"
                " without it, so strip it")
    bad = [c for c in value if not 0x21 <= ord(c) <= 0x7e]
    if bad:
        return ("contains %d character(s) outside printable ASCII (a control character or a non-ASCII letter);"
                " HTTP headers carry ASCII only, so use letters, digits and punctuation" % len(bad))
    return None


def check_api_key(value):
    """The API key: empty (open API) or printable ASCII without whitespace."""
    if value is None:
        return "", None
    if not is_string(value):
        return None, "must be a string (keep it in a vault)"
    problem = secret_problem(value)
    return (None, problem) if problem else (value, None)


def check_bool(value):
    if not isinstance(value, bool):
        if isinstance(value, str):  # `-e name=false` on the command line gives the string "false"
            meant = "true" if value.strip().lower() in ("true", "yes", "on", "1") else "false"
            return None, ("must be true or false, not the string %r (on the command line give it as JSON:"
                          " -e '{\"<name>\": %s}')" % (value, meant))
        return None, "must be true or false"
    return value, None


# Environment the collection sets itself, per node or from a role variable: an env dict may not override it (name ->
# what to set instead). The fabric variables come from rdma_facts on each node.
FABRIC_ENV = tuple(name for name in _rdma.FABRIC_ENV_KEYS if name != "VLLM_HOST_IP")  # VLLM_HOST_IP: its own hint
OWNED_ENV = dict(
    [(name, "rdma_facts sets it on each node from the fabric it finds (set sparkfleet_fabric_interface or fix the"
            " fabric instead)") for name in FABRIC_ENV],
    VLLM_API_KEY="set vllm_serve_api_key (in a vault) instead",
    VLLM_HOST_IP="set sparkfleet_fabric_ip instead (each node keeps its own)",
    VLLM_CONFIG_ROOT="remove it (it holds the variables vLLM must not copy onto the workers)",
    VLLM_ENGINE_READY_TIMEOUT_S="set vllm_serve_engine_ready_timeout instead",
    NCCL_DEBUG="set vllm_serve_nccl_debug instead",
    RAY_ADDRESS="remove it (every node joins the head's fabric IP and sparkfleet_ray_port)",
    RAY_USAGE_STATS_ENABLED="remove it (usage stats stay off)",
    RAY_memory_monitor_refresh_ms="set ray_cluster_memory_monitor instead",
    RAY_memory_usage_threshold="set ray_cluster_memory_usage_threshold instead",
)
OWNED_ENV_PREFIXES = (("RAY_AUTH_", "set ray_cluster_auth / ray_cluster_auth_token instead (Ray's token"
                                    " authentication is the collection's)"),)
# Variables that open the server or the workers to more than serving (dev endpoints, pickle between processes,
# adapters loaded from any path by API call, profiler endpoints): refused unless named in sparkfleet_allow_unsafe_env.
UNSAFE_ENV = {
    "VLLM_SERVER_DEV_MODE": "it opens vLLM's development endpoints (reset, sleep, collective RPC) to API clients",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "it lets vLLM's processes exchange pickles (code) over the network",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "it lets API clients load adapters from any path or repository",
    "VLLM_TORCH_PROFILER_DIR": "it opens the profiler endpoints to API clients, which write traces on the node",
}


def env_problems(value, allow_unsafe=()):
    """Every problem of an env dict (vllm_serve_env, ray_cluster_env): names, one-line values, no override of what
    the collection owns, no security-weakening variable unless opted in. Never raises."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return ["must be a dict of NAME: value"]
    allowed = set(n for n in allow_unsafe if is_string(n)) if isinstance(allow_unsafe, (list, tuple, set)) else set()
    problems = []
    for name in sorted(value, key=str):
        if not is_string(name) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", name):
            problems.append("has %r, which is not an environment variable name" % (name,))
            continue
        fix = OWNED_ENV.get(name) or next((f for p, f in OWNED_ENV_PREFIXES if name.startswith(p)), None)
        if fix:
            problems.append("may not set %s: the collection owns it; %s" % (name, fix))
            continue
        if name in UNSAFE_ENV and name not in allowed:
            problems.append("may not set %s: %s; list it in sparkfleet_allow_unsafe_env to accept that"
                            % (name, UNSAFE_ENV[name]))
            continue
        item = value[name]
        if item is None:
            continue
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            problems.append("%s must be a string or a number, got %s" % (name, type(item).__name__))
            continue
        if any(c in str(item) for c in "\n\r\0"):
            problems.append("%s must be one line (no newline, carriage return or NUL)" % name)
    return problems


def check_env_names(value):
    """A list of environment variable names (sparkfleet_allow_unsafe_env)."""
    if not isinstance(value, list) or not all(is_string(n) and n in UNSAFE_ENV for n in value):
        return None, ("must be a list of the variables it allows, each one of %s (an opt-in: see the README's"
                      " security section)" % ", ".join(sorted(UNSAFE_ENV)))
    return value, None


def check_env(value, allow_unsafe=()):
    problems = env_problems(value, allow_unsafe)
    if problems:
        return None, "; ".join(problems)
    return ({} if value is None else value), None


_UNIT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@:-]*\Z")
_CONTAINER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]+\Z")
# NCCL_DEBUG's levels (NCCL reads them without regard to case); empty turns NCCL's log off.
NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")


# systemd refuses a unit name over 255 characters; the longest name we make of one is <name>-watchdog.service.
UNIT_NAME_MAX = 255 - len("-watchdog.service")


def check_unit_name(value):
    """A systemd service name without its .service suffix (the roles append it)."""
    if not is_string(value) or not _UNIT_RE.match(value):
        return None, "must be a systemd unit name (letters, digits, '_', '.', '@', ':', '-'), e.g. sparkfleet-vllm"
    if len(value) > UNIT_NAME_MAX:
        return None, ("is %d characters long; systemd refuses unit names over 255 characters and the roles add"
                      " '-watchdog.service' to it: use at most %d" % (len(value), UNIT_NAME_MAX))
    if value.endswith(".service"):
        return None, "must be given without '.service' (the roles add it): %s" % value[:-len(".service")]
    return value, None


def check_unit_and_container_name(value):
    """Our units run a container of the same name (sparkfleet_ray_unit, sparkfleet_vllm_unit): both rules apply."""
    problems = [p for p in (check_unit_name(value)[1], check_container_name(value)[1]) if p]
    return (None, " and ".join(problems)) if problems else (value, None)


def check_container_name(value):
    """A Docker container name (docker's own rule: [a-zA-Z0-9][a-zA-Z0-9_.-]+)."""
    if not is_string(value) or not _CONTAINER_RE.match(value):
        return None, "must be a Docker container name: a letter or digit, then letters, digits, '_', '.', '-'"
    return value, None


def _host_path_problem(value, what):
    """A host path the roles write and mount: absolute, and nothing systemd or docker -v would mangle."""
    if not is_string(value) or not value.strip():
        return "must be an absolute path (the %s)" % what
    problem = unsafe_problem(value)
    if problem:
        return problem
    if not value.startswith("/"):
        return "must be an absolute path (the %s)" % what
    if ":" in value or "," in value or any(c.isspace() for c in value):
        return "must not contain ':', ',' or whitespace (docker -v splits on them)"
    return None


def _written(value, what, kind, example):
    """A path the roles create, chown, chmod or overwrite: the host-path rule, then the written-path rule."""
    problem = _host_path_problem(value, what)
    if problem:
        return None, problem
    problem = written_path_problem(value, kind)
    if problem:
        return None, "%s; use %s" % (problem, example)
    return normal_path(value), None


def check_data_dir(value):
    """A directory the roles create (root) and mount read-write into the containers: never the system's."""
    return _written(value, "directory the containers write to", "directory",
                    "a directory of its own, e.g. /var/cache/sparkfleet/vllm")


def check_config_dir(value):
    """The directory of our env files and keys (/etc/sparkfleet, chmod 0750 root): a directory of its own."""
    return _written(value, "directory of the env files, e.g. /etc/sparkfleet", "directory",
                    "a directory of its own, e.g. /etc/sparkfleet")


def check_state_file(value):
    """model_sync's state file on the head (written, and copied next to itself as <file>.served)."""
    return _written(value, "file model_sync records the model state in", "file",
                    "a file in a directory of its own, e.g. /etc/sparkfleet/model.state")


def check_written_file(value):
    """A file a role writes (a key, a token, a progress file, a forced command)."""
    return _written(value, "file a role writes", "file", "a file in a directory of its own, e.g. under /etc/sparkfleet")


def check_known_hosts(value):
    """An ssh known-hosts file: under the sync user's ~/.ssh (ssh expands ~ on each hop) or a written file."""
    if is_string(value) and value.startswith("~/"):
        rest = value[2:]
        if not re.match(r"^\.ssh/[A-Za-z0-9._+@-]+\Z", rest) or rest in SSH_OWN_FILES:
            return None, ("must be ~/.ssh/<file of its own> (e.g. ~/.ssh/sparkfleet_known_hosts) or an absolute path;"
                          " never ssh's own files (%s)" % ", ".join(sorted(SSH_OWN_FILES)))
        name = rest.split("/", 1)[1]
        if name.startswith("id_") or name.endswith(".pub"):
            return None, "must not be a key file of ~/.ssh (%s)" % value
        return value, None
    return check_written_file(value)


# Files of ~/.ssh that ssh itself reads: never a known-hosts file of ours.
SSH_OWN_FILES = frozenset((".ssh/authorized_keys", ".ssh/authorized_keys2", ".ssh/config", ".ssh/rc",
                           ".ssh/environment"))


# Controller trees the failure logs never go into (the controller's homes, /root included, are fine: the default is
# the directory ansible-playbook runs from).
CONTROLLER_SYSTEM_TREES = ("/proc", "/sys", "/dev", "/boot", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32",
                           "/lib64", "/var/lib", "/var/log", "/run")


def check_controller_dir(value):
    """A directory the roles write on the controller (the failure logs): absolute, no system tree, no dot-directory
    of a home."""
    problem = check_string(value)[1]
    if problem:
        return None, problem
    if not value.startswith("/"):
        return None, "must be an absolute path on the controller"
    norm = normal_path(value)
    for tree in CONTROLLER_SYSTEM_TREES:
        if norm == tree or norm.startswith(tree + "/"):
            return None, "lies under the system directory %s of the controller; use e.g. ./sparkfleet-logs" % tree
    parts = norm.strip("/").split("/")
    dot = parts[2] if parts[0] == "home" and len(parts) > 2 else parts[1] if parts[0] == "root" and len(parts) > 1 else ""
    if dot.startswith("."):
        return None, "lies in a home's dot-directory (%s); use e.g. ./sparkfleet-logs" % dot
    return norm, None


def check_read_path(value):
    """A path the roles only read (a tool, a sysfs root, a device directory): absolute and unmangled."""
    problem = _host_path_problem(value, "path")
    if problem:
        return None, problem
    return normal_path(value), None


def check_nccl_debug(value):
    """NCCL_DEBUG for every rank: empty (off) or one of NCCL's levels."""
    if value is None or value == "":
        return "", None
    if not is_string(value) or value.strip().upper() not in NCCL_DEBUG_LEVELS:
        return None, "must be empty (off) or one of NCCL's levels %s (INFO shows the transport the healthcheck" \
                     " proves)" % "/".join(NCCL_DEBUG_LEVELS)
    return value.strip().upper(), None


def check_min_version(value):
    """A minimum image version (image_check compares it): unset, or a version such as "0.17.1"."""
    if value is None or value == "":
        return None, None
    if isinstance(value, bool) or isinstance(value, float):
        return None, ("must be a quoted version string such as \"0.17.1\" (YAML reads an unquoted 0.10 as the"
                      " number 0.1)")
    if isinstance(value, int):
        value = str(value)
    if not is_string(value) or parse_version(value) is None or unsafe_problem(value):
        return None, "must be a version such as \"0.17.1\" (numbers separated by dots), or null for no minimum"
    return value.strip(), None


def check_argv_words(value):
    """Extra docker run words: a list of non-empty strings systemd passes unchanged."""
    if not isinstance(value, list):
        return None, "must be a list of docker run arguments, e.g. ['--gpus', 'all']"
    for word in value:
        if not is_string(word) or not word:
            return None, "must hold only non-empty strings, got %r" % (word,)
        problem = unsafe_problem(word)
        if problem:
            return None, "%r %s" % (word, problem)
    return value, None


# The docker run flags that give a container its GPU; every other flag (name, network, mounts, env, privileges,
# capabilities, user) is the roles' own. -e/--env only for the NVIDIA container runtime's variables.
GPU_ARG_FLAGS = ("--gpus", "--runtime", "--device", "--device-cgroup-rule", "--group-add", "--ulimit", "-e", "--env")
GPU_DEVICE_PREFIXES = ("/dev/nvidia", "/dev/dri/", "/dev/infiniband/")


def check_gpu_args(value):
    """The docker run words that give a container the GPU (e.g. [--gpus, all] or [--device, /dev/nvidia0])."""
    words, problem = check_argv_words(value)
    if problem:
        return None, problem
    i = 0
    while i < len(words):
        flag, eq, arg = words[i].partition("=")
        if not flag.startswith("-"):
            return None, "has %r without a flag before it; write e.g. ['--gpus', 'all']" % words[i]
        if flag not in GPU_ARG_FLAGS:
            return None, ("has %r, which is not a docker run argument for the GPU (accepted: %s); the roles set the"
                          " container's name, network, mounts, environment and privileges themselves"
                          % (words[i], ", ".join(GPU_ARG_FLAGS)))
        if not eq:
            i += 1
            if i >= len(words) or words[i].startswith("-"):
                return None, "%s needs a value after it" % flag
            arg = words[i]
        if flag in ("-e", "--env") and not re.match(r"^NVIDIA_[A-Z0-9_]+=", arg):
            return None, ("%s %s: only the NVIDIA runtime's variables (NVIDIA_...=value) may be set here; the"
                          " containers' environment is vllm_serve_env / ray_cluster_env" % (flag, arg.split("=")[0]))
        if flag == "--device" and not arg.startswith(GPU_DEVICE_PREFIXES):
            return None, ("--device %s is not a GPU or RDMA device (accepted: %s...)"
                          % (arg, "..., ".join(GPU_DEVICE_PREFIXES)))
        i += 1
    return words, None


def check_optional_count(value):
    return (None, None) if value is None or value == "" else check_int(value, 1, COUNT_MAX, "a whole number")


bounded(check_optional_count, 1, COUNT_MAX)


def check_whole(low, what="a whole number", high=None):
    """A whole number from low to high (INT_CARRIED_MAX when high is None)."""
    return bounded(lambda v: check_int(v, low, high, what), low, INT_CARRIED_MAX if high is None else high)


def check_choice(*choices):
    def check(value):
        if not is_string(value) or value not in choices:
            return None, "must be one of %s" % ", ".join(choices)
        return value, None
    check.choices = choices
    return check


# A systemd OnCalendar= expression (weekly, Sun *-*-* 03:00:00, *-*-01 04:00): what its grammar may hold, no more.
_CALENDAR_RE = re.compile(r"^[A-Za-z0-9*:,./~ -]{1,120}\Z")
# Its words, in systemd's order (systemd.time(7)): a shortcut alone, or [weekdays] [date] [time] [UTC], one at least.
# A word systemd cannot parse drops OnCalendar= (the timer then refuses to load: the scrub would never run).
_CALENDAR_SHORTCUTS = ("minutely", "hourly", "daily", "weekly", "monthly", "yearly", "annually", "quarterly",
                       "semiannually")
_WEEKDAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*"
_CALENDAR_PARTS = (re.compile(r"%s(?:(?:,|\.\.)%s)*\Z" % (_WEEKDAY, _WEEKDAY)),
                   re.compile(r"[0-9*][0-9*,./~]*(?:-[0-9*][0-9*,./~]*){1,2}\Z"),
                   re.compile(r"[0-9*][0-9*,./]*(?::[0-9*][0-9*,./]*){1,2}\Z"),
                   re.compile(r"UTC\Z"))


def _calendar_words_ok(text):
    words = text.split()
    if len(words) == 1 and words[0].lower() in _CALENDAR_SHORTCUTS:
        return True
    part = 0
    for word in words:
        while part < len(_CALENDAR_PARTS) and not _CALENDAR_PARTS[part].match(word):
            part += 1
        if part == len(_CALENDAR_PARTS):
            return False
        part += 1
    return bool(words) and words != ["UTC"]


def check_calendar(value):
    """'' (off) or a systemd calendar expression for a timer's OnCalendar=."""
    if value is None or value == "":
        return "", None
    if is_string(value) and value.strip() and value != value.strip():
        # the timer's unit is written with the value as given: a newline there ends OnCalendar= early
        return None, "must not begin or end with a blank or a newline (%r)" % value.strip()
    if (not is_string(value) or not _CALENDAR_RE.match(value.strip()) or not value.strip()
            or not _calendar_words_ok(value.strip())):
        return None, ("must be '' (off) or a systemd calendar expression such as weekly, daily or 'Sun *-*-* 03:00:00'"
                      " (letters, digits, spaces and * : , . / ~ - only); `systemd-analyze calendar` checks one")
    return value.strip(), None


_IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}\Z")
_USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}\Z")
_MODEL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?\Z")
_GLOB_RE = re.compile(r"^[A-Za-z0-9_.@:*?\[\]-]+\Z")
_TABLE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}\Z")
_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
_LOAD_COMMAND_RE = re.compile(r"^[A-Za-z0-9/][A-Za-z0-9 ._/=-]*\Z")   # a program by name or by its path


def check_image(value):
    """A container image reference (name[:tag][@digest]): one word docker reads as an image, never as a flag."""
    if not is_string(value) or not _IMAGE_RE.match(value):
        return None, ("must be an image reference such as nvcr.io/nvidia/vllm:26.03-py3 (letters, digits and . _ / : @"
                      " + -, not starting with '-')")
    return value, None


def check_user(value):
    """A user name on the nodes (ssh's user, the owner of the model directory): never read as an ssh option."""
    if not is_string(value) or not _USER_RE.match(value):
        return None, "must be a user name on the nodes (letters, digits, '_', '.', '-', not starting with '-')"
    return value, None


def check_model_id(value):
    """A Hugging Face model id (org/name), as the download and the API use it."""
    if not is_string(value) or not _MODEL_ID_RE.match(value):
        return None, "must be a model id such as Qwen/Qwen3.5-122B-A10B-FP8 (letters, digits, '.', '_', '-', one '/')"
    return value, None


def check_optional_secret(value):
    """A token (vault): empty, or printable ASCII without whitespace."""
    if value is None or value == "":
        return "", None
    if not is_string(value):
        return None, "must be a string (keep it in a vault)"
    problem = secret_problem(value)
    return (None, problem) if problem else (value, None)


def check_globs(value):
    """Unit or container names and globs (gpu_cleanup's lists)."""
    if not isinstance(value, list):
        return None, "must be a list of unit or container names (globs allowed), e.g. [vllm-cluster, 'sglang*']"
    for item in value:
        if not is_string(item) or not _GLOB_RE.match(item) or item.startswith("-"):
            return None, ("has %r, which is not a unit or container name or glob (letters, digits, '_', '.', '@',"
                          " ':', '-', '*', '?', '[', ']')" % (item,))
    return value, None


def check_command_globs(value):
    """Process names and command-line patterns (gpu_cleanup_stale_commands): shell patterns matched, never run."""
    if not isinstance(value, list):
        return None, "must be a list of process names or command-line patterns, e.g. ['VLLM::*', '*vllm serve*']"
    for item in value:
        if not is_string(item) or not item.strip() or not item.isprintable() or item.strip('*?') == '':
            return None, ("has %r, which is not a process name or command-line pattern (printable text with more than"
                          " '*' and '?': a pattern of wildcards alone would make every GPU holder stale)" % (item,))
    return value, None


def check_text(value):
    """A free text (a prompt): a non-empty string without NUL."""
    if not is_string(value) or not value.strip() or "\0" in value:
        return None, "must be a non-empty string"
    return value, None


# The characters RFC 3986 allows in a URL's path, query and fragment (percent-encode any other): no quote, backslash,
# blank or brace, which a YAML or JSON string we write the URL into (alertmanager.yml) would end or unescape.
_URL_REST_RE = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]*\Z")


def check_url(value):
    """An http(s) URL whose host is an IP address ([v6] bracketed) or a host name, the rest in RFC 3986's characters."""
    m = re.match(r"^https?://(\[[0-9A-Fa-f:.]+\]|[^/:?#\[\]]+)(:\d{1,5})?(/[^\s]*)?\Z", value) if is_string(value) else None
    host = m.group(1).strip("[]") if m else None
    if not m or not is_host_name(host) or (m.group(2) and not 1 <= int(m.group(2)[1:]) <= 65535):
        return None, "must be an http:// or https:// URL such as http://10.1.230.180:30000"
    if m.group(3) and not _URL_REST_RE.match(m.group(3)):
        return None, ("holds a character a URL carries only percent-encoded (a quote, a backslash, a brace, a blank or"
                      " a non-ASCII letter); encode it (%22 for \", %5C for \\)")
    return value, None


def check_device_glob(value):
    problem = _host_path_problem(value, "device files, e.g. /dev/nvidia[0-9]*")
    if problem:
        return None, problem
    if not value.startswith("/dev/"):
        return None, "must be a glob of device files under /dev, e.g. /dev/nvidia[0-9]*"
    return value, None


def check_nft_table(value):
    if not is_string(value) or not _TABLE_RE.match(value):
        return None, "must be an nftables table name (a letter, then letters, digits, '_', '-'; 32 at most)"
    return value, None


def check_port_range(value):
    """ray_cluster_firewall_ephemeral_range: "LOW-HIGH" (ports), or empty for the node's own range."""
    if value == "":
        return value, None
    low, _sep, high = value.partition("-") if is_string(value) else ("", "", "")
    if not (low.isdigit() and high.isdigit() and 1 <= int(low) <= int(high) <= 65535):
        return None, "must be LOW-HIGH (ports, LOW <= HIGH), e.g. 32768-60999, or empty for the node's own range"
    return value, None


def check_load_command(value):
    """The command the image key runs on a worker (in authorized_keys' command="..."): plain words only."""
    if not is_string(value) or not _LOAD_COMMAND_RE.match(value):
        return None, ("must be a plain command such as 'sudo -n /usr/bin/python3 /usr/local/sbin/sparkfleet-image-load'"
                      " (letters, digits, spaces and . _ / = -): it is written into the key's command=\"...\"")
    return value, None


def check_cidr_list(value):
    """Source networks (CIDR) for the node firewall."""
    if not isinstance(value, list) or not value:
        return None, "must be a non-empty list of networks (CIDR), e.g. ['192.168.200.0/24']"
    nets = []
    for item in value:
        try:
            nets.append(ipaddress.ip_network(str(item), strict=False))
        except ValueError:
            return None, "has %r, which is not a network in CIDR form such as 192.168.200.0/24" % (item,)
    return nets, None


def check_ansible_version(value):
    if not is_string(value) or parse_version(value) is None:
        return None, "must be a version string such as \"2.19.0\""
    return value, None


_PLAIN_VERSION_RE = re.compile(r"(0|[1-9][0-9]{0,5})(\.(0|[1-9][0-9]{0,5})){0,3}\Z")


def check_plain_version(value, example):
    """A version the roles compare with Ansible's `version` test: dotted whole numbers only. That test compares a
    blank, a letter or a suffix ('2.52.0rc1', '1e3') otherwise than a person reads it, or fails with a Python error."""
    if not is_string(value) or not _PLAIN_VERSION_RE.match(value):
        return None, "must be a version of dotted whole numbers such as \"%s\" (quoted, no blank, letter or suffix)" % example
    return value, None


def check_optional_url(value):
    """Empty, or an http(s) URL (monitoring_webhook_url)."""
    if value == "":
        return value, None
    return check_url(value)


def check_number_between(low, high, what):
    def check(value):
        f, problem = _number(value, "[%g, %g], %s" % (low, high, what))
        if problem is None and not low <= f <= high:
            return None, "must be between %g and %g (%s)" % (low, high, what)
        return (None, problem) if problem else (f, None)
    return bounded(check, low, high, "float")


def check_cidr_list_or_empty(value):
    """Extra source networks (CIDR); an empty list is fine."""
    if value == []:
        return [], None
    nets, problem = check_cidr_list(value)
    if problem is None and any(n.prefixlen == 0 for n in nets):
        return None, "opens the port to every address; list the networks that need it"
    return nets, problem
