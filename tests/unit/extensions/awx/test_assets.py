"""extensions/awx/sparkfleet-vllm.json: what `awx import` (awxkit) and the awx.awx `import` module read.

The rules below are AWX's own, read from its source (ansible/awx, devel):
- survey specs: `JobTemplateSurveySpec._validate_spec_data` in awx/api/views/__init__.py (what a POST to
  .../survey_spec/ accepts) and `SurveyJobTemplateMixin._survey_element_validation` in awx/main/models/mixins.py
  (what a launch accepts; a default that fails it is silently dropped at launch);
- credential types: the JSON schemas and checks of `CredentialTypeInputField` / `CredentialTypeInjectorField` in
  awx/main/fields.py, and the rendering of `CredentialType.inject_credential` in awx/main/models/credential.py.
On top, this collection's own rules: every survey variable and injected variable is a real, documented variable
of the roles with the same type, and an unanswered question leaves the inventory's value in force.
"""

from __future__ import annotations

import json
import os

import jsonschema
import pytest
import yaml
from jinja2 import StrictUndefined, UndefinedError
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
ASSETS_PATH = os.path.join(ROOT, "extensions", "awx", "sparkfleet-vllm.json")

# awx/main/constants.py SURVEY_TYPE_MAPPING
SURVEY_TYPE_MAPPING = {"text": str, "textarea": str, "password": str, "multiplechoice": str, "multiselect": str,
                       "integer": int, "float": (float, int)}
# awxkit's own rules (pinned in requirements.txt): the top-level keys `awx import` reads and each type's natural key.
from awxkit.api import pages as awx_pages  # noqa: E402
from awxkit.api.pages.api import EXPORTABLE_RESOURCES  # noqa: E402

EXPORTABLE = set(EXPORTABLE_RESOURCES)
NATURAL_KEYS = {t: tuple(getattr(awx_pages, c).NATURAL_KEY) for t, c in (
    ("organization", "Organization"), ("credential_type", "CredentialType"), ("project", "Project"),
    ("job_template", "JobTemplate"), ("execution_environment", "ExecutionEnvironment"), ("inventory", "Inventory"),
    ("inventory_source", "InventorySource"))}
# Natural-key fields an object without such a field of its own leaves out (awxkit's get_natural_key skips them).
DERIVED = {("inventory_source", "organization")}


def survey_spec_errors(new_spec, old_spec=None):
    """AWX's POST-time survey validation; returns the first error AWX would answer with 400, or None."""
    for field, expect in (("name", str), ("description", str), ("spec", list)):
        if field not in new_spec:
            return "Field '%s' is missing from survey spec." % field
        if not isinstance(new_spec[field], expect):
            return "Expected %s for field '%s'" % (expect.__name__, field)
    if not new_spec["spec"]:
        return "'spec' doesn't contain any items."
    old = {item["variable"]: item for item in (old_spec or {}).get("spec", [])}
    seen = set()
    for idx, item in enumerate(new_spec["spec"]):
        if not isinstance(item, dict):
            return "Survey question %d is not a json object." % idx
        for key in ("type", "question_name", "variable", "required"):
            if key not in item:
                return "'%s' missing from survey question %d" % (key, idx)
            if not isinstance(item[key], bool if key == "required" else str):
                return "'%s' in survey question %d has the wrong type" % (key, idx)
        if item["variable"] in seen:
            return "'variable' '%s' duplicated in survey question %d." % (item["variable"], idx)
        seen.add(item["variable"])
        qtype = item["type"]
        if qtype not in SURVEY_TYPE_MAPPING:
            return "'%s' in survey question %d is not an allowed question type" % (qtype, idx)
        if "default" in item and item["default"] != "" and not isinstance(item["default"], SURVEY_TYPE_MAPPING[qtype]):
            return "Default value %r in survey question %d has the wrong type" % (item["default"], idx)
        for key in ("min", "max"):
            if item.get(key) is not None and not isinstance(item[key], int):
                return "The %s limit in survey question %d expected to be integer." % (key, idx)
        if qtype in ("multiselect", "multiplechoice"):
            if "choices" not in item:
                return "Survey question %d of type %s must specify choices." % (idx, qtype)
            if "default" in item:
                defaults = item["default"].splitlines() if isinstance(item["default"], str) else item["default"]
                if qtype == "multiplechoice" and len(defaults) > 1:
                    return "Multiple Choice (Single Select) can only have one default value."
                if any(d not in item["choices"] for d in defaults):
                    return "Default choice must be answered from the choices listed."
        if isinstance(item.get("default"), str) and item["default"].startswith("$encrypted$"):
            if qtype != "password":
                return "$encrypted$ is a reserved keyword for password question defaults (question %d)" % idx
            old_default = old.get(item["variable"], {}).get("default")
            if not (isinstance(old_default, str) and (old_default.startswith("$encrypted$") or old_default == "")):
                return "$encrypted$ is a reserved keyword, may not be used for new default in position %d." % idx
    return None


