"""The runtime image's check is the floor's (roles/sparkfleet/tasks/image_check.yml, issue 43 item 1): runtime_image
runs it where vllm_serve's defaults and vars are not loaded, vllm_serve runs it again in its own play. What it asks
(_sparkfleet_image_check_inputs) must be what vllm_serve derives in its own play, flag for flag, for the same
inventory: rendered here by ansible-playbook in both places and compared."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.sparkfleet.vllm.tests.unit.support.playbook import run_playbook

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "roles"
INVENTORY = {"sparkfleet_image": "vllm-runtime:1", "sparkfleet_model_dir": "/models/qwen", "sparkfleet_model_id": "qwen",
             "sparkfleet_fabric_ip": "10.99.1.11"}


def _play(tmp_path, plays, extravars):
    playbook = tmp_path / "p.yml"
    playbook.write_text(yaml.safe_dump(plays))
    inventory = tmp_path / "hosts.yml"   # the head alone: the floor derives the API address from the groups
    inventory.write_text(yaml.safe_dump({"spark": {"children": {"spark_head": {"hosts": {"localhost": None}},
                                                                "spark_workers": {"hosts": {}}}}}))
    proc = run_playbook(playbook, "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable,
                        "-e", json.dumps(extravars), inventory=inventory, timeout=120, report_dir=tmp_path / "r",
                        env={"ANSIBLE_ROLES_PATH": tmp_path / "roles"})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _write(what, dest):
    return {"name": "Write " + dest.name, "ansible.builtin.copy": {"content": "{{ %s | to_json }}" % what,
                                                                   "dest": str(dest), "mode": "0644"}}


@pytest.mark.parametrize("over", [
    {},
    {"vllm_serve_mtp_tokens": 2, "vllm_serve_kv_cache_dtype": None, "vllm_serve_extra_args": {"max-num-seqs": 8},
     "vllm_serve_tensor_parallel_size": 1, "vllm_serve_image": "other:2", "vllm_serve_model": "/models/x"},
])
def test_the_floor_asks_what_vllm_serve_derives(tmp_path, over):
    """A role beside the floor that is not vllm_serve (as runtime_image) reads the inputs through the floor; a play
    that loads vllm_serve's own defaults and vars derives them itself: the two agree."""
    (tmp_path / "roles" / "reader" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "sparkfleet").symlink_to(ROLES / "sparkfleet")
    floor_out, own_out = tmp_path / "floor.json", tmp_path / "own.json"
    (tmp_path / "roles" / "reader" / "tasks" / "main.yml").write_text(
        yaml.safe_dump([_write("_sparkfleet_image_check_inputs", floor_out)]))
    own = {"image": "{{ vllm_serve_image }}", "serve_args": "{{ _vllm_serve_args_cfg | sparkfleet.vllm.vllm_serve_args }}",
           "recipe": "{{ _vllm_serve_recipe }}", "model_config": "{{ vllm_serve_model }}/config.json"}
    _play(tmp_path, [
        {"name": "Where vllm_serve is not loaded", "hosts": "localhost", "gather_facts": False,
         "roles": ["sparkfleet", "reader"]},
        {"name": "vllm_serve's own values", "hosts": "localhost", "gather_facts": False, "roles": ["sparkfleet"],
         "vars_files": [str(ROLES / "vllm_serve" / "defaults" / "main.yml"), str(ROLES / "vllm_serve" / "vars" / "main.yml")],
         "tasks": [{"name": "Derive", "ansible.builtin.set_fact": {"_own": own}}, _write("_own", own_out)]},
    ], dict(INVENTORY, **over))
    floor, mine = json.loads(floor_out.read_text()), json.loads(own_out.read_text())
    assert floor == mine
    assert floor["image"] == over.get("vllm_serve_image", "vllm-runtime:1")
    assert floor["model_config"] == over.get("vllm_serve_model", "/models/qwen") + "/config.json"
    assert floor["serve_args"][0] == over.get("vllm_serve_model", "/models/qwen")
    variables = [item["variable"] for item in floor["recipe"]]
    assert ("vllm_serve_kv_cache_dtype" in variables) is ("vllm_serve_kv_cache_dtype" not in over)
    if over:
        assert "--max-num-seqs" in floor["serve_args"] and "vllm_serve_mtp_tokens" in variables
