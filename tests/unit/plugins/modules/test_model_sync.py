"""model_sync end to end with real rsync between temp dirs; ssh is a local shim (no network).

The shim stands in for ssh: it skips ssh options, maps the host to a directory under tmp_path
(``hosts/<host>``) by rewriting the destination path in the remote command, logs what it was
asked to do, and runs the command locally. Unknown hosts fail like an unreachable host.
"""

from __future__ import annotations

import json
import re
import os
import signal
import struct
import subprocess
import sys
import time
import uuid

import pytest

from ansible_collections.sparkfleet.vllm.plugins.modules import model_sync
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync import _model_sync_run as model_sync_run
from ansible_collections.sparkfleet.vllm.tests.unit.support.model_files import write_safetensors

pytestmark = pytest.mark.skipif(
    subprocess.call(["sh", "-c", "command -v rsync && command -v ssh-agent && command -v ssh-keygen"],
                    stdout=subprocess.DEVNULL) != 0,
    reason="needs rsync and openssh-client on this machine")

COLLECTIONS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "collections"))

# model_sync as a process, as Ansible runs it (its arguments in the file named by argv[1]), in the home the lab fixture
# gave the test ($HOME): a run stopped or killed there meets the next run at the same transfer lock and hash caches.
AS_ANSIBLE = (
    "import os\n"
    "from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync import _model_sync_run\n"
    "_model_sync_run.user_home = lambda: os.environ['HOME']\n"
    "from ansible_collections.sparkfleet.vllm.plugins.modules import model_sync\n"
    "model_sync.main()\n"
)

SHIM = r'''#!%(python)s
import json, os, re, sys
args = sys.argv[1:]
takes_value = set("-o -i -c -p -l -F -J -b -e -m -L -R -D -W -E -S -O -Q -B -w -I".split())
if "-O" in args:  # a master connection asked to exit: nothing to run
    sys.exit(0)
opts = []
i = 0
while i < len(args) and args[i].startswith("-"):
    step = 2 if args[i] in takes_value else 1
    opts.extend(args[i:i + step])
    i += step
host = args[i].split("@")[-1]
cmd = " ".join(args[i + 1:])
with open(os.environ["SHIM_LOG"], "a") as log:
    log.write(json.dumps({"host": host, "cmd": cmd, "opts": opts,
                          "agent": bool(os.environ.get("SSH_AUTH_SOCK"))}) + "\n")
hosts = json.loads(os.environ["SHIM_HOSTS"])
if host not in hosts:
    sys.stderr.write("ssh: connect to host %%s port 22: No route to host\n" %% host)
    sys.exit(255)
dest = os.environ["SHIM_DEST"]
cmd = re.sub(r"(?<![:\w/.-])" + re.escape(dest), hosts[host] + dest, cmd)
# sshd tells the session which address the client reached: every fake host is this machine's loopback.
if os.environ.get("SHIM_NO_SSH_CONNECTION") != "1":
    os.environ["SSH_CONNECTION"] = "127.0.0.1 50000 127.0.0.1 22"
# A destination whose disk is this small (bytes) while its receiver runs: a tmpfs over the directory, seen by the
# receiver only (its own mount namespace).
small = os.environ.get("SHIM_SMALL_DISK")
if small and (" receive " in cmd or cmd.startswith("rsync --server")):
    where = hosts[host] + dest
    os.makedirs(where, exist_ok=True)
    cmd = "mount -t tmpfs -o size=%%s tmpfs %%s && mkdir %%s/.sparkfleet-sync && %%s" %% (small, where, where, cmd)
    os.execvp("unshare", ["unshare", "-m", "sh", "-c", cmd])
os.execvp("sh", ["sh", "-c", cmd])
'''


def make_model(root, shards=4, shard_bytes=64 * 1024):
    """A multi-shard model: config, tokenizer, index, shards of F8 tensors (random bytes)."""
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "config.json"), "w") as handle:
        json.dump({"architectures": ["TestForCausalLM"], "model_type": "test"}, handle)
    with open(os.path.join(root, "tokenizer.json"), "w") as handle:
        json.dump({"version": "1.0"}, handle)
    weight_map = {}
    for i in range(1, shards + 1):
        name = "model-%05d-of-%05d.safetensors" % (i, shards)
        # Different sizes so largest-first packing has something to do.
        rows = (shard_bytes * (shards + 1 - i)) // 1024
        tensors = {"layers.%d.w" % i: ("F8_E4M3", [rows, 1024], os.urandom(rows * 1024)),
                   "layers.%d.scale" % i: ("BF16", [4], os.urandom(8))}
        write_safetensors(os.path.join(root, name), tensors, metadata={"format": "pt"})
        for t in tensors:
            weight_map[t] = name
    with open(os.path.join(root, "model.safetensors.index.json"), "w") as handle:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, handle)
    return root