def answer_errors(item, data):
    """AWX's launch-time check of one answer (`_survey_element_validation`)."""
    var, qtype = item["variable"], item["type"]
    if qtype == "password" and data.get(var) == "$encrypted$":
        return ["'%s' value missing" % var] if item.get("default") is None and item["required"] else []
    if var not in data:
        return ["'%s' value missing" % var] if item["required"] else []
    value = data[var]
    lo, hi = item.get("min"), item.get("max")
    lo = None if lo in ("", None) else lo
    hi = None if hi in ("", None) else hi
    if qtype in ("text", "textarea", "password"):
        if not isinstance(value, str):
            return ["Value %s for '%s' expected to be a string." % (value, var)]
        return ([] if lo is None or len(value) >= int(lo) else ["'%s' too short" % var]) + \
               ([] if hi is None or len(value) <= int(hi) else ["'%s' too long" % var])
    if qtype == "integer":
        if isinstance(value, bool) or not isinstance(value, int):  # AWX: type(value) != int
            return ["Value %s for '%s' expected to be an integer." % (value, var)]
        return ([] if lo is None or value >= int(lo) else ["'%s' too small" % var]) + \
               ([] if hi is None or value <= int(hi) else ["'%s' too large" % var])
    if qtype == "float":
        if isinstance(value, bool) or not isinstance(value, (float, int)):  # AWX: type() not in (float, int)
            return ["Value %s for '%s' expected to be a numeric type." % (value, var)]
        return ([] if lo is None or value >= float(lo) else ["'%s' too small" % var]) + \
               ([] if hi is None or value <= float(hi) else ["'%s' too large" % var])
    choices = item["choices"].splitlines() if isinstance(item["choices"], str) else item["choices"]
    if qtype == "multiselect":
        return [] if isinstance(value, list) and all(v in choices for v in value) else ["'%s' not in choices" % var]
    return [] if value in choices else ["'%s' not in choices" % var]


# awx/main/fields.py CredentialTypeInputField.schema / CredentialTypeInjectorField.schema
INPUTS_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "required": {"type": "array", "items": {"type": "string"}},
        "fields": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["id", "label"],
            "properties": {
                "type": {"enum": ["string", "boolean"]},
                "format": {"enum": ["ssh_private_key", "url"]},
                "choices": {"type": "array", "minItems": 1, "items": {"type": "string"}, "uniqueItems": True},
                "id": {"type": "string", "pattern": "^[a-zA-Z_]+[a-zA-Z0-9_]*$"},
                "label": {"type": "string"}, "help_text": {"type": "string"}, "multiline": {"type": "boolean"},
                "secret": {"type": "boolean"}, "ask_at_runtime": {"type": "boolean"}, "default": {},
            }}},
    },
}
INJECTORS_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "file": {"type": "object", "additionalProperties": False,
                 "patternProperties": {r"^template(\.[a-zA-Z_]+[a-zA-Z0-9_]*)?$": {"type": "string"}}},
        "env": {"type": "object", "additionalProperties": False,
                "patternProperties": {"^[a-zA-Z_]+[a-zA-Z0-9_]*$": {"type": "string", "pattern": "^[\x00-\x7F]*$"}}},
        "extra_vars": {"type": "object", "additionalProperties": False,
                       "patternProperties": {r"^[a-zA-Z_\{\}]+[a-zA-Z0-9_\{\}]*$": {
                           "anyOf": [{"type": "string"}, {"type": "array"}, {"$ref": "#/properties/extra_vars"}]}}},
    },
}


