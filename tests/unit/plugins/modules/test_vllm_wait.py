"""vllm_wait end to end in-process: log sources, the wait loop, API readiness on loopback."""

from __future__ import annotations

import atexit
import gzip
import json
import os
import shutil
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ansible.module_utils import basic

from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine import _vllm_wait
from ansible_collections.sparkfleet.vllm.plugins.modules import vllm_wait

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "vllm_wait")
EXPECTED = json.load(open(os.path.join(FIXTURES, "expected.json")))
# The logs are stored gzipped (their tqdm carriage returns are real); the module reads plain files.
_PLAIN = tempfile.mkdtemp(prefix="vllm_wait-fixtures-")
atexit.register(shutil.rmtree, _PLAIN, True)


def fixture(name):
    path = os.path.join(_PLAIN, name)
    if not os.path.exists(path):
        with gzip.open(os.path.join(FIXTURES, name + ".gz"), "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return path


def _text(name):
    with open(fixture(name), newline="") as fh:
        return fh.read()


# ---- read once (timeout=0) over every fixture ----

@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_read_once(run_module, name):
    exp = EXPECTED[name]
    res = run_module(vllm_wait, {"log_file": fixture(name), "timeout": 0})
    assert res["phase"] == exp["phase"]
    assert res.get("failed", False) == (exp["phase"] == "failed")
    assert res["changed"] is False
    assert res["offset"] == os.path.getsize(fixture(name))
    if exp["class"]:
        assert res["failure"]["class"] == exp["class"]
        assert res["failed_phase"] == exp["failed_phase"]
        assert exp["class"] in res["msg"]
        assert res["hint"] == res["failure"]["hint"]
    else:
        assert res["failure"] is None
        assert res["ready"] is (exp["phase"] == "ready")


def test_check_mode_reads_the_same(run_module):
    res = run_module(vllm_wait, {"log_file": fixture("progress_v1_midload.log"), "timeout": 0}, check_mode=True)
    assert res["phase"] == "loading_weights"
    assert res["summary"].startswith("loading_weights 14/39 shards (36%)")


def test_missing_log_file_fails_with_a_reason(run_module, tmp_path):
    res = run_module(vllm_wait, {"log_file": str(tmp_path / "nope.log"), "timeout": 0})
    assert res["failed"] is True
    assert "cannot be read" in res["msg"]


def test_since_offset_skips_an_older_run(run_module, tmp_path):
    log = tmp_path / "serve.log"
    log.write_text(_text("fail_cuda_oom_v1_profiling.log"))
    first = run_module(vllm_wait, {"log_file": str(log), "timeout": 0})
    assert first["failure"]["class"] == "cuda_oom"
    with open(str(log), "a") as fh:
        fh.write(_text("progress_v1_midload.log"))
    again = run_module(vllm_wait, {"log_file": str(log), "timeout": 0, "since_offset": first["offset"]})
    assert again.get("failed", False) is False
    assert again["phase"] == "loading_weights"
    # without the offset the whole file is a crash loop
    whole = run_module(vllm_wait, {"log_file": str(log), "timeout": 0})
    assert whole["failed"] is True


# ---- waiting ----

def _writer(path, lines, delay, start_delay=0.0):
    def go():
        time.sleep(start_delay)
        with open(path, "a", newline="") as fh:
            for ln in lines:
                fh.write(ln)
                fh.flush()
                time.sleep(delay)
    t = threading.Thread(target=go)
    t.daemon = True
    t.start()
    return t


def test_wait_fails_at_the_first_poll_after_the_failing_line(run_module, main_sleeps, tmp_path):
    log = tmp_path / "serve.log"
    text = _text("fail_ray_oom_killed_v1_graphs.log")
    head, tail = text.split("(EngineCore_0 pid=233) (raylet, ip=192.168.200.13)", 1)
    log.write_text(head)
    appended = {}

    def late():
        while len(main_sleeps) < 2:       # the waiter has polled twice and found nothing
            time.sleep(0.05)
        appended["polls"] = len(main_sleeps)
        with open(str(log), "a") as fh:
            fh.write("(EngineCore_0 pid=233) (raylet, ip=192.168.200.13)" + tail)
    threading.Thread(target=late, daemon=True).start()
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 30, "poll_interval": 1})
    assert res["failure"]["class"] == "ray_oom_killed"
    assert res["failed_phase"] == "cuda_graphs"
    # the line was read at the next poll: at most one more wait after it appeared, each of one poll interval
    assert len(main_sleeps) - appended["polls"] <= 1 and max(main_sleeps) <= 1


def test_wait_follows_progress_to_ready(run_module, tmp_path):
    log = tmp_path / "serve.log"
    lines = _text("ok_v1_010_ray.log").splitlines(True)
    log.write_text("".join(lines[:30]))
    _writer(str(log), lines[30:], 0.005)
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 30, "poll_interval": 0.2})
    assert res["ready"] is True and res["phase"] == "ready"
    assert res["timed_out"] is False


def test_timeout_returns_phase_without_failing(run_module, tmp_path):
    log = tmp_path / "serve.log"
    log.write_text(_text("progress_v1_midload.log"))
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 1, "poll_interval": 0.2})
    assert res.get("failed", False) is False
    assert res["timed_out"] is True and res["ready"] is False
    assert res["phase"] == "loading_weights"
    assert res["progress"]["n"] == 14
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 1, "poll_interval": 0.2, "fail_on_timeout": True})
    assert res["failed"] is True and "not ready after 1 s" in res["msg"]


def test_no_progress_for_stall_timeout_is_stalled(run_module, tmp_path):
    log = tmp_path / "serve.log"
    log.write_text(_text("progress_v1_midload.log"))
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 20, "stall_timeout": 1, "poll_interval": 0.2})
    assert res["failed"] is True
    assert res["failure"]["class"] == "stalled"
    assert res["failed_phase"] == "loading_weights"
    assert res["timed_out"] is False          # the stall ended it, not the 20 s timeout


