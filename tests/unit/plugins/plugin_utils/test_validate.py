"""plugin_utils/_validate: one check per serving variable, and vLLM's reading of `vllm serve` flags.

Property-based (hypothesis): the checks never raise and accept exactly their domain; the flag normaliser is
idempotent and every spelling Python's own argparse (with vLLM's rewrite in front) reads as a pinned flag is
refused as pinned.
"""

from __future__ import annotations

import argparse
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate as v

# database=None: no .hypothesis directory in the checkout; failures print their example.
PROPS = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8)


# --- the checks never raise, and return either a value or a problem -------------------------------

@PROPS
@given(name=st.sampled_from(sorted(v.SERVING_CHECKS)), value=ANY)
def test_every_check_returns_value_or_problem_and_never_raises(name, value):
    errors = v.serving_errors({name: value}, "spark-1")
    assert isinstance(errors, list) and all(isinstance(e, str) for e in errors)
    assert all(e.startswith("spark-1: ") for e in errors)
    check = v.SERVING_CHECKS[name]
    if check is not None:
        normal, problem = check(value)
        assert (problem is None) or (normal is None and isinstance(problem, str))


@PROPS
@given(settings_=st.dictionaries(st.sampled_from(sorted(v.SERVING_CHECKS)), ANY, max_size=8), gpus=ANY)
def test_serving_errors_never_raises_on_any_mix(settings_, gpus):
    assert isinstance(v.serving_errors(settings_, "h", {"x": "boom"}, gpus), list)


@PROPS
@given(extra=ANY)
def test_extra_args_never_raises(extra):
    words, problems = v.extra_args_argv(extra, v.SERVING_PINNED)
    assert all(isinstance(w, str) for w in words) and all(isinstance(p, str) for p in problems)


# --- each check accepts exactly its domain ---------------------------------------------------------

def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _plain_int(value):
    """The int a value is when every consumer reads it alike (issue 40.2): an int, or its plain digits (no blanks,
    sign, leading zeros or decimal point); None otherwise."""
    if _is_int(value):
        return value
    if isinstance(value, str) and re.fullmatch(r"0|-?[1-9][0-9]*", value, re.ASCII):
        return int(value)
    return None


@PROPS
@given(value=st.integers() | st.floats() | st.text(max_size=8) | st.booleans() | st.none())
def test_port_domain(value):
    ok = v.check_port(value)[1] is None
    as_int = _plain_int(value)
    assert ok == (as_int is not None and 1 <= as_int <= 65535)


@PROPS
@given(name=st.sampled_from(["vllm_serve_tensor_parallel_size", "vllm_serve_pipeline_parallel_size",
                             "vllm_serve_engine_ready_timeout", "vllm_serve_ready_timeout", "vllm_serve_liveness_failures",
                             "vllm_serve_memory_gate_timeout", "vllm_serve_escalate_after", "vllm_serve_escalate_window"]),
       value=st.integers(-3, 10 ** 11) | st.text(max_size=5) | st.booleans() | st.floats(-2, 9))
def test_positive_whole_number_domain(name, value):
    ok = v.SERVING_CHECKS[name](value)[1] is None
    as_int = _plain_int(value)
    high = {"vllm_serve_liveness_failures": v.COUNT_MAX, "vllm_serve_escalate_after": v.COUNT_MAX,
            "vllm_serve_tensor_parallel_size": v.INT_CARRIED_MAX,
            "vllm_serve_pipeline_parallel_size": v.INT_CARRIED_MAX}.get(name, v.SECONDS_MAX)
    assert ok == (as_int is not None and 1 <= as_int <= high)


@PROPS
@given(name=st.sampled_from([("vllm_serve_memory_margin", 0.2), ("vllm_serve_memory_tolerance", 0.5)]),
       value=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-2, 2) | st.text(max_size=6) | st.booleans())
def test_memory_gate_shares_domain(name, value):
    # a share of each node's memory: 0 allowed (no margin, no tolerance), never negative, never most of the node
    ok = v.SERVING_CHECKS[name[0]](value)[1] is None
    try:
        f = None if isinstance(value, bool) or not _plain_decimal(value) else float(value)
    except (ValueError, OverflowError):
        f = None
    assert ok == (f is not None and 0 <= f <= name[1])


