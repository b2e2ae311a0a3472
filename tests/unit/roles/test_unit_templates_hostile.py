"""Issue 40.5: the Ray and vLLM units rendered with hostile values (newline, '%', quotes, blanks, NUL, '$', very long,
numbers in other spellings) for every variable that reaches them: each value either is refused by the check preflight
runs on it (the same function), or the unit parses to exactly the directives and the command words it has with
plain values. A value that passed its check and still added a directive, split a word or let systemd expand a
specifier would fail here.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _inventory
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate as v
from ansible_collections.sparkfleet.vllm.tests.unit.support.units import ray_unit, vllm_unit

TMP = Path("/srv/sparkfleet-test")   # only rendered into the text, never touched


def _ip(value):
    try:
        return str(ipaddress.ip_address(value)) == value
    except ValueError:
        return False


def _check(name):
    return lambda value: (v.SERVING_CHECKS.get(name) or v.ROLE_CHECKS[name])(value)[1] is None


# variable -> (the preflight check that guards it, the units it reaches)
GUARDED = {
    "sparkfleet_head_host": (lambda value: _inventory._why_not_a_name(value) is None, ("ray",)),
    "sparkfleet_fabric_ip": (_ip, ("ray",)),
    "sparkfleet_head_fabric_ip": (_ip, ("ray",)),
    "sparkfleet_ray_unit": (_check("sparkfleet_ray_unit"), ("ray", "vllm")),
    "sparkfleet_vllm_unit": (_check("sparkfleet_vllm_unit"), ("vllm",)),
    "sparkfleet_config_dir": (_check("sparkfleet_config_dir"), ("ray", "vllm")),
    "ray_cluster_firewall_nft": (_check("ray_cluster_firewall_nft"), ("ray",)),
    "ray_cluster_gcs_wait_timeout": (_check("ray_cluster_gcs_wait_timeout"), ("ray",)),
    "ray_cluster_restart_sec": (_check("ray_cluster_restart_sec"), ("ray",)),
    "ray_cluster_restart_max_delay": (_check("ray_cluster_restart_max_delay"), ("ray",)),
    "sparkfleet_ray_port": (_check("sparkfleet_ray_port"), ("ray",)),
    "vllm_serve_served_model_name": (_check("vllm_serve_served_model_name"), ("vllm",)),
    "vllm_serve_cluster_wait_timeout": (_check("vllm_serve_cluster_wait_timeout"), ("vllm",)),
    "vllm_serve_memory_gate_timeout": (_check("vllm_serve_memory_gate_timeout"), ("vllm",)),
    "vllm_serve_escalate_after": (_check("vllm_serve_escalate_after"), ("vllm",)),
    "vllm_serve_escalate_window": (_check("vllm_serve_escalate_window"), ("vllm",)),
    "vllm_serve_restart_sec": (_check("vllm_serve_restart_sec"), ("vllm",)),
    "vllm_serve_tensor_parallel_size": (_check("vllm_serve_tensor_parallel_size"), ("vllm",)),
}
HOSTILE = ["x\nExecStartPre=/bin/sh -c id", "a%n", "a b", "it's", 'say "hi"', "nul\0byte", "$HOME", "a\\nb", ";reboot",
           "x" * 5000, " 30", "30\n", "030", "+30", 30.0, 2 ** 70, "", "-1", "%H", "[Service]", "a\rb", "\u2028",
           "/etc/sparkfleet\nUser=root", "spark-1 --head"]


def _render(unit, name, value):
    if unit == "ray":
        return ray_unit(True, TMP, **{name: value}), ray_unit(True, TMP)
    return vllm_unit(TMP, **{name: value}), vllm_unit(TMP)


def _shape(text):
    """The unit as systemd reads it: [(section, key, words or value)], Exec* values as their words."""
    shape, section = [], None
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip() or line.startswith("#"):
            continue
        assert "\0" not in line and "\r" not in line, "line %d holds a NUL or CR: %r" % (number, line)
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z]+", key), "line %d is no directive: %r" % (number, line)
        if key.startswith("Exec"):
            words = shlex.split(value.lstrip("-+!@:"))
            assert not any("%" in w for w in words), "line %d: a '%%' systemd would expand: %r" % (number, line)
            shape.append((section, key, len(words)))
        else:
            shape.append((section, key))
    return shape


def _judge(name, value):
    check, units = GUARDED[name]
    if not check(value):
        return "refused"
    for unit in units:
        hostile, plain = _render(unit, name, value)
        assert _shape(hostile) == _shape(plain), (name, value)
    return "rendered"


@pytest.mark.bad_input(name="hostile values for every variable that reaches the Ray and vLLM units",
                       expected="refused by preflight's check, or the unit parses to exactly the intended directives")
@pytest.mark.parametrize("name", sorted(GUARDED))
def test_every_hostile_value_is_refused_or_renders_the_same_unit(name, observe):
    outcome = {repr(value)[:20]: _judge(name, value) for value in HOSTILE}
    plain = ("spark-1", "192.168.200.12", 30, "/etc/sparkfleet", "qwen", "/usr/sbin/nft", "sparkfleet-ray", 6379, 2)
    assert "rendered" in {_judge(name, value) for value in plain}, name
    observe("%s: %d hostile values refused, %d rendered intact" % (
        name, list(outcome.values()).count("refused"), list(outcome.values()).count("rendered")))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(GUARDED)),
       value=st.text(st.characters(codec="utf-8"), max_size=40) | st.integers() | st.floats(allow_nan=False))
def test_property_any_value_is_refused_or_renders_the_same_unit(name, value):
    _judge(name, value)


# Found by the property above: Python's `$` also matches before a final newline, so every `^...$` rule took a value
# with a trailing newline, which then ended an ExecStart line in the middle (the rules now end with \Z).
@pytest.mark.bad_input(name="a value with a trailing newline (a `$` rule let it through)",
                       expected="preflight refuses it naming host, variable and value")
@pytest.mark.parametrize("name, value", [
    ("sparkfleet_ray_unit", "sparkfleet-ray\n"), ("sparkfleet_vllm_unit", "sparkfleet-vllm\n"),
    ("sparkfleet_image", "vllm/vllm-openai:v0.17.1\n"), ("model_sync_user", "spark\n"),
    ("sparkfleet_model_id", "Qwen/Qwen3-Coder\n"), ("ray_cluster_firewall_table", "sparkfleet\n"),
    ("gpu_cleanup_stale_units", ["vllm-cluster.service\n"]), ("model_sync_scrub_interval", "weekly\n"),
])
def test_a_trailing_newline_is_refused(name, value, observe):
    errors = [e for e in v.settings_errors({name: value, "sparkfleet_fabric_subnet": "192.168.200.0/24"}, "spark-1",
                                           head=True) if e.startswith("spark-1: %s " % name)]
    assert errors, "%s %r was accepted" % (name, value)
    observe(errors[0])


def test_a_host_address_with_a_trailing_newline_is_refused():
    assert not v.is_host_name("spark-1.lab\n") and v.is_host_name("spark-1.lab")
