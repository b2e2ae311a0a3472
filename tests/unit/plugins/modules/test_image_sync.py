"""image_sync with a fake docker (save prints bytes) and a fake ssh (counts stdin, answers like docker load)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.image._image import content_identity
from ansible_collections.sparkfleet.vllm.plugins.modules import image_sync

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "image_identity")
# The head's image as Docker 20.10 (classic store) inspects it, its Size set to 3000 for the fake save below.
with open(os.path.join(FIX, "head-classic-docker20.10.json")) as _fh:
    HEAD = json.load(_fh)
HEAD[0]["Size"] = 3000
HEAD_ID = HEAD[0]["Id"]
HEAD_CONTENT = content_identity(HEAD[0])
# The same image loaded into Docker 26's containerd image store: another ID, the same content.
with open(os.path.join(FIX, "worker-containerd-docker26.1.json")) as _fh:
    WORKER_CONTENT = content_identity(json.load(_fh)[0])
DOCKER = """#!/bin/sh
echo "docker $*" >> "$FAKE_LOG"
case "$1 $2" in
  "image inspect") [ -n "$FAKE_MISSING" ] && { echo "[]"; echo "Error: No such image" >&2; exit 1; }; cat "$FAKE_INSPECT" ;;
  "version --format") echo "${FAKE_API:-1.41}" ;;
  "save sparklab/vllm-runtime:x") head -c 3000 /dev/zero ;;
  "save --platform") [ "$3 $4" = "linux/amd64 sparklab/vllm-runtime:x" ] && head -c 3000 /dev/zero ;;
  *) exit 9 ;;
esac
"""
SSH = """#!/bin/sh
n=$(wc -c)
echo "ssh $* bytes=$n" >> "$FAKE_LOG"
[ -n "$FAKE_SSH_FAIL" ] && { echo "sudo: a password is required" >&2; exit 1; }
echo "Loaded image: sparklab/vllm-runtime:x"
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("docker", DOCKER), ("ssh", SSH)):
        f = bindir / name
        f.write_text(text)
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    inspect = tmp_path / "inspect.json"
    inspect.write_text(json.dumps(HEAD))
    monkeypatch.setenv("FAKE_INSPECT", str(inspect))
    return lambda: (tmp_path / "log").read_text().splitlines() if (tmp_path / "log").exists() else []


def args(*dests):
    return {"image": "sparklab/vllm-runtime:x", "destinations": list(dests), "ssh_user": "spark",
            "ssh_key": "/etc/sparkfleet/image-sync_ed25519", "load_command": ["sudo", "-n", "docker", "load"]}


def test_moves_the_image_only_where_the_content_differs(run_module, fake):
    r = run_module(image_sync, args({"name": "spark-2", "ip": "10.99.1.12", "content": ""},
                                    {"name": "spark-3", "ip": "10.99.1.13", "content": HEAD_CONTENT}))
    assert not r.get("failed"), r.get("msg")
    assert r["changed"] is True and r["image_id"] == HEAD_ID and r["bytes_transferred"] == 3000
    assert r["content"] == HEAD_CONTENT and r["save_args"] == []
    two, three = r["results"]
    assert two["changed"] is True and two["bytes"] == 3000 and two["loaded"]["tags"] == ["sparklab/vllm-runtime:x"]
    assert three["changed"] is False and three["bytes"] == 0
    sshs = [line for line in fake() if line.startswith("ssh ")]
    assert len(sshs) == 1 and sshs[0].endswith("spark@10.99.1.12 sudo -n docker load bytes=3000")
    assert "-i /etc/sparkfleet/image-sync_ed25519" in sshs[0] and "BatchMode=yes" in sshs[0]
    assert "spark-2 0 MB in" in r["msg"] and "spark-3 up to date" in r["msg"]


def test_same_content_everywhere_is_unchanged(run_module, fake):
    r = run_module(image_sync, args({"name": "spark-2", "ip": "10.99.1.12", "content": HEAD_CONTENT + "\n"}))
    assert r["changed"] is False and r["bytes_transferred"] == 0
    assert not [line for line in fake() if line.startswith("ssh ")]


def test_check_mode_reports_without_moving(run_module, fake):
    r = run_module(image_sync, args({"ip": "10.99.1.12"}), check_mode=True)
    assert r["changed"] is True and r["results"][0]["name"] == "10.99.1.12" and "would get it" in r["msg"]
    assert not [line for line in fake() if line.startswith("ssh ") or "save" in line]


