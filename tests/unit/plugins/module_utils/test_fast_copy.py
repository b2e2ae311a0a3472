"""The tcp transport's script (module_utils/_fast_copy.py) between temp dirs on loopback: authentication, per-file
verification before the final name, resume of a partial file, and no listener left when the run goes away."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils._fast_copy import FAST_SCRIPT
from ansible_collections.sparkfleet.vllm.plugins.module_utils._model_sync import fast_bins


def digest(data):
    return hashlib.sha256(data).hexdigest()


class Receiver(object):
    def __init__(self, dest, files, streams=1, home=None, timeout=10):
        env = dict(os.environ)
        env.pop("SSH_CONNECTION", None)
        env["HOME"] = str(home or dest)
        self.proc = subprocess.Popen([sys.executable, "-c", FAST_SCRIPT, "receive", str(dest)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        req = {"files": files, "streams": streams, "timeout": timeout, "bind": "127.0.0.1"}
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        self.first = json.loads(line) if line else None

    def result(self):
        line = self.proc.stdout.readline()
        self.proc.stdin.close()
        self.proc.wait(timeout=20)
        return json.loads(line) if line else None


def send(root, first, bins):
    proc = subprocess.Popen([sys.executable, "-c", FAST_SCRIPT, "send", str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    req = {"host": "127.0.0.1", "port": first["port"], "key": first["key"], "bins": bins, "timeout": 10}
    proc.stdin.write((json.dumps(req) + "\n").encode())
    proc.stdin.flush()
    line = proc.stdout.readline()
    proc.stdin.close()
    proc.wait(timeout=20)
    return json.loads(line)


@pytest.fixture
def model(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    blobs = {"a.safetensors": os.urandom(3 << 20), "b.safetensors": os.urandom(1 << 20), "sub/c.json": b"{}"}
    for name, data in blobs.items():
        (src / name).write_bytes(data)
    os.utime(src / "a.safetensors", ns=(1_600_000_000_123_456_789, 1_600_000_000_123_456_789))
    files = []
    for name, data in sorted(blobs.items()):
        st = os.stat(src / name)
        files.append([name, len(data), st.st_mtime_ns, st.st_mode & 0o777, digest(data)])
    return src, blobs, files


def test_two_streams_deliver_every_file_verified_with_mtime_and_hash_cache(tmp_path, model):
    src, blobs, files = model
    dest = tmp_path / "dest"
    recv = Receiver(dest, files, streams=2, home=tmp_path / "home")
    assert recv.first["bind"] == "127.0.0.1" and recv.first["offsets"] == {}
    bins = fast_bins([(f[0], f[1]) for f in files], {}, 2)
    sent = send(src, recv.first, bins)
    assert sent["errors"] == [] and sent["bytes"] == sum(len(b) for b in blobs.values())
    res = recv.result()
    assert res["ok"] == sorted(blobs) and res["failed"] == {} and res["cache"] == 3
    for name, data in blobs.items():
        assert (dest / name).read_bytes() == data
    assert os.stat(dest / "a.safetensors").st_mtime_ns == 1_600_000_000_123_456_789
    assert os.listdir(dest / ".sparkfleet-sync") == []
    cache = json.loads(next((tmp_path / "home" / ".cache" / "sparkfleet").glob("hashes-*.json")).read_text())
    assert cache["files"]["a.safetensors"][1] == digest(blobs["a.safetensors"])


def test_a_file_whose_bytes_differ_from_the_sources_hash_never_gets_its_name(tmp_path, model):
    src, blobs, files = model
    files[0][4] = digest(b"something else")  # a.safetensors: the manifest's hash is not what arrives
    dest = tmp_path / "dest"
    recv = Receiver(dest, files)
    sent = send(src, recv.first, fast_bins([(f[0], f[1]) for f in files], {}, 1))
    assert sent["errors"] == []
    res = recv.result()
    assert res["failed"] == {"a.safetensors": "content hash differs from the source's"}
    assert not (dest / "a.safetensors").exists() and (dest / "b.safetensors").read_bytes() == blobs["b.safetensors"]
    assert os.listdir(dest / ".sparkfleet-sync") == []  # the bad bytes are not kept for a resume


def test_a_partial_file_of_the_same_version_is_continued_and_others_are_removed(tmp_path, model):
    src, blobs, files = model
    dest = tmp_path / "dest"
    recv = Receiver(dest, files)
    stage = dest / ".sparkfleet-sync"
    assert recv.first is not None  # a first run that never sends: the staging directory exists now
    recv.proc.stdin.close()
    recv.proc.wait(timeout=20)
    assert os.listdir(stage) == []
    ns = {}
    exec(compile(FAST_SCRIPT.split("\ndef recv_exact", maxsplit=1)[0], "fast", "exec"), ns)  # stage_name() as the receiver names
    a = files[0]
    (stage / ns["stage_name"](a[0], a[1], a[2])).write_bytes(blobs["a.safetensors"][:1000000])
    (stage / "leftover.tmp").write_bytes(b"x")
    recv = Receiver(dest, files)
    assert recv.first["offsets"] == {"a.safetensors": 1000000}
    assert not (stage / "leftover.tmp").exists()
    sent = send(src, recv.first, fast_bins([(f[0], f[1]) for f in files], recv.first["offsets"], 1))
    res = recv.result()
    assert sent["bytes"] == sum(len(b) for b in blobs.values()) - 1000000
    assert res["resumed"] == 1000000 and res["failed"] == {}
    assert (dest / "a.safetensors").read_bytes() == blobs["a.safetensors"]  # the hash covered the old prefix too


def test_a_connection_without_the_secret_writes_nothing_and_is_dropped(tmp_path, model):
    src, blobs, files = model
    dest = tmp_path / "dest"
    recv = Receiver(dest, files)
    intruder = socket.create_connection(("127.0.0.1", recv.first["port"]), timeout=5)
    intruder.recv(32)
    intruder.sendall(b"\0" * 32 + b"\0\0\0\x10" + b'{"end": true}   ')
    try:
        assert intruder.recv(1) == b""  # closed on us
    except ConnectionResetError:
        pass  # or reset: the unread bytes were discarded
    intruder.close()
    sent = send(src, recv.first, fast_bins([(f[0], f[1]) for f in files], {}, 1))
    assert sent["errors"] == []
    assert recv.result()["ok"] == sorted(blobs)


def test_the_listener_closes_once_every_stream_is_in_and_the_receiver_dies_with_the_run(tmp_path, model):
    src, blobs, files = model
    dest = tmp_path / "dest"
    recv = Receiver(dest, files)
    port = recv.first["port"]
    recv.proc.stdin.close()  # the run went away (ssh dropped): no stream ever connected
    assert recv.proc.wait(timeout=10) == 3
    assert b"stdin closed" in recv.proc.stderr.read()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    # With every stream connected, nobody else can connect even while the copy runs.
    recv = Receiver(dest, files)
    conn = socket.create_connection(("127.0.0.1", recv.first["port"]), timeout=5)
    import hmac
    conn.sendall(hmac.new(bytes.fromhex(recv.first["key"]), conn.recv(32), hashlib.sha256).digest())
    time.sleep(0.5)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", recv.first["port"]), timeout=2).close()
    conn.close()
    recv.proc.stdin.close()
    recv.proc.wait(timeout=10)


@pytest.mark.parametrize("name", ["../etc/passwd", "/etc/passwd", "a/../../x", ".sparkfleet-sync/x", ".sparkfleet-model",
                                  "a//b", ""])
def test_names_outside_the_directory_are_refused_before_listening(tmp_path, name):
    recv = Receiver(tmp_path / "dest", [[name, 1, 0, 0o644, None]])
    assert recv.first is None
    assert recv.proc.wait(timeout=10) == 2 and b"refused file name" in recv.proc.stderr.read()


def test_fast_bins_pack_by_missing_bytes_and_keep_complete_partials():
    bins = fast_bins([("a", 100), ("b", 60), ("c", 50)], {"a": 90, "c": 50}, 2)
    flat = sorted(item for b in bins for item in b)
    assert flat == [["a", 90, 100], ["b", 0, 60], ["c", 50, 50]]
    assert len(bins) == 2