def render_injected_extra_vars(credential_type, inputs):
    """What AWX writes to the job's credential extra-vars file (inject_credential): blank inputs render as ''."""
    env = ImmutableSandboxedEnvironment()
    namespace = {k: v for k, v in inputs.items() if v != ""}
    return {env.from_string(k).render(**namespace): env.from_string(v).render(**namespace)
            for k, v in credential_type["injectors"].get("extra_vars", {}).items()}


@pytest.fixture(scope="module")
def assets():
    with open(ASSETS_PATH, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def role_specs():
    """Every role variable: name -> its argument_specs entry (main entry point)."""
    specs = {}
    roles = os.path.join(ROOT, "roles")
    for role in sorted(os.listdir(roles)):
        with open(os.path.join(roles, role, "meta", "argument_specs.yml"), encoding="utf-8") as f:
            doc = yaml.safe_load(f)
        for entry in doc["argument_specs"].values():
            specs.update(entry.get("options") or {})
    return specs


def job_templates(assets):
    return {t["name"]: t for t in assets["job_templates"]}


def test_only_exportable_resources_each_with_its_natural_key(assets):
    assert set(assets) <= EXPORTABLE
    for resource, items in assets.items():
        for item in items:
            key = item["natural_key"]
            fields = [f for f in NATURAL_KEYS[key["type"]] if (key["type"], f) not in DERIVED]
            assert set(key) == set(fields) | {"type"}, (resource, key)
            # A job template's organization is its project's (AWX derives it); the others carry the field.
            for field in fields:
                expected = item["project"]["organization"] if (key["type"], field) == ("job_template", "organization") \
                    else item[field]
                assert key[field] == expected, (resource, field)


def test_references_resolve_to_an_asset_of_the_file_or_awx_default_organization(assets):
    known = {json.dumps(i["natural_key"], sort_keys=True) for items in assets.values() for i in items}
    known.add(json.dumps({"name": "Default", "type": "organization"}, sort_keys=True))
    for resource, items in assets.items():
        for item in items:
            for field, value in item.items():
                if field != "natural_key" and isinstance(value, dict) and "type" in value:
                    assert json.dumps(value, sort_keys=True) in known, (resource, item["name"], field)


def test_the_four_job_templates_run_the_repository_playbooks(assets):
    jts = job_templates(assets)
    assert set(jts) == {"sparkfleet deploy", "sparkfleet status", "sparkfleet stop", "sparkfleet restart"}
    for name, jt in jts.items():
        assert os.path.isfile(os.path.join(ROOT, jt["playbook"])), (name, jt["playbook"])
        # AWX adds --become only from the template's become_enabled (no play sets become).
        assert jt["become_enabled"] is True, name
        # Inventory and credentials (Machine + the secrets type) are chosen at launch; runs never overlap
        # (the deploy lock would refuse the second one anyway).
        assert jt["ask_inventory_on_launch"] and jt["ask_credential_on_launch"] and not jt["allow_simultaneous"]
    # The root site.yml imports it with the FQCN form, which AWX's playbook scan does not recognise.
    assert jts["sparkfleet deploy"]["playbook"] == "playbooks/site.yml"


@pytest.mark.parametrize("name", ["sparkfleet deploy", "sparkfleet status", "sparkfleet restart"])
def test_surveys_pass_awx_survey_validation(assets, name):
    jt = job_templates(assets)[name]
    assert jt["survey_enabled"]
    assert survey_spec_errors(jt["related"]["survey_spec"]) is None


def test_stop_has_no_survey(assets):
    jt = job_templates(assets)["sparkfleet stop"]
    assert not jt["survey_enabled"] and "survey_spec" not in jt["related"]


def test_deploy_survey_asks_the_serving_knobs(assets):
    spec = job_templates(assets)["sparkfleet deploy"]["related"]["survey_spec"]["spec"]
    by_var = {q["variable"]: q for q in spec}
    assert set(by_var) == {"sparkfleet_model_id", "sparkfleet_model_dir", "sparkfleet_image",
                           "vllm_serve_tensor_parallel_size", "vllm_serve_pipeline_parallel_size",
                           "vllm_serve_gpu_memory_utilization", "vllm_serve_max_model_len", "vllm_serve_api_key"}
    assert by_var["vllm_serve_api_key"]["type"] == "password"
    assert by_var["vllm_serve_tensor_parallel_size"]["type"] == "integer"
    assert by_var["vllm_serve_gpu_memory_utilization"]["type"] == "float"


def test_unanswered_questions_leave_the_inventory_in_force(assets):
    """Survey defaults become extra vars (which beat the inventory) at every launch: no question has one, so a
    blank answer keeps the inventory's value; a password default would also sit in this file in clear text."""
    for jt in assets["job_templates"]:
        for item in jt["related"].get("survey_spec", {}).get("spec", []):
            assert "default" not in item, (jt["name"], item["variable"])
            assert item["required"] is False, (jt["name"], item["variable"])
            assert answer_errors(item, {}) == []


def test_survey_types_match_the_role_argument_specs(assets, role_specs):
    kinds = {"integer": {"int"}, "float": {"float"}, "text": {"str", "raw", "path"}, "password": {"str"}}
    inventory_vars = {"sparkfleet_model_id": "str", "sparkfleet_model_dir": "path", "sparkfleet_image": "str"}
    for jt in assets["job_templates"]:
        for item in jt["related"].get("survey_spec", {}).get("spec", []):
            var = item["variable"]
            spec_type = inventory_vars.get(var) or role_specs.get(var, {}).get("type")
            assert spec_type, "%s: %s is not a documented role variable" % (jt["name"], var)
            assert spec_type in kinds[item["type"]], (var, item["type"], spec_type)
            if item["type"] == "password":
                assert role_specs[var].get("no_log"), var


@pytest.mark.parametrize("variable,good,bad", [
    ("vllm_serve_tensor_parallel_size", [1, 2, 64], [0, -1, 65, "2", 2.0]),
    ("vllm_serve_pipeline_parallel_size", [1, 4], [0, "1"]),
    ("vllm_serve_gpu_memory_utilization", [0.85, 1, 0.5], [1.2, -0.1, "0.85"]),
    ("vllm_serve_max_model_len", ["32768", "32k", "32K"], [32768, ""]),
    ("sparkfleet_model_id", ["Qwen/Qwen3.5-122B-A10B-FP8"], ["", 3]),
    ("vllm_serve_api_key", ["a-long-enough-key"], ["short", 12345678]),
])
def test_deploy_answers_as_awx_checks_them_at_launch(assets, variable, good, bad):
    item = next(q for q in job_templates(assets)["sparkfleet deploy"]["related"]["survey_spec"]["spec"]
                if q["variable"] == variable)
    for value in good:
        assert answer_errors(item, {variable: value}) == [], value
    for value in bad:
        assert answer_errors(item, {variable: value}), value


def test_the_validator_rejects_what_awx_rejects():
    """The re-implemented rules are not vacuous: each of AWX's refusals is hit by one bad spec."""
    good = {"type": "text", "question_name": "Q", "variable": "v", "required": False}
    cases = [
        {"name": "s", "spec": [good]},                                            # no description
        {"name": "s", "description": "", "spec": []},                             # empty spec
        {"name": "s", "description": "", "spec": [dict(good, required="no")]},    # required not a bool
        {"name": "s", "description": "", "spec": [good, good]},                   # duplicate variable
        {"name": "s", "description": "", "spec": [dict(good, type="number")]},    # unknown type
        {"name": "s", "description": "", "spec": [dict(good, type="integer", default="3")]},
        {"name": "s", "description": "", "spec": [dict(good, type="float", min=0.1)]},          # min not an int
        {"name": "s", "description": "", "spec": [dict(good, type="multiplechoice")]},          # no choices
        {"name": "s", "description": "", "spec": [dict(good, type="multiplechoice", choices=["a"], default="b")]},
        {"name": "s", "description": "", "spec": [dict(good, default="$encrypted$")]},          # not a password
        {"name": "s", "description": "", "spec": [dict(good, type="password", default="$encrypted$")]},
    ]
    for case in cases:
        assert survey_spec_errors(case), case
    assert survey_spec_errors({"name": "s", "description": "", "spec": [good]}) is None


def credential_type(assets):
    [ct] = assets["credential_types"]
    return ct


def test_credential_type_inputs_and_injectors_match_awx_schemas(assets):
    ct = credential_type(assets)
    assert ct["kind"] == "cloud"  # the kind AWX gives every custom credential type
    jsonschema.validate(ct["inputs"], INPUTS_SCHEMA)
    jsonschema.validate(ct["injectors"], INJECTORS_SCHEMA)
    ids = [f["id"] for f in ct["inputs"]["fields"]]
    assert len(ids) == len(set(ids)) and "tower" not in ids
    assert set(ct["inputs"].get("required", [])) <= set(ids)
    for env_var in ct["injectors"].get("env", {}):
        assert not env_var.startswith("ANSIBLE_"), env_var
    # Every injector template renders with only the defined fields (AWX refuses an undefined one).
    strict = ImmutableSandboxedEnvironment(undefined=StrictUndefined)
    namespace = {i: "EXAMPLE" for i in ids}
    for key, tmpl in ct["injectors"]["extra_vars"].items():
        strict.from_string(key).render(namespace)
        strict.from_string(tmpl).render(namespace)
    with pytest.raises(UndefinedError):
        strict.from_string("{{ api_token }}").render(namespace)


def test_the_injectors_would_refuse_a_bad_schema():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"extra_vars": {"bad-name": "{{ x }}"}}, INJECTORS_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"fields": [{"id": "api key", "label": "x"}]}, INPUTS_SCHEMA)


