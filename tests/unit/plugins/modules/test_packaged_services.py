"""packaged_services on a real directory tree, with dpkg-query and systemctl answering as the lab's bookworm hosts did
(fixtures/packaged_services): a fresh node gets its early files and firewall before apt runs, then its packages, its
settings and its units; a re-run asks dpkg and systemd once each and changes nothing; a changed setting restarts its
own unit only; a stopped unit is started, not restarted; check mode changes nothing; bad input is refused first."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.vllm.plugins.modules import packaged_services

FIXTURES = Path(__file__).parent / "fixtures" / "packaged_services"
ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name
PACKAGES = ["prometheus", "prometheus-alertmanager", "prometheus-node-exporter"]
UNITS = ["sparkfleet-monitoring-firewall.service", "prometheus-node-exporter", "prometheus", "prometheus-alertmanager",
         "sparkfleet-monitoring-textfile.timer"]


def fixture(name):
    return (FIXTURES / name).read_text()


def args(tmp_path, exporter_args='ARGS=""\n', webhook="http://10.99.0.1:9/hook?token=s3cr3t-token"):
    etc = tmp_path / "etc"
    units = etc / "systemd" / "system"
    fw = str(etc / "sparkfleet" / "monitoring-firewall.nft")
    fw_unit = str(units / "sparkfleet-monitoring-firewall.service")
    timer = str(units / "sparkfleet-monitoring-textfile.timer")
    own = {"owner": ME, "group": MY_GROUP}
    return {
        "files": [
            dict(own, path=str(etc / "sparkfleet"), state="directory", mode="0750", early=True),
            dict(own, path=str(units), state="directory", mode="0755", early=True),
            dict(own, path=fw, content="table inet sparkfleet_monitoring {}\n", mode="0644", early=True),
            dict(own, path=fw_unit, content="[Service]\nType=oneshot\n", mode="0644", early=True),
            dict(own, path=str(etc / "default"), state="directory", mode="0755"),
            dict(own, path=str(etc / "default" / "prometheus-node-exporter"), content=exporter_args, mode="0644"),
            dict(own, path=str(etc / "prometheus.yml"), content="scrape_configs: []\n", mode="0644"),
            dict(own, path=str(etc / "alertmanager.yml"), content="url: %s\n" % webhook, mode="0640", diff=False),
            dict(own, path=timer, content="[Timer]\nOnUnitActiveSec=15\n", mode="0644"),
        ],
        "packages": list(PACKAGES),
        "units": [
            {"name": UNITS[0], "early": True, "restart_on": [fw, fw_unit]},
            {"name": UNITS[1], "restart_on": [str(etc / "default" / "prometheus-node-exporter")]},
            {"name": UNITS[2], "restart_on": [str(etc / "prometheus.yml")]},
            {"name": UNITS[3], "restart_on": [str(etc / "alertmanager.yml")]},
            {"name": UNITS[4], "restart_on": [timer]},
        ],
    }


class Node(object):
    """dpkg-query and systemctl as the lab's head answered them, before the deploy (none) or after it (all)."""

    def __init__(self, tmp_path, installed, running, apt_rc=0):
        self.tmp_path = tmp_path
        self.installed = installed
        self.running = running
        self.apt_rc = apt_rc
        self.seen_at_apt = None

    def __call__(self, argv):
        tool = os.path.basename(argv[0])
        if tool == "dpkg-query":
            if self.installed:
                return 0, fixture("dpkg-query-all.stdout"), ""
            return 1, fixture("dpkg-query-none.stdout"), fixture("dpkg-query-none.stderr")
        if tool == "systemctl" and argv[1] == "show":
            states = self.running if isinstance(self.running, dict) else {}
            blocks = []
            for name in argv[6:]:
                up = states.get(name, self.running is not False)
                state = ("active", "enabled") if up else ("inactive", "")
                blocks.append("ActiveState=%s\nUnitFileState=%s\n" % state)
            return 0, "\n".join(blocks), ""
        if tool == "apt-get" and argv[1] == "install":
            # what the node held when the packages' services started
            etc = self.tmp_path / "etc"
            self.seen_at_apt = {"firewall": (etc / "sparkfleet" / "monitoring-firewall.nft").exists(),
                                "settings": (etc / "default" / "prometheus-node-exporter").exists()}
            if self.apt_rc:
                return self.apt_rc, "", "E: Unable to locate package prometheus-alertmanager\n"
        return 0, "", ""