def tree(root):
    """{relpath: bytes} of the model files under root (model_sync's own marker aside)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            if dirpath == root and name == ".sparkfleet-model":
                continue
            full = os.path.join(dirpath, name)
            with open(full, "rb") as handle:
                out[os.path.relpath(full, root)] = handle.read()
    return out


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """Three fake hosts, the ssh shim first on PATH, a real ed25519 sync key."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "ssh"
    shim.write_text(SHIM % {"python": sys.executable})
    shim.chmod(0o755)
    hosts = {}
    for name in ("10.99.1.12", "10.99.1.13", "10.99.1.14"):
        hosts[name] = str(tmp_path / "hosts" / name)
        os.makedirs(hosts[name])
    key = tmp_path / "sync_key"
    subprocess.check_call(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)])
    log = tmp_path / "shim.log"
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    monkeypatch.setenv("SHIM_HOSTS", json.dumps(hosts))
    # The module keeps its hash caches and one transfer lock per destination path in the user's home
    # (~/.cache/sparkfleet): a home of this test's own (for the module's password-database lookup, and $HOME for the
    # sender and the destination's shell), so that no run leaves files in the real home, and a destination path of its
    # own, so that tests running at once never take each other's lock (a run stops the lock holder's process tree; the
    # holder of an in-process run is the pytest process itself).
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(model_sync_run, "user_home", lambda: str(home))
    dest = "/srv/sparkfleet-test/%s/model" % uuid.uuid4().hex[:12]
    monkeypatch.setenv("SHIM_DEST", dest)
    monkeypatch.setenv("SHIM_LOG", str(log))
    src = make_model(str(tmp_path / "src" / "model"))

    class Lab(object):
        pass
    lab = Lab()
    lab.src, lab.key, lab.hosts, lab.tmp = src, str(key), hosts, tmp_path
    lab.dest_dir = dest
    lab.dest = lambda host: hosts[host] + dest
    lab.calls = lambda: [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    lab.args = lambda **kw: dict(dict(src=src, dest=dest, destinations=["10.99.1.12"], ssh_user="spark",
                                      ssh_key=str(key), streams=2), **kw)
    return lab


def test_first_sync_copies_everything_and_second_run_is_unchanged(run_module, lab):
    res = run_module(model_sync, lab.args())
    assert res.get("failed") is not True, res
    assert res["changed"] is True
    assert res["files_total"] == 7
    assert res["files_transferred"] == 7
    assert res["bytes_transferred"] == sum(len(b) for b in tree(lab.src).values())
    assert tree(lab.dest("10.99.1.12")) == tree(lab.src)
    dest = res["destinations"]["10.99.1.12"]
    assert dest["status"] == "synced" and dest["verified"] is True and dest["streams"] == 2
    # The staging dir is gone once the run succeeded; the directory carries the marker of a model we fill.
    assert not os.path.exists(os.path.join(lab.dest("10.99.1.12"), ".sparkfleet-sync"))
    assert os.path.isfile(os.path.join(lab.dest("10.99.1.12"), ".sparkfleet-model"))

    again = run_module(model_sync, lab.args())
    assert again["changed"] is False
    assert again["files_transferred"] == 0 and again["bytes_transferred"] == 0
    assert again["destinations"]["10.99.1.12"]["status"] == "in_sync"


def test_ssh_transport_is_whole_file_uncompressed_with_fast_cipher(run_module, lab):
    res = run_module(model_sync, lab.args(transport="ssh"))
    assert res["destinations"]["10.99.1.12"]["transport"] == "ssh"
    assert not [c for c in lab.calls() if " receive " in c["cmd"]]
    pushes = [c for c in lab.calls() if "--server" in c["cmd"] and "--dry-run" not in c["cmd"]
              and " -n" not in c["cmd"]]
    assert pushes, lab.calls()
    for call in lab.calls():
        assert "aes128-gcm@openssh.com,chacha20-poly1305@openssh.com" in call["opts"], call
        assert "Compression=no" in call["opts"]
    for call in pushes:
        flags = call["cmd"].split()[2]  # rsync --server -<flags>
        assert "W" in flags, call           # --whole-file reaches the receiver
        assert "z" not in flags, call


def test_only_changed_files_move(run_module, lab):
    run_module(model_sync, lab.args())
    time.sleep(1.1)
    shard = os.path.join(lab.src, "model-00002-of-00004.safetensors")
    with open(shard, "rb") as handle:
        data = handle.read()
    with open(shard, "wb") as handle:
        keep = 8 + struct.unpack("<Q", data[:8])[0]
        handle.write(data[:keep] + bytes(len(data) - keep))  # same size, same header, new data
    res = run_module(model_sync, lab.args())
    assert res["changed"] is True
    assert res["files_transferred"] == 1
    assert res["bytes_transferred"] == len(data)
    assert tree(lab.dest("10.99.1.12")) == tree(lab.src)


def test_check_mode_lists_what_would_move_and_changes_nothing(run_module, lab):
    res = run_module(model_sync, lab.args(destinations=["10.99.1.12", "10.99.1.13"]), check_mode=True)
    assert res["changed"] is True
    d = res["destinations"]["10.99.1.12"]
    assert d["status"] == "would_sync"
    assert sorted(d["would_transfer"]) == sorted(tree(lab.src))
    assert d["bytes_needed"] == sum(len(b) for b in tree(lab.src).values())
    # Plan: the source feeds the first, which then feeds the second (sparing the source).
    assert res["rounds"] == [[["source", "10.99.1.12"]], [["10.99.1.12", "10.99.1.13"]]]
    assert not os.path.exists(lab.dest("10.99.1.12"))
    assert not os.path.exists(lab.dest("10.99.1.13"))


def test_corrupt_shard_fails_before_anything_is_copied(run_module, lab):
    shard = os.path.join(lab.src, "model-00003-of-00004.safetensors")
    size = os.path.getsize(shard)
    with open(shard, "r+b") as handle:
        handle.truncate(size - 1000)
    res = run_module(model_sync, lab.args())
    assert res["failed"] is True
    assert "model-00003-of-00004.safetensors" in res["msg"] and "truncated" in res["msg"]
    assert lab.calls() == []  # not even a dry run: no destination was contacted
    assert not os.path.exists(lab.dest("10.99.1.12"))


def test_missing_shard_named_in_index_fails(run_module, lab):
    os.unlink(os.path.join(lab.src, "model-00004-of-00004.safetensors"))
    res = run_module(model_sync, lab.args())
    assert res["failed"] is True
    assert "model-00004-of-00004.safetensors is missing" in res["msg"]


def test_no_room_on_a_destination_fails_before_copying_with_numbers(run_module, lab, monkeypatch):
    real = model_sync_run.parse_df_avail
    monkeypatch.setattr(model_sync_run, "parse_df_avail", lambda text: min(real(text), 1000))
    res = run_module(model_sync, lab.args(destinations=["10.99.1.12", "10.99.1.13"]))
    assert res["failed"] is True
    assert "has 1000 bytes" in res["msg"] and "needs %d bytes" % sum(
        len(b) for b in tree(lab.src).values()) in res["msg"]
    assert not os.path.exists(lab.dest("10.99.1.12"))
    assert not os.path.exists(lab.dest("10.99.1.13"))


def test_unreachable_destination_fails_before_copying(run_module, lab):
    res = run_module(model_sync, lab.args(destinations=["10.99.1.12", "10.99.1.99"]))
    assert res["failed"] is True
    assert "10.99.1.99" in res["msg"] and "No route to host" in res["msg"]
    assert not os.path.exists(lab.dest("10.99.1.12"))


def test_three_destinations_fan_out_as_a_tree_through_a_per_run_agent(run_module, lab):
    hosts = ["10.99.1.12", "10.99.1.13", "10.99.1.14"]
    res = run_module(model_sync, lab.args(destinations=hosts, transport="ssh"))
    assert res.get("failed") is not True, res
    for h in hosts:
        assert tree(lab.dest(h)) == tree(lab.src)
        assert res["destinations"][h]["verified"] is True
    fed = [res["destinations"][h]["fed_from"] for h in hosts]
    assert fed[0] == "source"
    # Round 1: source -> first; round 2: source and the first both feed one more.
    assert sorted(fed) == sorted(["source", "source", "10.99.1.12"])
    assert res["rounds"][0] == [["source", "10.99.1.12"]] and len(res["rounds"]) == 2
    relay = [c for c in lab.calls() if c["host"] == "10.99.1.12" and c["cmd"].startswith("rsync ")
             and "--files-from" in c["cmd"]]
    assert relay, lab.calls()
    for call in relay:
        assert "-A" in call["opts"] and call["agent"] is True  # the key travels as a forwarded agent
    # Issue 17.4: the relay's own rsync follows no symlink: a link planted in a worker's copy (to that worker's key)
    # is skipped, never sent on. Run the relay's exact options between two local directories.
    import shlex
    planted, nexthop = lab.tmp / "planted", lab.tmp / "nexthop"
    planted.mkdir()
    nexthop.mkdir()
    (lab.tmp / "worker_key").write_text("PRIVATE KEY")
    (lab.tmp / "worker_key").chmod(0o600)
    os.symlink(str(lab.tmp / "worker_key"), str(planted / "model-00001-of-00004.safetensors"))
    argv = [a for a in shlex.split(relay[0]["cmd"]) if not a.startswith("--rsh=") and not a.startswith("--temp-dir")]
    argv = argv[:-2] + [str(planted) + "/", str(nexthop) + "/"]
    subprocess.run(argv, input=b"model-00001-of-00004.safetensors\0", capture_output=True, check=False)
    assert os.listdir(str(nexthop)) == []
    assert res["files_transferred"] == 21
    # No key file was left behind on any host.
    for h in hosts:
        assert not any(name.startswith("sync_key") for name in os.listdir(lab.hosts[h]))


def test_delete_removes_extra_files_only_when_asked(run_module, lab):
    os.makedirs(lab.dest("10.99.1.12"))
    stale = os.path.join(lab.dest("10.99.1.12"), "old-00001-of-00001.safetensors")
    with open(stale, "wb") as handle:
        handle.write(b"x")
    run_module(model_sync, lab.args())
    assert os.path.exists(stale)
    check = run_module(model_sync, lab.args(delete=True), check_mode=True)
    assert check["changed"] is True
    assert check["destinations"]["10.99.1.12"]["would_delete"] == ["old-00001-of-00001.safetensors"]
    assert os.path.exists(stale)
    res = run_module(model_sync, lab.args(delete=True))
    assert res["changed"] is True and res["destinations"]["10.99.1.12"]["files_deleted"] == 1
    assert not os.path.exists(stale)


def test_verify_catches_a_destination_file_damaged_behind_rsyncs_back(run_module, lab, monkeypatch):
    run_module(model_sync, lab.args())
    # A shorter shard with the source's mtime on the destination would fool nothing but a
    # listing; make the size check the one that catches it by skipping the transfer.
    target = os.path.join(lab.dest("10.99.1.12"), "model-00001-of-00004.safetensors")
    os.truncate(target, 10)
    monkeypatch.setattr(model_sync_run.ModelSync, "transfer", lambda self, f, t, m, info: (True, None))
    res = run_module(model_sync, lab.args())
    assert res["failed"] is True
    assert "model-00001-of-00004.safetensors is 10 bytes" in res["msg"]


def _corrupt_in_place(path):
    """Change the last bytes of a file, keeping its size and restoring its mtime (ctime moves, as always)."""
    st = os.stat(path)
    with open(path, "r+b") as handle:
        handle.seek(st.st_size - 4)
        old = handle.read(4)
        handle.seek(st.st_size - 4)
        handle.write(bytes(b ^ 0xFF for b in old))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_checksum_finds_same_size_same_mtime_corruption(run_module, lab):
    run_module(model_sync, lab.args())
    _corrupt_in_place(os.path.join(lab.dest("10.99.1.12"), "model-00001-of-00004.safetensors"))
    # size+mtime alone cannot see it ...
    assert run_module(model_sync, lab.args(verify_content=False))["changed"] is False
    # ... rsync's full checksum can.
    res = run_module(model_sync, lab.args(checksum=True, verify_content=False))
    assert res["changed"] is True and res["files_transferred"] == 1
    assert res["destinations"]["10.99.1.12"]["verified"] is True
    assert tree(lab.dest("10.99.1.12")) == tree(lab.src)


def test_content_hashes_repair_a_same_size_corruption_by_default(run_module, lab):
    first = run_module(model_sync, lab.args())
    shard = "model-00002-of-00004.safetensors"
    _corrupt_in_place(os.path.join(lab.dest("10.99.1.12"), shard))
    check = run_module(model_sync, lab.args(), check_mode=True)
    assert check["changed"] is True
    assert check["destinations"]["10.99.1.12"]["content_mismatch"] == [shard]
    assert check["destinations"]["10.99.1.12"]["would_transfer"] == [shard]
    res = run_module(model_sync, lab.args())
    assert res["changed"] is True and res["files_transferred"] == 1, res
    assert res["destinations"]["10.99.1.12"]["verified"] is True
    assert tree(lab.dest("10.99.1.12")) == tree(lab.src)
    # The source did not change: same fingerprint; the next run is quiet.
    assert res["fingerprint"] == first["fingerprint"] and len(first["fingerprint"]) == 32
    again = run_module(model_sync, lab.args())
    assert again["changed"] is False and again["destinations"]["10.99.1.12"]["content_mismatch"] == []
    # $HOME reaches the destination unexpanded: the cache lives in the sync user's home there, and the
    # command is byte for byte the one the sync key's forced command allows.
    hashes = [c["cmd"] for c in lab.calls() if c["cmd"].startswith("python3 -c ") and " receive " not in c["cmd"]]
    assert hashes and all('"$HOME/.cache/sparkfleet/hashes-' in c for c in hashes), hashes[:1]


def test_hash_cache_reads_an_unchanged_file_once_and_a_rewritten_one_again(lab, tmp_path):
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._content_hash import HASH_SCRIPT, parse_hashes
    cache = str(tmp_path / "cache" / "h.json")
    names = sorted(os.listdir(lab.src))

    def run():
        out = subprocess.run([sys.executable, "-c", HASH_SCRIPT, lab.src, cache], check=True, capture_output=True,
                             input=b"\0".join(n.encode() for n in names + ["absent.bin"])).stdout
        return parse_hashes(out)

    first = run()
    assert first["absent.bin"] is None and all(first[n] for n in names)
    with open(cache) as handle:
        entries = json.load(handle)["files"]
    # A cache entry whose key still matches is trusted: poison one digest, the script returns it unread.
    entries[names[0]][1] = "0" * 32
    with open(cache, "w") as handle:
        json.dump({"root": os.path.realpath(lab.src), "algorithm": "sha256", "files": entries}, handle)
    assert run()[names[0]] == "0" * 32
    # Any write moves the ctime: the file is read again even with size and mtime restored.
    _corrupt_in_place(os.path.join(lab.src, names[0]))
    again = run()
    assert again[names[0]] not in ("0" * 32, first[names[0]])
    assert all(again[n] == first[n] for n in names[1:])


def test_fingerprint_follows_content():
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._content_hash import fingerprint
    files = [("a", 1), ("b", 2)]
    base = fingerprint(files, {"a": "x", "b": "y"})
    assert fingerprint(list(reversed(files)), {"a": "x", "b": "y"}) == base
    assert fingerprint(files, {"a": "x", "b": "z"}) != base
    assert fingerprint([("a", 1), ("b", 3)], {"a": "x", "b": "y"}) != base


def test_drop_cache_runs_per_file_fadvise_on_destinations(run_module, lab):
    res = run_module(model_sync, lab.args(drop_cache=True))
    assert res.get("failed") is not True, res
    assert res["cache_dropped_source_files"] == 7
    drops = [c for c in lab.calls() if "oflag=nocache" in c["cmd"]]
    assert len(drops) == 1 and drops[0]["host"] == "10.99.1.12"
    assert "drop_caches" not in " ".join(c["cmd"] for c in lab.calls())
    assert tree(lab.dest("10.99.1.12")) == tree(lab.src)  # dd count=0 conv=notrunc leaves data intact


def test_killed_run_resumes_without_resending_finished_files(lab, tmp_path):
    """SIGKILL the module mid-transfer (as a process, like Ansible runs it), then run again."""
    args = lab.args(streams=1, bwlimit=100)  # 100 KiB/s: the 7 files take a few seconds
    argsfile = tmp_path / "args.json"
    argsfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    cmd = [sys.executable, "-c", AS_ANSIBLE, str(argsfile)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    dest = lab.dest("10.99.1.12")
    deadline = time.time() + 30
    # Largest first: wait until the largest shard is in place, then kill everything.
    first = os.path.join(dest, "model-00001-of-00004.safetensors")
    stage = os.path.join(dest, ".sparkfleet-sync")

    def partial():
        try:
            return any(os.path.getsize(os.path.join(stage, n)) > 0 for n in os.listdir(stage))
        except OSError:  # not there yet, or a file renamed into place meanwhile
            return False
    while not (os.path.exists(first) and partial()) and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert os.path.exists(first), "the first file never landed"
    landed = set(tree(dest))
    assert "model-00004-of-00004.safetensors" not in landed  # the run really was cut short
    # Nothing partial sits under a final name: every file present is complete.
    for rel in landed - {".sparkfleet-sync"}:
        if not rel.startswith(".sparkfleet-sync"):
            assert tree(dest)[rel] == tree(lab.src)[rel], rel

    args["bwlimit"] = 0
    argsfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    staged = sum(len(b) for r, b in tree(dest).items() if r.startswith(".sparkfleet-sync/"))
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, check=False).stdout
    res = json.loads(out)
    assert res.get("failed") is not True, res
    finished = {r for r in landed if not r.startswith(".sparkfleet-sync")}
    assert res["files_transferred"] == 7 - len(finished)
    assert tree(dest) == tree(lab.src)
    # The partial file is continued, not sent again: exactly the missing bytes move.
    missing = sum(len(b) for r, b in tree(lab.src).items() if r not in finished) - staged
    assert staged > 0 and res["destinations"]["10.99.1.12"]["bytes_resumed"] == staged
    assert res["bytes_transferred"] == missing


# --------------------------------------------------------------------------- destructive paths (issue 11.1)

@pytest.mark.parametrize("field, value, why", [
    ("dest", "/", "dest '/' is the system directory /"),
    ("dest", "", "dest is empty"),
    ("dest", "/models/..", "system directory /"),
    ("dest", "/home/spark", "home directory"),
    ("dest", "/etc", "system directory /etc"),
    ("src", "", "src is empty"),
    ("src", "/", "system directory /"),
])
def test_destructive_paths_are_refused_before_any_connection(run_module, lab, field, value, why):
    res = run_module(model_sync, lab.args(delete=True, **{field: value}))
    assert res["failed"] is True and why in res["msg"] and "nothing was copied" in res["msg"], res
    assert "hint" in res
    assert lab.calls() == []  # not one ssh connection, not even a probe


def test_dest_holding_something_else_is_refused_and_left_alone(run_module, lab):
    dest = lab.dest("10.99.1.12")
    os.makedirs(os.path.join(dest, "photos"))
    with open(os.path.join(dest, "notes.txt"), "w") as handle:
        handle.write("keep me")
    before = tree(dest)
    for check_mode in (True, False):
        res = run_module(model_sync, lab.args(delete=True), check_mode=check_mode)
        assert res["failed"] is True, res
        assert "refusing to sync into it" in res["msg"] and "is not a model directory" in res["msg"], res
        assert "notes.txt" in res["msg"] and "photos" in res["msg"]
    assert tree(dest) == before and sorted(os.listdir(dest)) == ["notes.txt", "photos"]
    # Only the read-only probe ran on the destination: no dry run, no push.
    assert all("rsync" not in c["cmd"] for c in lab.calls()), lab.calls()


def test_dest_symlink_to_a_directory_of_other_things_is_refused(run_module, lab, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "data.db").write_text("x")
    os.makedirs(os.path.dirname(lab.dest("10.99.1.12")))
    os.symlink(str(other), lab.dest("10.99.1.12"))
    res = run_module(model_sync, lab.args(delete=True))
    assert res["failed"] is True and "data.db" in res["msg"], res
    assert os.listdir(str(other)) == ["data.db"]


def test_a_directory_we_filled_stays_accepted_and_delete_keeps_our_marker(run_module, lab):
    assert run_module(model_sync, lab.args()).get("failed") is not True
    marker = os.path.join(lab.dest("10.99.1.12"), ".sparkfleet-model")
    os.remove(os.path.join(lab.dest("10.99.1.12"), "config.json"))
    res = run_module(model_sync, lab.args(delete=True))
    assert res.get("failed") is not True, res
    assert os.path.isfile(marker)
    assert tree(lab.dest("10.99.1.12")) == tree(lab.src)


@pytest.mark.parametrize("field, value", [("bwlimit", -5), ("timeout", -1), ("streams", 0)])
def test_negative_numbers_are_refused(run_module, lab, field, value):
    res = run_module(model_sync, lab.args(**{field: value}))
    assert res["failed"] is True and field in res["msg"] and str(value) in res["msg"], res
    assert lab.calls() == []


def test_source_that_is_not_a_model_directory_is_refused_without_walking(run_module, lab, tmp_path):
    home = tmp_path / "someone"
    (home / "deep").mkdir(parents=True)
    (home / "deep" / "x").write_text("x")
    res = run_module(model_sync, lab.args(src=str(home)))
    assert res["failed"] is True and "is not a model directory" in res["msg"], res
    assert lab.calls() == []


# --------------------------------------------------------------------------- the tcp transport (issue 8)

def test_tcp_transport_is_the_default_and_runs_only_the_allowed_fixed_commands(run_module, lab):
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_transports import destination_commands
    res = run_module(model_sync, lab.args())
    assert res.get("failed") is not True, res
    dest = res["destinations"]["10.99.1.12"]
    assert dest["transport"] == "tcp" and dest["verified"] is True and dest["streams"] == 2
    assert tree(lab.dest("10.99.1.12")) == tree(lab.src)
    assert not [c for c in lab.calls() if "--server" in c["cmd"] and "--dry-run" not in c["cmd"]
                and " -n" not in c["cmd"] and "n" not in c["cmd"].split()[2]]  # no rsync push carried data
    receive = [c["cmd"] for c in lab.calls() if " receive " in c["cmd"]]
    # Byte for byte the command the sync key's forced command allows.
    assert receive == [destination_commands(lab.dest_dir)["receive"]]
    # The receiver recorded the hashes it checked: the verify pass found every sent file in the cache.
    assert not os.path.exists(os.path.join(lab.dest("10.99.1.12"), ".sparkfleet-sync"))
    again = run_module(model_sync, lab.args())
    assert again["changed"] is False


def test_a_first_tcp_sync_hashes_the_source_while_sending_and_nothing_twice(run_module, lab, monkeypatch):
    import hashlib
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._content_hash import fingerprint
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import list_files
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_transports import destination_commands
    hashed_up_front = []
    real = model_sync_run.ModelSync.local_hashes
    monkeypatch.setattr(model_sync_run.ModelSync, "local_hashes",
                        lambda self, names, fail=True: hashed_up_front.extend(names) or real(self, names, fail))
    res = run_module(model_sync, lab.args())
    assert res.get("failed") is not True, res
    assert res["destinations"]["10.99.1.12"]["verified"] is True
    assert hashed_up_front == []  # every file moved: the sender hashed each one while sending it
    files = list_files(lab.src)
    truth = {}
    for rel, _size in files:
        with open(os.path.join(lab.src, rel), "rb") as handle:
            truth[rel] = hashlib.sha256(handle.read()).hexdigest()
    assert res["fingerprint"] == fingerprint(files, truth)
    # The receiver checked every file against the source's hash before its rename: verify does not hash again.
    assert not [c for c in lab.calls() if c["cmd"] == destination_commands(lab.dest_dir)["hash"]]
    assert set(res["phase_seconds"]) == {"checks", "plan", "hash", "transfer", "verify"}
    assert res["phase_seconds"]["transfer"] == res["transfer_seconds"]
    # The sender left its hashes in this user's cache: the next run reads no source file.
    again = run_module(model_sync, lab.args())
    assert again["changed"] is False and again["fingerprint"] == res["fingerprint"]


def test_tcp_fan_out_feeds_the_next_node_with_the_fixed_send_command(run_module, lab):
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_transports import destination_commands
    hosts = ["10.99.1.12", "10.99.1.13", "10.99.1.14"]
    res = run_module(model_sync, lab.args(destinations=hosts, transport="tcp"))
    assert res.get("failed") is not True, res
    for h in hosts:
        assert tree(lab.dest(h)) == tree(lab.src)
        assert res["destinations"][h]["transport"] == "tcp"
    assert sorted(res["destinations"][h]["fed_from"] for h in hosts) == ["10.99.1.12", "source", "source"]
    sends = [c for c in lab.calls() if c["cmd"].endswith(" send " + lab.dest_dir)]
    assert len(sends) == 1 and sends[0]["host"] == "10.99.1.12"
    assert sends[0]["cmd"] == destination_commands(lab.dest_dir)["send"]
    assert not any(c["agent"] for c in lab.calls())  # tcp hops need no forwarded agent


def test_auto_falls_back_to_ssh_when_the_receiver_cannot_listen(run_module, lab, monkeypatch):
    from ansible.module_utils import basic
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, w: warnings.append(w))
    monkeypatch.setenv("SHIM_NO_SSH_CONNECTION", "1")  # the receiver cannot tell which address to bind
    res = run_module(model_sync, lab.args())
    assert res.get("failed") is not True, res
    assert res["destinations"]["10.99.1.12"]["transport"] == "ssh"
    assert tree(lab.dest("10.99.1.12")) == tree(lab.src)
    assert any("the receiver did not start on 10.99.1.12" in w and "over ssh" in w
               and "no address to listen on" in w for w in warnings), warnings


