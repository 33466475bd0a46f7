"""A tiny OpenAI-compatible server on a real socket, standing in for someone else's (vLLM,
llama-server) in the remote backend's tests: /v1/models, streamed /v1/chat/completions, /metrics.

Knobs (attributes) make it refuse fields, answer 503 a few times, drop mid-reply or stall.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="fake"} %(running)d
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="fake"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="fake"} 0.25
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="fake"} 200.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="fake"} 50.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="fake"} 3.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="fake"} %(generated)d
"""


class FakeServer:
    def __init__(self, words: list[str] | None = None, api_key: str | None = None, metrics: bool = True):
        self.words = words or ["Hello", " from", " the", " server", "."]
        self.api_key = api_key
        self.metrics = metrics
        self.refuse = ()  # fields a request must not carry: 400 naming them
        self.busy_times = 0  # answer 503 this many times first
        self.drop_after: int | None = None  # close the connection after this many words
        self.delay = 0.0  # seconds between words
        self.metrics_body: bytes | str | None = None  # served verbatim at /metrics when set
        self.bodies: list[dict[str, Any]] = []
        self.running = 0
        self.generated = 0
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def reply(self, status: int, body: str, kind: str = "application/json") -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def authorized(self) -> bool:
                if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    self.reply(401, json.dumps({"error": {"message": "invalid api key"}}))
                    return False
                return True

            def do_GET(self) -> None:
                if not self.authorized():
                    return
                if self.path == "/v1/models":
                    self.reply(200, json.dumps({"data": [{"id": "fake", "max_model_len": 4096}]}))
                elif self.path == "/metrics" and server.metrics_body is not None:
                    body = server.metrics_body
                    data = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                elif self.path == "/metrics" and server.metrics:
                    text = VLLM_METRICS % {"running": server.running, "generated": server.generated}
                    self.reply(200, text, "text/plain")
                else:
                    self.reply(404, json.dumps({"error": {"message": "not found"}}))

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not self.authorized():
                    return
                server.bodies.append(body)
                if bad := [f for f in server.refuse if f in body]:
                    self.reply(400, json.dumps({"error": {"message": f"unknown fields: {', '.join(bad)}"}}))
                    return
                if server.busy_times:
                    server.busy_times -= 1
                    self.reply(503, json.dumps({"error": {"message": "overloaded"}}))
                    return
                self.stream(body)

            def stream(self, body: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                server.running += 1
                try:
                    self.words_out(body)
                except OSError:  # the client went away (a cancel)
                    pass
                finally:
                    server.running -= 1
                self.close_connection = True

            def words_out(self, body: dict[str, Any]) -> None:
                for n, word in enumerate(server.words):
                    if server.drop_after is not None and n == server.drop_after:
                        return
                    self.event({"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]})
                    server.generated += 1
                    time.sleep(server.delay)
                self.event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                usage = {"prompt_tokens": 11, "completion_tokens": len(server.words), "total_tokens": 0}
                if body.get("stream_options", {}).get("include_usage"):
                    self.event({"choices": [], "usage": usage})
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def event(self, chunk: dict[str, Any]) -> None:
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()

        return Handler
