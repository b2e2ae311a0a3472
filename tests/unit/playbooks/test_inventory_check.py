"""Issue 19.1: an inventory without a spark group and exactly one spark_head stops every playbook at once, non-zero,
naming what is missing (plays that match no host are otherwise skipped and the run ends "successful").

The check is the first play of every playbook (playbooks/inventory_check.yml, on the controller); these runs contact
no node.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.sparkfleet.vllm.tests.unit.support.playbook import run_playbook

REPO = Path(__file__).resolve().parents[3]


def _play(inventory, playbook, tmp_path, *args):
    proc = run_playbook(REPO / playbook, *args, inventory=inventory, cwd=tmp_path, report_dir=tmp_path / "r")
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


def _inventory(tmp_path, layout):
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(layout(host)))
    return path


def test_every_playbook_starts_with_the_inventory_check():
    playbooks = sorted(p for p in (REPO / "playbooks").glob("*.yml") if p.name != "inventory_check.yml")
    assert len(playbooks) >= 12
    for path in playbooks:
        plays = yaml.safe_load(path.read_text())
        assert plays[0].get("ansible.builtin.import_playbook") == "inventory_check.yml", \
            "%s: its first play must be `ansible.builtin.import_playbook: inventory_check.yml`" % path.name
    top = yaml.safe_load((REPO / "site.yml").read_text())
    assert top[0]["ansible.builtin.import_playbook"] == "playbooks/site.yml"
    check = yaml.safe_load((REPO / "playbooks" / "inventory_check.yml").read_text())
    assert check[0]["hosts"].startswith("{{ 'localhost' if ansible_limit is not defined") and "always" in check[0]["tags"]


@pytest.mark.parametrize("playbook", ["site.yml", "playbooks/status.yml"])
def test_an_inventory_that_does_not_exist_fails(tmp_path, playbook):
    rc, out = _play(tmp_path / "nonexistent", playbook, tmp_path)
    assert rc != 0, out[-2000:]
    assert "inventory: group 'spark' is missing" in out and "inventory: group 'spark_head' is missing" in out
    assert "it holds no host at all" in out and "Inventory given: %s" % (tmp_path / "nonexistent") in out
    assert "skipping: no hosts matched" not in out.split("inventory_check", maxsplit=1)[0]


@pytest.mark.parametrize("name, layout, playbook, message", [
    ("no head group", lambda h: {"spark": {"hosts": {"a": h, "b": h}}}, "playbooks/stop.yml",
     "inventory: group 'spark_head' is missing; put the node that runs the Ray head and the API in it"),
    ("two heads", lambda h: {"spark": {"children": {"spark_head": {"hosts": {"a": h, "b": h}}}}}, "playbooks/restart.yml",
     "inventory: group 'spark_head' must hold exactly one host, it holds 2 (a, b)"),
    ("no spark group", lambda h: {"spark_head": {"hosts": {"a": h}}, "spark_workers": {"hosts": {"b": h}}},
     "playbooks/gpu_cleanup.yml", "inventory: group 'spark' is missing"),
    ("empty spark group", lambda h: {"all": {"hosts": {"a": h}, "children": {"spark": {"hosts": {}}, "spark_head": {
        "hosts": {"a": h}}}}}, "playbooks/vllm_serve.yml", "inventory: group 'spark' holds no host"),
])
def test_missing_groups_are_named(tmp_path, name, layout, playbook, message):
    rc, out = _play(_inventory(tmp_path, layout), playbook, tmp_path)
    assert rc != 0, (name, out[-2000:])
    assert message in out, (name, out[-2000:])


def test_a_good_inventory_passes_the_check_once(tmp_path):
    """The check's tasks run once per run, however many playbooks import it."""
    (tmp_path / "twice.yml").write_text(
        "- name: A\n  ansible.builtin.import_playbook: %s\n- name: B\n  ansible.builtin.import_playbook: %s\n"
        % (REPO / "playbooks" / "inventory_check.yml", REPO / "playbooks" / "inventory_check.yml"))
    inv = _inventory(tmp_path, lambda h: {"spark": {"children": {"spark_head": {"hosts": {"a": h}},
                                                                 "spark_workers": {"hosts": {"b": h}}}}})
    rc, out = _play(inv, tmp_path / "twice.yml", tmp_path)
    assert rc == 0, out[-2000:]
    assert "localhost : ok=2 changed=0 unreachable=0 failed=0 skipped=4" in out, out[-2000:]


