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
        self.stats = {"running": 0, "waiting": 0, "kv_tokens": 0}

    def generate(self, prompt, count, timing=None):
        self.calls.append((prompt, count))
        if self.fail:
            self.dead = True
            return None
        if timing is not None:
            timing.update(queue_s=0.03, step_s=0.4)
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
    # the engine's measured 0.03 s queue and 0.4 s step for 4 tokens: first token at 0.13 s, then 0.1 s apart
    assert 'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="tiny"} 0.0' in text
    assert 'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.25",model_name="tiny"} 1.0' in text
    assert 'vllm:inter_token_latency_seconds_count{engine="0",model_name="tiny"} 3.0' in text
    assert 'vllm:request_queue_time_seconds_sum{engine="0",model_name="tiny"} 0.03' in text
    assert 'vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 1.0' in text


def test_metrics_do_not_move_without_requests():
    st = _state(FakeEngine())
    text = call(st, "GET", "/metrics")[1]
    assert 'vllm:generation_tokens_total{engine="0",model_name="tiny"} 0.0' in text
    assert 'vllm:e2e_request_latency_seconds_count{engine="0",model_name="tiny"} 0.0' in text
    call(st, "POST", "/v1/completions", {"model": "tiny", "prompt": "x"}, key="wrong")  # refused: 401, not counted
    assert call(st, "GET", "/metrics")[1] == text


@pytest.mark.parametrize("body", [{"model": "tiny"}, {"model": "tiny", "prompt": "x", "max_tokens": 0}])
def test_bad_completion_bodies_are_400(body):
    assert call(_state(FakeEngine()), "POST", "/v1/completions", body, key="sekret")[0] == 400


# ------------------------------------------------------------------------------ reasoning and tool-call parsers
# As vLLM 0.17's OpenAI server does it for Qwen3.5: parser names checked at start, `tool_choice: auto` refused without
# auto tool choice, <think> reasoning and Qwen3-Coder XML tool calls parsed into `reasoning` and `tool_calls` only by
# the matching parsers.
from sparklab_vllm import cli, parsers  # noqa: E402

WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city", "days"]}}}]
QWEN35 = ["--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder", "--reasoning-parser", "qwen3"]


def serve_args(*extra):
    return cli.parse(["serve", "/models/tiny"] + list(extra))


@pytest.mark.parametrize("extra, error", [
    (QWEN35, None),
    (["--reasoning-parser", "qwen3"], None),
    (["--enable-auto-tool-choice"], "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser"),
    (["--enable-auto-tool-choice", "--tool-call-parser", "qwen35"], "KeyError: 'invalid tool call parser: qwen35 (chose"),
    (["--reasoning-parser", "qwen35"], "KeyError: 'invalid reasoning parser: qwen35 (chose from {"),
])
def test_parser_names_are_checked_at_start_as_vllm_does(extra, error):
    got = parsers.startup_error(serve_args(*extra))
    assert (got is None) if error is None else got.startswith(error)


def test_the_registries_the_image_check_reads():
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager
    assert {"qwen3_coder", "hermes"} <= set(ToolParserManager.lazy_parsers)
    assert "qwen3" in ReasoningParserManager.lazy_parsers


def chat(args, **req):
    st = _state(FakeEngine(), keys=())
    st["max_model_len"] = 4096
    st["args"] = args
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 12}
    body.update(req)
    return call(st, "POST", "/v1/chat/completions", body)


def test_qwen35_parsers_return_a_parsed_tool_call_and_the_reasoning():
    status, body = chat(serve_args(*QWEN35), tools=WEATHER)
    assert status == 200, body
    choice = body["choices"][0]
    msg = choice["message"]
    assert choice["finish_reason"] == "tool_calls" and msg["content"] is None
    assert len(msg["tool_calls"]) == 1
    call_ = msg["tool_calls"][0]
    assert call_["type"] == "function" and call_["id"].startswith("chatcmpl-tool-")
    assert call_["function"]["name"] == "get_weather"
    args = json.loads(call_["function"]["arguments"])
    assert set(args) == {"city", "days"} and isinstance(args["days"], (int, str))
    assert msg["reasoning"] and "<think>" not in msg["reasoning"] and "reasoning_content" not in msg


def test_without_auto_tool_choice_a_tool_request_is_refused_like_vllm():
    status, body = chat(serve_args(), tools=WEATHER)
    assert status == 400
    assert body["error"]["message"] == ('"auto" tool choice requires --enable-auto-tool-choice and '
                                        '--tool-call-parser to be set')


def test_a_wrong_tool_parser_leaves_the_tags_in_the_content():
    status, body = chat(serve_args("--enable-auto-tool-choice", "--tool-call-parser", "hermes"), tools=WEATHER)
    msg = body["choices"][0]["message"]
    assert status == 200 and msg["tool_calls"] == [] and "<function=get_weather>" in msg["content"]
    assert "<think>" in msg["content"] and msg["reasoning"] is None   # no reasoning parser either


def test_thinking_off_and_no_tools_is_a_plain_answer():
    status, body = chat(serve_args(*QWEN35), chat_template_kwargs={"enable_thinking": False})
    msg = body["choices"][0]["message"]
    assert status == 200 and msg["content"] and msg["reasoning"] is None and msg["tool_calls"] == []
    assert body["choices"][0]["finish_reason"] == "length"


def test_tool_choice_none_answers_in_text():
    status, body = chat(serve_args(*QWEN35), tools=WEATHER, tool_choice="none")
    msg = body["choices"][0]["message"]
    assert status == 200 and msg["tool_calls"] == [] and "<tool_call>" not in (msg["content"] or "")
