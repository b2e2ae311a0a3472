"""Pure helpers of model_sync: model completeness, stream packing, fan-out, rsync/df/find parsing."""

from __future__ import annotations

import json
import math
import os

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import (
    FanoutScheduler,
    check_model_dir,
    compare_sizes,
    pack_bins,
    parse_df_avail,
    parse_itemize,
    parse_size_list,
    rsync_argv,
    rsync_target,
    ssh_argv,
    summarize,
    tree_rounds,
)
from ansible_collections.sparkfleet.vllm.tests.unit.support import model_files


def write_safetensors(path, tensors):
    """{name: nbytes}: U8 tensors of ones."""
    model_files.write_safetensors(path, dict((n, ("U8", [k], b"\x01" * k)) for n, k in tensors.items()), pad=False)


@pytest.fixture
def model(tmp_path):
    root = tmp_path / "m"
    root.mkdir()
    (root / "config.json").write_text('{"model_type": "x"}')
    wm = {}
    for i in (1, 2):
        name = "model-%05d-of-00002.safetensors" % i
        write_safetensors(str(root / name), {"a%d" % i: 10 * i, "b%d" % i: 3})
        wm.update({"a%d" % i: name, "b%d" % i: name})
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    return root


# ------------------------------------------------------------------ check_model_dir

def test_complete_model(model):
    report, problems = check_model_dir(str(model))
    assert problems == []
    assert report["index"] == "model.safetensors.index.json"
    assert report["weight_files"] == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert report["tensors"] == 4
    assert len(report["files"]) == 4


def test_missing_config(model):
    (model / "config.json").unlink()
    assert check_model_dir(str(model))[1] == ["config.json is missing or empty"]


def test_config_not_json(model):
    (model / "config.json").write_text("{oops")
    assert "config.json does not parse" in check_model_dir(str(model))[1][0]


def test_shard_named_in_index_missing(model):
    (model / "model-00002-of-00002.safetensors").unlink()
    assert check_model_dir(str(model))[1] == [
        "model-00002-of-00002.safetensors is missing (named in model.safetensors.index.json)"]


def test_empty_shard(model):
    (model / "model-00001-of-00002.safetensors").write_bytes(b"")
    assert check_model_dir(str(model))[1] == ["model-00001-of-00002.safetensors is empty"]


def test_truncated_shard_named_with_reason(model):
    path = model / "model-00002-of-00002.safetensors"
    path.write_bytes(path.read_bytes()[:-5])
    problems = check_model_dir(str(model))[1]
    assert len(problems) == 1 and problems[0].startswith("model-00002-of-00002.safetensors: ")
    assert "truncated" in problems[0]


def test_shard_lacking_tensors_the_index_names(model):
    write_safetensors(str(model / "model-00001-of-00002.safetensors"), {"a1": 10})
    problems = check_model_dir(str(model))[1]
    assert problems == ["model-00001-of-00002.safetensors lacks 1 tensor(s) the index puts there, e.g. b1"]


def test_index_without_weight_map(model):
    (model / "model.safetensors.index.json").write_text("{}")
    assert check_model_dir(str(model))[1] == ["model.safetensors.index.json has no weight_map"]


