"""roles/gpu_cleanup: the unit that stops the stale stack again before our Ray starts, and the drop-in on our Ray unit
that wants it (issue 45.5), rendered with the role's own defaults as the template module renders them (trim_blocks)."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "gpu_cleanup"
# the record gpu_release keeps on a node of the lab's old stack (tests/unit/plugins/modules/test_gpu_release.py)
RECORD = {"units": ["vllm-cluster.service", "vllm-embeddings.service", "vllm-proxy.service", "vllm-reranker.service"],
          "containers": ["reranker", "vllm_embeddings", "vllm_node"]}


def _defaults():
    found = {}
    for role in ("sparkfleet", "gpu_cleanup"):
        found.update(yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()))
    return found


def render(name, record, **extra):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True)
    variables = dict(_defaults(), ansible_managed="Ansible managed", _gpu_cleanup_record=record)
    variables.update(extra)
    return env.from_string((ROLE / "templates" / name).read_text()).render(**variables)


def parse_unit(text):
    """systemd's unit syntax, strictly enough to catch a template gone wrong: [Section] lines, Key=value lines (a key
    may repeat), comments and blank lines; anything else fails."""
    sections, current = {}, None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        key, sep, value = line.partition("=")
        assert current is not None and sep and key == key.strip() and key.isalnum(), "line %d: %r" % (number, line)
        current.append((key, value))
    return sections


def values(section, key):
    return [v for k, v in section if k == key]


def test_the_stale_stack_is_stopped_before_our_ray_with_the_role_s_defaults():
    unit = parse_unit(render("sparkfleet-stale-stop.service.j2", RECORD))
    assert set(unit) == {"Unit", "Service"}
    after = values(unit["Unit"], "After")
    assert len(after) == 1 and after[0].split() == ["docker.service"] + RECORD["units"]
    assert values(unit["Unit"], "Before") == ["sparkfleet-ray.service"]
    service = unit["Service"]
    assert values(service, "Type") == ["oneshot"]
    assert values(service, "Restart") == [] and values(service, "RemainAfterExit") == []  # runs again at each start
    # in order: the units, then the containers lose their restart policy, then they stop within the grace; a failure
    # of one (a unit gone, docker down) never keeps our Ray from starting ('-')
    assert values(service, "ExecStart") == [
        "-/usr/bin/systemctl stop " + " ".join(RECORD["units"]),
        "-/usr/bin/docker update --restart=no " + " ".join(RECORD["containers"]),
        "-/usr/bin/docker stop -t 10 " + " ".join(RECORD["containers"])]
    # bounded: two grace periods and a minute, whatever the containers do
    assert values(service, "TimeoutStartSec") == ["80"]
    # its comment names the record it was made from (the role's default)
    assert "/var/lib/sparkfleet/stale-stack.json" in render("sparkfleet-stale-stop.service.j2", RECORD)


@pytest.mark.parametrize("record, kinds", [
    ({"units": ["vllm-cluster.service"], "containers": []}, ["systemctl"]),
    ({"units": [], "containers": ["vllm_node"]}, ["docker", "docker"]),
])
def test_only_what_is_known_is_stopped(record, kinds):
    unit = parse_unit(render("sparkfleet-stale-stop.service.j2", record, gpu_cleanup_grace=3,
                             sparkfleet_ray_unit="ray-x"))
    starts = values(unit["Service"], "ExecStart")
    assert [s.split()[0].rsplit("/", 1)[1] for s in starts] == kinds
    assert all(s.split()[-1] in record["units"] + record["containers"] for s in starts)
    assert values(unit["Unit"], "Before") == ["ray-x.service"]
    assert values(unit["Unit"], "After")[0].split() == ["docker.service"] + record["units"]
    assert values(unit["Service"], "TimeoutStartSec") == ["66"]


def test_our_ray_wants_it_and_starts_after_it():
    dropin = parse_unit(render("stale-stop.conf.j2", RECORD))
    assert dropin == {"Unit": [("Wants", "sparkfleet-stale-stop.service"), ("After", "sparkfleet-stale-stop.service")]}


def test_the_tasks_install_both_where_systemd_reads_them_and_remove_both_when_nothing_is_known():
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    written = next(t for t in tasks if "sparkfleet.vllm.config_files" in t)
    files = written["sparkfleet.vllm.config_files"]["files"]
    by_template = {f["content"].split("'ansible.builtin.template', '")[1].split("'")[0]: f["path"]
                   for f in files if "content" in f}
    unit_dest = by_template["sparkfleet-stale-stop.service.j2"]
    dropin_dest = by_template["stale-stop.conf.j2"]
    # the drop-in names the unit by the file name the unit is installed under, in our Ray unit's drop-in directory
    assert unit_dest == "/etc/systemd/system/" + render("stale-stop.conf.j2", RECORD).split("Wants=")[1].split()[0]
    assert dropin_dest == "/etc/systemd/system/{{ sparkfleet_ray_unit }}.service.d/10-stale-stop.conf"
    assert {"path": "/etc/systemd/system/{{ sparkfleet_ray_unit }}.service.d", "state": "directory", "owner": "root",
            "group": "root", "mode": "0755"} in files
    removed = next(t for t in tasks if "ansible.builtin.command" in t)
    assert sorted(removed["ansible.builtin.command"]["argv"][3:]) == sorted([dropin_dest, unit_dest])
    for task in (written, removed):
        assert task.get("notify") == "gpu_cleanup daemon-reload"
    handlers = yaml.safe_load((ROLE / "handlers" / "main.yml").read_text())
    assert [h.get("listen") for h in handlers] == ["gpu_cleanup daemon-reload"]
    # the guard is in place (and systemd reloaded) before the serving roles start our units in the same run
    names = [t.get("ansible.builtin.meta") for t in tasks]
    assert names.index("flush_handlers") > max(tasks.index(t) for t in (written, removed))


def test_a_unit_name_systemd_escaped_is_stopped_by_that_name():
    # systemctl lists an instance's unit with systemd's own escapes (vllm@gpu\x2d0.service); systemd reads C escapes in
    # ExecStart=, so written raw the backslash went and `systemctl stop vllm@gpux2d0.service` stopped another unit.
    name = "vllm@gpu\\x2d0.service"
    unit = parse_unit(render("sparkfleet-stale-stop.service.j2", {"units": [name], "containers": []}))
    (command,) = [v for k, v in unit["Service"] if k == "ExecStart"]
    # systemd's reading of the command line: a backslash escapes the next character (\\ is one backslash)
    words = [re.sub(r"\\(.)", r"\1", w) for w in command.split()]
    assert words == ["-/usr/bin/systemctl", "stop", name], command
