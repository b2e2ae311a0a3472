"""plugins/module_utils/sync/_model_manifest.py: what the sync left on a node, the stat check and the scrub, on real files
(a model written by tests/unit/support/model_files.py, corrupted as the lab test does: 64 KiB overwritten in place,
size kept, mtime put back)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync import _model_manifest as mm
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync import _sync_shell
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._content_hash import HASH_SCRIPT, parse_hashes
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import list_files
from ansible_collections.sparkfleet.vllm.tests.unit.support.model_files import shard_name, write_model

SHARD2 = shard_name(2, 3)


@pytest.fixture
def model(tmp_path):
    root = str(tmp_path / "models" / "m")
    write_model(root, 3, 256 << 10)
    return root


def hashes_of(root, cache=""):
    """The head's hashes as model_sync computes them: its own HASH_SCRIPT, run as the module runs it."""
    names = sorted(rel for rel, _s in list_files(root))
    p = subprocess.run([sys.executable, "-c", HASH_SCRIPT, root, cache], input=b"\0".join(n.encode() for n in names),
                       capture_output=True, check=True)
    return parse_hashes(p.stdout.decode())


def corrupt(path, offset=4096, size=64 << 10):
    """Overwrite size bytes in place (the size kept) and put the mtime back, as a careless tool or a bad disk would."""
    st = os.stat(path)
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(os.urandom(size))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return st


def record(root, tmp_path, **kw):
    path = str(tmp_path / "state" / "model-manifest.json")
    mm.write_atomic(path, mm.build(root, "spark-2", **kw))
    return path


def test_the_sync_names_are_those_of_the_sync_shell():
    assert (mm.TEMP_DIR_NAME, mm.MARKER_NAME) == (_sync_shell.TEMP_DIR_NAME, _sync_shell.MARKER_NAME)


def test_the_files_are_those_model_sync_sends(model, tmp_path):
    os.makedirs(os.path.join(model, mm.TEMP_DIR_NAME))
    open(os.path.join(model, mm.TEMP_DIR_NAME, "partial"), "w").close()
    with open(os.path.join(model, mm.MARKER_NAME), "w") as fh:
        fh.write("copy=complete\n")
    (tmp_path / "secret").write_text("x")
    os.symlink(str(tmp_path / "secret"), os.path.join(model, "leak"))      # a link out of the model: never a file of it
    assert sorted(mm.model_files(model)) == sorted(rel for rel, _s in list_files(model))
    assert "leak" not in mm.model_files(model) and mm.MARKER_NAME not in mm.model_files(model)


def test_an_untouched_model_is_as_the_sync_left_it(model, tmp_path):
    path = record(model, tmp_path)
    got = mm.check(model, path)
    assert got["state"] == "ok" and got["changes"] == []
    assert got["msg"].startswith("model on spark-2 as the sync of ")


def test_a_same_size_write_with_its_mtime_put_back_is_caught_by_stat(model, tmp_path):
    path = record(model, tmp_path)
    corrupt(os.path.join(model, SHARD2))
    got = mm.check(model, path)
    assert got["state"] == "changed"
    assert [c["file"] for c in got["changes"]] == [SHARD2]
    assert got["changes"][0]["detail"] == "ctime moved (written, or its metadata set); size and mtime kept"
    assert got["msg"] == ("model changed since the sync on spark-2: %s ctime moved (written, or its metadata set); "
                          "size and mtime kept: run site.yml" % SHARD2)


def test_a_replaced_a_missing_and_an_extra_file_are_named(model, tmp_path):
    path = record(model, tmp_path)
    shard = os.path.join(model, SHARD2)
    with open(shard, "rb") as fh:
        data = fh.read()
    with open(shard + ".tmp", "wb") as fh:
        fh.write(data)
    os.replace(shard + ".tmp", shard)                       # same bytes, a new inode: an editor's or a tool's save
    os.unlink(os.path.join(model, "config.json"))
    open(os.path.join(model, "stray.bin"), "w").close()
    changes = {c["file"]: c for c in mm.check(model, path)["changes"]}
    assert changes["config.json"]["change"] == "missing"
    assert changes["stray.bin"]["change"] == "extra"
    assert "replaced (new inode)" in changes[SHARD2]["detail"]


