"""The tcp transport's script (module_utils/sync/_fast_copy.py) between temp dirs on loopback: authentication, per-file
verification before the final name, resume of a partial file, and no listener left when the run goes away."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
import subprocess
import sys
import time

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._fast_copy import FAST_SCRIPT
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_tcp import fast_bins


def digest(data):
    return hashlib.sha256(data).hexdigest()


class Receiver(object):
    def __init__(self, dest, files, streams=1, home=None, timeout=10, hash=False):
        env = dict(os.environ)
        env.pop("SSH_CONNECTION", None)
        env["HOME"] = str(home or dest)
        self.proc = subprocess.Popen([sys.executable, "-c", FAST_SCRIPT, "receive", str(dest)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        req = {"files": files, "streams": streams, "timeout": timeout, "bind": "127.0.0.1", "hash": hash}
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        self.first = json.loads(line) if line else None

    def result(self):
        line = self.proc.stdout.readline()
        self.proc.stdin.close()
        self.proc.wait(timeout=20)
        return json.loads(line) if line else None


def send(root, first, bins, hash=False, home=None, key=None):
    env = dict(os.environ, HOME=str(home or root))
    proc = subprocess.Popen([sys.executable, "-c", FAST_SCRIPT, "send", str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env)
    req = {"host": "127.0.0.1", "port": first["port"], "key": key or first["key"], "bins": bins, "timeout": 10,
           "hash": hash}
    proc.stdin.write((json.dumps(req) + "\n").encode())
    proc.stdin.flush()
    line = proc.stdout.readline()
    proc.stdin.close()
    proc.wait(timeout=20)
    return json.loads(line)


class RawSender(object):
    """A stream written by hand: what a broken or hostile peer could put on the wire (framing as FAST_SCRIPT's)."""

    def __init__(self, first, key=None):
        self.key = bytes.fromhex(key or first["key"])
        self.sock = socket.create_connection(("127.0.0.1", first["port"]), timeout=10)
        nonce = b""
        while len(nonce) < 32:
            nonce += self.sock.recv(32 - len(nonce))
        self.sock.sendall(hmac.new(self.key, nonce, hashlib.sha256).digest())
        proof = b""
        while len(proof) < 32:
            proof += self.sock.recv(32 - len(proof))
        assert proof == hmac.new(self.key, b"receiver" + nonce, hashlib.sha256).digest()

    def msg(self, obj):
        data = json.dumps(obj).encode()
        self.sock.sendall(struct.pack(">I", len(data)) + data)

    def trailer(self, name, size, digest, key=None):
        mac = hmac.new(key or self.key, ("%s\0%d\0%s" % (name, size, digest or "")).encode(), hashlib.sha256)
        self.msg({"digest": digest, "mac": mac.hexdigest()})

    def close(self):
        self.sock.close()


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


def test_the_sender_hashes_while_sending_and_both_ends_keep_the_hashes(tmp_path, model):
    src, blobs, files = model
    for f in files:
        f[4] = None  # the head has not hashed anything yet: the hashes come with the bytes
    dest = tmp_path / "dest"
    recv = Receiver(dest, files, streams=2, home=tmp_path / "home", hash=True)
    sent = send(src, recv.first, fast_bins([(f[0], f[1]) for f in files], {}, 2), hash=True, home=tmp_path / "srchome")
    assert sent["errors"] == [] and sent["digests"] == dict((n, digest(d)) for n, d in blobs.items())
    res = recv.result()
    assert res["ok"] == sorted(blobs) and res["hashed"] is True and res["cache"] == 3
    src_cache = json.loads(next((tmp_path / "srchome" / ".cache" / "sparkfleet").glob("hashes-*.json")).read_text())
    assert src_cache["algorithm"] == "sha256" and src_cache["root"] == os.path.realpath(src)
    assert src_cache["files"]["a.safetensors"][1] == digest(blobs["a.safetensors"])


def test_hashes_asked_but_not_sent_means_no_file_gets_its_name(tmp_path, model):
    src, blobs, files = model
    for f in files:
        f[4] = None
    dest = tmp_path / "dest"
    recv = Receiver(dest, files, hash=True)
    send(src, recv.first, fast_bins([(f[0], f[1]) for f in files], {}, 1), hash=False)
    res = recv.result()
    assert res["ok"] == [] and set(res["failed"]) == set(blobs)
    assert all(why == "no source hash came with it" for why in res["failed"].values())
    assert sorted(os.listdir(dest)) == [".sparkfleet-sync"] and os.listdir(dest / ".sparkfleet-sync") == []


def test_bytes_altered_on_the_wire_are_caught_by_the_hash_and_never_renamed(tmp_path, model):
    src, blobs, files = model
    name, data = "b.safetensors", blobs["b.safetensors"]
    entry = [f for f in files if f[0] == name][0]
    entry[4] = None
    dest = tmp_path / "dest"
    recv = Receiver(dest, [entry], hash=True)
    raw = RawSender(recv.first)
    raw.msg({"name": name, "offset": 0, "length": len(data)})
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x01  # one bit on the way; the trailer is the real sender's
    raw.sock.sendall(bytes(flipped))
    raw.trailer(name, len(data), digest(data))
    raw.msg({"end": True})
    res = recv.result()
    raw.close()
    assert res["ok"] == [] and res["failed"] == {name: "content hash differs from the source's"}
    assert not (dest / name).exists() and os.listdir(dest / ".sparkfleet-sync") == []


def test_a_trailer_without_this_runs_secret_is_refused_even_with_a_matching_hash(tmp_path, model):
    src, blobs, files = model
    name, data = "b.safetensors", blobs["b.safetensors"]
    entry = [f for f in files if f[0] == name][0]
    entry[4] = None
    dest = tmp_path / "dest"
    recv = Receiver(dest, [entry], hash=True)
    raw = RawSender(recv.first)  # a connection taken over after the challenge: the data and hash are its own
    forged = os.urandom(len(data))
    raw.msg({"name": name, "offset": 0, "length": len(forged)})
    raw.sock.sendall(forged)
    raw.trailer(name, len(forged), digest(forged), key=b"\x01" * 32)
    res = recv.result()
    raw.close()
    assert res["ok"] == [] and "MAC does not check out" in res["failed"][name]
    assert not (dest / name).exists() and os.listdir(dest / ".sparkfleet-sync") == []


def test_a_sender_with_another_runs_secret_delivers_nothing(tmp_path, model):
    src, blobs, files = model
    dest = tmp_path / "dest"
    recv = Receiver(dest, files, timeout=5)
    sent = send(src, recv.first, fast_bins([(f[0], f[1]) for f in files], {}, 1), key="ab" * 32)
    assert sent["bytes"] == 0 and "refused this run's secret" in sent["errors"][0]
    assert recv.proc.wait(timeout=20) == 4  # nobody authenticated: the receiver gives up after its timeout
    err = recv.proc.stderr.read()
    assert b"no stream connected within 5 s" in err or b"no data for 5 s" in err, err
    assert sorted(os.listdir(dest)) == [".sparkfleet-sync"] and os.listdir(dest / ".sparkfleet-sync") == []


def test_a_stream_cut_mid_file_leaves_the_part_staged_never_under_its_name(tmp_path, model):
    src, blobs, files = model
    name, data = "a.safetensors", blobs["a.safetensors"]
    dest = tmp_path / "dest"
    recv = Receiver(dest, files, hash=True)
    raw = RawSender(recv.first)
    raw.msg({"name": name, "offset": 0, "length": len(data)})
    raw.sock.sendall(data[:1 << 20])
    raw.close()  # the sender died (or the cable was pulled) one MiB in
    res = recv.result()
    assert res["ok"] == [] and "connection closed" in res["failed"][name]
    assert not (dest / name).exists()
    staged = os.listdir(dest / ".sparkfleet-sync")
    assert len(staged) == 1 and os.path.getsize(dest / ".sparkfleet-sync" / staged[0]) == 1 << 20
    again = Receiver(dest, files, hash=True)
    assert again.first["offsets"] == {name: 1 << 20}  # the next run continues it
    sent = send(src, again.first, fast_bins([(f[0], f[1]) for f in files], again.first["offsets"], 1), hash=True)
    assert sent["bytes"] == sum(len(b) for b in blobs.values()) - (1 << 20)
    res = again.result()
    assert res["ok"] == sorted(blobs) and (dest / name).read_bytes() == data


def test_the_sender_sends_nothing_to_a_listener_that_cannot_prove_the_secret(tmp_path, model):
    src, blobs, files = model
    impostor = socket.socket()
    impostor.bind(("127.0.0.1", 0))
    impostor.listen(1)
    first = {"port": impostor.getsockname()[1], "key": "cd" * 32}
    proc = subprocess.Popen([sys.executable, "-c", FAST_SCRIPT, "send", str(src)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=dict(os.environ, HOME=str(tmp_path)))
    req = {"host": "127.0.0.1", "port": first["port"], "key": first["key"], "timeout": 10,
           "bins": fast_bins([(f[0], f[1]) for f in files], {}, 1)}
    proc.stdin.write((json.dumps(req) + "\n").encode())
    proc.stdin.flush()
    conn, _peer = impostor.accept()
    conn.settimeout(10)
    conn.sendall(os.urandom(32))
    assert len(conn.recv(32)) == 32  # it answers the challenge (an HMAC: the secret itself never goes out)
    conn.sendall(os.urandom(32))  # but the proof is wrong
    got = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        got += chunk
    res = json.loads(proc.stdout.readline())
    proc.stdin.close()
    proc.wait(timeout=10)
    conn.close()
    impostor.close()
    assert got == b"" and res["bytes"] == 0
    assert "did not prove it holds this run's secret" in res["errors"][0]


# --------------------------------------------------------------------------- hostile peers on the fabric (issue 17.11)

def _from(source, port):
    """A connection to the receiver from another loopback address (another host of the fabric)."""
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    return sock


def test_wrong_secrets_and_silent_peers_never_stop_the_receiver_nor_hold_up_the_real_sender(tmp_path, model):
    src, blobs, files = model
    dest = tmp_path / "dest"
    # The receiver's timeout (20 s) is longer than the sender's (10 s): a receiver that answers one peer at a time
    # would keep the real sender waiting behind the silent ones until it gives up.
    recv = Receiver(dest, files, streams=2, timeout=20, hash=True)
    port = recv.first["port"]
    silent = [_from("127.0.0.2", port) for _i in range(12)]  # more than one source may hold open at once
    for _i in range(20):  # more wrong answers than the 16 that used to end the receiver
        wrong = _from("127.0.0.3", port)
        try:
            nonce = wrong.recv(32)
            wrong.sendall(hmac.new(b"\x00" * 32, nonce, hashlib.sha256).digest())
            assert wrong.recv(32) == b""  # no proof for a wrong answer: the receiver hangs up
        except ConnectionResetError:
            pass
        wrong.close()
    assert recv.proc.poll() is None, recv.proc.stderr.read()
    sent = send(src, recv.first, fast_bins([(f[0], f[1]) for f in files], {}, 2), hash=True)
    assert sent["errors"] == [], sent
    res = recv.result()
    for s in silent:
        s.close()
    assert res["ok"] == sorted(blobs) and res["failed"] == {}
    assert res["refused"] >= 20
    assert (dest / "a.safetensors").read_bytes() == blobs["a.safetensors"]


def test_a_json_list_after_authentication_is_refused_in_one_line_without_a_traceback(tmp_path, model):
    src, blobs, files = model
    dest = tmp_path / "dest"
    recv = Receiver(dest, files)
    raw = RawSender(recv.first)
    data = b"[1, 2, 3]"
    raw.sock.sendall(struct.pack(">I", len(data)) + data)
    res = recv.result()
    raw.close()
    err = recv.proc.stderr.read()
    assert b"Traceback" not in err, err
    assert res["ok"] == [] and res["failed"] == {"(stream)": "message is not a JSON object"}


def _hostile_stream(tmp_path, files, payloads):
    """One authenticated stream per payload, each sending that payload and hanging up: the receiver's result."""
    recv = Receiver(tmp_path / "dest", files, streams=len(payloads), timeout=10, hash=True)
    raws = [RawSender(recv.first) for _p in payloads]
    for raw, payload in zip(raws, payloads):
        raw.sock.sendall(payload)
        raw.close()
    res = recv.result()
    err = recv.proc.stderr.read()
    return res, err, recv.proc.returncode


@pytest.mark.parametrize("payload", [
    struct.pack(">I", 2) + b"{}",
    struct.pack(">I", 4) + b"null",
    struct.pack(">I", 9) + b'"a" + "b"',
    struct.pack(">I", 20000) + b"[" * 20000,
    struct.pack(">I", 1 << 30),
    struct.pack(">I", 45) + b'{"name": "a.safetensors", "offset": -1, "length": 3}'[:45],
    struct.pack(">I", 50) + b'{"name": "a.safetensors", "offset": 0.5, "length": 3}'[:50],
    struct.pack(">I", 55) + b'{"name": ["a"], "offset": 0, "length": 3145728}         '[:55],
    struct.pack(">I", 3) + b"\xff\xfe\xfd",
])
def test_any_bytes_after_authentication_end_the_stream_not_the_receiver(tmp_path, model, payload):
    _src, _blobs, files = model
    res, err, rc = _hostile_stream(tmp_path, files, [payload])
    assert b"Traceback" not in err, err
    assert rc == 0 and res is not None and res["ok"] == [] and res["failed"], (res, err)


def test_property_any_bytes_on_a_stream_never_give_a_traceback(tmp_path_factory, model):
    from hypothesis import HealthCheck, given, settings, strategies as st
    _src, _blobs, files = model

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.binary(max_size=300), min_size=1, max_size=4))
    def prop(payloads):
        res, err, rc = _hostile_stream(tmp_path_factory.mktemp("h"), files, payloads)
        assert b"Traceback" not in err, err
        assert rc == 0 and res is not None and res["ok"] == []

    prop()