def test_single_file_model_without_index(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    write_safetensors(str(tmp_path / "model.safetensors"), {"w": 4})
    report, problems = check_model_dir(str(tmp_path))
    assert problems == [] and report["weight_files"] == ["model.safetensors"]


def test_no_weights_at_all(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert "no weights" in check_model_dir(str(tmp_path))[1][0]


def test_dangling_symlink_named(model):
    os.symlink("/nonexistent/blob", str(model / "tokenizer.json"))
    assert "tokenizer.json is a dangling symlink" in check_model_dir(str(model))[1]


def test_hf_snapshot_symlinks_into_its_blobs_are_followed(tmp_path, model):
    repo = tmp_path / "models--org--m"
    snap = repo / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    os.rename(str(model), str(repo / "blobs"))
    for entry in (repo / "blobs").iterdir():
        os.symlink("../../blobs/" + entry.name, str(snap / entry.name))
    report, problems = check_model_dir(str(snap))
    assert problems == [] and len(report["files"]) == 4


def test_symlinks_out_of_the_model_are_refused_and_never_listed(tmp_path, model):
    """Issue 17.12: a link to a file outside the model (a 0600 key, say) is never queued for the workers."""
    (tmp_path / "secret").write_text("PRIVATE")
    (tmp_path / "secret").chmod(0o600)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.json").write_text("{}")
    os.symlink(str(tmp_path / "secret"), str(model / "extra.json"))
    os.symlink(str(tmp_path / "elsewhere"), str(model / "sub"))
    os.symlink("config.json", str(model / "inside.json"))  # a link within the model is fine
    report, problems = check_model_dir(str(model))
    names = [n for n, _s in report["files"]]
    assert "extra.json" not in names and not any(n.startswith("sub/") for n in names) and "inside.json" in names
    assert sorted(p.split(" is a symlink")[0] for p in problems) == ["extra.json", "sub"], problems
    # A snapshot directory with links to some other place is refused the same way.
    snap = tmp_path / "snap"
    snap.mkdir()
    for entry in model.iterdir():
        os.symlink(str(entry), str(snap / entry.name))
    assert any("symlink out of the model directory" in p for p in check_model_dir(str(snap))[1])


def test_staging_dir_is_not_part_of_the_model(model):
    (model / ".sparkfleet-sync").mkdir()
    (model / ".sparkfleet-sync" / "x").write_text("partial")
    names = [n for n, _s in check_model_dir(str(model))[0]["files"]]
    assert not any(n.startswith(".sparkfleet-sync") for n in names)


def test_not_a_directory(tmp_path):
    assert check_model_dir(str(tmp_path / "nope"))[1] == ["%s is not a directory" % (tmp_path / "nope")]


# ------------------------------------------------------------------ pack_bins

def test_pack_bins_largest_first_balances():
    items = [("s%d" % i, size) for i, size in enumerate([9, 8, 7, 6, 5, 4, 3, 2, 1])]
    bins = pack_bins(items, 3)
    sizes = dict(items)
    totals = sorted(sum(sizes[n] for n in b) for b in bins)
    assert totals == [14, 15, 16]  # LPT: within one small file of the perfect 15/15/15
    assert sorted(n for b in bins for n in b) == sorted(sizes)


def test_pack_bins_never_more_streams_than_files():
    assert pack_bins([("a", 5), ("b", 1)], 8) == [["a"], ["b"]]
    assert pack_bins([], 4) == []


def test_pack_bins_one_stream_keeps_everything_largest_first():
    assert pack_bins([("small", 1), ("big", 100), ("mid", 10)], 1) == [["big", "mid", "small"]]


def test_pack_bins_39_real_sized_shards_on_4_streams_within_one_shard():
    items = [("model-%05d-of-00039.safetensors" % i, 3 * 10 ** 9 + (i % 5) * 10 ** 7) for i in range(1, 40)]
    items.append(("model-00040-of-00040.safetensors", 10 ** 9))
    totals = [sum(dict(items)[n] for n in b) for b in pack_bins(items, 4)]
    assert max(totals) - min(totals) <= 3.1 * 10 ** 9


# ------------------------------------------------------------------ fan-out

@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 15])
def test_tree_rounds_grow_with_log2(n):
    targets = ["w%d" % i for i in range(n)]
    rounds = tree_rounds(["source"], targets)
    assert len(rounds) == math.ceil(math.log2(n + 1))
    fed = [t for r in rounds for _f, t in r]
    assert sorted(fed) == sorted(targets)
    holders = {"source"}
    for r in rounds:
        feeders = [f for f, _t in r]
        assert len(set(feeders)) == len(feeders)      # one transfer per feeder at a time
        assert set(feeders) <= holders                # only nodes that already hold the model feed
        holders |= {t for _f, t in r}


def test_in_sync_destination_feeds_from_the_first_round():
    assert tree_rounds(["source", "w0"], ["w1", "w2"]) == [[("source", "w1"), ("w0", "w2")]]


