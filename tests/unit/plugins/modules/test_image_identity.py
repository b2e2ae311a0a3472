"""image_identity with a fake docker answering with inspect outputs captured in the lab (Docker 20.10 classic store on
the head, Docker 26.1 with the containerd image store on a worker)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.image._image import content_identity
from ansible_collections.sparkfleet.vllm.plugins.modules import image_identity

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "image_identity")
TAG = "sparklab/vllm-runtime:28f6c6d5159b"


def load(name):
    with open(os.path.join(FIX, name)) as fh:
        return json.load(fh)[0]


HEAD, WORKER, ENV_LAYER = (load("head-classic-docker20.10.json"), load("worker-containerd-docker26.1.json"),
                           load("head-classic-env-layer.json"))
# `docker image inspect REF...` answers from $FAKE_IMAGES (a JSON object: ref -> entry; IDs are refs too)
DOCKER = """#!/usr/bin/python3
import json, os, sys
images = json.load(open(os.environ["FAKE_IMAGES"]))
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
if args[:2] == ["image", "ls"]:
    print("\\n".join(sorted({e["Id"] for e in images.values()})))
    sys.exit(0)
if args[:2] == ["image", "inspect"]:
    found = [images[r] for r in args[2:] if r in images]
    print(json.dumps(found))
    missing = [r for r in args[2:] if r not in images]
    if missing:
        sys.stderr.write("Error: No such image: %s\\n" % missing[0])
        sys.exit(1)
    sys.exit(0)
sys.exit(9)
"""


@pytest.fixture
def docker(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "docker"
    fake.write_text(DOCKER)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))

    def images(*entries, tagged=True):
        table = {}
        for e in entries:
            table[e["Id"]] = e
            if tagged:
                for t in e.get("RepoTags") or []:
                    table[t] = e
        (tmp_path / "images.json").write_text(json.dumps(table))
        monkeypatch.setenv("FAKE_IMAGES", str(tmp_path / "images.json"))
        return lambda: (tmp_path / "log").read_text().splitlines() if (tmp_path / "log").exists() else []
    return images


def test_reads_the_image_by_its_reference(run_module, docker):
    docker(HEAD)
    r = run_module(image_identity, {"image": TAG})
    assert r["found"] is True and r["by_content"] is False and r["changed"] is False
    assert r["id"] == HEAD["Id"] and r["content"] == content_identity(HEAD) and r["platform"] == "linux/amd64"
    assert r["tags"] == [TAG] and r["repo_digests"] == []


def test_a_worker_with_another_id_for_the_same_content_holds_it(run_module, docker):
    docker(WORKER)
    r = run_module(image_identity, {"image": TAG, "content": content_identity(HEAD)})
    assert r["found"] is True and r["by_content"] is False and r["id"] == WORKER["Id"] != HEAD["Id"]


def test_an_untagged_copy_is_found_by_its_content(run_module, docker):
    calls = docker(ENV_LAYER, dict(WORKER, RepoTags=[]), tagged=False)
    r = run_module(image_identity, {"image": TAG, "content": content_identity(HEAD)})
    assert r["found"] is True and r["by_content"] is True and r["id"] == WORKER["Id"]
    assert calls()[1] == "image ls --quiet --no-trunc"


def test_a_tag_moved_onto_other_content_is_not_the_image(run_module, docker):
    docker(dict(ENV_LAYER, RepoTags=[TAG]))
    r = run_module(image_identity, {"image": TAG, "content": content_identity(HEAD)})
    assert r["found"] is False and r["id"] == "" and r["content"] == ""


def test_missing_everywhere(run_module, docker):
    docker()
    assert run_module(image_identity, {"image": TAG})["found"] is False
    assert run_module(image_identity, {"image": TAG, "content": content_identity(HEAD)})["found"] is False


def test_check_mode_reads_the_same(run_module, docker):
    docker(HEAD)
    assert run_module(image_identity, {"image": TAG}, check_mode=True)["found"] is True


@pytest.mark.parametrize("args, msg", [
    ({"image": "--help"}, "image must name an image"),
    ({"image": " "}, "image must name an image"),
    ({"image": TAG, "content": "abc"}, "content must be a content identity"),
])
def test_bad_arguments(run_module, docker, args, msg):
    docker(HEAD)
    r = run_module(image_identity, args)
    assert r["failed"] is True and msg in r["msg"]
