"""roles/runtime_image/files/sparkfleet-image-load, the image key's forced command on the workers: it keeps a load only
when it is the run's image, and undoes anything else. Run against a fake docker that keeps its images in a file."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import stat

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.image._image import content_identity

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCRIPT = os.path.join(ROOT, "roles", "runtime_image", "files", "sparkfleet-image-load")
FIX = os.path.join(ROOT, "tests", "unit", "plugins", "modules", "fixtures", "image_identity")
TAG = "sparklab/vllm-runtime:28f6c6d5159b"


def _fixture(name):
    with open(os.path.join(FIX, name)) as fh:
        return json.load(fh)[0]


HEAD, WORKER, ENV_LAYER = (_fixture("head-classic-docker20.10.json"), _fixture("worker-containerd-docker26.1.json"),
                           _fixture("head-classic-env-layer.json"))

# A docker with state in $FAKE_STATE: {"images": {id: entry}, "tags": {ref: id}}. `load` reads a JSON archive
# stand-in on stdin: {"images": [entry...], "tags": {ref: id}}.
DOCKER = r"""#!/usr/bin/python3
import json, os, sys
path = os.environ["FAKE_STATE"]
st = json.load(open(path))
a = sys.argv[1:]
def save():
    json.dump(st, open(path, "w"))
if a[:2] == ["image", "ls"]:
    for ref, i in sorted(st["tags"].items()):
        print("%s %s" % (ref, i))
elif a == ["load"]:
    arc = json.load(sys.stdin)
    for e in arc["images"]:
        st["images"][e["Id"]] = e
    out = []
    for ref, i in arc["tags"].items():
        st["tags"][ref] = i
        out.append("Loaded image: " + ref)
    if not arc["tags"]:
        out += ["Loaded image ID: " + e["Id"] for e in arc["images"]]
    save()
    print("\n".join(out))
elif a[:2] == ["image", "inspect"]:
    res = []
    for r in a[2:]:
        i = st["tags"].get(r, r)
        if i in st["images"]:
            res.append(dict(st["images"][i], RepoTags=[t for t, x in st["tags"].items() if x == i]))
    print(json.dumps(res))
elif a[0] == "tag":
    st["tags"][a[2]] = a[1]; save()
elif a[:2] == ["image", "rm"]:
    r = a[-1]
    if r in st["tags"]:
        del st["tags"][r]
    elif r in st["images"] and r not in st["tags"].values():
        del st["images"][r]
    save()
else:
    sys.exit(9)
"""


@pytest.fixture
def loader(tmp_path, monkeypatch):
    fake = tmp_path / "docker"
    fake.write_text(DOCKER)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    state = tmp_path / "state.json"
    monkeypatch.setenv("FAKE_STATE", str(state))
    spec = importlib.util.spec_from_loader("sparkfleet_image_load",
                                           importlib.machinery.SourceFileLoader("sparkfleet_image_load", SCRIPT))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.DOCKER = str(fake)
    mod.ENV = dict(mod.ENV, FAKE_STATE=str(state))

    class L:
        module = mod

        @staticmethod
        def state(images=(), tags=None):
            state.write_text(json.dumps({"images": {e["Id"]: e for e in images}, "tags": tags or {}}))

        @staticmethod
        def now():
            return json.loads(state.read_text())

        @staticmethod
        def run(archive, *argv):
            stdin = tmp_path / "stdin"
            stdin.write_text(json.dumps(archive))
            with open(stdin) as fh:
                monkeypatch.setattr("sys.stdin", fh)
                return mod.main(list(argv))
    return L


def test_its_content_identity_is_the_collections():
    spec = importlib.util.spec_from_loader("l", importlib.machinery.SourceFileLoader("l", SCRIPT))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for entry in (HEAD, WORKER, ENV_LAYER, dict(HEAD, Variant="v8", Config=dict(HEAD["Config"], User="1000"))):
        assert mod.content_identity(entry) == content_identity(entry)
    assert mod.CONTENT_CONFIG_KEYS == __import__(
        "ansible_collections.sparkfleet.vllm.plugins.module_utils.image._image", fromlist=["x"]).CONTENT_CONFIG_KEYS


def test_loads_the_run_image_and_keeps_it(loader, capsys):
    loader.state()
    rc = loader.run({"images": [WORKER], "tags": {TAG: WORKER["Id"]}}, "--name", TAG, "--content", content_identity(HEAD))
    assert rc == 0
    assert loader.now()["tags"] == {TAG: WORKER["Id"]}
    assert "sparkfleet-image-load: %s is %s" % (TAG, WORKER["Id"]) in capsys.readouterr().out


def test_other_content_under_the_run_tag_is_undone_and_the_old_tag_restored(loader, capsys):
    loader.state([HEAD], {TAG: HEAD["Id"]})
    rc = loader.run({"images": [ENV_LAYER], "tags": {TAG: ENV_LAYER["Id"]}}, "--name", TAG,
                    "--content", content_identity(HEAD))
    assert rc == 1
    st = loader.now()
    assert st["tags"] == {TAG: HEAD["Id"]} and ENV_LAYER["Id"] not in st["images"]
    assert "refused: its content is" in capsys.readouterr().err


def test_an_archive_that_moves_another_tag_is_undone(loader, capsys):
    loader.state([ENV_LAYER], {"debian:12": ENV_LAYER["Id"]})
    rc = loader.run({"images": [WORKER], "tags": {TAG: WORKER["Id"], "debian:12": WORKER["Id"]}}, "--name", TAG,
                    "--content", content_identity(HEAD))
    assert rc == 1
    assert loader.now()["tags"] == {"debian:12": ENV_LAYER["Id"]}
    assert "the archive tags debian:12, not %s" % TAG in capsys.readouterr().err


def test_an_archive_of_two_images_is_undone(loader, capsys):
    loader.state()
    rc = loader.run({"images": [WORKER, ENV_LAYER], "tags": {TAG: WORKER["Id"], "x:1": ENV_LAYER["Id"]}},
                    "--name", TAG, "--content", content_identity(HEAD))
    assert rc == 1 and loader.now() == {"images": {}, "tags": {}}
    assert "held 2 images" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["--name", TAG], ["--name", TAG, "--content", "sha256:abc"],
                                  ["--name", TAG, "--content", "sha256:" + "a" * 64, "--extra"]])
def test_refuses_any_other_command_line(loader, argv, capsys):
    loader.state()
    assert loader.module.main(argv) == 2 and "usage:" in capsys.readouterr().err