@pytest.mark.parametrize("request_line", [
    b"[]\n", b"{}\n", b'{"files": 3}\n', b'{"files": [[1, 2]]}\n', b'{"files": [["a", -1, 0, 420, null]]}\n',
    b'{"files": [["a", 1, 0, 420, 5]]}\n', b'{"files": [], "streams": "x"}\n', b"\xff\n", b"[" * 100000 + b"\n",
])
def test_a_bad_request_on_stdin_is_one_line_never_a_traceback(tmp_path, request_line):
    env = dict(os.environ, HOME=str(tmp_path))
    env.pop("SSH_CONNECTION", None)
    for mode in ("receive", "send"):
        p = subprocess.run([sys.executable, "-c", FAST_SCRIPT, mode, str(tmp_path / "d")], input=request_line,
                           capture_output=True, env=env, timeout=30, check=False)
        assert p.returncode == 2 and b"Traceback" not in p.stderr, p.stderr
        assert p.stderr.startswith(b"sparkfleet fast copy: ") and p.stderr.count(b"\n") == 1, p.stderr


def test_the_sender_never_follows_a_symlink_out_of_the_model(tmp_path, model):
    """A link planted in a worker's copy (to the worker's private key, say) is never sent on by a relay."""
    src, blobs, files = model
    secret = tmp_path / "id_ed25519"
    secret.write_bytes(b"PRIVATE KEY")
    secret.chmod(0o600)
    (src / "b.safetensors").unlink()
    os.symlink(str(secret), str(src / "b.safetensors"))
    entry = [f for f in files if f[0] == "b.safetensors"][0]
    entry[1] = len(b"PRIVATE KEY")
    dest = tmp_path / "dest"
    recv = Receiver(dest, [entry])
    sent = send(src, recv.first, fast_bins([(entry[0], entry[1])], {}, 1))
    res = recv.result()
    assert sent["bytes"] == 0 and "symlink out of" in sent["errors"][0], sent
    assert res["ok"] == [] and not (dest / "b.safetensors").exists()
    assert not any(b"PRIVATE" in p.read_bytes() for p in (dest / ".sparkfleet-sync").iterdir())


