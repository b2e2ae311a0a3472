"""node_facts: one module run answers the reads preflight and the roles made one task at a time (captured outputs)."""

from __future__ import annotations

import os
import subprocess

import pytest

from ansible.module_utils import basic

from ansible_collections.sparkfleet.vllm.plugins.modules import node_facts, rdma_facts

HERE = os.path.dirname(__file__)
FIX = os.path.join(HERE, "fixtures", "node_facts")
RDMA = os.path.join(HERE, "fixtures", "rdma_facts")


def _text(name):
    with open(os.path.join(FIX, name)) as handle:
        return handle.read()


@pytest.fixture
def node(monkeypatch, run_module, node_commands):
    """run(args, images={ref: id}, nft=True): node_facts with the node's commands answered from captures."""
    calls = []

    def _run(args, images=None, nft_ok=True, docker=True, check_mode=False, show="systemctl-show.txt",
             info="docker-info-live-restore-off.txt"):
        images = images or {}
        with open(os.path.join(RDMA, "lab_spark1", "ip-addr.json")) as handle:
            ip_json = handle.read()

        def answer(cmd):            # a bounded docker call (timeout -k 5 30 docker ...) arrives unwrapped
            tool = os.path.basename(cmd[0])
            if tool == "ip":
                return 0, ip_json, ""
            if tool == "systemctl" and cmd[1] == "show":
                return 0, _text(show), ""
            if tool == "systemctl":
                return 0, _text("systemctl-version.txt"), ""
            if tool == "nft" and cmd[1:] == ["list", "tables"]:
                return (0, _text("nft-list-tables.txt"), "") if nft_ok else (1, "", "Error: Operation not permitted")
            if tool == "nft" and cmd[-1] == "sparkfleet":
                return 0, _text("nft-list-table-sparkfleet.txt"), ""
            if tool == "nft":
                return 1, "", _text("nft-list-table-missing.stderr")
            if tool == "docker" and cmd[1] == "inspect" and cmd[2] == "-f":
                return 0, "true\n", ""
            if tool == "docker" and cmd[1] == "info":   # live-restore as docker info reports it, or no daemon
                return (0, _text(info), "") if info.endswith(".txt") else (1, "", _text(info))
            if tool == "docker" and cmd[1] == "exec":  # the container sees the host's directory: the real stat
                out = subprocess.run(["stat", "-c", "%i:%h", "--", cmd[-1]], capture_output=True, text=True,
                                     check=False)
                return out.returncode, out.stdout, out.stderr
            if tool == "docker":
                ref = cmd[-1]
                return (0, images[ref] + "\n", "") if ref in images else (1, "", "Error: No such image: %s" % ref)
            raise AssertionError("unexpected command %s" % cmd)

        node_commands(answer, bin_dir="/usr/sbin", missing=() if docker else ("docker",)).ran = calls
        monkeypatch.setattr(os.path, "exists",       # a bytes path too (ansible's config reads its own with one)
                            lambda p, _e=os.path.exists: True if os.fsdecode(p).startswith("/usr/sbin/") else _e(p))
        monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, w: None)
        return run_module(node_facts, args, check_mode=check_mode)

    _run.calls = calls
    return _run


