"""serving_bench: the own client against real HTTP servers (a token-by-token stream, the lab stand-in's captured
one-piece stream and its 401), and `vllm bench serve` on a published capture."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine import _load_test as lt
from ansible_collections.sparkfleet.vllm.plugins.modules import serving_bench

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "serving_bench")
KEY = "sk-qualify-secret-123"


def read(name):
    with open(os.path.join(FIXTURES, name), "rb") as f:
        return f.read()


def capture(name):
    """A captured HTTP answer, byte for byte (kept as JSON: the repository's files end lines with LF only)."""
    with open(os.path.join(FIXTURES, name + ".json"), encoding="utf-8") as f:
        return json.load(f)["raw"].encode("utf-8")


class Server(object):
    """A loopback HTTP server answering every request with ``respond(conn, request_bytes)``."""

    def __init__(self, respond):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.requests = []
        self.respond = respond
        self.open = 0
        self.peak = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                conn = self.sock.accept()[0]
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        with self.lock:
            self.open += 1
            self.peak = max(self.peak, self.open)
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(4096)
        head, body = data.split(b"\r\n\r\n", 1)
        length = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0])
        while len(body) < length:
            body += conn.recv(4096)
        self.requests.append((head.decode(), json.loads(body)))
        try:
            self.respond(conn, head.decode(), json.loads(body))
        finally:
            with self.lock:
                self.open -= 1
            conn.close()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def close(self):
        self.sock.close()


def token_stream(conn, head, body):
    """A vLLM-like stream: one chunk per token, 5 ms apart, usage at the end."""
    if "Bearer %s" % KEY not in head:
        conn.sendall(capture("standin_401"))
        return
    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
    n = body["max_tokens"]

    def chunk(obj):
        data = ("data: %s\n\n" % (obj if isinstance(obj, str) else json.dumps(obj))).encode()
        conn.sendall(b"%x\r\n%s\r\n" % (len(data), data))

    time.sleep(0.02)  # prefill
    for i in range(n):
        chunk({"choices": [{"index": 0, "text": " w%d" % i}], "usage": None})
        time.sleep(0.005)
    chunk({"choices": [], "usage": {"completion_tokens": n, "prompt_tokens": 9}})
    chunk("[DONE]")
    conn.sendall(b"0\r\n\r\n")


@pytest.fixture
def server():
    made = []

    def make(respond):
        made.append(Server(respond))
        return made[-1]

    yield make
    for s in made:
        s.close()


def test_token_stream_gives_ttft_itl_and_throughput_per_level(run_module, server):
    srv = server(token_stream)
    result = run_module(serving_bench, dict(url=srv.url + "/v1", model="m", api_key=KEY, concurrency=[1, 4],
                                            rounds=2, min_requests=3, output_tokens=10, input_tokens=5,
                                            tool="client"), check_mode=True)
    assert result.get("failed") is None, result
    assert result["tool"] == "client"
    one, four = result["levels"]
    assert (one["concurrency"], one["requests"], one["ok"]) == (1, 3, 3)
    assert (four["concurrency"], four["requests"], four["ok"]) == (4, 8, 8)
    assert one["output_tokens"] == 30 and one["output_tok_s"] > 0
    assert one["ttft_ms"]["p50"] >= 15 and 3 <= one["itl_ms"]["p50"] < 100 and one["itl_note"] is None
    assert srv.peak == 4 or srv.peak >= 3  # four users at once
    head, body = srv.requests[0]
    assert "POST /v1/completions HTTP/1.1" in head and "Bearer %s" % KEY in head
    assert body["stream"] is True and body["ignore_eos"] is True and body["max_tokens"] == 10
    assert len(body["prompt"].split()) == 6  # 5 words and the request's number
    assert KEY not in json.dumps(result)


def test_the_stand_in_sends_a_completion_in_one_piece_no_itl(run_module, server):
    srv = server(lambda conn, head, body: conn.sendall(capture("standin_stream")))
    result = run_module(serving_bench, dict(url=srv.url, model="sparklab/tiny-moe", concurrency=[1], tool="client"))
    level = result["levels"][0]
    assert level["ok"] == 8 and level["output_tokens"] == 64  # usage says 8 per completion
    assert level["itl_ms"] is None and level["tpot_ms"] is None
    assert level["itl_note"] == "the server sent each completion in one piece: no inter-token gaps"


