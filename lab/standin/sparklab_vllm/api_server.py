"""The APIServer process: binds the port first (as vLLM does), starts EngineCore_DP0, then serves HTTP.

stdlib only (ThreadingHTTPServer). Endpoints: /health /ping /version /metrics /v1/models /v1/completions
/v1/chat/completions. /v1 routes need the API key when one is set (--api-key or VLLM_API_KEY).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import RELEASE, STANDIN_MARKER, __version__
from . import parsers
from .cli import non_default_args
from .metrics import EngineMetrics
from .formats import (UNAUTHORIZED_BODY, Logger, PrefixedStream, api_key_allows, error_body, log_line,
                      process_prefix, tokenize, words_from_ids)

ROUTES = [("/openapi.json", "GET, HEAD"), ("/docs", "GET, HEAD"), ("/docs/oauth2-redirect", "GET, HEAD"),
          ("/redoc", "GET, HEAD"), ("/tokenize", "POST"), ("/detokenize", "POST"), ("/metrics", "GET"),
          ("/health", "GET"), ("/load", "GET"), ("/v1/models", "GET"), ("/version", "GET"),
          ("/v1/chat/completions", "POST"), ("/v1/completions", "POST"), ("/ping", "GET"), ("/ping", "POST")]


class EngineClient:
    """Talks to the EngineCore_DP0 process; remembers when it died."""

    def __init__(self, proc, conn):
        self.proc = proc
        self.conn = conn
        self.lock = threading.Lock()
        self.dead = False
        self.stats = {"running": 0, "waiting": 0, "kv_tokens": 0}
        threading.Thread(target=self._monitor, daemon=True).start()

    def _monitor(self):
        self.proc.join()
        if not self.dead:
            self.dead = True
            Logger("core_client.py").error(
                565, "Engine core proc %s died unexpectedly, shutting down client.", self.proc.name)

    def generate(self, prompt, count, timing=None):
        """The generated token ids, or None once the engine is dead; timing gets queue_s and step_s (seconds)."""
        if self.dead:
            return None
        arrived = time.monotonic()
        self.stats["waiting"] += 1
        with self.lock:
            scheduled = time.monotonic()
            self.stats["waiting"] -= 1
            self.stats["running"] += 1
            self.stats["kv_tokens"] = len(tokenize(prompt)) + count
            try:
                self.conn.send(("generate", prompt, count))
                deadline = float(os.environ.get("SPARKLAB_STEP_TIMEOUT_S", "30")) + 15
                if not self.conn.poll(deadline):
                    raise EOFError("engine step timed out")
                kind, payload = self.conn.recv()
            except (EOFError, OSError, BrokenPipeError):
                kind, payload = "dead", None
            finally:
                self.stats["running"] -= 1
                self.stats["kv_tokens"] = 0
                if timing is not None:
                    timing["queue_s"] = scheduled - arrived
                    timing["step_s"] = time.monotonic() - scheduled
        if kind != "ok":
            self.dead = True
            return None
        return payload


def _engine_dead_log():
    text = ("AsyncLLM output_handler failed.\nTraceback (most recent call last):\n"
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) "
            "for the root cause.")
    sys.stdout.write(log_line("ERROR", "async_llm.py", 480, text) + "\n")
    sys.stdout.flush()


def _metrics(state):
    """The server's EngineMetrics (vLLM 0.17.1's series), made on first use."""
    if "metrics" not in state:
        state["metrics"] = EngineMetrics(state["max_model_len"])
    return state["metrics"]


def make_handler(state):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, fmt, *args):
            pass

        def _access(self, code):
            if state["access_log"]:
                phrase = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                          405: "Method Not Allowed", 500: "Internal Server Error",
                          503: "Service Unavailable"}.get(code, "")
                sys.stdout.write('INFO:     %s:%d - "%s %s HTTP/1.1" %d %s\n' % (
                    self.client_address[0], self.client_address[1], self.command, self.path, code, phrase))
                sys.stdout.flush()

        def _send(self, code, body=None, ctype="application/json"):
            data = b""
            if body is not None:
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            if body is not None:
                self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            self._access(code)

        def _authorized(self):
            path = self.path.split("?", 1)[0]
            if api_key_allows(path, self.command, self.headers.get("Authorization"), state["api_keys"]):
                return True
            self._send(401, UNAUTHORIZED_BODY)
            return False

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if not self._authorized():
                return
            engine = state["engine"]
            if path in ("/health", "/ping"):
                self._send(503 if engine.dead else 200)
            elif path == "/version":
                self._send(200, {"version": __version__})
            elif path == "/metrics":
                stats = engine.stats
                # one request at a time holds the KV cache: its prompt and requested tokens against the model length
                kv_usage = min(1.0, stats.get("kv_tokens", 0) / float(state["max_model_len"]))
                self._send(200, _metrics(state).render(state["served"][0], running=stats["running"],
                                                       waiting=stats["waiting"], kv_usage=kv_usage),
                           "text/plain; version=0.0.4; charset=utf-8")
            elif path == "/v1/models":
                data = [{"id": name, "object": "model", "created": int(time.time()), "owned_by": "vllm",
                         "root": state["model"], "parent": None, "max_model_len": state["max_model_len"],
                         "permission": [{"id": "modelperm-" + uuid.uuid4().hex, "object": "model_permission",
                                         "created": int(time.time()), "allow_create_engine": False,
                                         "allow_sampling": True, "allow_logprobs": True,
                                         "allow_search_indices": False, "allow_view": True,
                                         "allow_fine_tuning": False, "organization": "*", "group": None,
                                         "is_blocking": False}]}
                        for name in state["served"]]
                self._send(200, {"object": "list", "data": data})
            elif path in ("/load",):
                self._send(200, {"server_load": engine.stats["running"]})
            else:
                self._send(404, {"detail": "Not Found"})

        do_HEAD = do_GET

        def do_POST(self):
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not self._authorized():
                return
            if path == "/ping":
                self._send(503 if state["engine"].dead else 200)
                return
            if path not in ("/v1/completions", "/v1/chat/completions"):
                self._send(404 if path not in dict(ROUTES) else 405, {"detail": "Not Found"})
                return
            try:
                req = json.loads(raw or b"{}")
                if not isinstance(req, dict):
                    raise ValueError("body must be a JSON object")
            except ValueError as exc:
                self._send(400, error_body("JSON decode error: %s" % exc, "BadRequestError", 400))
                return
            self._complete(path, req)

        def _complete(self, path, req):
            chat = path.endswith("chat/completions")
            model = req.get("model") or state["served"][0]
            if model not in state["served"]:
                self._send(404, error_body("The model `%s` does not exist." % model, "NotFoundError", 404))
                return
            if chat:
                msgs = req.get("messages")
                if not isinstance(msgs, list) or not msgs:
                    self._send(400, error_body("messages: Field required", "BadRequestError", 400))
                    return
                refused = parsers.request_error(req, state.get("args"))
                if refused:
                    self._send(400, error_body(refused, "BadRequestError", 400))
                    return
                prompt = "\n".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
                max_tokens = req.get("max_completion_tokens", req.get("max_tokens"))
                max_tokens = 64 if max_tokens is None else max_tokens
            else:
                prompt = req.get("prompt")
                if isinstance(prompt, list):
                    prompt = prompt[0] if prompt else ""
                if not isinstance(prompt, str):
                    self._send(400, error_body("prompt: Field required", "BadRequestError", 400))
                    return
                max_tokens = req.get("max_tokens")
                max_tokens = 16 if max_tokens is None else max_tokens
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
                self._send(400, error_body("max_tokens must be at least 1, got %r." % max_tokens,
                                           "BadRequestError", 400))
                return
            p_tokens = max(len(tokenize(prompt)), 1)
            if p_tokens + max_tokens > state["max_model_len"]:
                self._send(400, error_body(
                    "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in "
                    "the messages, %d in the completion). Please reduce the length of the messages or completion."
                    % (state["max_model_len"], p_tokens + max_tokens, p_tokens, max_tokens),
                    "BadRequestError", 400))
                return
            engine = state["engine"]
            timing = {}
            ids = engine.generate(prompt, max_tokens, timing)
            if ids is None:
                if not state.get("dead_logged"):
                    state["dead_logged"] = True
                    _engine_dead_log()
                self._send(500)
                state["on_engine_dead"]()
                return
            text = words_from_ids(ids)
            _metrics(state).observe_request(p_tokens, len(ids), max_tokens, timing.get("queue_s", 0.0),
                                            timing.get("step_s", 0.0), finish="length")
            usage = {"prompt_tokens": p_tokens, "total_tokens": p_tokens + len(ids),
                     "completion_tokens": len(ids), "prompt_tokens_details": None}
            now = int(time.time())
            if chat:
                fields, finish = parsers.parse(parsers.model_output(req, text), req, state.get("args"))
                message = {"role": "assistant", "refusal": None, "annotations": None, "audio": None,
                           "function_call": None}
                message.update(fields)
                body = {"id": "chatcmpl-" + uuid.uuid4().hex, "object": "chat.completion", "created": now,
                        "model": model, "choices": [{
                            "index": 0, "message": message,
                            "logprobs": None, "finish_reason": finish, "stop_reason": None}],
                        "service_tier": None, "system_fingerprint": None, "usage": usage, "prompt_logprobs": None,
                        "kv_transfer_params": None}
            else:
                body = {"id": "cmpl-" + uuid.uuid4().hex, "object": "text_completion", "created": now,
                        "model": model, "choices": [{"index": 0, "text": text, "logprobs": None,
                                                     "finish_reason": "length", "stop_reason": None,
                                                     "prompt_logprobs": None}],
                        "service_tier": None, "system_fingerprint": None, "usage": usage,
                        "kv_transfer_params": None}
            if req.get("stream"):
                self._stream(body, chat)
            else:
                self._send(200, body)

        def _stream(self, body, chat):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            chunk = dict(body)
            chunk["object"] = "chat.completion.chunk" if chat else "text_completion"
            events = [chunk, "[DONE]"]
            for ev in events:
                data = ("data: %s\n\n" % (ev if isinstance(ev, str) else json.dumps(ev))).encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")
            self._access(200)

    return Handler


def speculative_error(args):
    """vLLM's refusal of --speculative-config (None when it takes it); a per-model MTP name is rewritten to "mtp" in
    args with vLLM's deprecation warning, as 0.17.1 does."""
    spec = args.speculative_config
    if spec is None:
        return None
    if not isinstance(spec, dict):
        return "ValueError: speculative_config must be a JSON object, got %r" % (spec,)
    method = spec.get("method")
    if method in RELEASE["speculative_mtp_aliases"]:
        Logger("speculative.py").warning(
            303, "method `%s` is deprecated and replaced with mtp.", method)
        spec["method"] = method = "mtp"
    if method not in RELEASE["speculative_methods"]:
        return ("pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\nmethod\n  "
                "Input should be %s [type=literal_error, input_value=%r]" % (
                    " or ".join(repr(m) for m in RELEASE["speculative_methods"] + RELEASE["speculative_mtp_aliases"]),
                    method))
    n = spec.get("num_speculative_tokens")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return "ValueError: num_speculative_tokens must be a positive integer, got %r" % (n,)
    return None