def test_answers_every_question_in_one_run(node, tmp_path):
    small = tmp_path / "sync.pub"
    small.write_text("ssh-ed25519 AAAA sparkfleet model sync\n")
    small.chmod(0o644)
    (tmp_path / "dir").mkdir(mode=0o750)
    result = node({
        "fabric": {"sysfs_root": os.path.join(RDMA, "lab_spark1", "sys"), "subnet": "10.99.1.0/24"},
        "nft": "nft", "nft_tables": [{"name": "sparkfleet"}, {"name": "nosuch"}],
        "files": [str(small), str(tmp_path / "dir"), str(tmp_path / "absent")],
        "images": ["sparklab/vllm-runtime:28f6", "other:1"], "systemd_version": True},
        images={"sparklab/vllm-runtime:28f6": "sha256:4f2a"})
    assert not result.get("failed"), result
    assert result["changed"] is False
    facts = result["ansible_facts"]
    n = result
    assert n["files"][str(small)]["content"] == "ssh-ed25519 AAAA sparkfleet model sync\n"
    assert (n["files"][str(small)]["type"], n["files"][str(small)]["mode"]) == ("file", "0644")
    assert (n["files"][str(tmp_path / "dir")]["type"], n["files"][str(tmp_path / "dir")]["mode"]) == ("directory", "0750")
    assert n["files"][str(tmp_path / "absent")]["exists"] is False
    assert n["images"] == {"sparklab/vllm-runtime:28f6": "sha256:4f2a", "other:1": ""}
    assert n["nft"]["usable"] is True and "table inet sparkfleet" in n["nft"]["stdout"]
    assert n["nft_tables"]["inet sparkfleet"]["rc"] == 0
    assert 'comment "sparkfleet ray firewall' in n["nft_tables"]["inet sparkfleet"]["stdout"]
    assert n["nft_tables"]["inet nosuch"]["rc"] == 1
    assert n["systemd_version"] == 252
    # the same fabric fact as rdma_facts reports
    assert facts["sparkfleet_fabric"]["interface"] == "enp1s0f1np1"
    assert facts["sparkfleet_fabric"]["env"]["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"


def test_same_fabric_as_rdma_facts(node, run_module):
    sysfs = os.path.join(RDMA, "lab_spark1", "sys")
    ours = node({"fabric": {"sysfs_root": sysfs, "subnet": "10.99.1.0/24"}})["ansible_facts"]["sparkfleet_fabric"]
    theirs = run_module(rdma_facts, {"sysfs_root": sysfs, "subnet": "10.99.1.0/24"})["ansible_facts"]
    assert ours == theirs["sparkfleet_fabric"]


def test_fabric_failure_names_the_fix_as_rdma_facts_does(node):
    result = node({"fabric": {"sysfs_root": os.path.join(RDMA, "lab_spark1", "sys"), "subnet": "10.77.0.0/24"}})
    assert result["failed"] and "10.77.0.0/24" in result["msg"] and result["hint"]


def test_nft_that_does_not_work_is_an_answer_not_a_failure(node):
    result = node({"nft": "nft", "nft_tables": [{"name": "sparkfleet"}]}, nft_ok=False)
    n = result
    assert not result.get("failed")
    assert n["nft"]["usable"] is False and n["nft"]["rc"] == 1 and "not permitted" in n["nft"]["stderr"]
    assert n["nft_tables"]["inet sparkfleet"]["rc"] is None  # not asked of an nft that does not work


def test_no_docker_means_no_image(node):
    result = node({"images": ["x:1"]}, docker=False)
    assert result["images"] == {"x:1": ""}


@pytest.mark.parametrize("info, expected", [
    ("docker-info-live-restore-on.txt", True),
    ("docker-info-live-restore-off.txt", False),
    ("docker-info-no-daemon.stderr", None),   # the CLI's answer when dockerd does not answer
])
def test_docker_live_restore_as_docker_info_reports_it(node, info, expected):
    result = node({"docker_live_restore": True}, info=info)
    assert not result.get("failed"), result
    assert result["docker_live_restore"] is expected


def test_docker_live_restore_without_docker_is_unknown_and_only_when_asked(node):
    assert node({"docker_live_restore": True}, docker=False)["docker_live_restore"] is None
    assert "docker_live_restore" not in node({})


def test_check_mode_reads_all_the_same(node):
    result = node({"systemd_version": True}, check_mode=True)
    assert result["systemd_version"] == 252


@pytest.mark.parametrize("args, words", [
    ({"files": ["relative/path"]}, "absolute"),
    ({"nft_tables": [{"name": "sparkfleet"}]}, "needs nft"),
    ({"max_bytes": -1}, "max_bytes"),
])
def test_bad_arguments_fail_before_anything_is_read(node, args, words):
    result = node(args)
    assert result["failed"] and words in result["msg"]
    assert node.calls == []


def test_unit_states_from_one_systemctl_show(node):
    result = node({"units": ["sparkfleet-ray", "sparkfleet-vllm.service", "nosuch.service"]})
    u = result["units"]
    assert u["sparkfleet-ray"] == {"load_state": "loaded", "active_state": "active", "sub_state": "running",
                                   "unit_file_state": "enabled", "need_daemon_reload": False, "result": "success",
                                   "InactiveExitTimestamp": "Sat 2026-12-05 03:45:57 UTC",
                                   "InactiveEnterTimestamp": ""}
    assert u["nosuch.service"]["load_state"] == "not-found" and u["nosuch.service"]["unit_file_state"] is None
    assert sum(1 for c in node.calls if c[1] == "show") == 1


def test_a_unit_file_changed_on_disk_needs_a_reload(node):
    result = node({"units": ["sparkfleet-vllm.service"]}, show="systemctl-show-need-reload.txt")
    assert result["units"]["sparkfleet-vllm.service"]["need_daemon_reload"] is True


def test_mounts_answer_as_container_mount_does(node, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    result = node({"mounts": [{"path": str(models), "container": "sparkfleet-ray"},
                              {"path": str(tmp_path / "gone"), "container": "sparkfleet-ray"}]})
    seen = result["mounts"]["sparkfleet-ray:%s" % models]
    assert seen["state"] == "same" and seen["stale"] is False and seen["host_inode"] == os.stat(models).st_ino
    assert result["mounts"]["sparkfleet-ray:%s" % (tmp_path / "gone")]["state"] == "absent"


def test_a_mount_without_a_container_name_is_refused(node, tmp_path):
    result = node({"mounts": [{"path": str(tmp_path), "container": " "}]})
    assert result["failed"] and "must name a container" in result["msg"]