def test_no_manifest_is_never_a_refusal(model, tmp_path):
    got = mm.check(model, str(tmp_path / "none.json"))
    assert got["state"] == "unrecorded" and "site.yml writes it" in got["msg"]
    other = record(str(tmp_path), tmp_path)                 # a manifest of another directory
    assert mm.check(model, other)["state"] == "unrecorded"


def test_hashes_come_from_model_syncs_cache_only_for_the_version_hashed(model, tmp_path):
    cache = str(tmp_path / "cache" / "hashes.json")
    want = hashes_of(model, cache)
    stats = mm.model_files(model)
    assert mm.cached_hashes(cache, model, stats) == want
    corrupt(os.path.join(model, SHARD2))                    # the cache's key for it no longer matches
    got = mm.cached_hashes(cache, model, mm.model_files(model))
    assert SHARD2 not in got and len(got) == len(want) - 1


def test_the_scrub_finds_what_stat_cannot(model, tmp_path):
    head = hashes_of(model)
    corrupt(os.path.join(model, SHARD2))
    # recorded after the damage (a bad disk returns other bytes with no write at all): stat sees nothing
    path = record(model, tmp_path, head_hashes=head)
    assert mm.check(model, path)["state"] == "ok"
    got = mm.scrub(model, path)
    assert got["state"] == "bad" and got["checked"] == len(head)
    assert [b["file"] for b in got["bad"]] == [SHARD2]
    assert got["msg"].startswith("the scrub found 1 file(s) on spark-2 whose content is not the head's: %s content "
                                 "differs from the head's (sha256 " % SHARD2)
    assert got["msg"].endswith(": run site.yml")


def test_a_clean_scrub_and_one_with_nothing_to_compare(model, tmp_path):
    path = record(model, tmp_path, head_hashes=hashes_of(model))
    got = mm.scrub(model, path)
    assert got["state"] == "ok" and got["bad"] == [] and got["bytes"] > 0
    assert mm.scrub(model, record(model, tmp_path))["state"] == "unrecorded"


def test_the_command_line_as_the_units_and_status_run_it(model, tmp_path):
    path = record(model, tmp_path, head_hashes=hashes_of(model))
    out = str(tmp_path / "scrub.json")
    script = mm.__file__
    p = subprocess.run([sys.executable, "-B", script, "scrub", "--model-dir", model, "--manifest", path, "--out", out],
                       capture_output=True, text=True, check=False)
    assert p.returncode == 0 and p.stdout.startswith("sparkfleet model scrub: the scrub read 5 file(s) on spark-2")
    corrupt(os.path.join(model, SHARD2))
    p = subprocess.run([sys.executable, "-B", script, "status", "--model-dir", model, "--manifest", path, "--scrub", out],
                       capture_output=True, text=True, check=True)
    got = json.loads(p.stdout)
    assert got["state"] == "changed" and got["scrub"]["state"] == "ok"


def test_a_manifest_is_replaced_whole(model, tmp_path):
    path = record(model, tmp_path)
    assert os.listdir(os.path.dirname(path)) == ["model-manifest.json"]
    assert mm.same_record(mm.load(path), mm.build(model, "spark-2", when="later"))


def test_a_scrub_older_than_the_last_sync_is_not_reported(model, tmp_path):
    out = str(tmp_path / "scrub.json")
    path = record(model, tmp_path, head_hashes={"config.json": "0" * 64})
    mm.write_atomic(out, mm.scrub(model, path))
    assert mm.status(model, path, out)["scrub"]["state"] == "bad"
    data = mm.load(path)
    data["recorded"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))   # a sync after the scrub
    mm.write_atomic(path, data)
    assert mm.status(model, path, out)["scrub"] is None
