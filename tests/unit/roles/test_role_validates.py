"""Issue 40.2: a role run by its own playbook (no preflight in the play list) checks its settings first.

Preflight checks every role's variables before site.yml changes anything; playbooks/ray_cluster.yml, gpu_cleanup.yml
and the other per-role playbooks run no preflight, so without a check of their own a " 30" or a 2**70 would reach a
unit, a script or a module as given. Each such role includes the floor's tasks/validate.yml first (preflight's rule,
plugins/plugin_utils/_validate.py), skipped when preflight checked every role in this run.
Runs the playbooks with the local connection in check mode (tests/unit/roles/test_preflight.py's inventory): the
validation fails before any task reaches a node.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate as v
from ansible_collections.sparkfleet.vllm.tests.unit.roles.test_preflight import _inventory
from ansible_collections.sparkfleet.vllm.tests.unit.support.playbook import run_playbook

REPO = Path(__file__).resolve().parents[3]
# The roles that check their own settings through the floor's validate.yml (vllm_serve has its own validate.yml,
# preflight is the check, the floor is checked with each of them).
SELF_CHECKED = sorted(set(v.ROLE_TABLES) - {"sparkfleet", "preflight", "vllm_serve"})


@pytest.mark.parametrize("role", SELF_CHECKED)
def test_each_role_validates_its_settings_first(role):
    tasks = yaml.safe_load((REPO / "roles" / role / "tasks" / "main.yml").read_text())
    first = tasks[0]
    include = first.get("ansible.builtin.include_role") or {}
    assert include == {"name": "sparkfleet.vllm.sparkfleet", "tasks_from": "validate.yml"}, (role, first)
    assert first.get("vars") == {"_sparkfleet_validate_role": role}, (role, first)
    assert first.get("when") == "not (sparkfleet_settings_validated | default(false))", (role, first)


def _play(playbook, inventory):
    proc = run_playbook(REPO / "playbooks" / playbook, "--check", inventory=inventory, timeout=300,
                        report_dir=Path(inventory).parent / "r")
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.bad_input(name="a number a unit would read otherwise, given to a role's own playbook (no preflight)",
                       expected="the role refuses it first, naming host, variable, value and the plain spelling")
@pytest.mark.parametrize("playbook, name, value, words", [
    ("gpu_cleanup.yml", "gpu_cleanup_grace", " 30", "plain digits (30, not ' 30')"),
    ("ray_cluster.yml", "ray_cluster_watchdog_interval", "030", "leading zeros"),
    ("model_sync.yml", "model_sync_streams", 2 ** 70, "must be between 1 and 64"),
    ("monitoring.yml", "monitoring_alert_page_cache_fraction", "5e-1", "plain decimal digits (0.5, not '5e-1')"),
    ("healthcheck.yml", "healthcheck_timeout", "+30", "plain digits (30, not '+30')"),
    ("runtime_image.yml", "runtime_image_ssh_timeout", "1e3", "must be a whole number of seconds"),
])
def test_a_role_s_own_playbook_refuses_a_number_first(tmp_path, playbook, name, value, words, observe):
    extra = {name: value}
    if playbook == "monitoring.yml":
        extra["sparkfleet_monitoring"] = True
    rc, out = _play(playbook, _inventory(tmp_path, extra))
    text = " ".join(out.split())
    assert rc != 0, text[-3000:]
    assert "spark-1: %s " % name in text and (words in text or words.replace("'", "''") in text), text[-3000:]
    assert "Validate the role's settings and the floor's" in out, out[-3000:]
    # stopped at the validation: the role's next task never ran on any node
    tasks = [t for t in out.split("TASK [") if t.startswith("sparkfleet.vllm.")]
    assert tasks and "Validate the role's settings" in tasks[-1], [t.split("]")[0] for t in tasks]
    observe(text[text.index("spark-1: %s " % name):][:280])