@PROPS
@given(value=st.floats(allow_nan=True, allow_infinity=True) | st.integers() | st.text(max_size=6) | st.booleans())
def test_gpu_memory_utilization_domain(value):
    ok = v.check_fraction(value)[1] is None
    try:
        f = None if isinstance(value, bool) or not _plain_decimal(value) else float(value)
    except (ValueError, OverflowError):
        f = None
    assert ok == (f is not None and 0 < f <= 1)


def _plain_decimal(value):
    """Issue 40.2: a number as a string only in its plain decimal spelling (no blanks, sign, exponent, '_')."""
    return not isinstance(value, str) or re.fullmatch(r"(0|[1-9][0-9]*)(\.[0-9]+)?", value, re.ASCII) is not None


@PROPS
@given(value=st.integers(-5, 10 ** 7) | st.from_regex(r"\A\d{1,4}(\.\d{1,2})?[kmgtKMGT]?\Z") | st.text(max_size=6))
def test_max_model_len_domain(value):
    ok = v.check_max_model_len(value)[1] is None
    if _is_int(value):
        assert ok == (1 <= value <= v.INT_CARRIED_MAX)   # issue 40.2: bounded
        return
    m = re.fullmatch(r"(\d+)(\.\d+)?([kmgtKMGT]?)", value)   # issue 40.2: no blanks (vLLM's argv takes it as given)
    if not m or (m.group(2) and not m.group(3)) or (m.group(2) and m.group(3).isupper()):
        assert not ok
        return
    mult = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
    assert ok == (1 <= int(float(m.group(1) + (m.group(2) or "")) * mult[m.group(3)]) <= v.INT_CARRIED_MAX)


@pytest.mark.parametrize("value, ok", [
    ("32k", True), ("32K", True), ("25.6k", True), ("1.5K", False), ("0k", False), ("auto", False), ("-1", False),
    (32768, True), (0, False), (True, False), ("32768", True), (" 4096 ", False),
])
def test_max_model_len_examples(value, ok):
    assert (v.check_max_model_len(value)[1] is None) is ok


@PROPS
@given(value=st.text(max_size=12))
def test_api_key_domain(value):
    # issue 17.13: printable ASCII only (an HTTP header carries nothing else), no whitespace
    assert (v.check_api_key(value)[1] is None) == all(0x21 <= ord(c) <= 0x7e for c in value)


@pytest.mark.parametrize("value, problem", [
    ("", "absolute path"), ("models/x", "absolute path"), ("/", "root directory /"), ("/etc/", "system directory"),
    ("/usr//", "system directory /usr"), ("/models/../etc", "system directory /etc"), ("/models/a:b", "':'"),
    ("/models/a b", "whitespace"), ("/models/$X", "'$'"), (None, "absolute path"), (["/m"], "absolute path"),
])
def test_model_dir_problems(value, problem):
    normal, got = v.check_model_dir(value)
    assert normal is None and problem in got


def test_model_dir_is_normalised():
    assert v.check_model_dir("/models//qwen/") == ("/models/qwen", None)


@pytest.mark.parametrize("value", [0, 1.5, "abc", -0.1, float("nan"), float("inf"), True, None, "1.01"])
def test_issue_11_gpu_memory_utilization_values_are_refused(value):
    assert v.check_fraction(value)[1] is not None


@pytest.mark.parametrize("value", [0, 70000, "x", -1, True, 1.5, None, ""])
def test_issue_11_port_values_are_refused(value):
    assert v.check_port(value)[1] is not None


@pytest.mark.parametrize("host, key, allow, refused", [
    ("10.1.230.180", "", False, True),
    ("0.0.0.0", "", False, True),
    ("10.1.230.180", "", True, False),
    ("127.0.0.1", "", False, False),
    ("::1", "", False, False),
    ("localhost", "", False, False),
    ("10.1.230.180", "sk-1", False, False),
])
def test_open_api_needs_consent_off_loopback(host, key, allow, refused):
    errors = v.serving_errors({"sparkfleet_api_host": host, "vllm_serve_api_key": key, "sparkfleet_api_port": 30000,
                               "vllm_serve_allow_open_api": allow}, "spark-1")
    assert bool(errors) is refused
    if refused:
        assert errors == ["spark-1: vllm_serve_api_key is empty, so the API on %s:30000 would be open to anyone who"
                          " reaches it; set vllm_serve_api_key (keep it in a vault), or set"
                          " vllm_serve_allow_open_api: true to serve without a key" % host]


