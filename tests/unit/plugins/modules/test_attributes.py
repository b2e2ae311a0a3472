"""Every module documents check_mode / diff_mode / platform through the one attributes doc fragment.

The descriptions live once in plugins/doc_fragments/attributes.py; a module states only its support
(and details where it is partial) and its platforms. These tests read the DOCUMENTATION strings the way
ansible-doc and validate-modules do (statically, without importing the module) and compare the claims
with what the code does (supports_check_mode, a diff in the result, ansible_facts).
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from ansible.utils.plugin_docs import merge_fragment

from ansible_collections.sparkfleet.vllm.plugins.doc_fragments.attributes import ModuleDocFragment

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODULES = os.path.join(ROOT, "plugins", "modules")
NAMES = sorted(f[:-3] for f in os.listdir(MODULES) if f.endswith(".py") and not f.startswith("_"))
SUPPORT = {"full", "partial", "none", "N/A"}
FRAGMENT = "sparkfleet.vllm.attributes"
FACTS_FRAGMENT = "sparkfleet.vllm.attributes.facts"


def _source(name):
    with open(os.path.join(MODULES, name + ".py")) as fh:
        return fh.read()


def _doc(name):
    for node in ast.parse(_source(name)).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)
    raise AssertionError("%s has no DOCUMENTATION" % name)


def _merged(doc):
    """The module's attributes after the fragments it extends, merged as ansible-doc merges them."""
    attrs = copy.deepcopy(doc.get("attributes") or {})
    for frag in doc.get("extends_documentation_fragment") or []:
        if frag == FRAGMENT:
            text = ModuleDocFragment.DOCUMENTATION
        elif frag == FACTS_FRAGMENT:
            text = ModuleDocFragment.FACTS
        else:
            continue
        merge_fragment(attrs, yaml.safe_load(text)["attributes"])
    return attrs


def test_the_fragment_describes_and_does_not_decide():
    base = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["attributes"]
    assert set(base) == {"check_mode", "diff_mode", "platform"}
    for name, attr in base.items():
        assert attr["description"], name
    # The fragment never claims support for a module; only platform (a property, not a feature) is N/A.
    assert "support" not in base["check_mode"] and "support" not in base["diff_mode"]
    assert base["platform"]["support"] == "N/A"
    facts = yaml.safe_load(ModuleDocFragment.FACTS)["attributes"]
    assert set(facts) == {"facts"} and "support" not in facts["facts"]


def test_there_are_modules():
    assert "vllm_wait" in NAMES and len(NAMES) >= 13


@pytest.mark.parametrize("name", NAMES)
def test_module_extends_the_fragment_and_states_only_its_support(name):
    doc = _doc(name)
    assert FRAGMENT in (doc.get("extends_documentation_fragment") or []), (
        "%s: add `extends_documentation_fragment: [%s]`" % (name, FRAGMENT))
    own = doc.get("attributes") or {}
    for attr, value in own.items():
        # Descriptions come from the fragment only, so they are written once.
        assert "description" not in value, "%s: attributes.%s repeats the fragment's description" % (name, attr)
    for attr in ("check_mode", "diff_mode"):
        assert own.get(attr, {}).get("support") in SUPPORT - {"N/A"}, (
            "%s: attributes.%s needs support: full, partial or none" % (name, attr))
        if own[attr]["support"] == "partial":
            assert own[attr].get("details"), "%s: a partial %s needs details" % (name, attr)
    assert own.get("platform", {}).get("platforms") == "posix", "%s: attributes.platform.platforms" % name


@pytest.mark.parametrize("name", NAMES)
def test_merged_attributes_are_complete(name):
    merged = _merged(_doc(name))
    assert {"check_mode", "diff_mode", "platform"} <= set(merged)
    for attr, value in merged.items():
        assert value.get("description"), "%s: %s has no description after merging" % (name, attr)
        assert value.get("support") in SUPPORT, "%s: %s has no support after merging" % (name, attr)


@pytest.mark.parametrize("name", NAMES)
def test_support_claims_match_the_code(name):
    src = _source(name)
    action = os.path.join(ROOT, "plugins", "action", name + ".py")
    code = src
    if os.path.exists(action):
        with open(action) as fh:
            code += fh.read()
    attrs = _merged(_doc(name))
    checks = "supports_check_mode=True" in code or "self._task.check_mode" in code
    assert (attrs["check_mode"]["support"] != "none") == checks, name
    diffs = re.search(r"\bdiff\s*=", code) is not None
    assert (attrs["diff_mode"]["support"] != "none") == diffs, name
    facts = "ansible_facts" in code
    assert ("facts" in attrs) == facts, "%s: returns ansible_facts, extend %s" % (name, FACTS_FRAGMENT)
    if facts:
        assert attrs["facts"]["support"] == "full"


def test_ansible_doc_shows_the_merged_attributes():
    tool = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    out = subprocess.run(
        [tool, "-t", "module", "--json"] + ["sparkfleet.vllm.%s" % n for n in NAMES],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
        env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")),
    )
    docs = json.loads(out.stdout)
    assert sorted(docs) == ["sparkfleet.vllm.%s" % n for n in NAMES]
    for fq, entry in docs.items():
        attrs = entry["doc"]["attributes"]
        expected = _merged(_doc(fq.rsplit(".", 1)[1]))
        assert attrs == expected, fq