def test_failed_target_never_feeds_and_the_rest_still_gets_fed():
    sched = FanoutScheduler(["source"], ["a", "b", "c"])
    assert sched.next() == [("source", "a")]
    sched.done("source", "a", False)
    assert sched.failed == ["a"]
    assert sched.next() == [("source", "b")]
    sched.done("source", "b", True)
    pairs = sched.next()
    assert pairs == [("b", "c")]                  # a good holder feeds; the failed a never does
    sched.done("b", "c", True)
    assert sched.finished()


def test_dynamic_scheduler_feeds_as_soon_as_a_feeder_is_free():
    sched = FanoutScheduler(["source"], ["a", "b", "c", "d"])
    sched.next()
    sched.done("source", "a", True)
    # The fresh holder feeds first, then the source.
    assert sched.next() == [("a", "b"), ("source", "c")]
    sched.done("source", "c", True)  # c finished before b: c feeds d without waiting for b
    assert sched.next() == [("c", "d")]
    assert ("a", "b") in sched.busy


# ------------------------------------------------------------------ rsync output

# Captured with rsync 3.5.0: push over a shell-less -e, --out-format='SFL|%i|%l|%n'.
RSYNC_OUT = """\
SFL|*deleting  |0|stale.bin
SFL|.d..t......|4096|./
SFL|<f+++++++++|3|a
SFL|cd+++++++++|4096|sub/
SFL|<f+++++++++|1,234|sub/b with | bar
SFL|<f.st......|4|c
SFL|.f...p.....|4|d
rsync: [sender] some warning that is not ours
SFL|>f..t......|7|e
"""


def test_parse_itemize():
    entries = parse_itemize(RSYNC_OUT)
    by = {e["name"]: e for e in entries}
    assert by["stale.bin"]["deleted"] and not by["stale.bin"]["transferred"]
    assert by["a"]["transferred"] and by["a"]["size"] == 3
    assert by["sub/b with | bar"]["size"] == 1234
    assert not by["sub/"]["transferred"] and not by["./"]["transferred"]
    assert by["c"]["transferred"]
    assert not by["d"]["transferred"]        # permissions only: no data moves
    assert by["e"]["transferred"]            # local receiver shows '>'
    assert summarize(entries) == (4, 3 + 1234 + 4 + 7, ["a", "sub/b with | bar", "c", "e"], ["stale.bin"])


def test_parse_itemize_ignores_other_lines():
    assert parse_itemize("sending incremental file list\nSFL|garbage\n\n") == []


def test_parse_df_avail():
    out = ("Filesystem        1-blocks         Used     Available Capacity Mounted on\n"
           "/dev/nvme0n1p2 3936818814976 130064715776 3606545301504       4% /\n")
    assert parse_df_avail(out) == 3606545301504


def test_parse_df_avail_wrapped_device_name():
    out = ("Filesystem 1-blocks Used Available Capacity Mounted on\n"
           "/dev/mapper/a-very-long-volume-name\n"
           "      1000 400 600 40% /models\n")
    assert parse_df_avail(out) == 600


def test_parse_df_avail_rejects_garbage():
    with pytest.raises(ValueError):
        parse_df_avail("df: /x: No such file or directory\n")


def test_size_list_and_compare():
    actual = parse_size_list("12 config.json\x00300 model-00001.safetensors\x005 name with space\x00")
    assert actual == {"config.json": 12, "model-00001.safetensors": 300, "name with space": 5}
    expected = {"config.json": 12, "model-00001.safetensors": 301, "model-00002.safetensors": 1}
    assert compare_sizes(expected, actual) == [
        "model-00001.safetensors is 300 bytes, the source has 301",
        "model-00002.safetensors is missing"]


# ------------------------------------------------------------------ command lines