def test_tcp_only_fails_instead_of_falling_back(run_module, lab, monkeypatch):
    monkeypatch.setenv("SHIM_NO_SSH_CONNECTION", "1")
    res = run_module(model_sync, lab.args(transport="tcp"))
    assert res["failed"] is True
    assert "the receiver did not start on 10.99.1.12" in res["msg"], res["msg"]
    assert not os.path.exists(os.path.join(lab.dest("10.99.1.12"), "config.json"))


def test_transport_choices_are_checked(run_module, lab):
    res = run_module(model_sync, lab.args(transport="udp"))
    assert res["failed"] is True and "transport" in res["msg"] and "udp" in res["msg"]


# --------------------------------------------------------------------------- bad input, hostile copies (issue 17)

def test_a_file_linked_from_outside_the_model_is_never_queued(run_module, lab, tmp_path):
    """Issue 17.12: a 0600 file linked from the model directory is refused, not sent to the workers."""
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY")
    secret.chmod(0o600)
    os.symlink(str(secret), os.path.join(lab.src, "extra.json"))
    res = run_module(model_sync, lab.args())
    assert res["failed"] is True, res
    assert "extra.json is a symlink out of the model directory" in res["msg"] and "nothing was copied" in res["msg"]
    assert lab.calls() == []
    assert not os.path.exists(lab.dest("10.99.1.12"))