def test_failed_load_names_the_node_and_the_fix(run_module, fake, monkeypatch):
    monkeypatch.setenv("FAKE_SSH_FAIL", "1")
    r = run_module(image_sync, args({"name": "spark-2", "ip": "10.99.1.12"}))
    assert r["failed"] is True
    assert r["msg"].startswith("moving sparklab/vllm-runtime:x to spark-2 (10.99.1.12) failed (rc 1)")
    assert "sudo: a password is required" in r["msg"] and "passwordless sudo" in r["hint"]


def test_image_missing_on_the_head(run_module, fake, monkeypatch):
    monkeypatch.setenv("FAKE_MISSING", "1")
    r = run_module(image_sync, args({"ip": "10.99.1.12"}))
    assert r["failed"] is True and "is not on this node" in r["msg"]


# ssh that shows what it is being sent before it finishes: the progress file must name the destination then.
SSH_PEEK = """#!/bin/sh
cat "$FAKE_PROGRESS" >> "$FAKE_LOG.peek"
n=$(wc -c)
echo "ssh $* bytes=$n" >> "$FAKE_LOG"
echo "Loaded image: sparklab/vllm-runtime:x"
"""


def test_progress_file_names_each_destination_while_it_runs_and_is_removed_after(run_module, fake, tmp_path,
                                                                                 monkeypatch):
    ssh = tmp_path / "bin" / "ssh"
    ssh.write_text(SSH_PEEK)
    progress = tmp_path / "run" / "image-sync.progress"
    monkeypatch.setenv("FAKE_PROGRESS", str(progress))
    r = run_module(image_sync, dict(args({"name": "spark-2", "ip": "10.99.1.12"},
                                         {"name": "spark-3", "ip": "10.99.1.13", "content": HEAD_CONTENT},
                                         {"name": "spark-4", "ip": "10.99.1.14"}), progress_file=str(progress)))
    assert not r.get("failed"), r.get("msg")
    assert [x["bytes"] for x in r["results"]] == [3000, 0, 3000]  # dd passes every byte through
    peeks = (tmp_path / "log.peek").read_text().splitlines()
    headers = [json.loads(line.split(" ", 3)[3]) for line in peeks if line.startswith("# sparkfleet transfer ")]
    seen = [(h["name"], h["index"], h["count"], h["total"]) for h in headers]
    assert seen == [("spark-2", 1, 2, 3000), ("spark-4", 2, 2, 3000)]
    assert not progress.exists()


def test_check_mode_writes_no_progress(run_module, fake, tmp_path):
    progress = tmp_path / "p"
    r = run_module(image_sync, dict(args({"ip": "10.99.1.12"}), progress_file=str(progress)), check_mode=True)
    assert r["changed"] is True and not progress.exists()


def test_a_worker_whose_containerd_store_gave_the_image_another_id_is_up_to_date(run_module, fake):
    # moby #44833/#48401: saved by a classic store, loaded into a containerd store, the IDs differ; the content not
    assert WORKER_CONTENT == HEAD_CONTENT
    r = run_module(image_sync, args({"name": "spark-2", "ip": "10.99.1.12", "content": WORKER_CONTENT}))
    assert r["changed"] is False and "spark-2 up to date" in r["msg"]
    assert not [line for line in fake() if line.startswith("ssh ") or " save " in line]


def test_save_names_the_platform_where_the_daemon_takes_it(run_module, fake, monkeypatch):
    monkeypatch.setenv("FAKE_API", "1.48")
    r = run_module(image_sync, args({"name": "spark-2", "ip": "10.99.1.12"}))
    assert not r.get("failed"), r.get("msg")
    assert r["save_args"] == ["--platform", "linux/amd64"] and r["bytes_transferred"] == 3000
    assert "docker save --platform linux/amd64 sparklab/vllm-runtime:x" in fake()


@pytest.mark.parametrize("dest, user", [
    ({"name": "spark-2", "ip": "-oProxyCommand=touch /tmp/sparkfleet-pwned"}, "spark"),
    ({"name": "spark-2", "ip": "10.99.1.12"}, "-oProxyCommand=sh"),
])
def test_a_destination_or_user_never_reaches_ssh_as_an_option(run_module, fake, dest, user):
    """Issue 17.10 (model_sync's helper checks, reused): refused before docker or ssh runs."""
    a = args(dest)
    a["ssh_user"] = user
    r = run_module(image_sync, a)
    assert r["failed"] is True and ("destination ip" in r["msg"] or "ssh_user" in r["msg"]), r
    assert fake() == [] and not os.path.exists("/tmp/sparkfleet-pwned")


def test_ssh_options_end_before_the_host(run_module, fake):
    run_module(image_sync, args({"name": "spark-2", "ip": "10.99.1.12", "content": ""}))
    ssh = [line for line in fake() if line.startswith("ssh ")][0]
    assert " -- spark@10.99.1.12 " in ssh