def test_ssh_argv_fast_cipher_no_compression_key_only():
    argv = ssh_argv("/usr/bin/ssh", "aes128-gcm@openssh.com", "/k", ["-p", "2222"], forward_agent=True, timeout=9)
    assert argv[0] == "/usr/bin/ssh"
    assert "Compression=no" in argv and "BatchMode=yes" in argv and "ConnectTimeout=9" in argv
    assert argv[argv.index("-c") + 1] == "aes128-gcm@openssh.com"
    assert argv[argv.index("-i") + 1] == "/k" and "IdentitiesOnly=yes" in argv
    assert "-A" in argv and argv[-2:] == ["-p", "2222"]


def test_rsync_argv_whole_file_staged_never_compressed():
    argv = rsync_argv("rsync", ["ssh", "-c", "x"], "/models/m", "spark@10.99.1.12:/models/m",
                      bwlimit=2500, files_from=True)
    assert "--whole-file" in argv and "--temp-dir=.sparkfleet-sync" in argv
    assert "--compress" not in argv and "-z" not in argv
    assert "--bwlimit=2500" in argv and "--files-from=-" in argv and "--from0" in argv
    assert argv[-2:] == ["/models/m/", "spark@10.99.1.12:/models/m/"]
    assert "--rsh=ssh -c x" in argv


def test_rsync_argv_dry_run_has_no_staging():
    argv = rsync_argv("rsync", ["ssh"], "/a", "h:/b", dry_run=True, delete=True, checksum=True)
    assert "--dry-run" in argv and "--delete" in argv and "--checksum" in argv
    assert not any(a.startswith("--temp-dir") for a in argv)


def test_rsync_target_ipv6_brackets():
    assert rsync_target("fd00::12", "/m", "spark") == "spark@[fd00::12]:/m"
    assert rsync_target("10.99.1.12", "/m") == "10.99.1.12:/m"


# --------------------------------------------------------------------------- destination guard

def _probe(real, kind, count=0, has=(), entries=()):
    text = "real=%s\ntype=%s\n" % (real, kind)
    if kind == "dir":
        text += "count=%d\n" % count + "".join("has=%s\n" % h for h in has)
        text += "".join("entry=%s\n" % e for e in entries)
    return text + "---df---\nFilesystem 1-blocks Used Available Capacity Mounted on\n/dev/x 100 10 90 10% /\n"


@pytest.mark.parametrize("dest, probe, why", [
    ("/models/m", _probe("/models/m", "absent"), None),
    ("/models/m", _probe("/models/m", "dir"), None),
    ("/models/m", _probe("/models/m", "dir", 40, ["config.json"], ["config.json"]), None),
    # A config.json that is not a model's (~/.docker's) does not make a model directory (issue 17.6).
    ("/models/docker", _probe("/models/docker", "dir", 3, [], ["config.json", "daemon.json", "contexts"]),
     "no model config.json"),
    ("/models/m", _probe("/models/m", "dir", 3, ["*.safetensors"], ["a.safetensors"]), None),
    ("/models/m", _probe("/models/m", "dir", 1, [".sparkfleet-model"], [".sparkfleet-model"]), None),
    # A symlink that leads to / or into the system is refused by where it leads.
    ("/models/m", _probe("/", "dir", 20, [], ["bin", "etc"]), "after symlinks"),
    ("/models/m", _probe("/etc", "dir", 90, [], ["passwd"]), "system directory /etc"),
    ("/models/m", _probe("/home/spark", "dir", 9, [], [".bashrc"]), "home directory"),
    # Something else already lives there.
    ("/models/m", _probe("/models/m", "other"), "not a directory"),
    ("/models/m", _probe("/models/m", "dir", 7, [], ["notes.txt", "photos", "a", "b", "c"]),
     "holds 7 entries (notes.txt, photos, a, b, c, ...) but is not a model directory"),
    ("/", _probe("/", "dir", 20), "system directory /"),
    ("/models/m", "", "could not inspect"),
])
def test_dest_problem(dest, probe, why):
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import dest_problem, parse_dest_probe
    problem = dest_problem(dest, parse_dest_probe(probe))
    if why is None:
        assert problem is None
    else:
        assert problem is not None and why in problem, problem


