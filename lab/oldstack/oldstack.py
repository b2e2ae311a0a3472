#!/usr/bin/env python3
"""The operators' older deployment, as the lab stages it (lab/stage.sh): what its processes show the collection.

    oldstack.py api PORT MODEL     an OpenAI-style API of the old stack (GLM-4.7-Flash, embeddings, a reranker): holds
                                   /dev/nvidia0 open, as a served model holds GPU memory, and answers /health,
                                   /v1/models and small completions so a person can see what runs
    oldstack.py proxy PORT URL     the old stack's proxy in front of its API (no GPU), forwarding every request to URL
Not part of the collection: only the lab's stand-in for software the operators ran before it.
"""

import json
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def api(port, model):
    gpu = open("/dev/nvidia0", "rb")  # noqa: SIM115  held for the life of the process, as CUDA holds the device

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                return self._send(200, {})
            if self.path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            return self._send(404, {"error": "not found"})

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            return self._send(200, {"model": model, "choices": [{"index": 0, "text": " (old stack)"}]})

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("0.0.0.0", int(port)), Handler)
    server.gpu = gpu
    server.serve_forever()


def proxy(port, upstream):
    class Handler(BaseHTTPRequestHandler):
        def _forward(self, body=None):
            req = urllib.request.Request(upstream.rstrip("/") + self.path, data=body, method=self.command,
                                         headers={"Content-Type": self.headers.get("Content-Type") or "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    code, data = resp.status, resp.read()
            except urllib.error.HTTPError as exc:
                code, data = exc.code, exc.read()
            except OSError as exc:
                code, data = 502, json.dumps({"error": str(exc)}).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._forward()

        def do_POST(self):
            self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("0.0.0.0", int(port)), Handler).serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("api", "proxy"):
        sys.exit("usage: oldstack.py api PORT MODEL | proxy PORT URL")
    (api if sys.argv[1] == "api" else proxy)(sys.argv[2], sys.argv[3])