def test_a_hugging_face_snapshot_links_into_its_blobs_and_is_sent(run_module, lab, tmp_path):
    repo = tmp_path / "hub" / "models--org--m"
    snap = repo / "snapshots" / "abc123"
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for name in sorted(os.listdir(lab.src)):
        os.rename(os.path.join(lab.src, name), str(repo / "blobs" / ("blob-" + name)))
        os.symlink("../../blobs/blob-" + name, str(snap / name))
    res = run_module(model_sync, lab.args(src=str(snap)))
    assert res.get("failed") is not True, res
    assert res["files_transferred"] == 7 and res["destinations"]["10.99.1.12"]["verified"] is True


@pytest.mark.parametrize("field, value", [
    ("destinations", ["-oProxyCommand=touch /tmp/sparkfleet-pwned"]),
    ("destinations", ["10.99.1.12", "-oProxyCommand=sh"]),
    ("destinations", ["spark@10.99.1.12"]),
    ("destinations", ["10.99.1.12 -oProxyCommand=sh"]),
    ("destinations", [""]),
    ("ssh_user", "-oProxyCommand=sh"),
    ("ssh_user", "spark -oProxyCommand=sh"),
    ("ssh_user", "a@b"),
])
def test_ssh_option_injection_is_refused_before_any_connection(run_module, lab, field, value):
    """Issue 17.10: a destination or ssh_user never reaches ssh as an option."""
    res = run_module(model_sync, lab.args(**{field: value}))
    assert res["failed"] is True, res
    assert ("destination" if field == "destinations" else "ssh_user") in res["msg"], res["msg"]
    assert "nothing was copied" in res["msg"] and "hint" in res
    assert lab.calls() == []
    assert not os.path.exists("/tmp/sparkfleet-pwned")