def mutating(calls):
    return [c for c in calls if os.path.basename(c[0]) == "apt-get"
            or (os.path.basename(c[0]) == "systemctl" and c[1] != "show")]


def test_the_fixtures_are_the_hosts_answers():
    """The states the tests play are read from what the lab's hosts printed, not written by hand."""
    assert packaged_services.missing_packages(fixture("dpkg-query-none.stdout"), PACKAGES) == PACKAGES
    assert packaged_services.missing_packages(fixture("dpkg-query-all.stdout"), PACKAGES) == []
    before = packaged_services.unit_states(fixture("systemctl-show-none.stdout"), UNITS)
    after = packaged_services.unit_states(fixture("systemctl-show-all.stdout"), UNITS)
    assert {s["active"] for s in before.values()} == {"inactive"}
    assert after == {u: {"active": "active", "enabled": "enabled"} for u in UNITS}


@pytest.mark.parametrize("line, installed", [
    ("prometheus ii \n", True),
    ("prometheus rc \n", False),   # removed by stop.yml (apt remove), its configuration left: install again
    ("prometheus iU \n", False),   # unpacked, not configured
    ("prometheus:arm64 ii \n", True),
])
def test_only_a_configured_package_counts_as_installed(line, installed):
    assert packaged_services.missing_packages(line, ["prometheus"]) == ([] if installed else ["prometheus"])


def test_a_fresh_node_gets_its_firewall_before_the_packages_then_everything_runs(run_module, node_commands, tmp_path):
    node = Node(tmp_path, installed=False, running=False)
    fake = node_commands(node)
    r = run_module(packaged_services, args(tmp_path))
    assert r.get("failed") is not True, r
    assert r["changed"] is True and r["installed"] == PACKAGES
    # the firewall was in place (and its unit started) before apt ran; our settings came after the install
    assert node.seen_at_apt == {"firewall": True, "settings": False}
    tools = [" ".join([os.path.basename(c[0])] + c[1:3]) for c in mutating(fake.calls)]
    assert tools[:4] == ["systemctl daemon-reload", "systemctl enable " + UNITS[0], "systemctl restart " + UNITS[0],
                         "apt-get update -q"]
    install = [c for c in fake.calls if c[1:2] == ["install"]][0]
    assert "Dpkg::Options::=--force-confold" in install and install[-3:] == PACKAGES
    assert [k.get("environ_update", {}).get("DEBIAN_FRONTEND") for c, k in zip(fake.calls, fake.kwargs)
            if os.path.basename(c[0]) == "apt-get"] == ["noninteractive", "noninteractive"]
    assert r["restarted"] == UNITS and r["started"] == [] and r["daemon_reload"] is True
    assert (tmp_path / "etc" / "alertmanager.yml").stat().st_mode & 0o777 == 0o640
    assert "s3cr3t-token" not in str(r)


def test_a_rerun_asks_once_and_changes_nothing(run_module, node_commands, tmp_path):
    node_commands(Node(tmp_path, installed=False, running=False))
    run_module(packaged_services, args(tmp_path))
    fake = node_commands(Node(tmp_path, installed=True, running=True))
    r = run_module(packaged_services, args(tmp_path))
    assert r["changed"] is False, r
    assert (r["installed"], r["changed_paths"], r["restarted"], r["started"]) == ([], [], [], [])
    assert mutating(fake.calls) == []
    # one dpkg read, one systemctl read per phase (early units, the rest)
    assert [os.path.basename(c[0]) + " " + c[1] for c in fake.calls] == [
        "systemctl show", "dpkg-query -W", "systemctl show"]