def test_every_secret_is_a_secret_field_injected_into_a_no_log_role_variable(assets, role_specs):
    ct = credential_type(assets)
    fields = {f["id"]: f for f in ct["inputs"]["fields"]}
    assert set(fields) == {"api_key", "hf_token", "ray_token"}
    assert all(f.get("secret") for f in fields.values())
    injected = ct["injectors"]["extra_vars"]
    assert injected == {"vllm_serve_api_key": "{{ api_key }}", "model_sync_hf_token": "{{ hf_token }}",
                        "ray_cluster_auth_token": "{{ ray_token }}"}
    for var in injected:
        assert role_specs[var]["type"] == "str" and role_specs[var].get("no_log"), var
    # An empty API key would override the inventory's with "" (preflight then refuses an open API): required.
    assert ct["inputs"]["required"] == ["api_key"]


def test_injected_values_as_awx_renders_them(assets):
    ct = credential_type(assets)
    rendered = render_injected_extra_vars(ct, {"api_key": "k3y", "hf_token": "", "ray_token": ""})
    # Blank Ray token: the role generates one on the head once and keeps it there (no controller state).
    assert rendered == {"vllm_serve_api_key": "k3y", "model_sync_hf_token": "", "ray_cluster_auth_token": ""}


# --- issue 19.2: the import procedure (extensions/awx/sparkfleet_awx.py) -----------------------------------------

