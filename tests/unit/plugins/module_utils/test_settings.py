"""module_utils._settings: the settings hints name, the role's names for them, and the shared option's docs."""

from __future__ import annotations

import glob
import os
import re

import pytest
import yaml

from ansible_collections.sparkfleet.vllm.plugins.doc_fragments.setting_names import ModuleDocFragment
from ansible_collections.sparkfleet.vllm.plugins.module_utils import _settings
from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import (
    SETTINGS,
    check_setting_names,
    fields,
    render_text,
    setting_names_option,
    setting_names_problem,
    unknown_settings,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine._vllm_causes import CAUSES

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
_ROLE_VAR = r"\b((?:vllm_serve|ray_cluster|model_sync|gpu_cleanup|sparkfleet|healthcheck|preflight)_[a-z0-9_]+)"
HINT_MODULES = ("vllm_wait", "nccl_transport", "ray_cluster_check", "image_check", "gpu_holders")


def _read(*parts):
    with open(os.path.join(ROOT, *parts)) as fh:
        return fh.read()


def test_render_text_names_each_setting_as_the_caller_says_else_generically():
    assert render_text("set {fabric_ip} and {nccl_debug}") == "set the node's fabric IP and NCCL_DEBUG=INFO"
    assert render_text("set {fabric_ip}", {"fabric_ip": "sparkfleet_fabric_ip"}) == "set sparkfleet_fabric_ip"
    assert render_text("set {fabric_ip}", {"fabric_ip": ""}) == "set the node's fabric IP"
    assert render_text("no field") == "no field"
    assert fields("a {x} b {y}") == ("x", "y")
    with pytest.raises(KeyError):
        render_text("{not_a_setting}")


def test_setting_names_problem():
    assert setting_names_problem({}) is None and setting_names_problem(None) is None
    assert setting_names_problem({"fabric_ip": "my_ip"}) is None
    msg, hint = setting_names_problem({"fabric_ipp": "x", "aa": "y"})
    assert msg == "setting_names has unknown setting(s) aa, fabric_ipp" and "documentation" in hint
    msg, _hint = setting_names_problem({"port": " ", "fabric_ip": 3})
    assert msg == "setting_names values must be non-empty strings (fabric_ip, port)"
    assert unknown_settings({"port": 1, "zz": 2}) == ["zz"]


def test_the_generic_names_of_the_settings_name_no_role_variable():
    """What a hint says when the caller passed no setting_names. The code of every module_utils file is held to
    naming no role variable by tests/unit/test_architecture.py."""
    for value in SETTINGS.values():
        assert not re.search(_ROLE_VAR, value), value


def test_the_shared_option_lists_exactly_the_settings():
    doc = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)
    listed = [d for d in doc["options"]["setting_names"]["description"] if d.startswith("The settings:")]
    assert len(listed) == 1
    assert sorted(re.findall(r"C\((\w+)\)", listed[0])) == sorted(SETTINGS)


@pytest.mark.parametrize("module", HINT_MODULES)
def test_hint_modules_take_setting_names(module):
    src = _read("plugins", "modules", module + ".py")
    assert "- sparkfleet.vllm.setting_names" in src
    assert "**setting_names_option()" in src      # the option's spec, paired with the doc fragment, in one place
    # the check is made in the module or in the module_utils file that holds its logic
    logic = glob.glob(os.path.join(ROOT, "plugins", "module_utils", "**", "_%s.py" % module), recursive=True)
    assert re.search(r"check_setting_names\(module\)|setting_names_problem\(",
                     src + "".join(open(path).read() for path in logic))


def test_the_shared_option_spec_and_check():
    assert setting_names_option() == {"setting_names": {"type": "dict", "default": {}}}
    assert setting_names_option()["setting_names"]["default"] is not setting_names_option()["setting_names"]["default"]

    class Module:
        def __init__(self, names):
            self.params = {"setting_names": names}
            self.failed = None

        def fail_json(self, **kw):
            self.failed = kw

    good, bad = Module({"fabric_ip": "my_ip"}), Module({"fabric_ipp": "x"})
    check_setting_names(good)
    check_setting_names(bad)
    assert good.failed is None
    assert bad.failed["msg"] == "setting_names has unknown setting(s) fabric_ipp" and "documentation" in bad.failed["hint"]


def test_every_setting_is_named_by_some_hint():
    used = set(s for c in CAUSES for s in c.settings)
    for folder in ("module_utils", "modules"):
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, "plugins", folder)):
            for name in files:
                if name.endswith(".py") and name != "_settings.py":
                    with open(os.path.join(dirpath, name)) as handle:
                        used.update(re.findall(r"\{(%s)\}" % "|".join(SETTINGS), handle.read()))
    assert sorted(set(SETTINGS) - used) == []


def test_the_roles_name_every_setting_and_pass_their_names_to_every_hint_module():
    names = yaml.safe_load(_read("roles", "sparkfleet", "vars", "main.yml"))["sparkfleet_setting_names"]
    assert sorted(names) == sorted(SETTINGS), "roles/sparkfleet/vars/main.yml sparkfleet_setting_names"
    assert setting_names_problem(names) is None
    calls = 0
    for role in os.listdir(os.path.join(ROOT, "roles")):
        tasks = os.path.join(ROOT, "roles", role, "tasks")
        for name in os.listdir(tasks) if os.path.isdir(tasks) else []:
            for task in _tasks(yaml.safe_load(_read("roles", role, "tasks", name)) or []):
                for module in HINT_MODULES:
                    if "sparkfleet.vllm." + module in task:
                        calls += 1
                        args = task["sparkfleet.vllm." + module]
                        assert args.get("setting_names") == "{{ sparkfleet_setting_names }}", (role, name, task["name"])
    assert calls >= 7


def _tasks(items):
    for item in items:
        if not isinstance(item, dict):
            continue
        yield item
        for key in ("block", "rescue", "always"):
            yield from _tasks(item.get(key) or [])


def test_module_docstring_says_how_to_add_a_setting():
    assert "sparkfleet_setting_names" in _settings.__doc__ and "doc_fragments/setting_names.py" in _settings.__doc__