def test_api_key_value_never_appears_in_a_message():
    errors = v.serving_errors({"vllm_serve_api_key": "sk secret"}, "h")
    assert errors and not any("secret" in e for e in errors)


def test_tp_times_pp_against_gpus():
    base = {"vllm_serve_tensor_parallel_size": 2, "vllm_serve_pipeline_parallel_size": 2}
    assert v.serving_errors(base, "s1", gpus=4) == []
    assert v.serving_errors(dict(base, vllm_serve_pipeline_parallel_size=1), "s1", gpus=4) == [
        "s1: vllm_serve_tensor_parallel_size (2) x vllm_serve_pipeline_parallel_size (1) = 2, but the inventory"
        " declares 4 GPU(s) (sparkfleet_gpus_per_node over the nodes); make them equal"]


def test_template_errors_are_reported_with_their_variable():
    errors = v.serving_errors({"sparkfleet_api_port": "x"}, "s1", {"vllm_serve_model": "'a' is undefined"})
    assert errors[0] == "s1: vllm_serve_model cannot be templated: 'a' is undefined; fix the expression in the inventory"
    assert errors[1].startswith("s1: sparkfleet_api_port 'x' must be a TCP port number")


# --- extra args: vLLM's reading, checked against Python's own argparse --------------------------------

class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _Refused(message)


def _vllm_like_parser():
    """argparse with vLLM 0.17.1's serve option strings (as _validate lists them)."""
    p = _Parser(prog="vllm serve", add_help=True)
    aliases = {}
    for short, name in v.VLLM_SHORT_ALIASES.items():
        aliases.setdefault(name, []).append(short)
    for name in sorted(v.VLLM_SERVE_FLAGS):
        strings = ["--" + name] + [a for a in aliases.get(name, []) if a != "-h"]
        if name in v.VLLM_BOOLEAN_FLAGS:
            p.add_argument(*strings, dest=name, action=argparse.BooleanOptionalAction, default="UNSET")
        else:
            p.add_argument(*strings, dest=name, default="UNSET")
    p.add_argument("model_tag", nargs="?")
    return p


PARSER = _vllm_like_parser()


def _vllm_rewrite(word):
    """FlexibleArgumentParser's rewrite in front of argparse: '_' -> '-' in the flag part before the first '.'."""
    if word.startswith("--"):
        key, eq, value = word.partition("=")
        head, dot, rest = key[2:].partition(".")
        return "--" + head.replace("_", "-") + dot + rest + eq + value
    return word


def _argparse_reads(word):
    """How Python's argparse reads the option word followed by a value: (dest or None, refusal or None)."""
    try:
        ns = PARSER.parse_known_args([_vllm_rewrite(word), "1"])[0]
    except (_Refused, SystemExit) as exc:
        return None, str(exc) or "help"
    set_ = [k for k, val in vars(ns).items() if k != "model_tag" and val != "UNSET"]
    return (set_[0] if len(set_) == 1 else None), None


def _spellings(flag):
    """Ways to write a flag: dashes or underscores, prefixes (argparse abbreviations), =value."""
    return st.tuples(
        st.lists(st.sampled_from("-_"), min_size=flag.count("-"), max_size=flag.count("-")),
        st.integers(2, len(flag)),
        st.sampled_from(["", "=1", "=x"]),
    ).map(lambda t: "--" + "".join(
        c if c != "-" else t[0].pop() for c in flag)[:t[1]] + t[2])


