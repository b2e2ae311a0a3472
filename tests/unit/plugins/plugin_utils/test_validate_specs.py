"""Issue 43.3/43.4: the validator's knowledge of each role's variables is tied to the role's argument specs.

Each role's checks live in plugins/plugin_utils/_validate_<role>.py (CHECKS). A role that adds an option its table does
not know, a table that knows a variable its role does not declare, a type, a choice or a bound that the two state
differently: each fails here. Issue 40.2's bounds: every numeric option states its lower and upper bound in the
argument specs ("Preflight takes a whole number from 1 to 31536000"), and the validator refuses just past each.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _inventory
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate as v
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate_values as values

REPO = Path(__file__).resolve().parents[4]
# The roles whose variables preflight checks (qualify's are checked by playbooks/qualify.yml when it runs).
CHECKED_ROLES = sorted(v.ROLE_TABLES)
# "Preflight takes a whole number from 1 to 31536000 (a year)", "... a number above 0 and at most 1".
_BOUNDS_RE = re.compile(r"Preflight takes [^.]*?\b(from|above) (-?[0-9][0-9,]*(?:\.[0-9]+)?)"
                        r" (?:to|and at most) ([0-9][0-9,]*(?:\.[0-9]+)?)")


def _spec(role):
    return yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]


def _declared():
    """name -> (role whose table checks it, option): each role's own options (named <role>_*), and the floor's
    (sparkfleet_*), which other roles declare too where they read them."""
    out = {}
    for role in ["sparkfleet"] + [r for r in CHECKED_ROLES if r != "sparkfleet"]:
        for entry in _spec(role).values():
            for name, option in (entry.get("options") or {}).items():
                owner = "sparkfleet" if name.startswith("sparkfleet_") else role
                if not name.startswith("_") and name not in _inventory.NODE_VARS:
                    out.setdefault(name, (owner, option))
    return out


DECLARED = _declared()


def _options(role):
    return dict((name, option) for name, (owner, option) in DECLARED.items() if owner == role)


def _description(option):
    desc = option.get("description", "")
    return " ".join(desc) if isinstance(desc, list) else str(desc)


def _number(text):
    text = text.replace(",", "")
    return float(text) if "." in text else int(text)


OPTIONS = [(role, name, option) for role in CHECKED_ROLES for name, option in sorted(_options(role).items())]
NUMERIC = [(role, name, option) for role, name, option in OPTIONS if getattr(v.ROLE_TABLES[role][name], "bounds", None)
           or option.get("type") in ("int", "float")]


def test_every_checked_role_has_a_table_and_a_spec():
    on_disk = sorted(p.parent.parent.name for p in (REPO / "roles").glob("*/meta/argument_specs.yml"))
    assert set(CHECKED_ROLES) == set(on_disk) - {"qualify"}, (CHECKED_ROLES, on_disk)


@pytest.mark.parametrize("role", CHECKED_ROLES)
def test_each_role_table_knows_exactly_its_options(role):
    declared, known = set(_options(role)), set(v.ROLE_TABLES[role])
    assert not declared - known, "%s declares options its validator table does not know: %s" % (
        role, sorted(declared - known))
    assert not known - declared, "plugin_utils/_validate_%s.py knows variables the role does not declare: %s" % (
        role, sorted(known - declared))


def test_the_node_variables_are_the_inventory_checks_own():
    """The floor variables no table knows are the ones plugin_utils/_inventory.py checks, each read there."""
    source = (REPO / "plugins" / "plugin_utils" / "_inventory.py").read_text()
    for name in _inventory.NODE_VARS:
        assert source.count('"%s"' % name) >= 2, name   # NODE_VARS and at least one read


def test_every_table_entry_is_checked_by_preflight():
    """A table's None (checked with its context) is still one of preflight's or serving_errors' own rules."""
    contextual = {name for table in v.ROLE_TABLES.values() for name, check in table.items() if check is None}
    assert contextual == {"vllm_serve_extra_args", "ray_cluster_env", "ray_cluster_extra_args",
                          "ray_cluster_firewall_allow"}, contextual


@pytest.mark.parametrize("role, name, option", OPTIONS, ids=[o[1] for o in OPTIONS])
def test_the_types_agree(role, name, option):
    check = v.ROLE_TABLES[role][name]
    kind = option.get("type", "str")
    if kind == "bool" or check is values.check_bool:
        assert kind == "bool" and check is values.check_bool, (name, kind, check)
    bounds = getattr(check, "bounds", None)
    if kind in ("int", "float"):
        assert bounds, "%s is an %s option whose check states no bounds (values.bounded)" % (name, kind)
    if bounds:
        assert (bounds[0], kind) in (("int", "int"), ("int", "raw"), ("float", "float")), (name, kind, bounds)


@pytest.mark.parametrize("role, name, option", OPTIONS, ids=[o[1] for o in OPTIONS])
def test_the_choices_agree(role, name, option):
    check = v.ROLE_TABLES[role][name]
    stated = option.get("choices")
    known = getattr(check, "choices", None)
    assert (stated is None) == (known is None), (name, stated, known)
    if stated is not None:
        assert tuple(stated) == tuple(known), (name, stated, known)
        for choice in stated:
            assert check(choice) == (choice, None), (name, choice)
        assert check("%s-not-a-choice" % stated[0])[1], name


@pytest.mark.parametrize("role, name, option", OPTIONS, ids=[o[1] for o in OPTIONS])
def test_a_plain_default_passes_its_check(role, name, option):
    """A default that is a value (not a Jinja expression) passes the check preflight gives it."""
    if "default" not in option or option["default"] is None or "{{" in str(option["default"]):
        return
    check = v.ROLE_TABLES[role][name]
    if check is None:
        return
    assert check(option["default"])[1] is None, (name, option["default"], check(option["default"]))


@pytest.mark.parametrize("role, name, option", NUMERIC, ids=[o[1] for o in NUMERIC])
def test_every_number_states_its_bounds_and_the_validator_enforces_them(role, name, option):
    check = v.ROLE_TABLES[role][name]
    kind, low, high, low_open = check.bounds
    match = _BOUNDS_RE.search(_description(option))
    assert match, ("%s (%s): the description must state the bounds, e.g. 'Preflight takes a whole number from %s to"
                   " %s'" % (name, role, low, high))
    assert (_number(match.group(2)), _number(match.group(3))) == (low, high), (name, match.group(0), low, high)
    assert (match.group(1) == "above") == low_open, (name, match.group(0))
    step = 1 if kind == "int" else 1e-6
    # the bounds themselves (or just above an open lower bound) are accepted, just past them refused
    assert check(high)[1] is None, (name, high, check(high))
    assert check(low + step if low_open else low)[1] is None, (name, low)
    assert check(high + step)[1], (name, high + step)
    assert check(low if low_open else low - step)[1], (name, low)
    # and through settings_errors, naming the variable the user set
    errors = v.settings_errors({name: high + step, "sparkfleet_fabric_subnet": "192.168.200.0/24"}, "spark-1")
    assert [e for e in errors if e.startswith("spark-1: %s " % name)], (name, errors)