def test_a_second_receiver_into_the_same_directory_waits_for_the_first(tmp_path, model):
    src, blobs, files = model
    dest = tmp_path / "dest"
    first = Receiver(dest, files, timeout=30)
    second = Receiver(dest, files, timeout=5)  # a run re-started while a receiver of the killed one still runs
    assert second.first is None
    assert second.proc.wait(timeout=30) == 6
    assert b"another transfer into" in second.proc.stderr.read()
    first.proc.stdin.close()
    first.proc.wait(timeout=10)
    third = Receiver(dest, files)  # once the first is gone, the lock is free
    sent = send(src, third.first, fast_bins([(f[0], f[1]) for f in files], {}, 1))
    assert sent["errors"] == [] and third.result()["ok"] == sorted(blobs)


@pytest.mark.parametrize("cut", [(1 << 20) + 123, 4095, 7])
def test_a_part_cut_mid_block_is_continued_to_the_same_bytes(tmp_path, model, cut):
    """Writes go to disk in whole blocks (O_DIRECT where the filesystem takes it); a part that ends mid-block is
    continued up to the next block boundary first, then in whole blocks again."""
    src, blobs, files = model
    name, data = "a.safetensors", blobs["a.safetensors"]
    dest = tmp_path / "dest"
    recv = Receiver(dest, files, hash=True)
    raw = RawSender(recv.first)
    raw.msg({"name": name, "offset": 0, "length": len(data)})
    raw.sock.sendall(data[:cut])
    time.sleep(0.3)
    raw.close()
    recv.result()
    again = Receiver(dest, files, hash=True)
    assert again.first["offsets"] == {name: cut}
    sent = send(src, again.first, fast_bins([(f[0], f[1]) for f in files], again.first["offsets"], 1), hash=True)
    assert sent["errors"] == []
    assert again.result()["ok"] == sorted(blobs)
    assert (dest / name).read_bytes() == data


