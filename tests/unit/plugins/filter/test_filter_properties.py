"""Every filter of the collection, fed any input (hypothesis): it returns, or refuses with AnsibleFilterError whose
message starts with the filter's name, so the user reads which filter and which argument. Never a traceback.

The filters are found in plugins/filter/*.py (each FilterModule's filters()), so a new filter is covered without
editing this file; its arguments are drawn from its signature (positional and keyword). CI draws the same examples
every run (derandomize); SPARKFLEET_PROPERTY_EXAMPLES=600 draws that many random ones instead.
"""

from __future__ import annotations

import importlib
import inspect
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible.errors import AnsibleFilterError

PROPS = settings(max_examples=int(os.environ.get("SPARKFLEET_PROPERTY_EXAMPLES", "120")), deadline=None, database=None,
                 derandomize=not os.environ.get("SPARKFLEET_PROPERTY_EXAMPLES"), suppress_health_check=[HealthCheck.too_slow])
FILTER_DIR = Path(__file__).resolve().parents[4] / "plugins" / "filter"
ANY = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats() | st.text(max_size=24)
    | st.sampled_from(["10.99.1.11", "10.99.1.0/24", "fd00::1", "0.0.0.0", "--help", "-tp", "/etc", "../x", "1e400",
                       "{{ x }}", "eager", "ray", "spark-1", "INFO", "32k"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10) | st.sampled_from(
        ["model", "ip", "host", "head", "env", "mtu", "interface", "results", "item", "values", "errors", "extra_args",
         "served_model_name", "port", "NCCL_DEBUG"]), inner, max_size=4),
    max_leaves=10)


def _filters():
    out = []
    for path in sorted(FILTER_DIR.glob("*.py")):
        module = importlib.import_module("ansible_collections.sparkfleet.vllm.plugins.filter.%s" % path.stem)
        for name, func in sorted(module.FilterModule().filters().items()):
            out.append(pytest.param(name, func, id=name))
    return out


FILTERS = _filters()


def test_every_filter_is_found():
    names = {p.id for p in FILTERS}
    assert {"vllm_serve_args", "ray_start_args", "settings_errors", "node_paths", "serving_errors",
            "inventory_errors", "model_path_problem"} <= names


@pytest.mark.parametrize("name, func", FILTERS)
@PROPS
@given(data=st.data())
def test_no_input_gives_a_traceback(name, func, data):
    params = list(inspect.signature(func).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    n = data.draw(st.integers(len(required), len(positional)), label="positional args")
    args = [data.draw(ANY, label=p.name) for p in positional[:n]]
    kwargs = {}
    for p in positional[n:]:
        if data.draw(st.booleans(), label="pass %s" % p.name):
            kwargs[p.name] = data.draw(ANY, label=p.name)
    try:
        func(*args, **kwargs)
    except AnsibleFilterError as exc:
        message = str(exc)
        assert message.startswith(name + ":") or message.startswith(name.replace("_errors", "") + ":") \
            or (name == "inventory_errors"), message