PINNED_NAMES = sorted(n for n in v.SERVING_PINNED if n != "help")
SHORTS = sorted(v.VLLM_SHORT_ALIASES)
WORDS = (st.sampled_from(PINNED_NAMES).flatmap(_spellings)
         | st.sampled_from(sorted(v.VLLM_SERVE_FLAGS)).flatmap(_spellings)
         | st.sampled_from(SHORTS).flatmap(lambda s: st.sampled_from([s, s[:2], s + "=1", s + "1", s[:-1]]))
         | st.from_regex(r"\A--?[a-z_-]{1,12}(=[0-9a-z]{0,3})?\Z"))


@settings(max_examples=600, deadline=None, database=None)
@given(word=WORDS)
def test_every_spelling_argparse_reads_as_a_pinned_flag_is_refused_as_pinned(word):
    dest, refusal = _argparse_reads(word)
    problem = v.flag_problem(word, v.SERVING_PINNED)
    if dest in v.SERVING_PINNED:
        assert problem and "is pinned" in problem, (word, dest, problem)
    if dest is None and not word.startswith("-O") and (refusal is None or "ambiguous" in refusal):
        # an unrecognised or ambiguous flag (a refusal about the value, e.g. -ep=1, is vLLM's to make); one that 0.17.1's
        # list does not know at all is left to the image's own vLLM (image_check, issue 41.9)
        assert problem or v.resolve_flag(word)[2] == "unknown", (word, "argparse does not take it as a flag")
    name = v.resolve_flag(word)[1]
    if dest is not None:
        assert name == dest, (word, dest, name)


@PROPS
@given(word=WORDS | st.text(max_size=16).map(lambda t: "-" + t))
def test_normalisation_is_idempotent(word):
    once = v.normalize_flag(word)
    assert v.normalize_flag(once) == once
    assert v.resolve_flag(once)[1] == v.resolve_flag(word)[1] or v.resolve_flag(word)[2] in ("unknown", "ambiguous")


@PROPS
@given(word=st.sampled_from(PINNED_NAMES).flatmap(_spellings), value=st.integers(1, 8))
def test_pinned_flags_are_refused_in_dict_and_list_form(word, value):
    name = v.resolve_flag(word)[1]
    if name not in v.SERVING_PINNED:
        return  # a prefix shared with another flag: ambiguous or another flag, covered above
    key = word.split("=", 1)[0]
    for extra in ({key.lstrip("-") if key.startswith("--") and "_" in key else key: value}, [word, str(value)]):
        problems = v.extra_args_argv(extra, v.SERVING_PINNED)[1]
        assert any("is pinned" in p for p in problems), (extra, problems)


@pytest.mark.parametrize("word, name, how", [
    ("--distributed_executor_backend", "distributed-executor-backend", "exact"),
    ("-tp", "tensor-parallel-size", "alias"),
    ("-pp=2", "pipeline-parallel-size", "alias"),
    ("--api_key", "api-key", "exact"),
    ("--api-k", "api-key", "abbreviation"),
    ("-t", "tensor-parallel-size", "abbreviation"),
    ("-p", None, "ambiguous"),
    ("-tp1", None, "unknown"),
    ("-O3", "optimization-level", "alias"),
    ("--no-enforce-eager", "enforce-eager", "negated"),
    ("--compilation_config.mode", "compilation-config", "exact"),
    ("-cc.mode", "compilation-config", "alias"),
    ("--help", "help", "exact"),
    ("-h", "help", "alias"),
])
def test_resolve_examples(word, name, how):
    assert v.resolve_flag(word)[1:] == (name, how)


def test_the_image_s_own_flag_table_can_be_passed():
    # image_check (another module) may hand over the flags of the image's own vLLM.
    assert v.flag_problem("--new-flag", {}, flags={"new-flag"}, booleans=(), aliases={}) is None
    assert "not a vllm serve flag" in v.flag_problem("--max-num-seqs", {}, flags={"new-flag"}, booleans=(),
                                                     aliases={})


def test_the_role_validates_every_checked_variable():
    """validate.yml loops over _vllm_serve_validated_vars: exactly the variables SERVING_CHECKS knows."""
    from pathlib import Path

    import yaml

    repo = Path(__file__).resolve().parents[4]
    listed = yaml.safe_load((repo / "roles/vllm_serve/vars/main.yml").read_text())["_vllm_serve_validated_vars"]
    assert sorted(listed) == sorted(v.SERVING_CHECKS)