def test_a_process_that_exits_says_why_even_when_its_stderr_is_read_late(monkeypatch):
    """The receiver that cannot listen exits naming why; the module reports that, not 'no answer', even when the
    thread that reads its stderr runs after the exit was seen (a loaded node; seen under pytest -n 2)."""
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync import _fast_copy
    pump = _fast_copy.LineProc._pump_err

    def late_pump(self):
        time.sleep(1.5)
        pump(self)
    monkeypatch.setattr(_fast_copy.LineProc, "_pump_err", late_pump)
    monkeypatch.delenv("SSH_CONNECTION", raising=False)   # no address to listen on: the receiver exits at once
    proc = _fast_copy.LineProc([sys.executable, "-c", FAST_SCRIPT, "receive", "/nonexistent"], {"files": []})
    assert proc.line(30) is None
    assert proc.close(10) == 2
    assert "no address to listen on (not run through ssh)" in proc.err_tail()


@pytest.mark.bad_input(name="idle connections from many fabric addresses filling the receiver's handshake slots",
                       expected="the real sender still gets in: the oldest unauthenticated peer makes room for it")
def test_idle_peers_from_many_addresses_never_keep_the_real_sender_out(tmp_path, model, observe):
    """Issue 40.6: the bound per address (8) and in all (64 + streams) let 9 addresses x 8 idle connections fill
    every handshake slot for 10 s at a time; the real sender was hung up on. Now the oldest peer still in its handshake
    is dropped for a new one, so holding slots takes a stream of fresh connections faster than a handshake's RTT."""
    src, blobs, files = model
    recv = Receiver(tmp_path / "dest", files, streams=2, timeout=20, hash=True)
    port = recv.first["port"]
    idle = [_from("127.0.0.%d" % host, port) for host in range(2, 12) for _i in range(8)]   # 80 > 64 + 2
    try:
        sent = send(src, recv.first, fast_bins([(f[0], f[1]) for f in files], {}, 2), hash=True)
        res = recv.result()
    finally:
        for sock in idle:
            sock.close()
    assert sent["errors"] == [], sent
    assert res["ok"] == sorted(blobs) and res["failed"] == {}, res
    observe("80 idle connections from 10 addresses open; the sender's 2 streams got in, %d files received"
            % len(res["ok"]))