SCRIPT = os.path.join(ROOT, "extensions", "awx", "sparkfleet_awx.py")
VALUES = {"SPARKFLEET_SCM_URL": "https://git.example.com/ops/sparkfleet.vllm.git",
          "SPARKFLEET_EE_IMAGE": "registry.example.com/sparkfleet-vllm-ee:0.2.0"}


def _script(args, env=None, cwd=ROOT):
    import subprocess
    import sys
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPARKFLEET_")}
    base.update(env or {})
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True, env=base, cwd=cwd,
                          timeout=60, check=False)


def _module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("sparkfleet_awx", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_uses_awxkits_rules_when_awxkit_is_there():
    exportable, natural_keys, from_awxkit = _module().awxkit_rules()
    assert from_awxkit and set(exportable) == EXPORTABLE and natural_keys == NATURAL_KEYS


def test_dry_run_of_the_export_passes_with_the_two_values(assets):
    awx = _module()
    assert awx.problems(awx.render(assets, *VALUES.values()), ROOT) == []
    p = _script(["--check", ROOT], VALUES)
    assert p.returncode == 0, p.stderr
    assert "dry run ok (awxkit's rules)" in p.stdout
    for name in ("sparkfleet deploy", "sparkfleet status", "sparkfleet restart", "sparkfleet stop",
                 "sparkfleet sample", "sparkfleet.vllm"):
        assert ": %s" % name in p.stdout, p.stdout


def test_every_job_template_runs_a_playbook_awx_lists_for_the_project(assets):
    listed = _module().project_playbooks(ROOT)
    assert {jt["playbook"] for jt in assets["job_templates"]} <= set(listed)
    # AWX's scan does not see the FQCN import in the root site.yml (its regex wants a bare import_playbook:).
    assert "site.yml" not in listed and "playbooks/site.yml" in listed
    assert not [p for p in listed if p.startswith(("roles/", ".", "collections/"))]


def test_the_two_values_must_be_set_before_anything_happens(assets):
    p = _script(["--import"])
    assert p.returncode == 2 and not p.stdout
    assert "set SPARKFLEET_SCM_URL" in p.stderr and "set SPARKFLEET_EE_IMAGE" in p.stderr
    # The raw file cannot be imported by mistake: the placeholders are named by the dry run.
    awx = _module()
    said = "\n".join(awx.problems(assets, ROOT))
    assert "scm_url is not set" in said and "image is not set" in said


def test_the_dry_run_names_what_awx_would_refuse(assets):
    awx = _module()
    broken = awx.render(assets, *VALUES.values())
    broken["job_templates"][1]["playbook"] = "playbooks/nothere.yml"
    broken["job_templates"][2]["become_enabled"] = False
    broken["job_templates"][3]["execution_environment"] = {"name": "other-ee", "type": "execution_environment"}
    broken["workflows"] = []
    said = "\n".join(awx.problems(broken, ROOT))
    assert "playbook 'playbooks/nothere.yml' is not one AWX lists" in said
    assert "job template 'sparkfleet restart': become_enabled is not true" in said
    assert "refers to {\"name\": \"other-ee\"" in said
    assert "workflows: awx import does not read this key" in said


def test_one_command_imports_the_export_with_both_values(tmp_path):
    """`--import` hands `awx import` the export with the two values set (a stand-in awx records what it got)."""
    fake = tmp_path / "awx"
    fake.write_text("#!/bin/sh\n[ \"$1\" = import ] || exit 9\ncat > %s\n" % (tmp_path / "got.json"))
    fake.chmod(0o755)
    env = dict(VALUES, PATH="%s:%s" % (tmp_path, os.environ.get("PATH", "")))
    p = _script(["--import"], env)
    assert p.returncode == 0, p.stderr
    got = json.loads((tmp_path / "got.json").read_text())
    assert got["projects"][0]["scm_url"] == VALUES["SPARKFLEET_SCM_URL"]
    assert got["execution_environments"][0]["image"] == VALUES["SPARKFLEET_EE_IMAGE"]
    assert all(jt["become_enabled"] for jt in got["job_templates"])


def test_the_sample_inventory_source_gives_the_three_groups(assets):
    import subprocess
    import sys
    [source] = assets["inventory_sources"]
    assert source["source"] == "scm" and source["source_project"]["name"] == assets["projects"][0]["name"]
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-inventory"), "-i",
                          os.path.join(ROOT, source["source_path"]), "--graph"], capture_output=True, text=True,
                         check=True)
    for group in ("@spark:", "@spark_head:", "@spark_workers:"):
        assert group in out.stdout, out.stdout