def test_placement_wait_lines_do_not_count_as_progress(run_module, tmp_path):
    log = tmp_path / "serve.log"
    log.write_text(_text("progress_placement_short.log"))
    wait = ("(EngineCore_0 pid=233) INFO 08-20 10:01:%02d [ray_utils.py:255] Waiting for creating a placement "
            "group of specs for %d seconds. specs=[{'GPU': 1.0}, {'GPU': 1.0}].\n")
    _writer(str(log), [wait % (i, 40 + 10 * i) for i in range(40)], 0.1)
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 20, "stall_timeout": 2, "poll_interval": 0.2})
    assert res["failure"]["class"] == "stalled"
    assert res["failed_phase"] == "placement"


# ---- journal and docker, with the commands' real output shapes ----

@pytest.fixture
def fake_bins(node_commands):
    """journalctl / systemctl / docker answered like the real tools (the shared NodeCommands)."""
    return node_commands


def test_unit_journal_progress_and_cursor(run_module, fake_bins):
    body = _text("progress_v1_midload.log")

    def journalctl(args):
        assert args[1:4] == ["-u", "vllm-serve.service", "-o"]
        return 0, body + "-- cursor: s=3e1c;i=8f2;b=1a;m=2d;t=5f;x=77\n", ""

    def systemctl(args):
        return 0, "ActiveState=active\nSubState=running\nResult=success\nExecMainStatus=0\n", ""
    fake = fake_bins({"journalctl": journalctl, "systemctl": systemctl})
    res = run_module(vllm_wait, {"unit": "vllm-serve.service", "since": "2026-11-29 10:00:00", "timeout": 0})
    assert res["phase"] == "loading_weights"
    assert res["cursor"] == "s=3e1c;i=8f2;b=1a;m=2d;t=5f;x=77"
    # the node's local time, passed on as epoch seconds (docker and journalctl spell times differently)
    assert ["--since", "@%d" % time.mktime((2026, 11, 29, 10, 0, 0, 0, 0, -1))] == fake.calls[0][-2:]
    res = run_module(vllm_wait, {"unit": "vllm-serve.service", "cursor": res["cursor"], "timeout": 0})
    assert fake.calls[-2][-2:] == ["--after-cursor", "s=3e1c;i=8f2;b=1a;m=2d;t=5f;x=77"]


def _journal(body, last_unix):
    """journalctl: the log with -o cat, the last entry's time with -n 1 -o short-unix."""
    def answer(args):
        if "short-unix" in args:
            return 0, "%.6f spark-1 vllm[2211]: last line\n" % last_unix, ""
        return 0, body + "-- cursor: s=1\n", ""
    return answer


def test_unit_gone_without_a_marker_is_engine_exited(run_module, fake_bins):
    body = _text("progress_v1_midload.log")
    fake_bins({
        "journalctl": _journal(body, time.time()),
        "systemctl": lambda a: (0, "ActiveState=activating\nSubState=auto-restart\nResult=signal\nExecMainStatus=9\n", ""),
    })
    res = run_module(vllm_wait, {"unit": "vllm-serve.service", "timeout": 10, "poll_interval": 0.1})
    assert res["failure"]["class"] == "engine_exited"
    assert res["failed_phase"] == "loading_weights"
    assert any("SubState=auto-restart" in ln for ln in res["failure"]["evidence"])


def test_unit_gone_after_a_known_cause_keeps_the_cause(run_module, fake_bins):
    body = _text("fail_dependency_missing_v0.log")
    fake_bins({
        "journalctl": _journal(body, time.time()),
        "systemctl": lambda a: (0, "ActiveState=failed\nSubState=failed\nResult=exit-code\nExecMainStatus=1\n", ""),
    })
    res = run_module(vllm_wait, {"unit": "vllm-serve.service", "timeout": 10, "poll_interval": 0.1})
    assert res["failure"]["class"] == "dependency_missing"


def _docker_split(name, started=None):
    """docker logs --timestamps: each line stamped (UTC, one second apart from ``started``), stdout and
    stderr on separate pipes."""
    started = time.time() - 3600 if started is None else started
    out, err = [], []
    for i, ln in enumerate(_text(name).split("\n")[:-1]):
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(started + i))
        stamped = "%s.%09dZ %s" % (stamp, i, ln)
        (err if ("Loading" in ln or "ERROR" in ln or i % 3) else out).append(stamped)
    return "\n".join(out) + "\n", "\n".join(err) + "\n"


def test_container_logs_are_merged_by_timestamp(run_module, fake_bins):
    out, err = _docker_split("fail_weights_corrupt_safetensors_v1.log")
    fake_bins({
        "docker": lambda a: (0, out, err) if a[1] == "logs" else (0, "running 0 false\n", ""),
    })
    res = run_module(vllm_wait, {"container": "vllm", "timeout": 0})
    assert res["failure"]["class"] == "weights_corrupt"
    assert res["failed_phase"] == "loading_weights"
    assert res["progress"]["n"] == 18  # the lagging worker rank


def test_container_exited_is_engine_exited(run_module, fake_bins):
    out, err = _docker_split("progress_v1_midload.log")
    fake_bins({
        "docker": lambda a: (0, out, err) if a[1] == "logs" else (0, "exited 137 true\n", ""),
    })
    res = run_module(vllm_wait, {"container": "vllm", "timeout": 5, "poll_interval": 0.1})
    assert res["failure"]["class"] == "engine_exited"
    assert "oom_killed=true" in res["failure"]["evidence"][-1]


def _no_such_container(args):
    return 1, "", "Error response from daemon: No such container: vllm\n"


def test_a_container_being_removed_is_a_container_gone(run_module, fake_bins):
    # Seen on the lab: a --rm container caught between its exit and its removal.
    body = _text("fail_port_in_use_v1.log")
    fake_bins({
        "docker": lambda a: (1, "", "Error response from daemon: can not get logs from container which is dead or"
                             " marked for removal\n"),
        "journalctl": lambda a: (0, body + "-- cursor: s=9\n", ""),
        "systemctl": _systemctl("ActiveState=activating\nSubState=auto-restart\nResult=exit-code\nExecMainStatus=1\n"),
    })
    res = run_module(vllm_wait, {"container": "vllm", "unit": "sparkfleet-vllm", "timeout": 10, "poll_interval": 0.2})
    assert res["failure"]["class"] == "port_in_use" and res["log_source"] == "journal"


