"""Issue 40.3: vllm_serve_served_model_name may be a list (check_names accepts one, vLLM answers to each name); every
consumer that takes one name uses its first, and each is rendered here with the list, through ansible-core's own
templating (the collection's vars and defaults as the roles read them).

Before, the liveness timer's unit passed `--model "['qwen', 'q2']"`: every probe asked for a model the API does not
serve, so a healthy engine was judged dead and restarted, for ever; the start wait, healthcheck_model and
qualify_model (type str) got the list too.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = Path(__file__).resolve().parents[3]
NAMES = ["qwen3-coder", "qwen", "coder"]


def _trusted(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    return value


def _yaml(path):
    return yaml.safe_load((REPO / path).read_text()) or {}


def _tasks(tasks):
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def templar(**overrides):
    variables = {}
    for path in ("roles/sparkfleet/defaults/main.yml", "roles/vllm_serve/defaults/main.yml",
                 "roles/vllm_serve/vars/main.yml", "roles/healthcheck/defaults/main.yml",
                 "roles/qualify/defaults/main.yml"):
        variables.update(_yaml(path))
    variables.update(sparkfleet_model_id="Qwen/Qwen3-Coder", sparkfleet_api_url="http://192.168.200.12:8000",
                     sparkfleet_api_host="0.0.0.0", sparkfleet_api_port=8000, sparkfleet_head_fabric_ip="192.168.200.12",
                     sparkfleet_cluster_nodes=[{"host": "spark-1", "ip": "192.168.200.12", "head": True},
                                               {"host": "spark-2", "ip": "192.168.200.13", "head": False}],
                     sparkfleet_model_dir="/models/qwen3-coder", sparkfleet_image="vllm:0.17.1",
                     ansible_managed="Ansible managed")
    # the floor's view of vllm_serve's settings (the role_settings lookup: inventory over vllm_serve's defaults,
    # both loaded here), which healthcheck and qualify read
    variables["_sparkfleet_vllm_serve"] = {k: "{{ %s }}" % k for k in (
        "vllm_serve_api_key", "vllm_serve_served_model_name", "vllm_serve_extra_args", "vllm_serve_image",
        "vllm_serve_model")}
    variables.update(overrides)
    return Templar(loader=DataLoader(), variables=_trusted(variables))


def render(templar_, text):
    return templar_.template(trust_as_template(text))


@pytest.mark.parametrize("names, first", [(NAMES, NAMES[0]), ("qwen", "qwen"), (["solo"], "solo")])
def test_the_liveness_probe_asks_for_one_name_the_api_serves(names, first):
    t = templar(vllm_serve_served_model_name=names)
    unit = render(t, (REPO / "roles/vllm_serve/templates/sparkfleet-vllm-watchdog.service.j2").read_text())
    start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    words = shlex.split(start.split("=", 1)[1])
    assert words[words.index("--model") + 1] == first, start


@pytest.mark.parametrize("names, first", [(NAMES, NAMES[0]), ("qwen", "qwen")])
def test_the_start_wait_healthcheck_and_qualify_take_the_first_name(names, first):
    t = templar(vllm_serve_served_model_name=names)
    wait = next(task for task in _tasks(_yaml("roles/vllm_serve/tasks/wait.yml"))
                if "sparkfleet.vllm.vllm_wait" in task)["sparkfleet.vllm.vllm_wait"]
    assert render(t, wait["model"]) == first
    assert render(t, "{{ healthcheck_model }}") == first
    assert render(t, "{{ qualify_model }}") == first


def test_without_a_served_name_the_one_name_is_the_model_id():
    t = templar()           # vllm_serve's own default for the served name, as the floor's view reads it
    assert render(t, "{{ healthcheck_model }}") == "Qwen/Qwen3-Coder"
    assert render(t, "{{ qualify_model }}") == "Qwen/Qwen3-Coder"


def test_the_server_gets_every_name_and_its_unit_names_them_all():
    t = templar(vllm_serve_served_model_name=NAMES)
    unit = render(t, (REPO / "roles/vllm_serve/templates/sparkfleet-vllm.service.j2").read_text()
                  .split("[Service]")[0])
    assert "Description=sparkfleet vLLM API (qwen3-coder, qwen, coder)" in unit, unit
    args = render(t, "{{ _vllm_serve_args_cfg }}")
    assert args["served_model_name"] == NAMES


def test_every_consumer_of_the_served_name_is_one_of_these():
    """A new consumer must be added here (and say which element it uses)."""
    known = {"roles/healthcheck/defaults/main.yml", "roles/qualify/defaults/main.yml", "roles/vllm_serve/defaults/main.yml",
             "roles/vllm_serve/vars/main.yml", "roles/sparkfleet/vars/main.yml",
             "roles/vllm_serve/templates/sparkfleet-vllm.service.j2", "roles/healthcheck/tasks/main.yml"}
    users = {str(p.relative_to(REPO)) for p in (REPO / "roles").rglob("*")
             if p.is_file() and p.suffix in (".yml", ".j2") and "meta" not in p.parts
             and "vllm_serve_served_model_name" in p.read_text()}
    assert users <= known, sorted(users - known)