# --- the role's newer variables (issue 11: every serving variable is checked in preflight) --------------------

def test_the_role_defaults_pass_their_checks():
    """Every default of vllm_serve that is a plain value (not a Jinja expression) passes its own check."""
    from pathlib import Path

    import yaml

    repo = Path(__file__).resolve().parents[4]
    defaults = yaml.safe_load((repo / "roles/sparkfleet/defaults/main.yml").read_text())
    defaults.update(yaml.safe_load((repo / "roles/vllm_serve/defaults/main.yml").read_text()))
    checked = {k: val for k, val in defaults.items()
               if k in v.SERVING_CHECKS and not (isinstance(val, str) and "{{" in val)}
    assert {"sparkfleet_cache_dir", "sparkfleet_model_state_file", "vllm_serve_nccl_debug",
            "vllm_serve_cluster_wait_timeout", "vllm_serve_image_min_ray_version"} <= set(checked)
    assert v.serving_errors(dict(checked, vllm_serve_api_key="k"), "spark-1") == []


@pytest.mark.parametrize("name, value, problem", [
    ("sparkfleet_cache_dir", "", "absolute path"),
    ("sparkfleet_cache_dir", "cache", "absolute path"),
    ("sparkfleet_cache_dir", "/", "root directory /"),
    ("sparkfleet_cache_dir", "/usr", "system directory /usr"),
    ("sparkfleet_cache_dir", "/etc/x", "under the system directory /etc"),
    ("sparkfleet_cache_dir", "/var/cache/a:b", "':'"),
    ("sparkfleet_cache_dir", "/var/cache/%h", "'%'"),
    ("sparkfleet_ray_tmp_dir", "/var/lib", "system directory /var/lib"),
    ("sparkfleet_config_dir", "/etc", "system directory /etc"),
    ("sparkfleet_config_dir", "etc/sparkfleet", "absolute path"),
    ("sparkfleet_model_state_file", "/etc/sparkfleet/", "must name a file"),
    ("sparkfleet_model_state_file", "/", "must name a file"),
    ("sparkfleet_model_state_file", "model.state", "absolute path"),
    ("sparkfleet_model_state_file", None, "absolute path"),
    ("vllm_serve_nccl_debug", "DEBUG", "NCCL's levels"),
    ("vllm_serve_nccl_debug", 1, "NCCL's levels"),
    ("vllm_serve_cluster_wait_timeout", 0, "at least 1"),
    ("vllm_serve_cluster_wait_timeout", "10m", "whole number of seconds"),
    ("vllm_serve_image_min_vllm_version", 0.10, "quoted version string"),
    ("vllm_serve_image_min_vllm_version", "latest", "a version such as"),
    ("vllm_serve_image_min_ray_version", True, "quoted version string"),
    ("vllm_serve_image_min_ray_version", ["2.52"], "a version such as"),
    ("vllm_serve_gpu_args", "--gpus all", "list of docker run arguments"),
    ("vllm_serve_gpu_args", ["--gpus", ""], "non-empty strings"),
    ("vllm_serve_gpu_args", ["--device=$DEV"], "'$'"),
    ("sparkfleet_vllm_unit", "sparkfleet-vllm.service", "without '.service'"),
    ("sparkfleet_vllm_unit", "my unit", "systemd unit name"),
    ("sparkfleet_ray_unit", "", "systemd unit name"),
    ("sparkfleet_vllm_unit", "-x", "Docker container name"),
    ("sparkfleet_ray_unit", "ray/head", "Docker container name"),
])
def test_newer_variables_are_refused_with_the_fix(name, value, problem):
    errors = v.serving_errors({name: value}, "spark-1")
    assert len(errors) == 1 and errors[0].startswith("spark-1: %s " % name), errors
    assert problem in errors[0], errors