def test_container_missing_when_read_once_is_engine_exited(run_module, fake_bins):
    fake_bins({"docker": _no_such_container})
    res = run_module(vllm_wait, {"container": "vllm", "timeout": 0})
    assert res["failed"] and res["failure"]["class"] == "engine_exited"
    assert "container vllm does not exist" in res["failure"]["evidence"][-1]


def test_container_missing_for_the_grace_period_while_waiting_is_engine_exited(run_module, main_sleeps, fake_bins):
    # A --rm container under a failed unit is gone for good: report it instead of waiting out the timeout.
    fake_bins({"docker": _no_such_container})
    res = run_module(vllm_wait, {"container": "vllm", "timeout": 6, "poll_interval": 0.2})
    assert res["failure"]["class"] == "engine_exited"
    assert res["timed_out"] is False and sum(main_sleeps) < 6


def test_container_that_appears_within_the_grace_period_is_followed(run_module, fake_bins):
    out, err = _docker_split("progress_v1_midload.log")
    calls = {"logs": 0}

    def docker(args):
        if args[1] == "logs":
            calls["logs"] += 1
            return _no_such_container(args) if calls["logs"] < 3 else (0, out, err)
        return 0, "running 0 false\n", ""
    fake_bins({"docker": docker})
    res = run_module(vllm_wait, {"container": "vllm", "timeout": 10, "poll_interval": 0.2, "stall_timeout": 0})
    assert not res.get("failed"), res.get("failure")
    assert res["phase"] == "loading_weights"


# ---- API readiness on loopback ----

class _Api(BaseHTTPRequestHandler):
    models = ["/models/Qwen3-235B-A22B-FP8"]
    completion_status = 200
    seen_auth = []

    def log_message(self, *args):
        pass

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        type(self).seen_auth.append(self.headers.get("Authorization"))
        if self.headers.get("Authorization") != "Bearer s3cret":
            return self._send(401, {"error": "Unauthorized"})
        if self.path == "/v1/models":
            return self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]})
        self._send(404, {})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length))
        if self.path == "/v1/completions" and body.get("max_tokens") == 1:
            if self.completion_status != 200:
                return self._send(self.completion_status, {"error": "engine dead"})
            return self._send(200, {"choices": [{"index": 0, "text": "!"}], "model": body["model"]})
        self._send(404, {})


@pytest.fixture
def api():
    handler = type("Api", (_Api,), {"models": list(_Api.models), "completion_status": 200, "seen_auth": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield handler, "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_ready_needs_models_listing_and_a_completion(run_module, api):
    handler, url = api
    res = run_module(vllm_wait, {"log_file": fixture("ok_v1_010_ray.log"), "url": url + "/v1", "api_key": "s3cret",
                                 "model": "/models/Qwen3-235B-A22B-FP8", "timeout": 0})
    assert res["ready"] is True and res["phase"] == "ready"
    assert res["api"]["completion_ok"] is True
    assert "s3cret" not in json.dumps(res)


def test_log_ready_but_completion_failing_is_not_ready(run_module, api):
    handler, url = api
    handler.completion_status = 503
    res = run_module(vllm_wait, {"log_file": fixture("ok_v1_010_ray.log"), "url": url, "api_key": "s3cret",
                                 "timeout": 0})
    assert res["ready"] is False
    assert res["phase"] == "api_starting"
    assert "503" in res["api"]["error"]


def test_wrong_model_name_fails_at_once(run_module, api):
    handler, url = api
    res = run_module(vllm_wait, {"url": url, "api_key": "s3cret", "model": "Qwen/Qwen3.5-122B-A10B-FP8",
                                 "timeout": 30})
    assert res["failed"] is True
    assert "serves /models/Qwen3-235B-A22B-FP8, not Qwen/Qwen3.5-122B-A10B-FP8" in res["msg"]


def test_wrong_key_fails_at_once(run_module, api):
    handler, url = api
    res = run_module(vllm_wait, {"url": url, "api_key": "wrong", "timeout": 30})
    assert res["failed"] is True and "401" in res["msg"]


def test_url_only_waits_for_the_port(run_module):
    # A port nobody listens on: not ready, not failed, until timeout.
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    res = run_module(vllm_wait, {"url": "http://127.0.0.1:%d" % port, "timeout": 1, "poll_interval": 0.2})
    assert res.get("failed", False) is False
    assert res["ready"] is False and res["timed_out"] is True
    assert res["phase"] == "starting"


def test_ansible_doc_renders():
    import yaml
    doc = yaml.safe_load(vllm_wait.DOCUMENTATION)
    spec_opts = set(doc["options"])
    assert spec_opts == {"log_file", "unit", "container", "since_offset", "cursor", "since", "url", "api_key",
                         "model", "validate_certs", "timeout", "fail_on_timeout", "stall_timeout",
                         "poll_interval", "rank_names", "max_bytes"}
    # setting_names comes from the doc fragment the hint-naming modules share.
    assert "sparkfleet.vllm.setting_names" in doc["extends_documentation_fragment"]
    assert doc["options"]["api_key"]["type"] == "str"
    assert doc["options"]["timeout"]["default"] == 900
    yaml.safe_load(vllm_wait.RETURN)


def test_wait_on_a_crash_loop_fails_even_if_the_restart_arrives_in_the_same_read(run_module, main_sleeps, tmp_path):
    log = tmp_path / "serve.log"
    log.write_text(_text("fail_insufficient_memory_free_v1.log") + _text("progress_placement_short.log"))
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 30, "poll_interval": 0.5})
    assert res["failed"] is True
    assert res["failure"]["class"] == "insufficient_memory"
    assert res["attempts"] == 2
    assert main_sleeps == [_vllm_wait._SETTLE_S]   # decided at the first read (after the traceback's settle)


# ---- stall across short calls (the role's loop) ----

