"""The preflight play on the controller: bad inventories and serving values stop it, all errors at once.

Every host uses the local connection and only preflight.yml runs (it changes nothing: asserts and ping), so
these runs touch no node; the fabric reachability check (tag fabric) and the access check (tag access: ssh, become,
docker, keys; tests/integration/test_access.py) are skipped: these hosts are not real.
That the later plays of site.yml never start is tested on the lab
(tests/integration/test_preflight.py).
"""

from __future__ import annotations

import getpass
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.sparkfleet.vllm.tests.unit.support.playbook import run_playbook

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "playbooks" / "preflight.yml"


def _inventory(tmp_path, extra_vars=None, groups=None, host_vars=None):
    """An inventory shaped like inventories/lab (spark = spark_head + spark_workers), local connection."""
    common = {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_user": getpass.getuser(),
        "sparkfleet_fabric_subnet": "10.99.1.0/24", "sparkfleet_gpus_per_node": 1, "sparkfleet_image": "img:1",
        "sparkfleet_model_dir": "/models/tiny", "sparkfleet_model_id": "tiny",
        "vllm_serve_tensor_parallel_size": 2, "vllm_serve_api_key": "k123",
        # These hosts are this machine: the GPU plan must not read its processes as a node's GPU holders (a lab's
        # containers beside these tests hold the lab's stand-in /dev/nvidia0, visible from here). No device matches.
        "gpu_cleanup_device_glob": "/dev/sparkfleet-unit-test-no-gpu[0-9]*",
    }
    common.update(extra_vars or {})
    common = {k: v for k, v in common.items() if v is not None}
    hosts = {"spark-1": {"sparkfleet_fabric_ip": "10.99.1.11", "ansible_host": "10.99.1.11"},
             "spark-2": {"sparkfleet_fabric_ip": "10.99.1.12"}}
    for host, values in (host_vars or {}).items():
        hosts.setdefault(host, {}).update(values)
    layout = groups or {"spark_head": ["spark-1"], "spark_workers": ["spark-2"], "spark": []}
    children = {}
    for group in ("spark_head", "spark_workers"):
        if group in layout:
            children[group] = {"hosts": {h: hosts[h] for h in layout[group]}}
    top = {"vars": common}
    if "spark" in layout:
        top["children"] = children
        top["hosts"] = {h: hosts[h] for h in layout["spark"]}
        inv = {"spark": top}
    else:
        inv = {"all": {"vars": common, "children": children}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def _preflight(inventory, *extra):
    proc = run_playbook(PLAYBOOK, "--skip-tags", "fabric,access", *extra, inventory=inventory, timeout=120,
                        report_dir=Path(inventory).parent / "r")
    return proc.returncode, proc.stdout + proc.stderr


def test_a_good_inventory_passes(tmp_path):
    rc, out = _preflight(_inventory(tmp_path))
    assert rc == 0, out
    assert "inventory ok: head spark-1" in out


def test_variables_of_an_older_release_are_named_with_their_replacement(tmp_path):
    # The values every role shares moved to the sparkfleet role: an inventory still setting the old names would be
    # ignored silently (the API on another port than the healthcheck asks), so preflight stops and names both.
    rc, out = _preflight(_inventory(tmp_path, {"vllm_serve_port": 31000, "ray_cluster_node_ip": "10.99.1.11"}))
    assert rc != 0
    text = " ".join(out.split())
    assert "ray_cluster_node_ip is no longer read: set sparkfleet_fabric_ip (Ray registers every node on its fabric IP)" \
        in text, text[-2000:]
    assert "vllm_serve_port is no longer read: set sparkfleet_api_port instead." in text
    assert "TASK [sparkfleet.vllm.preflight : Validate the inventory]" not in out


@pytest.mark.parametrize("tags", [[], ["--tags", "vllm_serve"]])
def test_bad_serving_values_fail_preflight_all_at_once(tmp_path, tags):
    # Issue 11.2: each of these used to pass preflight and stop GPU holders before play 5 refused it.
    # With --tags vllm_serve the checks still run in preflight (its play is tagged always).
    rc, out = _preflight(_inventory(tmp_path, {
        "vllm_serve_gpu_memory_utilization": 1.5,
        "sparkfleet_api_port": "x",
        "sparkfleet_ray_port": 70000,
        "sparkfleet_model_dir": "",
        "vllm_serve_max_model_len": "{{ undefined_thing }}",
        "vllm_serve_extra_args": {"tensor-paralel-size": 2, "distributed_executor_backend": "mp"},
        "vllm_serve_api_key": "k123\n",
        "sparkfleet_fabric_min_mtu": -5,
    }), *tags)
    assert rc != 0
    for message in [
        "spark-1: vllm_serve_gpu_memory_utilization 1.5 must be in (0, 1]",
        "spark-1: sparkfleet_api_port 'x' must be a TCP port number",
        "spark-1: sparkfleet_ray_port 70000 must be between 1 and 65535",
        "spark-1: sparkfleet_model_dir '' must be the absolute path of the model directory",  # vllm_serve_model is made of it
        "spark-1: vllm_serve_max_model_len cannot be templated: ''undefined_thing'' is undefined",
        "--distributed-executor-backend is pinned",
        "spark-1: vllm_serve_api_key (hidden) contains whitespace",
        "spark-1: sparkfleet_fabric_min_mtu -5 must be between 68 and 65535",
    ]:
        assert message in " ".join(out.split()), message
    assert "k123" not in out
    assert "Check every node answers" not in out
    # Issue 41.9: a flag the 0.17.1 list does not know is the image's to judge (image_check, with its own flags).
    assert "tensor-paralel-size" not in " ".join(out.split())


@pytest.mark.parametrize("extra_vars, ok", [
    ({"vllm_serve_api_key": ""}, False),
    ({"vllm_serve_api_key": "", "vllm_serve_allow_open_api": True}, True),
    ({"vllm_serve_api_key": "", "sparkfleet_api_host": "127.0.0.1"}, True),
])
def test_an_open_api_on_the_network_needs_consent(tmp_path, extra_vars, ok):
    # Issue 10: an empty API key on a non-loopback address is refused unless vllm_serve_allow_open_api.
    rc, out = _preflight(_inventory(tmp_path, extra_vars))
    assert (rc == 0) is ok, out
    if not ok:
        assert "vllm_serve_api_key is empty, so the API on 10.99.1.11:30000 would be open" in " ".join(out.split())


@pytest.mark.parametrize("gpus_per_node, ok", [(1, True), (2, False)])
def test_tp_times_pp_is_checked_with_the_role_default(tmp_path, gpus_per_node, ok):
    # vllm_serve_tensor_parallel_size unset: the role's default (2) is what gets checked, not a guess of 1.
    rc, out = _preflight(_inventory(tmp_path, {"sparkfleet_gpus_per_node": gpus_per_node,
                                               "vllm_serve_tensor_parallel_size": None}))
    assert (rc == 0) is ok, out
    if not ok:
        assert "vllm_serve_tensor_parallel_size (2) x vllm_serve_pipeline_parallel_size (1) = 2, but the inventory" \
            " declares 4 GPU(s)" in " ".join(out.split())


@pytest.mark.parametrize("groups, message", [
    # Issue 11.5: a host in spark but in neither head nor workers got cleanup and Ray but no model.
    ({"spark_head": ["spark-1"], "spark_workers": [], "spark": ["spark-2"]},
     "spark-2: is in 'spark' but in neither 'spark_head' nor 'spark_workers'"),
    # No head group: the inventory message, not a Jinja error.
    ({"spark_workers": ["spark-2"], "spark": ["spark-1"]}, "inventory: group 'spark_head' is missing"),
    # No spark group: the plays that clean GPUs and run Ray would match no host.
    ({"spark_head": ["spark-1"], "spark_workers": ["spark-2"]}, "inventory: group 'spark' is missing"),
])
def test_group_layout_problems_name_the_host_or_group(tmp_path, groups, message):
    rc, out = _preflight(_inventory(tmp_path, groups=groups))
    assert rc != 0
    assert message in out, out
    assert "is undefined" not in out


def test_group_name_overrides_are_refused(tmp_path):
    # Issue 11.5: renaming the groups for preflight alone made the later plays match 0 hosts.
    rc, out = _preflight(_inventory(tmp_path), "-e", "preflight_head_group=heads")
    assert rc != 0
    assert "preflight_head_group / preflight_worker_group are no longer read" in " ".join(out.split())