def test_a_wrong_key_fails_without_showing_the_key(run_module, server):
    srv = server(token_stream)
    result = run_module(serving_bench, dict(url=srv.url, model="m", api_key="sk-wrong-key-456", concurrency=[1, 4],
                                            tool="client"))
    assert result["failed"] and "(HTTP 401 Unauthorized)" in result["msg"]
    assert len(result["levels"]) == 1  # no further level once nothing answers
    assert "sk-wrong-key-456" not in json.dumps(result)


def test_nothing_listening(run_module, server):
    srv = server(token_stream)
    url = srv.url
    srv.close()
    result = run_module(serving_bench, dict(url=url, model="m", concurrency=[1], tool="client", timeout=5))
    assert result["failed"] and "no request to %s/v1/completions succeeded" % url in result["msg"]


@pytest.fixture
def docker(node_commands):
    state = {"out": read("vllm_bench_serve.txt").decode("utf-8")}

    def answer(cmd):
        if cmd[-1] == "--help":
            return 0, "  --max-concurrency MAX_CONCURRENCY\n", ""
        return 0, state["out"], ""
    fake = node_commands(answer, unwrap=False)
    state["calls"] = fake.ran
    state["kwargs"] = fake.kwargs
    return state


def test_vllm_bench_serve_in_the_api_container(run_module, docker):
    result = run_module(serving_bench, dict(url="http://10.99.0.11:30000", model="m", api_key=KEY, concurrency=[1, 16],
                                            container="sparkfleet-vllm", tokenizer="/models/m"))
    assert result.get("failed") is None, result
    assert result["tool"] == "vllm bench serve" and len(result["levels"]) == 2
    level = result["levels"][1]
    assert level["concurrency"] == 16 and level["ok"] == 100 and level["output_tok_s"] == 190.40
    assert level["ttft_ms"] == {"mean": 8387.80, "p50": 9066.78, "p99": 14937.16}
    assert level["itl_ms"]["p50"] == 180.39 and level["tpot_ms"]["p99"] == 1288.01
    bench = docker["calls"][2]
    assert "--max-concurrency" in bench and bench[bench.index("--max-concurrency") + 1] == "16"
    assert bench[bench.index("--num-prompts") + 1] == "32" and bench[bench.index("--tokenizer") + 1] == "/models/m"
    assert ["-e", "OPENAI_API_KEY"] == bench[bench.index("exec") + 1:bench.index("exec") + 3]
    assert KEY not in " ".join(bench) and docker["kwargs"][2]["environ_update"]["OPENAI_API_KEY"] == KEY
    assert KEY not in json.dumps(result)


def test_vllm_bench_without_a_result_fails(run_module, docker):
    docker["out"] = "Traceback ...\nConnectionRefusedError"
    result = run_module(serving_bench, dict(url="http://10.99.0.11:30000", model="m", container="c", tool="vllm"))
    assert result["failed"] and "vllm bench serve printed no result" in result["msg"]


@pytest.mark.parametrize("args, message", [
    (dict(url="10.99.0.11:30000"), "is not an http(s) URL"),
    (dict(concurrency=[0]), "each level must be 1-1024 users"),
    (dict(tool="vllm"), "container is not set"),
    (dict(rounds=0), "rounds=0 is below 1"),
])
def test_bad_arguments(run_module, args, message):
    result = run_module(serving_bench, dict(dict(url="http://10.99.0.11:30000", model="m"), **args))
    assert result["failed"] and message in result["msg"]


def test_sse_split_across_chunks_and_pieces():
    sse = lt.SSE()
    assert sse.feed(b'data: {"choices": [{"text": "a"}]}\n') == []
    assert sse.feed(b'\ndata: [DONE]\n\n') == ['{"choices": [{"text": "a"}]}', "[DONE]"]
    assert lt.piece_text({"choices": [{"delta": {"content": "x"}}]}) == "x"
    assert lt.piece_text({"choices": []}) == ""


def test_capacity_from_itl_doubling():
    from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._qualify import capacity
    levels = [{"concurrency": c, "ok": 1, "itl_ms": {"p50": v}} for c, v in ((1, 30), (4, 35), (16, 59), (64, 140))]
    assert capacity(levels)["users"] == 16 and "first above twice that at 64 users" in capacity(levels)["note"]