def test_stall_is_seen_across_short_calls_from_the_file_age(run_module, main_sleeps, tmp_path):
    log = tmp_path / "serve.log"
    log.write_text(_text("progress_v1_midload.log"))
    # last written 1000 s ago: each call is short, but the startup has been quiet for longer than 900 s
    old = time.time() - 1000
    os.utime(str(log), (old, old))
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 5, "poll_interval": 0.5, "stall_timeout": 900})
    assert res["failure"]["class"] == "stalled"
    assert res["failed_phase"] == "loading_weights"
    assert main_sleeps == []                  # the file's age decides it at the first read
    # written just now: the same log is still moving as far as anyone can tell
    os.utime(str(log), None)
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 1, "poll_interval": 0.5, "stall_timeout": 900})
    assert res.get("failed", False) is False and res["timed_out"] is True


def test_quiet_time_inside_the_log_counts_too(run_module, tmp_path):
    log = tmp_path / "serve.log"
    text = _text("progress_v1_midload.log")
    # after the last shard step, ten minutes of lines that are not progress
    noise = ("(EngineCore_0 pid=233) WARNING 08-20 10:%02d:00 [shm_broadcast.py:466] No available shared memory "
             "broadcast block found in 60 second.\n")
    log.write_text(text + "".join(noise % m for m in range(10, 59)))
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 3, "poll_interval": 0.5, "stall_timeout": 600})
    assert res["failure"]["class"] == "stalled"
    # read once never calls a stall on the wall clock
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 0, "stall_timeout": 600})
    assert res.get("failed", False) is False and res["phase"] == "loading_weights"


def test_container_stall_uses_docker_stamps(run_module, fake_bins):
    fake = {"started": time.time() - 3600}

    def docker(args):
        if args[1] == "logs":
            return (0,) + _docker_split("progress_v1_midload.log", fake["started"])
        return 0, "running 0 false\n", ""
    fake_bins({"docker": docker})
    # last line stamped about 59 minutes ago
    res = run_module(vllm_wait, {"container": "vllm", "timeout": 2, "poll_interval": 0.5, "stall_timeout": 1800})
    assert res["failure"]["class"] == "stalled"
    # the same log, its last line stamped a few seconds ago: still loading
    fake["started"] = time.time() - 60
    res = run_module(vllm_wait, {"container": "vllm", "timeout": 1, "poll_interval": 0.5, "stall_timeout": 1800})
    assert res.get("failed", False) is False and res["phase"] == "loading_weights"


# ---- hardening: bytes that are not UTF-8, huge and endless files, a missing file, a container gone ----

def _utf8_clean(res):
    # What Ansible does with a result: a lone surrogate here makes it drop the whole result.
    json.dumps(res, ensure_ascii=False).encode("utf-8")


def test_invalid_utf8_in_an_error_line_keeps_class_and_hint(run_module, tmp_path):
    log = tmp_path / "serve.log"
    text = _text("fail_cuda_oom_v1_profiling.log").encode("utf-8")
    bad = text.replace(b"CUDA out of memory.", b"CUDA out of memory.\xff\xfe \xc3(", 1)
    assert bad != text
    log.write_bytes(bad)
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 0})
    assert res["failure"]["class"] == "cuda_oom"
    assert res["hint"] == res["failure"]["hint"]
    assert any("\ufffd" in ln for ln in res["failure"]["evidence"])
    _utf8_clean(res)


def test_invalid_utf8_from_the_journal_serialises(run_module, fake_bins):
    # run_command decodes with surrogateescape: the undecodable byte arrives as a lone surrogate.
    body = _text("fail_dependency_missing_v0.log").replace("No module named", "No module \udcff\udcfe named", 1)
    fake_bins({
        "journalctl": _journal(body, time.time()),
        "systemctl": lambda a: (0, "ActiveState=failed\nSubState=failed\nResult=exit-code\nExecMainStatus=1\n", ""),
    })
    res = run_module(vllm_wait, {"unit": "vllm-serve.service", "timeout": 0})
    assert res["failure"]["class"] == "dependency_missing"
    _utf8_clean(res)


def test_a_huge_file_is_read_from_its_tail_only(run_module, tmp_path):
    log = tmp_path / "serve.log"
    tail = _text("fail_cuda_oom_v1_profiling.log").encode("utf-8")
    with open(str(log), "wb") as fh:
        fh.truncate(200 * 1024 * 1024)  # 200 MB of a long serving log (sparse: no disk needed)
        fh.seek(0, 2)
        fh.write(b"\n" + tail)
    size = os.path.getsize(str(log))
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 0, "max_bytes": 1048576})
    assert res["failure"]["class"] == "cuda_oom"
    assert res["bytes_read"] <= 1048576
    assert res["skipped_bytes"] >= size - 1048576
    assert res["offset"] == size


def test_a_growing_file_is_read_once_not_again_per_poll(run_module, tmp_path):
    log = tmp_path / "serve.log"
    lines = _text("ok_v1_010_ray.log").splitlines(True)
    log.write_text("".join(lines[:30]))
    _writer(str(log), lines[30:], 0.005)
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 30, "poll_interval": 0.1})
    assert res["ready"] is True
    # every byte read once, however many polls it took
    assert res["bytes_read"] == res["offset"] == os.path.getsize(str(log))


def test_an_endless_file_is_refused_not_read(run_module):
    res = run_module(vllm_wait, {"log_file": "/dev/zero", "timeout": 5})
    assert res["failed"] is True
    assert "not a regular file" in res["msg"]


def test_max_bytes_too_small_is_refused(run_module, tmp_path):
    res = run_module(vllm_wait, {"log_file": str(tmp_path / "x.log"), "max_bytes": 100})
    assert res["failed"] is True and "max_bytes" in res["msg"]


def test_timeout_bounds_a_long_parse(run_module, tmp_path, monkeypatch):
    # Parsing is slowed to 0.2 s per 256 KiB piece; 4 MiB would take 3.2 s, timeout 1 stops it early.
    log = tmp_path / "serve.log"
    unit = _text("progress_v1_midload.log")
    log.write_text(unit * (4 * 1024 * 1024 // len(unit)))
    real_feed = _vllm_wait.VllmLogParser.feed

    def slow_feed(self, text):
        time.sleep(0.2)
        return real_feed(self, text)
    monkeypatch.setattr(_vllm_wait.VllmLogParser, "feed", slow_feed)
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 1, "poll_interval": 0.2, "stall_timeout": 0})
    assert res["timed_out"] is True
    assert res["bytes_read"] < os.path.getsize(str(log))   # the deadline stopped the reading, not the end of the file


