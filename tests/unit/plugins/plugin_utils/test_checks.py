"""plugin_utils._checks: the argument checks every filter shares."""

from __future__ import annotations

import ast
import os
import re

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _checks as c

FILTERS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "plugins", "filter")


def _refused(func, *args, **kwargs):
    with pytest.raises(AnsibleFilterError) as exc:
        func(*args, **kwargs)
    return str(exc.value)


def test_fail_prefixes_the_filter_name():
    assert _refused(c.fail, "my_filter", "x must be y") == "my_filter: x must be y"


@pytest.mark.parametrize("value, expected", [(6, 6), ("6", 6), (" 6 ", 6), (6.0, 6), ("+6", 6), (0, 0)])
def test_whole_number_reads_what_preflight_reads(value, expected):
    assert c.whole_number("f", "n", value, 0) == expected


@pytest.mark.parametrize("value, low, high, words", [
    (True, None, None, ["f: n must be a whole number", "not a boolean", "got True"]),
    ("many", None, None, ["f: n must be a whole number, got 'many'"]),
    (1.5, None, None, ["n must be a whole number, got 1.5"]),
    (None, None, None, ["n must be a whole number, got None"]),
    ("0\x1f", None, None, ["n must be a whole number, got '0\\x1f'"]),  # a blank to Unicode, not to int()
    ("\u0663", None, None, ["n must be a whole number"]),  # ARABIC-INDIC DIGIT THREE
    (-1, 0, None, ["n must be at least 0, got -1"]),
    (9, 1, 8, ["n must be between 1 and 8, got 9"]),
])
def test_whole_number_refuses_naming_the_argument_and_value(value, low, high, words):
    text = _refused(c.whole_number, "f", "n", value, low, high)
    for w in words:
        assert w in text


@pytest.mark.parametrize("value, expected", [(1, 1), ("6379", 6379), (65535, 65535), (" 22 ", 22)])
def test_port_number_accepts_ports(value, expected):
    assert c.port_number("f", "port", value) == expected


@pytest.mark.parametrize("value, words", [
    (0, ["f: port 0 is out of range (1-65535)"]),
    (65536, ["port 65536 is out of range"]),
    ("70000", ["port 70000 is out of range"]),
    ("x", ["port must be a whole number from 1 to 65535", "'x' is not a port number"]),
    (True, ["True is not a port number"]),
    ([1], ["[1] is not a port number"]),
])
def test_port_number_refuses_what_is_no_port(value, words):
    text = _refused(c.port_number, "f", "port", value)
    for w in words:
        assert w in text


def test_number_is_strict_about_types():
    assert c.number("f", "t", 0.5) == 0.5 and c.number("f", "t", 3, int) == 3
    for value, kinds in (("600", int), (True, int), (0.5, int), ("0.5", (int, float)), (None, (int, float))):
        assert "f: t must be a number, got %r" % (value,) in _refused(c.number, "f", "t", value, kinds)


def test_host_list_takes_iterables_of_names_but_not_one_name():
    assert c.host_list("f", ["a", "b"]) == ["a", "b"]
    assert c.host_list("f", ("a",)) == ["a"]
    assert c.host_list("f", (h for h in ["a"])) == ["a"]
    assert "f: hosts must be a list of inventory names, got str 'spark-1'" in _refused(c.host_list, "f", "spark-1")
    assert "must be a list" in _refused(c.host_list, "f", {"spark-1": {}})
    assert "must be a list" in _refused(c.host_list, "f", 3)


def test_hostvar_names_an_unknown_host():
    hostvars = {"spark-1": {"ip": "10.99.1.11"}}
    assert c.hostvar("f", hostvars, "spark-1", "ip") == "10.99.1.11"
    assert c.hostvar("f", hostvars, "spark-1", "other") is None
    assert "f: spark-9 is not in hostvars" in _refused(c.hostvar, "f", hostvars, "spark-9", "ip")


def test_env_name_and_value():
    assert c.env_name("NCCL_DEBUG") == "NCCL_DEBUG"
    assert c.env_value("X", 3) == "3" and c.env_value("X", 0.5) == "0.5" and c.env_value("X", "a b") == "a b"
    assert "f: '9X' is not a valid variable name" in _refused(c.env_name, "9X", "f")
    assert "not a valid variable name" in _refused(c.env_name, 3, "f")
    assert "f: X is a boolean" in _refused(c.env_value, "X", True, "f")
    assert "f: X must be a string or number, got list" in _refused(c.env_value, "X", [1], "f")
    for bad, what in (("a\nb", "a newline"), ("a\rb", "a carriage return"), ("a\0b", "a NUL byte")):
        assert "X contains %s" % what in _refused(c.env_value, "X", bad, "f")


def _filter_sources():
    for name in sorted(os.listdir(FILTERS)):
        if name.endswith(".py"):
            with open(os.path.join(FILTERS, name)) as fh:
                yield name, fh.read()


def test_filters_refuse_input_only_through_the_shared_checks():
    """No filter raises AnsibleFilterError itself or keeps a private integer, port or env validator."""
    for name, src in _filter_sources():
        assert "AnsibleFilterError" not in src, "%s: raise through plugin_utils._checks.fail" % name
        tree = ast.parse(src)
        defs = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        private = defs & {"_port", "_count", "_number", "_int", "env_name", "env_value", "_fail"}
        assert not private, "%s defines %s; use plugin_utils._checks" % (name, sorted(private))
        assert not re.search(r"\bint\(str\(", src), name
