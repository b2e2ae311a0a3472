"""The stand-in's HTTP answers, driven in-process (no socket): what the collection's health checks rely on."""

from __future__ import annotations

import io
import json

import pytest

from sparklab_vllm import api_server


class FakeEngine:
    def __init__(self, dead=False, fail=False):
        self.dead = dead
        self.fail = fail
        self.calls = []
        self.stats = {"running": 0, "waiting": 0, "prompt_tokens": 0, "generation_tokens": 0,
                      "success": {"length": 0, "stop": 0, "abort": 0}}

    def generate(self, prompt, count):
        self.calls.append((prompt, count))
        if self.fail:
            self.dead = True
            return None
        return list(range(count))


def _state(engine, keys=("sekret",)):
    died = []
    return {"engine": engine, "served": ["tiny"], "model": "/models/tiny", "max_model_len": 64,
            "api_keys": list(keys), "access_log": False, "on_engine_dead": lambda: died.append(1), "_died": died}


def call(state, method, path, body=None, key=None):
    data = json.dumps(body).encode() if body is not None else b""
    head = "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % (method, path, len(data))
    if key:
        head += "Authorization: Bearer %s\r\n" % key
    handler_cls = api_server.make_handler(state)
    h = handler_cls.__new__(handler_cls)
    h.rfile = io.BytesIO(head.encode() + b"\r\n" + data)
    h.wfile = io.BytesIO()
    h.client_address = ("10.99.0.1", 40000)
    h.request_version = "HTTP/1.1"
    h.raw_requestline = h.rfile.readline(65537)
    assert h.parse_request()
    getattr(h, "do_" + method)()
    raw = h.wfile.getvalue().decode()
    status = int(raw.split(" ", 2)[1])
    payload = raw.split("\r\n\r\n", 1)[1]
    return status, (json.loads(payload) if payload.startswith("{") else payload)


def test_health_ping_version_need_no_key_and_follow_the_engine():
    engine = FakeEngine()
    st = _state(engine)
    assert call(st, "GET", "/health") == (200, "")
    assert call(st, "GET", "/ping")[0] == 200
    assert call(st, "GET", "/version") == (200, {"version": "0.17.1"})
    engine.dead = True
    assert call(st, "GET", "/health")[0] == 503
    assert call(st, "POST", "/ping")[0] == 503


def test_v1_routes_need_the_key():
    st = _state(FakeEngine())
    assert call(st, "GET", "/v1/models") == (401, {"error": "Unauthorized"})
    assert call(st, "GET", "/v1/models", key="wrong")[0] == 401
    status, body = call(st, "GET", "/v1/models", key="sekret")
    assert status == 200 and [m["id"] for m in body["data"]] == ["tiny"]
    assert body["data"][0]["max_model_len"] == 64


def test_completion_honours_max_tokens_and_counts_usage():
    engine = FakeEngine()
    st = _state(engine)
    status, body = call(st, "POST", "/v1/completions", {"model": "tiny", "prompt": "Hello sparks !", "max_tokens": 5},
                        key="sekret")
    assert status == 200 and body["object"] == "text_completion"
    assert len(body["choices"][0]["text"].split()) == 5 and body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8,
                             "prompt_tokens_details": None}
    assert engine.calls == [("Hello sparks !", 5)]
    status, chat = call(st, "POST", "/v1/chat/completions",
                        {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
                        key="sekret")
    assert status == 200 and chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["completion_tokens"] == 2


def test_wrong_model_and_too_long_requests_are_refused_like_vllm():
    st = _state(FakeEngine())
    status, body = call(st, "POST", "/v1/completions", {"model": "other", "prompt": "x"}, key="sekret")
    assert status == 404 and body["error"]["message"] == "The model `other` does not exist."
    status, body = call(st, "POST", "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 100},
                        key="sekret")
    assert status == 400 and body["error"]["message"].startswith("This model's maximum context length is 64 tokens.")


def test_a_failed_step_is_a_500_then_the_engine_reads_dead():
    engine = FakeEngine(fail=True)
    st = _state(engine)
    status, _body = call(st, "POST", "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 2},
                         key="sekret")
    assert status == 500
    assert st["_died"] == [1]  # the server is told to stop, as vLLM's EngineDeadError handler does
    assert call(st, "GET", "/health")[0] == 503


def test_metrics_count_served_tokens():
    st = _state(FakeEngine())
    call(st, "POST", "/v1/completions", {"model": "tiny", "prompt": "a b", "max_tokens": 4}, key="sekret")
    status, text = call(st, "GET", "/metrics")
    assert status == 200
    assert 'vllm:generation_tokens_total{engine="0",model_name="tiny"} 4.0' in text
    assert 'vllm:prompt_tokens_total{engine="0",model_name="tiny"} 2.0' in text


@pytest.mark.parametrize("body", [{"model": "tiny"}, {"model": "tiny", "prompt": "x", "max_tokens": 0}])
def test_bad_completion_bodies_are_400(body):
    assert call(_state(FakeEngine()), "POST", "/v1/completions", body, key="sekret")[0] == 400