def test_missing_log_file_while_waiting_is_log_missing_not_starting(run_module, tmp_path):
    path = str(tmp_path / "nope.log")
    res = run_module(vllm_wait, {"log_file": path, "timeout": 60, "poll_interval": 0.5})
    assert res["failed"] is True
    assert res["failure"]["class"] == "log_missing"
    assert path in res["failure"]["evidence"][0]
    assert "log_file" in res["hint"]
    assert res["timed_out"] is False          # named after its grace, not after the 60 s timeout


def test_log_file_that_appears_within_the_grace_is_followed(run_module, tmp_path):
    log = tmp_path / "serve.log"

    def late():
        time.sleep(0.5)
        log.write_text(_text("progress_v1_midload.log"))
    threading.Thread(target=late, daemon=True).start()
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 3, "poll_interval": 0.2, "stall_timeout": 0})
    assert not res.get("failed"), res.get("failure")
    assert res["phase"] == "loading_weights"


_INVOCATION = "0f3c2a9d8b7e4c1a9e2d3b4c5a6f7e8d"


def _systemctl(state):
    def answer(args):
        if "InvocationID" in args:
            return 0, _INVOCATION + "\n", ""
        return 0, state, ""
    return answer


def test_container_gone_classifies_from_the_unit_journal(run_module, fake_bins):
    # The engine died within seconds and its --rm container is gone: the cause is in the unit's journal.
    body = _text("fail_insufficient_memory_free_v1.log")
    fake = fake_bins({
        "docker": _no_such_container,
        "journalctl": lambda a: (0, body + "-- cursor: s=9\n", ""),
        "systemctl": _systemctl("ActiveState=activating\nSubState=auto-restart\nResult=exit-code\nExecMainStatus=1\n"),
    })
    res = run_module(vllm_wait, {"container": "vllm", "unit": "sparkfleet-vllm", "timeout": 10, "poll_interval": 0.2})
    assert res["failure"]["class"] == "insufficient_memory"
    assert res["log_source"] == "journal"
    assert res["timed_out"] is False
    jcalls = [c for c in fake.calls if c[0].endswith("journalctl")]
    assert "_SYSTEMD_INVOCATION_ID=" + _INVOCATION in jcalls[0]


def test_a_container_removed_between_its_log_read_and_its_inspect_classifies_from_the_unit_journal(
        run_module, fake_bins):
    # Seen in CI: a rank died 2 s into loading; docker logs still answered (without the crash lines), then the --rm
    # container was gone when inspected. The crash is in the unit's journal: the cause comes from there, not
    # engine_exited.
    out, err = _docker_split("progress_v1_midload.log")
    body = _text("fail_insufficient_memory_free_v1.log")
    fake_bins({
        "docker": lambda a: (0, out, err) if a[1] == "logs" else _no_such_container(a),
        "journalctl": lambda a: (0, body + "-- cursor: s=9\n", ""),
        "systemctl": _systemctl("ActiveState=activating\nSubState=auto-restart\nResult=exit-code\nExecMainStatus=1\n"),
    })
    res = run_module(vllm_wait, {"container": "vllm", "unit": "sparkfleet-vllm", "timeout": 10, "poll_interval": 0.2})
    assert res["failure"]["class"] == "insufficient_memory" and res["log_source"] == "journal"


def test_a_container_removed_with_a_silent_journal_stays_engine_exited(run_module, fake_bins):
    out, err = _docker_split("progress_v1_midload.log")
    fake_bins({
        "docker": lambda a: (0, out, err) if a[1] == "logs" else _no_such_container(a),
        "journalctl": lambda a: (0, "-- No entries --\n", ""),
        "systemctl": _systemctl("ActiveState=activating\nSubState=auto-restart\nResult=exit-code\nExecMainStatus=1\n"),
    })
    res = run_module(vllm_wait, {"container": "vllm", "unit": "sparkfleet-vllm", "timeout": 10, "poll_interval": 0.2})
    assert res["failure"]["class"] == "engine_exited" and res["log_source"] == "docker"
    assert "docker: container vllm not found" in res["failure"]["evidence"]


def test_container_gone_and_journal_silent_is_engine_exited_with_systemd_evidence(run_module, fake_bins):
    fake_bins({
        "docker": _no_such_container,
        "journalctl": lambda a: (0, "-- No entries --\n", ""),
        "systemctl": _systemctl("ActiveState=failed\nSubState=failed\nResult=signal\nExecMainStatus=9\n"),
    })
    res = run_module(vllm_wait, {"container": "vllm", "unit": "sparkfleet-vllm", "timeout": 0})
    assert res["failure"]["class"] == "engine_exited"
    assert any("Result=signal" in ln for ln in res["failure"]["evidence"])


def test_container_missing_while_its_unit_runs_is_waited_for(run_module, fake_bins):
    # The unit is up (docker pulling the image): the container's absence is not an exit.
    fake_bins({
        "docker": _no_such_container,
        "journalctl": lambda a: (0, "", ""),
        "systemctl": _systemctl("ActiveState=active\nSubState=running\nResult=success\nExecMainStatus=0\n"),
    })
    res = run_module(vllm_wait, {"container": "vllm", "unit": "sparkfleet-vllm", "timeout": 1, "poll_interval": 0.2})
    assert res.get("failed", False) is False
    assert res["timed_out"] is True and res["phase"] == "starting"


