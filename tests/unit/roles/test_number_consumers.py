"""Issue 40.2: every consumer of a numeric setting reads the number the validator read.

The rule (docs/CONVENTIONS.md, "Numbers"): the validator accepts a number only in the one spelling every consumer
reads alike (an int or its plain digits; a float or its plain decimal digits), so a template may write the value as
given, or apply ``| int`` / ``| float``, and get the normalised number either way. This test finds every use of every
numeric role variable in the roles' tasks, vars, defaults and templates (Jinja's own parser, not text patterns), and
renders each use's filter chain with values that change meaning on the way ("1e3", " 30", "30.5", "0x10", 2**70,
"030", 30.0, ...): the check refuses the value, or the use renders it exactly as it renders the normalised number.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings, strategies as st
from jinja2 import Environment, nodes

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate as v
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate_values as values

REPO = Path(__file__).resolve().parents[3]
CONDITIONALS = ("when", "that", "until", "changed_when", "failed_when")
NUMBERS = dict((name, check) for table in v.ROLE_TABLES.values() for name, check in table.items()
               if getattr(check, "bounds", None))
ENV = Environment(extensions=["jinja2.ext.do", "jinja2.ext.loopcontrols"])
# Filters a use may apply to a number (Jinja's own), and the ones the roles are allowed to apply.
CHAIN_FILTERS = {"int", "float", "string", "length"}
HOSTILE = ("1e3", " 30", "30 ", "30.5", "0x10", "030", "+30", "-0", "3_0", "\u0663\u0660", "30\n", "1_000", 30.0, 2 ** 70,
           -1, "nan", "inf", " 0.5", "5e-1", ".5", "0.50", "0_5", "1.", "32k", " 32k", True, None, "", [30], {"a": 1})


def _expressions(obj, key=None):
    """Every Jinja source in a parsed YAML file (conditionals wrapped as expressions)."""
    if isinstance(obj, str):
        if key in CONDITIONALS:
            yield "{{ %s }}" % obj
        elif "{{" in obj or "{%" in obj:
            yield obj
    elif isinstance(obj, dict):
        for k, item in obj.items():
            yield from _expressions(item, k)
    elif isinstance(obj, list):
        for item in obj:
            yield from _expressions(item, key if key in CONDITIONALS else None)


def _sources():
    for path in sorted((REPO / "roles").rglob("*")):
        rel = path.relative_to(REPO).as_posix()
        if not path.is_file() or "/meta/" in rel or "/files/" in rel:
            continue
        if path.suffix == ".j2":
            yield rel, path.read_text()
        elif path.suffix == ".yml":
            for source in _expressions(yaml.safe_load(path.read_text())):
                yield rel, source


def _walk(node, parents=()):
    yield node, parents
    for child in node.iter_child_nodes():
        yield from _walk(child, parents + (node,))


def _uses():
    """(variable, filter chain applied directly to it) -> files, for every numeric variable read in the roles."""
    uses = {}
    for rel, source in _sources():
        for node, parents in _walk(ENV.parse(source)):
            if not (isinstance(node, nodes.Name) and node.ctx == "load" and node.name in NUMBERS):
                continue
            chain, current = [], node
            for parent in reversed(parents):
                if not (isinstance(parent, nodes.Filter) and parent.node is current):
                    break
                chain.append(parent.name)
                current = parent
            uses.setdefault((node.name, tuple(chain)), set()).add(rel)
    return uses


USES = _uses()


def _render(name, chain, value):
    return ENV.from_string("{{ %s }}" % " | ".join([name] + list(chain))).render({name: value})


def _unset(value, normal):
    # an optional number left unset (null / ''), which its uses test for before reading a number
    return normal is None or value is None or value == ""


def _same(name, chain, raw, normal):
    kind = NUMBERS[name].bounds[0]
    got, want = _render(name, chain, raw), _render(name, chain, normal)
    if got == want:
        return True
    # a float written as given: the plain decimal it was accepted in ("0.80" for 0.8) reads as the same number
    return kind == "float" and not chain and got.strip() == got and float(got) == float(want)


def test_the_uses_are_found():
    # units, scripts and Python read these; the list grows with the roles, never loses these
    found = set(name for name, _chain in USES)
    assert {"ray_cluster_watchdog_interval", "vllm_serve_liveness_timeout", "vllm_serve_gpu_memory_utilization",
            "monitoring_alert_queue_time_seconds", "gpu_cleanup_grace", "sparkfleet_api_port"} <= found, found
    assert ("vllm_serve_liveness_timeout", ("int",)) in USES and ("gpu_cleanup_grace", ()) in USES, sorted(USES)


@pytest.mark.parametrize("name, chain", sorted(USES), ids=["%s|%s" % (n, "|".join(c)) for n, c in sorted(USES)])
def test_every_use_reads_the_normalised_number(name, chain):
    assert set(chain) <= CHAIN_FILTERS, ("%s is read through %s in %s: apply | int or | float (or nothing) to a"
                                         " number, nothing else" % (name, chain, sorted(USES[(name, chain)])))
    check = NUMBERS[name]
    for raw in HOSTILE:
        normal, problem = check(raw)
        if problem or _unset(raw, normal):
            continue
        assert _same(name, chain, raw, normal), (
            "%s %r passes its check (read as %r) but %s renders it as %r, not %r" % (
                name, raw, normal, "{{ %s }}" % " | ".join((name,) + chain), _render(name, chain, raw),
                _render(name, chain, normal)))


@settings(max_examples=400, deadline=None)
@given(use=st.sampled_from(sorted(USES)),
       raw=st.integers(-(2 ** 70), 2 ** 70) | st.floats(allow_nan=True) | st.text(max_size=12)
       | st.from_regex(r"\A\s*[+-]?0*[0-9]{1,22}(\.[0-9]*)?([eE][+-]?[0-9]{1,3})?\s*\Z"))
def test_property_a_use_never_reads_another_number(use, raw):
    name, chain = use
    normal, problem = NUMBERS[name](raw)
    if problem or _unset(raw, normal):
        return
    assert _same(name, chain, raw, normal), (name, chain, raw, normal)
    kind, low, high, _open = NUMBERS[name].bounds
    number = values.parse_human_int(normal) if isinstance(normal, str) else normal   # max_model_len's 32k
    assert low <= number <= high and (kind == "float" or isinstance(number, int)), (name, raw, normal)
    if kind == "float":
        assert math.isfinite(normal), (name, raw)