@pytest.mark.bad_input(name="a node's inventory name that a unit, a script or a path would read otherwise",
                       expected="every playbook stops in its first play (on the controller), naming the host and why")
@pytest.mark.parametrize("host, why", [
    pytest.param("spark%n", "holds '%' (systemd expands it as a specifier in a unit)", id="spark%n"),
    pytest.param("spark 1", "holds a blank", id="spark 1"),
    pytest.param("spark;reboot", "holds a character other than ASCII letters", id="spark;reboot"),
])
def test_a_node_name_a_unit_would_read_otherwise_stops_every_playbook(tmp_path, host, why, observe):
    def layout(h):
        return {"spark": {"children": {"spark_head": {"hosts": {host: h}}, "spark_workers": {"hosts": {}}}}}
    rc, out = _play(_inventory(tmp_path, layout), "playbooks/status.yml", tmp_path)
    assert rc != 0, out[-2000:]
    message = "inventory: the host name %r %s" % (host, why)
    assert message in out, out[-2000:]
    assert "rename the host in the inventory" in out
    observe(out[out.index(message):][:300])


@pytest.mark.parametrize("playbook", ["site.yml", "playbooks/status.yml"])
def test_a_limit_on_an_inventory_that_does_not_exist_fails_naming_it(tmp_path, playbook):
    """Issue 41.1: --limit removes the implicit localhost where the check runs; every play was skipped and the run
    ended 0 ("site.yml successful in 0.0 s"). It now stops with ansible-playbook's exit code for a play it cannot
    parse, naming the inventory and the fix, and writes no report."""
    rc, out = _play(tmp_path / "nonexistent", playbook, tmp_path, "-l", "spark-1")
    assert rc == 4, out[-2000:]
    assert "inventory: it holds no host at all, so --limit spark-1 matches nothing" in out, out[-2000:]
    assert "Inventory given: %s" % (tmp_path / "nonexistent") in out and "Give -i the inventory of your Sparks" in out
    assert "successful" not in out
    assert not (tmp_path / "r").exists() or not os.listdir(tmp_path / "r")


@pytest.mark.parametrize("name, layout, message", [
    ("no head group", lambda h: {"spark": {"hosts": {"a": h, "b": h}}}, "inventory: group 'spark_head' is missing"),
    ("no spark group", lambda h: {"all": {"hosts": {"a": h}}}, "inventory: group 'spark' is missing"),
])
def test_the_check_still_runs_under_a_limit(tmp_path, name, layout, message):
    """Under -l the check runs once on the hosts the limit keeps (nothing connects to them)."""
    rc, out = _play(_inventory(tmp_path, layout), "site.yml", tmp_path, "-l", "a")
    assert rc != 0, (name, out[-2000:])
    assert message in out, (name, out[-2000:])


def test_a_good_inventory_passes_the_check_once_under_a_limit(tmp_path):
    (tmp_path / "twice.yml").write_text(
        "- name: A\n  ansible.builtin.import_playbook: %s\n- name: B\n  ansible.builtin.import_playbook: %s\n"
        % (REPO / "playbooks" / "inventory_check.yml", REPO / "playbooks" / "inventory_check.yml"))
    inv = _inventory(tmp_path, lambda h: {"spark": {"children": {"spark_head": {"hosts": {"a": h}},
                                                                 "spark_workers": {"hosts": {"b": h}}}}})
    rc, out = _play(inv, tmp_path / "twice.yml", tmp_path, "-l", "a:b")
    assert rc == 0, out[-2000:]
    assert "a : ok=2 changed=0 unreachable=0 failed=0 skipped=4" in out, out[-2000:]