def test_container_polls_fetch_only_new_lines(run_module, fake_bins):
    # A fake docker that honours --since (inclusive, like docker): the log grows by one line per call.
    out, err = _docker_split("progress_v1_midload.log", time.time() - 60)
    every = sorted((out + err).split("\n")[:-1], key=lambda ln: ln.split(" ", 1)[0])
    shown = {"n": len(every) - 5}
    calls = []

    def docker(args):
        if args[1] != "logs":
            return 0, "running 0 false\n", ""
        calls.append(args)
        since = args[args.index("--since") + 1] if "--since" in args else ""
        lines = [ln for ln in every[:shown["n"]] if ln.split(" ", 1)[0] >= since]
        shown["n"] = min(len(every), shown["n"] + 1)
        return 0, "".join(ln + "\n" for ln in lines), ""
    fake_bins({"docker": docker})
    res = run_module(vllm_wait, {"container": "vllm", "timeout": 2, "poll_interval": 0.2, "stall_timeout": 0})
    assert res["phase"] == "loading_weights"
    assert len(calls) >= 6
    assert "--since" not in calls[0] and "--since" in calls[1]
    # each line parsed once although the last stamp is sent again every time: as many as one whole read
    fake_bins({"docker": lambda a: (0, "".join(ln + "\n" for ln in every), "") if a[1] == "logs"
               else (0, "running 0 false\n", "")})
    whole = run_module(vllm_wait, {"container": "vllm", "timeout": 0})
    assert res["lines"] == whole["lines"]


def test_a_long_journal_is_parsed_from_its_tail(run_module, fake_bins):
    noise = "".join("(APIServer pid=1) INFO 08-20 10:20:%02d [loggers.py:123] Engine 000: Avg prompt "
                    "throughput: 0.0 tokens/s\n" % (i % 60) for i in range(30000))
    body = noise + _text("fail_cuda_oom_v1_profiling.log")
    fake_bins({
        "journalctl": _journal(body, time.time()),
        "systemctl": lambda a: (0, "ActiveState=failed\nSubState=failed\nResult=exit-code\nExecMainStatus=1\n", ""),
    })
    res = run_module(vllm_wait, {"unit": "vllm-serve.service", "timeout": 0, "max_bytes": 1048576})
    assert res["failure"]["class"] == "cuda_oom"
    # journalctl's output is cut to the last max_bytes before the module holds it: the rest never arrives
    assert res["lines"] * 100 < 1048576 < len(body)
    assert res["skipped_chars"] > 0  # the line the byte cut split


@pytest.mark.parametrize("args, why", [
    ({"url": "ftp://x"}, "url must be http://HOST[:PORT]"),
    ({"url": "10.0.0.1:30000"}, "url must be"),
    ({"url": "http://10.0.0.1:30000", "timeout": -1}, "timeout must be 0 to 604800 seconds"),
    ({"url": "http://10.0.0.1:30000", "stall_timeout": -5}, "stall_timeout must be 0 to 604800 seconds"),
])
def test_bad_arguments_are_refused_before_anything_is_read(run_module, args, why):
    res = run_module(vllm_wait, args)
    assert res["failed"] is True and why in res["msg"], res


@pytest.mark.parametrize("url", ["http://127.0.0.1:1", "https://localhost:1/v1", "http://[::1]:1"])
def test_good_urls_pass_validation(run_module, url):
    # Loopback only, and a port nothing listens on: the module reads once and reports the API as not up.
    res = run_module(vllm_wait, {"url": url, "timeout": 0})
    assert "url must be" not in res.get("msg", ""), res


# ---- the cause table is the documentation's source; hints name the caller's settings ----

def test_documentation_lists_exactly_the_cause_table():
    # DOCUMENTATION stays a static string (ansible-doc and sanity read it without importing): it must hold
    # the sentence the table makes, so a class added to the table without its documentation fails here.
    import yaml
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine._vllm_causes import doc_note
    doc = yaml.safe_load(vllm_wait.DOCUMENTATION)
    notes = [n for n in doc["notes"] if n.startswith("Failure classes")]
    assert notes == [doc_note()], "paste _vllm_causes.doc_note() into vllm_wait's notes:\n" + doc_note()


def test_hints_name_the_settings_as_the_caller_says(run_module):
    names = {"gpu_memory_utilization": "my_gpu_fraction", "ray_memory_monitor": "my_ray_monitor: off"}
    res = run_module(vllm_wait, {"log_file": fixture("fail_ray_oom_killed_v1_graphs.log"), "timeout": 0,
                                 "setting_names": names})
    assert res["failure"]["class"] == "ray_oom_killed"
    assert "lower my_gpu_fraction (the default 0.80" in res["hint"] and "my_ray_monitor: off" in res["hint"]
    assert res["hint"] == res["failure"]["hint"]
    plain = run_module(vllm_wait, {"log_file": fixture("fail_ray_oom_killed_v1_graphs.log"), "timeout": 0})
    assert "--gpu-memory-utilization" in plain["hint"] and "{" not in plain["hint"]


def test_api_hints_name_the_settings_as_the_caller_says(run_module, api):
    handler, url = api
    res = run_module(vllm_wait, {"url": url, "api_key": "wrong", "timeout": 30,
                                 "setting_names": {"api_key": "vllm_serve_api_key"}})
    assert res["failed"] is True and "(vllm_serve_api_key)" in res["hint"]


@pytest.mark.parametrize("names, why", [
    ({"gpu_memory_utilisation": "x"}, "unknown setting(s) gpu_memory_utilisation"),
    ({"port": ""}, "non-empty strings (port)"),
])
def test_bad_setting_names_are_refused(run_module, names, why):
    res = run_module(vllm_wait, {"log_file": fixture("ok_v1_010_ray.log"), "timeout": 0, "setting_names": names})
    assert res["failed"] is True and why in res["msg"], res


# ---- issue 17 defect 8: journal and docker logs read from the end, bounded in memory and time ----

@pytest.fixture
def held_outputs(monkeypatch):
    """The size of every command output the module held (what reached Python, after any tail -c)."""
    from ansible_collections.sparkfleet.vllm.plugins.module_utils import _command
    sizes = []
    real = _command.Runner.run

    def run(self, argv, *args, **kwargs):
        res = real(self, argv, *args, **kwargs)
        sizes.append(len(res.stdout) + len(res.stderr))
        return res
    monkeypatch.setattr(_command.Runner, "run", run)
    return sizes