@pytest.mark.parametrize("name, value, normal", [
    ("sparkfleet_cache_dir", "/var/cache/sparkfleet//vllm/", "/var/cache/sparkfleet/vllm"),
    ("sparkfleet_config_dir", "/etc/sparkfleet", "/etc/sparkfleet"),
    ("sparkfleet_config_dir", "/opt/sparkfleet/etc", "/opt/sparkfleet/etc"),
    ("sparkfleet_model_state_file", "/etc/sparkfleet/model.state", "/etc/sparkfleet/model.state"),
    ("vllm_serve_nccl_debug", "", ""),
    ("vllm_serve_nccl_debug", None, ""),
    ("vllm_serve_nccl_debug", "info", "INFO"),
    ("vllm_serve_nccl_debug", "WARN", "WARN"),
    ("vllm_serve_image_min_vllm_version", None, None),
    ("vllm_serve_image_min_vllm_version", "", None),
    ("vllm_serve_image_min_vllm_version", "0.17.1", "0.17.1"),
    ("vllm_serve_image_min_ray_version", "2.52", "2.52"),
    ("vllm_serve_image_min_ray_version", 3, "3"),
    ("vllm_serve_gpu_args", ["--gpus", "all"], ["--gpus", "all"]),
    ("vllm_serve_gpu_args", [], []),
    ("sparkfleet_vllm_unit", "sparkfleet-vllm", "sparkfleet-vllm"),
    ("sparkfleet_ray_unit", "sparkfleet-ray", "sparkfleet-ray"),
])
def test_newer_variables_accept_good_values(name, value, normal):
    assert v.SERVING_CHECKS[name](value) == (normal, None)


@PROPS
@given(value=st.text(max_size=12) | st.floats() | st.integers() | st.none())
def test_min_version_agrees_with_image_check(value):
    """A minimum version passes only when image_check's own parser reads a version from it."""
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.image._image import parse_version

    ok = v.check_min_version(value)[1] is None
    if value is None or value == "":
        assert ok
    elif isinstance(value, float):
        assert not ok
    else:
        assert ok == (parse_version(str(value)) is not None and v.unsafe_problem(str(value)) is None)


def test_a_boolean_given_as_a_command_line_string_names_the_json_form():
    """`-e ray_cluster_watchdog=false` arrives as the string 'false': refused, with the form that works."""
    value, problem = v.check_bool("false")
    assert value is None and "not the string 'false'" in problem and "\"<name>\": false}" in problem
    assert v.check_bool(False) == (False, None)


# --- gpu_cleanup_stale_commands and gpu_cleanup_record (issue 45, items 7 and 5) ---------------------------------

@pytest.mark.parametrize("value", [
    ["VLLM::*", "*vllm serve*", "*vllm.entrypoints*", "ray::*", "raylet", "gcs_server",
     "*/ray/_private/workers/default_worker.py*", "sglang::*", "*sglang.launch_server*"],
    [], ["python3 -m my.engine"], ["?x"],
])
def test_stale_command_patterns_pass(value):
    assert v.check_command_globs(value) == (value, None)


@pytest.mark.parametrize("value, words", [
    ("VLLM::*", "must be a list of process names or command-line patterns"),
    ({"a": 1}, "must be a list"),
    (["*"], "a pattern of wildcards alone would make every GPU holder stale"),
    (["*?*"], "wildcards alone"), (["  "], "not a process name"), ([""], "not a process name"),
    (["ray::*", 3], "has 3"), (["a\nb"], "printable"), ([None], "has None"),
])
def test_stale_command_patterns_that_would_match_anything_or_are_no_text_are_refused(value, words):
    normal, problem = v.check_command_globs(value)
    assert normal is None and words in problem, problem


def test_the_role_checks_name_the_stale_commands_and_the_record_with_the_host():
    errors = v.settings_errors({"gpu_cleanup_stale_commands": ["*"], "gpu_cleanup_record": "/etc/stale.json",
                                "sparkfleet_fabric_subnet": "10.10.10.0/24"}, "spark-2", head=True)
    assert [e.split(" ", 2)[1] for e in errors] == ["gpu_cleanup_record", "gpu_cleanup_stale_commands"], errors
    assert all(e.startswith("spark-2: ") for e in errors)
    assert v.settings_errors({"gpu_cleanup_stale_commands": ["ray::*"],
                              "gpu_cleanup_record": "/var/lib/sparkfleet/stale-stack.json",
                              "sparkfleet_fabric_subnet": "10.10.10.0/24"}, "spark-2", head=True) == []
