"""What a re-run skips because the same run already has the answer (issue 44): each task's own `when`, read from the
role's YAML and evaluated as Ansible evaluates it (Jinja, `| bool`, `is failed/skipped/defined`), for the inputs that
must ask again and those that need not."""

from __future__ import annotations

from pathlib import Path

import jinja2.nativetypes
import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ARGS = ["/models/m", "--served-model-name", "m", "--kv-cache-dtype", "fp8"]


def task(role, name, path="tasks/main.yml"):
    tasks = yaml.safe_load((REPO / "roles" / role / path).read_text())
    flat = []
    for t in tasks:
        flat.extend(t.get("block", [])) if "block" in t else flat.append(t)
    return next(t for t in flat if t.get("name", "").startswith(name))


def _bool(value):
    return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "yes", "on", "1")


def holds(t, **variables):
    # native types, as ansible-core 2.19 templates: a variable that renders a dict is a dict
    env = jinja2.nativetypes.NativeEnvironment(undefined=jinja2.StrictUndefined)
    env.filters["bool"] = _bool
    env.filters["sparkfleet.vllm.vllm_serve_args"] = lambda cfg: list(cfg["args"])
    env.tests["failed"] = lambda r: bool(r.get("failed"))
    env.tests["skipped"] = lambda r: bool(r.get("skipped"))
    conditions = t["when"] if isinstance(t["when"], list) else [t["when"]]
    # a task's vars are in scope for its own condition, as in Ansible
    scope = dict(variables)
    for key, value in (t.get("vars") or {}).items():
        if isinstance(value, str) and "{{" in value:
            scope[key] = env.from_string(value.strip()).render(**scope)
    return all(env.from_string("{{ (%s) | bool }}" % c.strip()).render(**scope) is True for c in conditions)


RECIPE = [{"variable": "vllm_serve_kv_cache_dtype", "args": ["--kv-cache-dtype", "fp8"]},
          {"variable": "vllm_serve_max_num_seqs", "args": ["--max-num-seqs", "64"]}]


INPUTS = {"image": "vllm:1", "serve_args": ARGS, "model_config": "/models/m/config.json", "recipe": RECIPE}


def image_vars(**over):
    """The runtime_image role's check in this run (the floor's image_check.yml: its result and what it asked with) and
    what vllm_serve would ask now (the floor's _sparkfleet_image_check_inputs; test_image_check_inputs.py shows it is
    vllm_serve's own flags and recipe)."""
    checked = {"image": "vllm:1", "model_architectures": ["Qwen3_5MoeForCausalLM"], "failed": False}
    v = {"sparkfleet_recheck": False, "vllm_serve_image": "vllm:1", "sparkfleet_image_check": checked,
         "_sparkfleet_image_check_inputs": dict(INPUTS), "sparkfleet_image_checked": dict(INPUTS)}
    v.update(over)
    return v


@pytest.mark.parametrize("over, asks", [
    ({}, False),                                                          # same image, flags, model judged: no call
    ({"sparkfleet_recheck": True}, True),
    ({"sparkfleet_image_check": {"image": "vllm:1", "model_architectures": [], "failed": False}}, True),  # no model yet
    ({"sparkfleet_image_check": {"image": "vllm:0", "model_architectures": ["X"], "failed": False}}, True),
    ({"_sparkfleet_image_check_inputs": dict(INPUTS, serve_args=ARGS + ["--max-num-seqs", "4"])}, True),  # other flags
    ({"_sparkfleet_image_check_inputs": dict(INPUTS, model_config="/models/other/config.json")}, True),
    ({"_sparkfleet_image_check_inputs": dict(INPUTS, recipe=RECIPE[:1])}, True),                          # other recipe
    ({"sparkfleet_image_check": {"skipped": True}}, True),
])
def test_vllm_serve_asks_the_image_again_only_when_the_answer_could_differ(over, asks):
    variables = image_vars(**over)
    assert holds(task("vllm_serve", "Check the runtime image serves this model"), **variables) is asks


def test_vllm_serve_run_alone_asks_the_image():
    variables = image_vars()
    del variables["sparkfleet_image_check"], variables["sparkfleet_image_checked"]
    assert holds(task("vllm_serve", "Check the runtime image serves this model"), **variables) is True


def unit(active="active", enabled="enabled", reload=False):
    return {"units": {"sparkfleet-vllm.service": {"active_state": active, "unit_file_state": enabled,
                                                  "need_daemon_reload": reload, "load_state": "loaded"}}}


@pytest.mark.parametrize("state, changed, clears", [
    (unit(), [], False),                                          # runs, enabled, nothing to reload: no start, no clear
    (unit(active="failed"), [], True),                            # a crash loop's start limit: cleared, then started
    (unit(enabled="disabled"), [], True),
    (unit(reload=True), [], True),
    (unit(), ["/etc/systemd/system/sparkfleet-vllm.service"], True),
])
def test_the_start_limit_is_cleared_exactly_when_the_unit_is_started(state, changed, clears):
    variables = {"_vllm_serve_model_state": state, "sparkfleet_vllm_unit": "sparkfleet-vllm",
                 "_vllm_serve_files": {"changed_paths": changed},
                 "_vllm_serve_unit_path": "/etc/systemd/system/sparkfleet-vllm.service"}
    clear = task("vllm_serve", "Clear a start limit")
    start = task("vllm_serve", "Enable and start vLLM")
    assert holds(clear, **variables) is clears and holds(start, **variables) is clears


@pytest.mark.parametrize("was_running, recheck, waits", [("True", False, False), ("False", False, True),
                                                         ("True", True, True)])
def test_ray_waits_for_the_gcs_only_where_it_starts_ray(was_running, recheck, waits):
    t = task("ray_cluster", "Wait for the Ray head's GCS on the fabric")
    assert holds(t, _ray_cluster_was_running=was_running, sparkfleet_recheck=recheck) is waits


@pytest.mark.parametrize("status, recheck, reads", [
    ({"ready": True}, False, False),         # vllm_serve's wait read the log up to ready in this run
    ({"ready": True}, True, True),
    ({"ready": False}, False, True),
    ({"skipped": True}, False, True),
    (None, False, True),                     # playbooks/healthcheck.yml alone
])
def test_the_healthcheck_reads_the_startup_log_unless_vllm_serve_did(status, recheck, reads):
    t = task("healthcheck", "Read the startup log")
    variables = {"sparkfleet_recheck": recheck}
    if status is not None:
        variables["sparkfleet_vllm_startup"] = status
    assert holds(t, **variables) is reads