def test_a_huge_journal_never_reaches_the_module_whole(run_module, fake_bins, held_outputs):
    # 24 MB of serving log before the failure: journalctl is asked for its newest entries only (-n), and its output
    # is cut to max_bytes before the module holds it.
    noise = "(APIServer pid=1) INFO 08-20 10:20:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0\n" * 250000
    body = noise + _text("fail_cuda_oom_v1_profiling.log")
    fake = fake_bins({
        "journalctl": _journal(body, time.time()),
        "systemctl": lambda a: (0, "ActiveState=failed\nSubState=failed\nResult=exit-code\nExecMainStatus=1\n", ""),
    })
    res = run_module(vllm_wait, {"unit": "vllm-serve.service", "timeout": 0, "max_bytes": 1048576})
    assert res["failure"]["class"] == "cuda_oom"
    read = [c for c in fake.calls if c[0].endswith("journalctl") and "cat" in c]
    assert "-n" in read[0]
    assert max(held_outputs) <= 1048576 + 1


def test_a_huge_container_log_never_reaches_the_module_whole(run_module, fake_bins, held_outputs):
    out, err = _docker_split("fail_cuda_oom_v1_profiling.log")
    filler = "".join("2026-11-29T09:00:%02d.%09dZ (APIServer pid=1) INFO 08-20 10:20:00 [loggers.py:123] Avg prompt "
                     "throughput: 0.0\n" % (i % 60, i) for i in range(200000))
    fake = fake_bins({"docker": lambda a: (0, filler + out, err) if a[1] == "logs" else (0, "exited 1 false\n", "")})
    res = run_module(vllm_wait, {"container": "vllm", "timeout": 0, "max_bytes": 1048576})
    assert res["failure"]["class"] == "cuda_oom"
    logs = [c for c in fake.calls if c[1] == "logs"]
    assert "--tail" in logs[0]
    assert max(held_outputs) <= 1048576 + 1


def _tool(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_a_journal_that_does_not_answer_cannot_hold_the_call_past_its_timeout(run_module, tmp_path, monkeypatch):
    # A journalctl that hangs (a huge or broken journal): the read is killed when the call's time is up.
    tools = {"journalctl": _tool(tmp_path, "journalctl", "exec sleep 120"),
             "systemctl": _tool(tmp_path, "systemctl", "echo ActiveState=active; echo SubState=running")}
    real = basic.AnsibleModule.get_bin_path
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, opt_dirs=None: tools.get(name) or real(self, name, required))
    from ansible_collections.sparkfleet.vllm.plugins.module_utils import _command
    limits = []
    real_run = _command.Runner.run

    def run(self, argv, *args, **kwargs):
        if "journalctl" in " ".join(str(a) for a in argv):
            limits.append((kwargs.get("timeout"), kwargs.get("kill_after")))
        return real_run(self, argv, *args, **kwargs)
    monkeypatch.setattr(_command.Runner, "run", run)
    res = run_module(vllm_wait, {"unit": "vllm-serve.service", "timeout": 2, "poll_interval": 1})
    assert res["timed_out"] is True and "did not answer" in res["read_error"]
    # every read is bounded by what is left of the call's 2 s, or the shortest a command is given (it waited 120 s
    # for journalctl before), and killed hard after
    bound = max(2, _vllm_wait._MIN_COMMAND_S)
    assert limits and all(t is not None and t <= bound and k for t, k in limits), limits


def test_the_role_passes_since_to_every_wait():
    import yaml
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
    tasks = yaml.safe_load(open(os.path.join(root, "roles", "vllm_serve", "tasks", "wait.yml")))
    waits = [t for blk in tasks for t in blk.get("block", [blk]) if "sparkfleet.vllm.vllm_wait" in t]
    assert waits and all("since" in t["sparkfleet.vllm.vllm_wait"] for t in waits)


# ---- issue 17 defect 9: replaced logs, non-finite numbers, bad ports and keys, millions of short lines ----

def test_a_log_replaced_by_a_longer_file_while_waiting_is_read_from_its_start(run_module, tmp_path):
    log = tmp_path / "serve.log"
    log.write_text(_text("progress_v1_midload.log")[:4000])
    failing = _text("fail_cuda_oom_v1_profiling.log")
    assert len(failing) > 4000 and "CUDA out of memory" in failing[:4000] + failing[4000:]

    def replace():
        time.sleep(0.6)
        new = tmp_path / "new.log"
        new.write_text(failing + "(APIServer pid=1) INFO 08-20 10:30:00 [x.py:1] still writing\n" * 20)
        os.rename(str(new), str(log))
    threading.Thread(target=replace, daemon=True).start()
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 8, "poll_interval": 0.2, "stall_timeout": 0})
    assert res["failure"]["class"] == "cuda_oom", res.get("summary")
    assert res["replaced"] == 1


def test_millions_of_two_byte_lines_are_bounded_by_lines_not_read_whole(run_module, tmp_path):
    log = tmp_path / "serve.log"
    with open(str(log), "w") as fh:
        fh.write("a\n" * (4 * 1024 * 1024))  # 8 MiB of 2-byte lines
        fh.write(_text("fail_cuda_oom_v1_profiling.log"))
    res = run_module(vllm_wait, {"log_file": str(log), "timeout": 0})
    assert res["failure"]["class"] == "cuda_oom"
    assert res["lines"] <= _vllm_wait.MAX_LINES + 1000  # not the 4 million lines of the file
    assert res["skipped_bytes"] > 7 * 1024 * 1024


def _unit_then(first, first_state, later_body, later_state, after=3):
    """systemctl and journalctl of a unit whose run ended (``first``, its journal; ``first_state``, systemd's view
    while it waits to start the unit again); from the ``after``-th look on, the next start has happened: its journal
    and its state."""
    seen = {"n": 0}

    def systemctl(args):
        if "InvocationID" in args:
            return 0, _INVOCATION + "\n", ""
        seen["n"] += 1
        return 0, (first_state if seen["n"] < after else later_state), ""

    def journalctl(args):
        body = first + (later_body if seen["n"] >= after else "")
        if "short-unix" in args:
            return 0, "%.6f spark-1 vllm[2211]: last line\n" % time.time(), ""
        return 0, body + "-- cursor: s=1\n", ""
    return systemctl, journalctl


def _restarting_cleanly_then(later_body, later_state, after=3):
    """A unit that ended cleanly (Result=success) and is about to be started again by Restart=always."""
    return _unit_then(_text("progress_v1_midload.log"),
                      "ActiveState=activating\nSubState=auto-restart\nResult=success\nExecMainStatus=0\nNRestarts=0\n",
                      later_body, later_state, after)