def test_every_ssh_command_ends_its_options_before_the_host(run_module, lab):
    res = run_module(model_sync, lab.args(drop_cache=True))
    assert res.get("failed") is not True, res
    direct = [c for c in lab.calls() if not c["cmd"].startswith("rsync --server")]
    assert direct and all(c["opts"][-1] == "--" for c in direct), direct


def test_one_host_spelled_two_ways_is_one_transfer(run_module, lab, monkeypatch):
    from ansible.module_utils import basic
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, w: warnings.append(w))
    hosts = dict(lab.hosts)
    hosts["10.99.1.12."] = hosts["10.99.1.12"]  # the same directory: the same host
    monkeypatch.setenv("SHIM_HOSTS", json.dumps(hosts))
    res = run_module(model_sync, lab.args(destinations=["10.99.1.12", "10.99.1.12."]))
    assert res.get("failed") is not True, res
    assert list(res["destinations"]) == ["10.99.1.12"]
    assert len([c for c in lab.calls() if " receive " in c["cmd"]]) == 1
    assert any("10.99.1.12 and 10.99.1.12. are the same host" in w for w in warnings), warnings
    assert tree(lab.dest("10.99.1.12")) == tree(lab.src)


def test_a_directory_with_a_config_json_that_is_not_a_models_is_refused(run_module, lab):
    """Issue 17.6: ~/.docker holds a config.json; with delete=true it would be emptied."""
    dest = lab.dest("10.99.1.12")
    os.makedirs(dest)
    with open(os.path.join(dest, "config.json"), "w") as handle:
        json.dump({"auths": {"registry.example": {"auth": "c2VjcmV0"}}}, handle)
    with open(os.path.join(dest, "daemon.json"), "w") as handle:
        handle.write("{}")
    before = tree(dest)
    res = run_module(model_sync, lab.args(delete=True))
    assert res["failed"] is True, res
    assert "is not a model directory" in res["msg"] and "daemon.json" in res["msg"], res["msg"]
    assert tree(dest) == before


