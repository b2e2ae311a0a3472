"""Issue 40.2: a number is read once, at validation, into the one spelling every consumer reads alike.

Numbers reach systemd units (time spans, ExecStart words), bash arithmetic in the node scripts (a leading 0 is octal,
a decimal point an error, past 2^63 it wraps) and argparse's int in the watchdog. The validator accepted " 30",
"\\n30", "+30", "030" and 30.0 (reading them as 30) while the templates wrote the value as given; and no time, count or
size setting had an upper bound. Now every whole-number setting is an int or its plain digits, within bounds every
consumer carries (SECONDS_MAX, COUNT_MAX, INT_CARRIED_MAX), documented in the roles' argument specs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate as v

HOST = "spark-1"
REPO = Path(__file__).resolve().parents[4]
ROLES = REPO / "roles"


def _reads_whole_numbers(check):
    for n in (1, 8, 100, 1500, 9000):
        normal, problem = check(n)
        if problem is None and isinstance(normal, int) and not isinstance(normal, bool) and check(str(n)) == (n, None):
            return check("x")[1] is not None and check(True)[1] is not None
    return False


def _int_checks():
    """Every role variable whose check reads a whole number (1, 8, 100 ... and their digits give that int)."""
    return sorted({name for table in (v.SERVING_CHECKS, v.ROLE_CHECKS) for name, check in table.items()
                   if check is not None and _reads_whole_numbers(check)})


INT_VARS = _int_checks()


def _errors(settings_):
    return v.settings_errors(dict(settings_, sparkfleet_fabric_subnet="192.168.200.0/24"), HOST, head=True)


def test_the_whole_number_settings_are_found():
    # the ones a unit or a script reads; the list grows with the roles, never shrinks below these
    assert {"ray_cluster_watchdog_interval", "ray_cluster_watchdog_grace", "ray_cluster_gcs_wait_timeout",
            "vllm_serve_cluster_wait_timeout", "vllm_serve_liveness_timeout", "vllm_serve_restart_sec",
            "gpu_cleanup_grace", "model_sync_streams", "sparkfleet_api_port"} <= set(INT_VARS), INT_VARS


@pytest.mark.bad_input(name="a whole-number setting a unit or script would read otherwise (settings_errors)",
                       expected="preflight refuses it naming host, variable, value and the plain spelling")
@pytest.mark.parametrize("name, value, words", [
    pytest.param("ray_cluster_watchdog_interval", " 30", "plain digits (30, not ' 30')", id="blank: ' 30'"),
    pytest.param("ray_cluster_gcs_wait_timeout", "\n30", "plain digits (30, not '\\n30')",
                 id="newline: a second ExecStartPre line"),
    pytest.param("ray_cluster_watchdog_grace", "030", "leading zeros", id="030: octal 24 to bash"),
    pytest.param("vllm_serve_liveness_timeout", "+30", "plain digits", id="'+30'"),
    pytest.param("ray_cluster_watchdog_checks", 3.0, "without a decimal point (3, not 3.0)",
                 id="3.0: argparse's int refuses '3.0'"),
    pytest.param("vllm_serve_cluster_wait_timeout", 2 ** 63, "at most 31536000 (a year", id="2^63: wraps in bash"),
    pytest.param("gpu_cleanup_grace", "99999999999", "at most 31536000", id="99999999999 s"),
    pytest.param("vllm_serve_restart_sec", 10 ** 9, "at most 31536000", id="RestartSec 10^9"),
    pytest.param("healthcheck_max_tokens", 10 ** 7, "at most 1000000", id="10^7 tokens"),
    pytest.param("preflight_min_free_mb", 2 ** 40, "at most 2147483647", id="2^40 MiB"),
    pytest.param("sparkfleet_api_port", "1" * 400, "at most 20 digits", id="400 digits"),
    pytest.param("vllm_serve_max_model_len", 10 ** 30, "at most 2147483647 tokens", id="max_model_len 10^30"),
    pytest.param("vllm_serve_max_model_len", "9999999999999T", "at most 2147483647 tokens", id="max_model_len 9999999999999T"),
])
def test_a_number_a_consumer_would_read_otherwise_is_refused(name, value, words, observe):
    errors = [e for e in _errors({name: value}) if e.startswith("%s: %s " % (HOST, name))]
    assert len(errors) == 1, _errors({name: value})
    assert words in errors[0], errors[0]
    observe(errors[0])


@pytest.mark.parametrize("name", INT_VARS)
def test_every_accepted_number_reads_the_same_raw_and_normalised(name):
    """What a template writes (the raw value) is what the check read: str(raw) == str(normalised)."""
    check = v.SERVING_CHECKS.get(name) or v.ROLE_CHECKS[name]
    for raw in (" 30", "30 ", "\n30", "+30", "030", "0030", 30.0, "30\n", "\t30", "٣٠", "3_0", "0x1e", "3e1"):
        normal, problem = check(raw)
        assert problem is not None or str(raw) == str(normal), (name, raw, normal)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(INT_VARS),
       raw=st.integers(-(2 ** 70), 2 ** 70) | st.text(max_size=30) | st.floats() | st.booleans()
       | st.from_regex(r"\A\s*[+-]?0*[0-9]{1,25}(\.[0-9]*)?\s*\Z"))
def test_property_accepted_numbers_are_plain_and_bounded(name, raw):
    check = v.SERVING_CHECKS.get(name) or v.ROLE_CHECKS[name]
    normal, problem = check(raw)
    if problem is None and normal is None and raw == "":
        return      # an optional setting left unset (ray_cluster_num_cpus: ''), which no template writes as a number
    if problem is None:
        assert isinstance(normal, int) and not isinstance(normal, bool) and str(normal) == str(raw), (name, raw)
        # every consumer carries it: bash (2^63 - 1, after a x1000), systemd's and ssh's C ints
        assert -(2 ** 31) < normal <= v.INT_CARRIED_MAX
    else:
        assert isinstance(problem, str) and problem


def _spec_options():
    for spec in sorted(ROLES.glob("*/meta/argument_specs.yml")):
        for entry in yaml.safe_load(spec.read_text())["argument_specs"].values():
            for name, option in (entry.get("options") or {}).items():
                yield spec.parent.parent.name, name, option


def test_the_bounds_are_in_the_argument_specs():
    """Every whole-number option a role declares names its upper bound (the validator's) in its description."""
    missing = []
    for role, name, option in _spec_options():
        if name not in INT_VARS or option.get("type") not in ("int", "raw", None):
            continue
        check = v.SERVING_CHECKS.get(name) or v.ROLE_CHECKS[name]
        high = None
        for bound in (v.SECONDS_MAX, v.COUNT_MAX, v.INT_CARRIED_MAX, 65535, 64, 300, 90, 65536, 1 << 20,
                      v.MTP_TOKENS_MAX):
            if check(bound)[1] is None and check(bound + 1)[1] is not None:
                high = bound
                break
        desc = " ".join(option.get("description") if isinstance(option.get("description"), list)
                        else [option.get("description", "")])
        if high is None or not re.search(r"\b%d\b" % high, desc.replace(",", "")):
            missing.append("%s: %s (bound %s)" % (role, name, high))
    assert not missing, missing