def test_a_changed_setting_restarts_its_own_unit_only(run_module, node_commands, tmp_path):
    node_commands(Node(tmp_path, installed=False, running=False))
    run_module(packaged_services, args(tmp_path))
    fake = node_commands(Node(tmp_path, installed=True, running=True))
    r = run_module(packaged_services, args(tmp_path, exporter_args='ARGS="--web.listen-address=:9101"\n'))
    assert r["changed_paths"] == [str(tmp_path / "etc" / "default" / "prometheus-node-exporter")]
    assert r["restarted"] == ["prometheus-node-exporter"] and r["daemon_reload"] is False
    assert [c[1:] for c in mutating(fake.calls)] == [["restart", "prometheus-node-exporter"]]


def test_a_stopped_unit_is_started_and_a_secret_change_is_hidden(run_module, node_commands, tmp_path):
    node_commands(Node(tmp_path, installed=False, running=False))
    run_module(packaged_services, args(tmp_path))
    fake = node_commands(Node(tmp_path, installed=True, running={"prometheus": False}))
    r = run_module(packaged_services, args(tmp_path, webhook="http://10.99.0.1:9/hook?token=n3w-t0ken-value"))
    assert r["started"] == ["prometheus"] and r["restarted"] == ["prometheus-alertmanager"]
    # in the order of units: Prometheus before Alertmanager
    assert [c[1:] for c in mutating(fake.calls)] == [["enable", "--now", "prometheus"],
                                                     ["restart", "prometheus-alertmanager"]]
    assert "n3w-t0ken-value" not in str(r) and "s3cr3t-token" not in str(r)


def test_check_mode_reports_and_changes_nothing(run_module, node_commands, tmp_path):
    fake = node_commands(Node(tmp_path, installed=False, running=False))
    r = run_module(packaged_services, args(tmp_path), check_mode=True)
    assert r["changed"] is True and r["installed"] == PACKAGES
    assert r["restarted"] == UNITS and len(r["changed_paths"]) == len(args(tmp_path)["files"])
    assert mutating(fake.calls) == []
    assert not (tmp_path / "etc").exists()


@pytest.mark.parametrize("change, expected", [
    (lambda a: a["units"][1].update(restart_on=["/etc/default/prometheus"]),
     "prometheus-node-exporter restarts on /etc/default/prometheus, which is not among files"),
    (lambda a: a["packages"].append("-o APT::Get::Assume-Yes=1"), "is not a package name"),
    (lambda a: a["units"].append({"name": "../../etc/passwd"}), "'../../etc/passwd' is not a unit name"),
    (lambda a: a["files"][2].update(mode="644x"), "is not an octal mode"),
])
def test_bad_input_is_refused_before_anything_changes(run_module, node_commands, tmp_path, change, expected):
    fake = node_commands(Node(tmp_path, installed=False, running=False))
    a = args(tmp_path)
    change(a)
    r = run_module(packaged_services, a)
    assert r["failed"] is True and expected in r["msg"], r["msg"]
    assert fake.calls == [] and not (tmp_path / "etc").exists()


def test_a_failed_install_names_the_command_and_apts_answer(run_module, node_commands, tmp_path):
    node = Node(tmp_path, installed=False, running=False, apt_rc=100)
    node_commands(node)
    r = run_module(packaged_services, args(tmp_path))
    assert r["failed"] is True and r.get("rc") == 100, r
    assert "apt-get install prometheus prometheus-alertmanager prometheus-node-exporter failed (rc 100)" in r["msg"]
    assert "Unable to locate package" in r["msg"] and r["cmd"][-3:] == PACKAGES
    # what was done before the failure is reported: the firewall's files and unit
    assert r["restarted"] == [UNITS[0]] and str(tmp_path / "etc" / "sparkfleet" / "monitoring-firewall.nft") in \
        r["changed_paths"]