def test_property_bad_options_are_refused_naming_them_never_a_traceback(run_module, lab, tmp_path):
    from hypothesis import HealthCheck, given, settings, strategies as st
    notmodel = tmp_path / "notmodel"
    notmodel.mkdir()
    text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(destinations=st.lists(text, max_size=3), ssh_user=st.one_of(st.none(), text),
           streams=st.integers(-3, 70), bwlimit=st.integers(-5, 5), timeout=st.integers(-2, 100))
    def prop(destinations, ssh_user, streams, bwlimit, timeout):
        res = run_module(model_sync, dict(src=str(notmodel), dest=lab.dest_dir, destinations=destinations,
                                          ssh_user=ssh_user, streams=streams, bwlimit=bwlimit, timeout=timeout))
        assert res["failed"] is True and res["msg"]
        named = [n for n in ("streams", "bwlimit", "timeout", "ssh_user", "destination")
                 if n in res["msg"]]
        # Options are checked first; valid ones get as far as the source model, which is not one.
        assert named or "is not a model directory" in res["msg"], res["msg"]
        assert lab.calls() == []

    prop()


# --------------------------------------------------------------------------- every run's work is one (issue 18.2)

def test_a_rerun_stops_the_transfer_left_running_by_a_killed_controller(run_module, lab, tmp_path, monkeypatch):
    from ansible.module_utils import basic
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, w: warnings.append(w))
    args = lab.args(streams=1, bwlimit=50)  # 50 KiB/s: the model takes ~15 s
    argsfile = tmp_path / "args.json"
    argsfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    orphan = subprocess.Popen([sys.executable, "-c", AS_ANSIBLE, str(argsfile)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stage = os.path.join(lab.dest("10.99.1.12"), ".sparkfleet-sync")
    deadline = time.time() + 30
    while time.time() < deadline and not (os.path.isdir(stage) and os.listdir(stage)):
        time.sleep(0.05)
    assert os.path.isdir(stage) and os.listdir(stage), "the first run never started sending"
    res = run_module(model_sync, lab.args())
    assert res.get("failed") is not True, res
    assert orphan.wait(timeout=10) != 0  # stopped, not finished
    assert any("an earlier run" in w and "was stopped" in w for w in warnings), warnings
    assert tree(lab.dest("10.99.1.12")) == tree(lab.src)
    assert res["destinations"]["10.99.1.12"]["verified"] is True


def test_a_run_that_did_not_verify_never_says_verified(run_module, lab):
    res = run_module(model_sync, lab.args(verify=False))
    assert res.get("failed") is not True, res
    assert res["verified"] is False and res["destinations"]["10.99.1.12"]["verified"] is None
    marker = open(os.path.join(lab.dest("10.99.1.12"), ".sparkfleet-model")).read()
    assert "copy=complete" in marker and "verified=no" in marker
    checked = run_module(model_sync, lab.args())
    assert checked["verified"] is True and checked["changed"] is False
    marker = open(os.path.join(lab.dest("10.99.1.12"), ".sparkfleet-model")).read()
    assert "verified=yes" in marker and "fingerprint=%s" % checked["fingerprint"] in marker
    # A refused run verified nothing.
    refused = run_module(model_sync, lab.args(destinations=["10.99.1.12", "10.99.1.99"]))
    assert refused["failed"] is True and refused["verified"] is False


def test_a_disk_that_fills_during_the_sync_is_named_with_its_numbers(run_module, lab, monkeypatch):
    if subprocess.call(["unshare", "-m", "true"], stderr=subprocess.DEVNULL) != 0:
        pytest.skip("needs unshare -m (root) for a small filesystem")
    monkeypatch.setenv("SHIM_SMALL_DISK", "256k")
    res = run_module(model_sync, lab.args())
    assert res["failed"] is True, res
    total = sum(len(b) for b in tree(lab.src).values())
    assert "10.99.1.12 ran out of space under %s during the sync" % lab.dest_dir in res["msg"], res["msg"]
    assert re.search(r"(\d+) bytes \([\d.]+ GB\) of the model still to write there, (\d+) bytes", res["msg"])
    needed, free = [int(x) for x in re.search(r"(\d+) bytes \(.*?, (\d+) bytes", res["msg"]).groups()]
    assert 0 < needed <= total and free < 256 * 1024
    assert "Free at least" in res["hint"] and "run again" in res["hint"]
    assert "No space left on device" not in res["msg"]
    assert res["destinations"]["10.99.1.12"]["copy"] == "incomplete"
    assert res["destinations"]["10.99.1.12"]["transport"] == "tcp"  # not sent again over ssh into the same disk


def test_a_killed_transfer_leaves_the_copy_marked_incomplete(run_module, lab, tmp_path):
    args = lab.args(streams=1, bwlimit=50)
    argsfile = tmp_path / "args.json"
    argsfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.Popen([sys.executable, "-c", AS_ANSIBLE, str(argsfile)],
                            env=dict(os.environ, PYTHONPATH=COLLECTIONS), stdout=subprocess.DEVNULL,
                            start_new_session=True)
    marker = os.path.join(lab.dest("10.99.1.12"), ".sparkfleet-model")
    deadline = time.time() + 30
    while time.time() < deadline and not os.path.exists(marker):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync import parse_copy_state
    state = parse_copy_state(open(marker).read())
    assert state["copy"] == "incomplete" and state["verified"] == "no", state


def test_a_disk_that_fills_under_rsync_is_named_with_its_numbers_too(run_module, lab, monkeypatch):
    if subprocess.call(["unshare", "-m", "true"], stderr=subprocess.DEVNULL) != 0:
        pytest.skip("needs unshare -m (root) for a small filesystem")
    monkeypatch.setenv("SHIM_SMALL_DISK", "256k")
    res = run_module(model_sync, lab.args(transport="ssh"))
    assert res["failed"] is True, res
    assert "10.99.1.12 ran out of space under %s during the sync" % lab.dest_dir in res["msg"], res["msg"]
    assert "still to write there" in res["msg"] and "No space left on device" not in res["msg"]
    assert "Free at least" in res["hint"]


# --------------------------------------------------------------------------- a third transport (issue 43 item 4)

def test_a_third_transport_is_one_registry_entry_and_the_chain_falls_through_to_ssh(run_module, lab, monkeypatch):
    """A transport that copies on the local disk (each fake host is a directory here) delivers every other file and
    reports the rest undelivered: registered as one entry with one chain, the run uses it, ssh takes the rest, and the
    copy verifies."""
    import shutil
    from ansible.module_utils import basic
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync import _sync_transport, _sync_transports

    sent_by_local = []

    class LocalTransport(_sync_transport.Transport):
        name = "local"
        CAUSES = ("partial",)

        def send(self, feeder, target, moved, info):
            info["streams"] = 1
            done = set()
            for i, (name, size) in enumerate(moved):
                if i % 2:
                    continue
                where = os.path.join(lab.dest(target), name)
                os.makedirs(os.path.dirname(where), exist_ok=True)
                shutil.copy2(os.path.join(self.run.src, name), where)
                done.add(name)
            sent_by_local.extend(sorted(done))
            nbytes = sum(s for n, s in moved if n in done)
            if len(done) < len(moved):
                return _sync_transport.Outcome("partial", "%d file(s) left by local" % (len(moved) - len(done)),
                                               done, nbytes)
            return _sync_transport.Outcome(_sync_transport.OK, None, done, nbytes)

    monkeypatch.setitem(_sync_transports.TRANSPORTS, "local", LocalTransport)
    monkeypatch.setitem(_sync_transports.CHAINS, "local", ("local", "ssh"))
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, w: warnings.append(w))
    res = run_module(model_sync, lab.args(transport="local"))
    assert res.get("failed") is not True, res
    dest = res["destinations"]["10.99.1.12"]
    assert dest["transport"] == "local+ssh" and dest["verified"] is True
    assert 0 < len(sent_by_local) < 7
    assert res["files_transferred"] == 7
    assert tree(lab.dest("10.99.1.12")) == tree(lab.src)
    assert any("left by local" in w and "sending them over ssh" in w for w in warnings), warnings
    # Only the files local did not deliver went over rsync.
    rsynced = [c for c in lab.calls() if c["cmd"].startswith("rsync --server")]
    assert rsynced