def _model_config(model):
    cfg_path = os.path.join(model, "config.json")
    if not os.path.isdir(model):
        raise OSError("Can't load the configuration of '%s'. If you were trying to load it from "
                      "'https://huggingface.co/models', make sure you don't have a local directory with the same name. "
                      "Otherwise, make sure '%s' is the correct path to a directory containing a config.json file"
                      % (model, model))
    with open(cfg_path) as f:
        return json.load(f)


def _sigterm(_signum, _frame):
    raise KeyboardInterrupt


def run_server(args):
    pid = os.getpid()
    signal.signal(signal.SIGTERM, _sigterm)
    sys.stdout = PrefixedStream(sys.__stdout__, process_prefix("APIServer", pid))
    sys.stderr = PrefixedStream(sys.__stderr__, process_prefix("APIServer", pid))
    log = Logger("api_server.py")
    log.info(1350, "%s: this is the sparklab stand-in for vLLM %s (lab only: Ray, gloo and shard reads are real, "
             "generation is filler)", STANDIN_MARKER, __version__)
    log.info(1351, "vLLM API server version %s", __version__)
    Logger("utils.py").info(253, "non-default args: %s", non_default_args(args))
    try:
        cfg = _model_config(args.model)
    except (OSError, ValueError):
        sys.stdout.write("Traceback (most recent call last):\n" + "".join(traceback.format_exc().splitlines(True)[1:]))
        return 1
    arch = (cfg.get("architectures") or ["LlamaForCausalLM"])[0]
    if arch not in RELEASE["architectures"]:
        # vLLM fails at model init (minutes in on a real GB10) when its registry lacks the architecture
        sys.stdout.write("Traceback (most recent call last):\n  File \"vllm/model_executor/models/registry.py\", "
                         "in inspect_model_cls\nValueError: Model architectures ['%s'] are not supported for now. "
                         "Supported architectures: dict_keys(%r)\n" % (arch, list(RELEASE["architectures"])))
        sys.stdout.flush()
        return 1
    Logger("model.py").info(514, "Resolved architecture: %s", arch)
    max_model_len = args.max_model_len or int(cfg.get("max_position_embeddings", 4096))
    Logger("model.py").info(1661, "Using max model len %d", max_model_len)
    Logger("scheduler.py").info(230, "Chunked prefill is enabled with max_num_batched_tokens=%d.",
                                args.max_num_batched_tokens or 8192)
    api_keys = args.api_key or ([os.environ["VLLM_API_KEY"]] if os.environ.get("VLLM_API_KEY") else [])
    refused = speculative_error(args)
    if refused:
        # vLLM builds its SpeculativeConfig with the engine config, before the port or the engine
        sys.stdout.write("Traceback (most recent call last):\n  File \"vllm/config/speculative.py\", in "
                         "__post_init__\n%s\n" % refused)
        sys.stdout.flush()
        return 1
    refused = parsers.startup_error(args)
    if refused:
        # vLLM checks the parser names before it binds the port or starts the engine
        sys.stdout.write("Traceback (most recent call last):\n  File \"vllm/entrypoints/openai/api_server.py\", in "
                         "validate_api_server_args\n%s\n" % refused)
        sys.stdout.flush()
        return 1

    # vLLM binds the listening socket before it starts the engine, so a busy port fails within seconds
    host = args.host or "0.0.0.0"
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        if os.environ.get("SPARKLAB_FAULT") == "port_in_use":
            raise OSError(98, "Address already in use")
        sock.bind((host, args.port))
    except OSError:
        sys.stdout.write("Traceback (most recent call last):\n" + "".join(traceback.format_exc().splitlines(True)[1:]))
        sys.stdout.flush()
        return 1
    sock.listen(128)
    sock.set_inheritable(False)

    from .engine import engine_main
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    a = vars(args).copy()
    proc = ctx.Process(target=engine_main, name="EngineCore_DP0", args=(a, max_model_len, child), daemon=False)
    proc.start()
    child.close()
    timeout = float(os.environ.get("VLLM_ENGINE_READY_TIMEOUT_S", "600"))
    try:
        ready = parent.poll(timeout)
    except KeyboardInterrupt:
        proc.terminate()
        proc.join(10)
        return 1
    status = None
    if ready:
        try:
            status, _info = parent.recv()
        except EOFError:
            status = None
    if status != "ready":
        proc.join(10 if status == "failed" else 0.1)  # it exits by itself after logging the root cause
        if proc.is_alive():
            proc.terminate()
            proc.join(5)
        # a load still running at VLLM_ENGINE_READY_TIMEOUT_S ends the same way, with no failed proc named
        failed = {proc.name: proc.exitcode} if ready and proc.exitcode else {}
        try:
            raise RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): %s"
                               % failed)
        except RuntimeError:
            sys.stdout.write("Traceback (most recent call last):\n"
                             + "".join(traceback.format_exc().splitlines(True)[1:]))
            sys.stdout.flush()
        return 1

    engine = EngineClient(proc, parent)
    served = args.served_model_name
    log.info(1099, "Supported tasks: ['generate']")
    log.info(1425, "Starting vLLM API server 0 on http://%s:%d", host, args.port)
    launcher = Logger("launcher.py")
    launcher.info(38, "Available routes are:")
    for route, methods in ROUTES:
        launcher.info(46, "Route: %s, Methods: %s", route, methods)

    server = ThreadingHTTPServer((host, args.port), make_handler({}), bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.daemon_threads = True
    stop = threading.Event()

    def on_engine_dead():
        # vLLM's EngineDeadError handler stops the server unless VLLM_KEEP_ALIVE_ON_ENGINE_DEATH is set
        if os.environ.get("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "0") in ("1", "true", "True"):
            return
        if not stop.is_set():
            stop.set()
            linger = float(os.environ.get("SPARKLAB_DEAD_LINGER_S", "2"))
            threading.Timer(linger, server.shutdown).start()

    state = {"engine": engine, "metrics": EngineMetrics(max_model_len), "served": served, "model": args.model, "max_model_len": max_model_len, "args": args,
             "api_keys": api_keys, "access_log": not args.disable_uvicorn_access_log, "on_engine_dead": on_engine_dead}
    server.RequestHandlerClass = make_handler(state)
    sys.stdout.write("INFO:     Started server process [%d]\nINFO:     Waiting for application startup.\n"
                     "INFO:     Application startup complete.\n" % pid)
    sys.stdout.flush()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    sys.stdout.write("INFO:     Shutting down\nINFO:     Waiting for application shutdown.\n"
                     "INFO:     Application shutdown complete.\nINFO:     Finished server process [%d]\n" % pid)
    sys.stdout.flush()
    try:
        parent.send(("shutdown",))
    except (OSError, BrokenPipeError):
        pass
    proc.join(10)
    if proc.is_alive():
        proc.terminate()
    return 0