def test_a_clean_end_that_systemd_restarts_is_followed_to_the_next_start(run_module, fake_bins):
    # Seen in CI: the engine ended cleanly during the deploy's wait (auto-restart, Result=success); the next start's
    # memory gate escalated. The answer is the escalation, not engine_exited from the first look.
    systemctl, journalctl = _restarting_cleanly_then(
        _text("fail_supervision_escalated_memory_journal.log"),
        "ActiveState=activating\nSubState=auto-restart\nResult=exit-code\nExecMainStatus=3\nNRestarts=1\n")
    fake_bins({"journalctl": journalctl, "systemctl": systemctl, "docker": _no_such_container})
    res = run_module(vllm_wait, {"container": "vllm", "unit": "sparkfleet-vllm", "timeout": 10, "poll_interval": 0.1})
    assert res["failure"]["class"] == "supervision_escalated", res["failure"]


def test_a_clean_end_is_followed_a_bounded_number_of_times(run_module, fake_bins):
    fake_bins({
        "journalctl": _journal(_text("progress_v1_midload.log"), time.time()),
        "systemctl": _systemctl("ActiveState=activating\nSubState=auto-restart\nResult=success\nExecMainStatus=0\n"
                                "NRestarts=%d\n" % _vllm_wait.CLEAN_RESTARTS_FOLLOWED),
    })
    res = run_module(vllm_wait, {"unit": "sparkfleet-vllm", "timeout": 10, "poll_interval": 0.1})
    assert res["failure"]["class"] == "engine_exited"
    assert any("NRestarts=%d" % _vllm_wait.CLEAN_RESTARTS_FOLLOWED in ln for ln in res["failure"]["evidence"])


def test_a_crash_that_systemd_restarts_is_still_engine_exited_at_once(run_module, fake_bins):
    fake_bins({
        "journalctl": _journal(_text("progress_v1_midload.log"), time.time()),
        "systemctl": _systemctl("ActiveState=activating\nSubState=auto-restart\nResult=exit-code\nExecMainStatus=1\n"
                                "NRestarts=0\n"),
    })
    res = run_module(vllm_wait, {"unit": "sparkfleet-vllm", "timeout": 10, "poll_interval": 0.1})
    assert res["failure"]["class"] == "engine_exited"
    assert any("Result=exit-code" in ln for ln in res["failure"]["evidence"])


# The memory gate's refusal as sparkfleet_watchdog.py's refuse() writes it (tests/unit/roles/test_sparkfleet_memory.py
# holds the two together), with systemd's words around it (systemd 252, the lab's).
_GATE_REFUSED = (
    "Starting sparkfleet-vllm.service - sparkfleet vLLM API (Qwen/Qwen3.5-122B-A10B-FP8)...\n"
    "memory gate: waiting up to 600 s for sparkfleet-ray to run and Ray's cluster to have 2 GPU(s)\n"
    "sparkfleet-watchdog: memory gate: not starting the engine yet (spark-2: 3.1 GiB short of the 60.2 GiB the engine"
    " takes); systemd tries again (refusal 1 of 3 before escalating)\n"
    "sparkfleet-vllm.service: Control process exited, code=exited, status=3/NOTIMPLEMENTED\n"
    "sparkfleet-vllm.service: Failed with result 'exit-code'.\n"
    "sparkfleet-vllm.service: Scheduled restart job, restart counter is at 1.\n")


def _refused_then(later_body, later_state, after=3, refusal=_GATE_REFUSED):
    """A unit whose memory gate refused its start (ExecStartPre exit 3, Restart=always), about to be started again."""
    return _unit_then(refusal,
                      "ActiveState=activating\nSubState=auto-restart\nResult=exit-code\nExecMainStatus=0\nNRestarts=1\n",
                      later_body, later_state, after)


@pytest.mark.parametrize("container", [None, "vllm"])
def test_a_start_the_memory_gate_refused_is_followed_to_the_escalation(run_module, fake_bins, container):
    # Seen in CI: the deploy's wait answered engine_exited ("Scheduled restart job, restart counter is at 1") a few
    # seconds after the gate refused the deploy's start, and before the next start's gate escalated.
    systemctl, journalctl = _refused_then(
        _text("fail_supervision_escalated_memory_journal.log"),
        "ActiveState=failed\nSubState=failed\nResult=exit-code\nExecMainStatus=0\nNRestarts=2\n")
    fake_bins({"journalctl": journalctl, "systemctl": systemctl, "docker": _no_such_container})
    args = {"unit": "sparkfleet-vllm", "timeout": 10, "poll_interval": 0.1}
    if container:
        args["container"] = container
    res = run_module(vllm_wait, args)
    assert res["failure"]["class"] == "supervision_escalated", res["failure"]


def test_a_start_the_gate_refused_is_followed_to_a_start_that_serves(run_module, fake_bins):
    systemctl, journalctl = _refused_then(
        "memory gate: spark-1 ok; spark-2 ok\n" + _text("ok_v1_011_journal.log"),
        "ActiveState=active\nSubState=running\nResult=success\nExecMainStatus=0\nNRestarts=1\n")
    fake_bins({"journalctl": journalctl, "systemctl": systemctl})
    res = run_module(vllm_wait, {"unit": "sparkfleet-vllm", "timeout": 10, "poll_interval": 0.1})
    assert res.get("ready") and not res.get("failure"), res


def test_the_gates_last_refusal_is_not_followed(run_module, fake_bins):
    # The gate escalates at its last refusal itself; a refusal that says it is the last and no escalation after it
    # (a gate of another version) ends the wait as engine_exited, not a wait to the deadline.
    systemctl, journalctl = _refused_then("", "ActiveState=activating\nSubState=auto-restart\nResult=exit-code\n"
                                          "ExecMainStatus=0\nNRestarts=3\n",
                                          refusal=_GATE_REFUSED.replace("refusal 1 of 3", "refusal 3 of 3"))
    fake_bins({"journalctl": journalctl, "systemctl": systemctl})
    res = run_module(vllm_wait, {"unit": "sparkfleet-vllm", "timeout": 10, "poll_interval": 0.1})
    assert res["failure"]["class"] == "engine_exited"