def test_the_own_project_example_of_the_doc_is_a_playbook_for_awx(tmp_path):
    import re
    with open(os.path.join(ROOT, "docs", "awx.md"), encoding="utf-8") as f:
        block = re.search(r"```yaml\n(.*?)```", f.read(), re.S).group(1)
    (tmp_path / "site.yml").write_text(block)
    assert _module().project_playbooks(str(tmp_path)) == ["site.yml"]


def test_the_inventory_says_its_source_replaces_its_hosts_and_the_docs_say_what_beats_the_credential():
    """Issue 41.11: the source overwrites hosts while the inventory's description invited adding them; the sample's
    ansible_user and key override the Machine credential without docs/awx.md saying so."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))))))
    with open(os.path.join(root, "extensions", "awx", "sparkfleet-vllm.json"), encoding="utf-8") as f:
        assets = json.load(f)
    (source,) = assets["inventory_sources"]
    (inventory,) = [i for i in assets["inventory"] if i["name"] == source["inventory"]["name"]]
    if source["overwrite"]:
        assert "add your hosts here" not in inventory["description"]
        assert "replaced at every update" in inventory["description"], inventory["description"]
    with open(os.path.join(root, "docs", "awx.md"), encoding="utf-8") as f:
        doc = " ".join(f.read().split())
    with open(os.path.join(root, "inventories", "sample", "group_vars", "spark", "main.yml"), encoding="utf-8") as f:
        sample = f.read()
    for var in ("ansible_user", "ansible_ssh_private_key_file"):
        if "\n%s:" % var in "\n" + sample:
            assert var in doc and "The inventory's variables beat the credential" in doc, var
    assert "a host added by hand is removed at the next update" in doc