def test_dest_probe_script_reports_a_real_directory(tmp_path):
    import subprocess
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import (
        dest_probe_script, parse_dest_probe, parse_df_avail)
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "qwen3_5_moe"}')
    (d / "x.safetensors").write_bytes(b"")
    (tmp_path / "link").symlink_to(d)
    out = subprocess.run(["sh", "-c", dest_probe_script(str(tmp_path / "link"))], capture_output=True,
                         text=True, check=True).stdout
    probe = parse_dest_probe(out)
    assert probe["real"] == str(d) and probe["type"] == "dir" and probe["count"] == 2
    assert set(probe["has"]) == {"config.json", "*.safetensors"}
    assert parse_df_avail(probe["df"]) > 0
    absent = parse_dest_probe(subprocess.run(["sh", "-c", dest_probe_script(str(tmp_path / "no" / "such"))],
                                             capture_output=True, text=True, check=True).stdout)
    assert absent["type"] == "absent" and parse_df_avail(absent["df"]) > 0


def test_source_that_is_not_a_model_is_not_walked(tmp_path):
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".bashrc").write_text("x")
    report, problems = check_model_dir(str(tmp_path / "home"))
    assert problems == ["%s is not a model directory: it has none of config.json, "
                        "model.safetensors.index.json, pytorch_model.bin.index.json and no *.safetensors file"
                        % (tmp_path / "home")]
    assert report["files"] == []


def test_symlink_loop_in_a_snapshot_is_walked_once(model):
    os.symlink(".", os.path.join(model, "loop"))  # loop -> the model itself
    report, problems = check_model_dir(model)
    assert problems == []
    assert not any(rel.startswith("loop/") for rel, _s in report["files"])


def test_the_probe_counts_a_config_json_only_when_it_is_a_models(tmp_path):
    import subprocess
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import (
        dest_problem, dest_probe_script, parse_dest_probe)
    d = tmp_path / "docker"
    d.mkdir()
    (d / "config.json").write_text('{"auths": {"r.example": {"auth": "c2VjcmV0"}}}')
    (d / "daemon.json").write_text("{}")
    probe = parse_dest_probe(subprocess.run(["sh", "-c", dest_probe_script(str(d))], capture_output=True, text=True,
                                            check=True).stdout)
    assert probe["has"] == [] and probe["listing"] is None  # nothing of it is even listed
    assert "is not a model directory" in dest_problem(str(d), probe)
    (d / "config.json").write_text('{\n  "architectures": ["Qwen3_5MoeForConditionalGeneration"]\n}')
    probe = parse_dest_probe(subprocess.run(["sh", "-c", dest_probe_script(str(d))], capture_output=True, text=True,
                                            check=True).stdout)
    assert probe["has"] == ["config.json"] and dest_problem(str(d), probe) is None
    assert set(probe["listing"]) == {"config.json", "daemon.json"}


def test_the_probe_lists_sizes_and_mtimes_and_the_plan_sends_what_differs(tmp_path):
    import subprocess
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import (
        dest_probe_script, parse_dest_probe, plan_moves)
    d = tmp_path / "m"
    (d / "sub").mkdir(parents=True)
    (d / ".sparkfleet-sync").mkdir()
    (d / ".sparkfleet-sync" / "x.part").write_text("partial")
    (d / "model.safetensors.index.json").write_text("{}")
    (d / "a.safetensors").write_bytes(b"a" * 10)
    (d / "sub" / "b c.json").write_bytes(b"b" * 5)
    (d / "old.bin").write_bytes(b"o")
    (d / ".sparkfleet-model").write_text("copy=complete\nverified=yes\n")
    os.utime(d / "a.safetensors", ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789))
    probe = parse_dest_probe(subprocess.run(["sh", "-c", dest_probe_script(str(d))], capture_output=True, text=True,
                                            check=True).stdout)
    listing = probe["listing"]
    assert listing["a.safetensors"] == (10, 1_700_000_000_123_456_789)
    assert listing["sub/b c.json"][0] == 5 and not any(n.startswith(".sparkfleet-sync") for n in listing)
    assert probe["state"] == {"copy": "complete", "verified": "yes"}
    stats = {"a.safetensors": (10, 1_700_000_000_123_456_789), "sub/b c.json": (5, 1),
             "model.safetensors.index.json": listing["model.safetensors.index.json"], "new.json": (3, 5)}
    moved, deleted = plan_moves(stats, listing, delete=True)
    assert moved == [("new.json", 3), ("sub/b c.json", 5)]
    assert deleted == ["old.bin"]  # never our marker
    assert plan_moves(stats, listing)[1] == []
    # A filesystem without sub-second times: whole seconds decide, as rsync does.
    assert plan_moves({"a": (1, 1_700_000_000_999_999_999)}, {"a": (1, 1_700_000_000_000_000_000)})[0] == []
    assert plan_moves({"a": (1, 1_700_000_001_000_000_001)}, {"a": (1, 1_700_000_000_000_000_000)})[0] == [("a", 1)]


