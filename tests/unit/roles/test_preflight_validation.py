"""Issue 17: the preflight play refuses bad values of every role's variables and the paths they write, all at once.

Runs playbooks/preflight.yml with the local connection (tests/unit/roles/test_preflight.py's inventory): nothing is
contacted, and the path_guard module runs on this machine as it would on each node. That the later plays never start
and nothing changes is tested on the lab (tests/integration/test_bad_input.py).
"""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.vllm.tests.unit.roles.test_preflight import _inventory, _preflight


@pytest.mark.bad_input(name="bad values of several roles at once (preflight play)",
                       expected="one failure per host listing every problem, before the GPU play")
def test_every_role_s_bad_values_are_named_at_once_in_preflight(tmp_path, observe):
    rc, out = _preflight(_inventory(tmp_path, {
        "sparkfleet_model_state_file": "/etc/passwd",
        "sparkfleet_ray_tmp_dir": "/home/spark/.ssh",
        "vllm_serve_served_model_name": ["qwen", "--host=0.0.0.0"],
        "vllm_serve_env": {"VLLM_API_KEY": ""},
        "ray_cluster_env": {"RAY_AUTH_MODE": "disabled"},
        "ray_cluster_extra_args": ["--node-ip-address=10.1.230.180", "--dashboard-host=0.0.0.0"],
        "ray_cluster_firewall_allow": ["0.0.0.0/1", "128.0.0.0/1"],
        "model_sync_bwlimit": -1,
        "gpu_cleanup_grace": -1,
        "runtime_image_ssh_timeout": "{{ nope }}",
    }))
    text = " ".join(out.split())
    assert rc != 0
    for message in [
        "spark-1: sparkfleet_model_state_file '/etc/passwd' lies under the system directory /etc",
        "spark-2: sparkfleet_ray_tmp_dir '/home/spark/.ssh' lies in the dot-directory /home/spark/.ssh",
        "spark-1: vllm_serve_served_model_name ['qwen', '--host=0.0.0.0'] has the element '--host=0.0.0.0'",
        "spark-1: vllm_serve_env {VLLM_API_KEY: ...} may not set VLLM_API_KEY",
        "spark-2: ray_cluster_env may not set RAY_AUTH_MODE",
        "spark-2: ray_cluster_extra_args: --node-ip-address is pinned",
        "spark-2: ray_cluster_extra_args: --dashboard-host would expose Ray",
        "spark-2: ray_cluster_firewall_allow 0.0.0.0/1, 128.0.0.0/1 reaches beyond the fabric subnet",
        "spark-2: model_sync_bwlimit -1 must be at least 0",
        "spark-2: gpu_cleanup_grace -1 must be at least 1",
        "spark-2: runtime_image_ssh_timeout cannot be templated: 'nope' is undefined",
    ]:
        assert message.replace("'", "''") in text or message in text, (message, text[-3000:])
    # the serving values are the head's: a worker does not repeat them
    assert "spark-2: vllm_serve_served_model_name" not in text
    assert "Check every node answers" not in out  # stopped at the validation, before the later checks
    observe(text[text.index("spark-1: "):][:280])


def test_a_good_inventory_runs_one_path_check_per_node(tmp_path):
    rc, out = _preflight(_inventory(tmp_path), "-v")
    assert rc == 0, out[-3000:]
    assert out.count("TASK [sparkfleet.vllm.preflight : Check on each node where the paths the roles write lead") == 1
    # the serving check of vllm_serve's own validate.yml is spared when preflight's passed
    assert "Template each serving variable" not in out or "skipping" in out.split("Template each serving variable")[1][:400]