@pytest.mark.parametrize("hosts, kept, merged", [
    (["10.99.1.12", "10.99.1.12."], ["10.99.1.12"], [("10.99.1.12", "10.99.1.12.")]),
    (["spark-2", "SPARK-2", "spark-2."], ["spark-2"], [("spark-2", "SPARK-2"), ("spark-2", "spark-2.")]),
    (["fd00::12", "[fd00:0::12]", "FD00:0000::0012"], ["fd00::12"],
     [("fd00::12", "[fd00:0::12]"), ("fd00::12", "FD00:0000::0012")]),
    (["10.99.1.12", "10.99.1.13"], ["10.99.1.12", "10.99.1.13"], []),
])
def test_one_host_spelled_two_ways_is_one_destination(hosts, kept, merged):
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import unique_hosts
    assert unique_hosts(hosts) == (kept, [], merged)


def test_a_name_and_its_address_are_one_destination():
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import unique_hosts
    resolve = {"spark-2": {"10.99.1.12"}, "spark-3": {"10.99.1.13"}}.get
    assert unique_hosts(["10.99.1.12", "spark-2", "spark-3"], resolve) == (
        ["10.99.1.12", "spark-3"], [], [("10.99.1.12", "spark-2")])


@pytest.mark.parametrize("host", ["-oProxyCommand=sh", "-p2222", "a b", "spark@10.99.1.12", "", " ", "x;id",
                                  "$(id)", "h\n-oX=y", "[fd00::1", "a/b"])
def test_hosts_that_ssh_would_read_as_options_are_refused(host):
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import unique_hosts
    kept, problems, _merged = unique_hosts([host])
    assert kept == [] and len(problems) == 1 and "destination" in problems[0]


def test_property_host_and_user_checks_never_raise_and_never_pass_an_option():
    from hypothesis import given, settings, strategies as st
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import unique_hosts
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_shell import ssh_user_problem

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.text(max_size=20), max_size=4), st.text(max_size=20))
    def prop(hosts, user):
        kept, problems, _merged = unique_hosts(hosts)
        assert all(not h.startswith("-") and h == h.strip() and "@" not in h and " " not in h for h in kept)
        assert len(kept) + len(problems) <= len(hosts)
        why = ssh_user_problem(user)
        assert why is None or "ssh_user" in why
        if why is None and user:
            assert not user.startswith("-") and all(c.isalnum() or c in "_.-" for c in user)

    prop()


def test_copy_state_round_trips():
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import copy_state, parse_copy_state
    text = copy_state(False, reason="push to x failed:\n  disk full", when="2026-12-01T15:00:00Z")
    assert parse_copy_state(text) == {"copy": "incomplete", "verified": "no", "fingerprint": "none",
                                      "updated": "2026-12-01T15:00:00Z", "reason": "push to x failed: disk full"}
    done = parse_copy_state(copy_state(True, "abc", True))
    assert done["copy"] == "complete" and done["verified"] == "yes" and done["fingerprint"] == "abc"
    assert parse_copy_state("") == {}
