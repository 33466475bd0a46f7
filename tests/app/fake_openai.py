"""A tiny OpenAI-compatible server on a real socket, standing in for someone else's (vLLM,
llama-server) in the remote backend's tests: /v1/models, streamed /v1/chat/completions, /metrics.

Knobs (attributes) make it refuse fields, answer 503 a few times, drop mid-reply or stall.

`FakeServer(mode=NAME)` makes it hostile, as a server we do not control may be: NAME is a key of
LISTINGS (what GET /v1/models answers), ERRORS (what every chat request is refused with), BAD_LINES
(one bad `data:` line after the first word, then a normal ending), STREAMS (a whole hostile
stream: a huge chunk, an endless line, a slow drip) or PACKED (a reply gzipped although the
client asked for none: a bomb). Adding a mode is adding one entry.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import threading
import time
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# A clipboard write (OSC 52), a window title (OSC 0), a screen clear, an 8-bit CSI, and markup.
ESCAPES = "\x1b]52;c;cHduZWQK\x1b\\ \x1b]0;PWNED\x07 \x1b[2J \x9b31m [bold red]markup[/]"
MIB = 1 << 20
HANG_UP_SECONDS = 30.0  # an endless line or a drip stops by itself after this, client or not


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _listing(**entry: Any) -> bytes:
    return _json({"object": "list", "data": [{"id": "fake", **entry}]})


def _data(chunk: Any) -> bytes:
    return b"data: " + (chunk if isinstance(chunk, bytes) else _json(chunk)) + b"\n\n"


def _delta(content: Any, finish_reason: Any = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish_reason}]}


LISTINGS: dict[str, bytes | tuple[int, bytes]] = {  # a body, or (status, body)
    "escape_models_error": (500, _json({"error": {"message": f"down {ESCAPES}"}})),
    "escape_model_ids": _json({"data": [{"id": f"evil{ESCAPES}", "max_model_len": 4096}, {"id": ESCAPES}]}),
    "models_list": _json([{"id": "fake"}]),
    "models_string": _json("fake"),
    "models_no_data": _json({"object": "list"}),
    "model_ids_not_strings": _json({"data": [{"id": 12}, {"id": None}, {"id": ["fake"]}, "fake"]}),
    "models_deep": b"[" * 100_000 + b"]" * 100_000,
    "models_huge": _json({"data": [{"id": "x" * 1000}] * 6000}),  # ~6 MB
    "context_abc": _listing(max_model_len="abc"),
    "context_1e400": b'{"data": [{"id": "fake", "max_model_len": 1e400}]}',
    "context_negative": _listing(max_model_len=-5),
    "context_huge": _listing(max_model_len=10**30),
    "context_bool": _listing(max_model_len=True),
    "meta_not_object": _listing(meta="n_ctx_train"),
    "two_models": _json({"data": [{"id": "fake", "max_model_len": 4096}, {"id": "fake-large"}]}),
}

ERRORS: dict[str, tuple[int, bytes]] = {  # (status, body) for every chat request in this mode
    "escape_error_body": (500, _json({"error": {"message": f"broken {ESCAPES}"}})),
    "escape_error_text": (500, f"<html>{ESCAPES}</html>".encode()),
    "huge_error_body": (500, b"x" * (20 * MIB)),
}

BAD_LINES: dict[str, bytes] = {
    "content_int": _data(_delta(12345)),
    "content_list": _data(_delta(["a", 1])),
    "content_dict": _data(_delta({"text": "a"})),
    "content_bool": _data(_delta(True)),
    "garbage_line": b"data: this is not JSON at all\n\n",
    "chunk_not_object": _data([1, 2, 3]),
    "choices_not_list": _data({"choices": {"0": {"delta": {"content": "x"}}}}),
    "choices_items_not_objects": _data({"choices": ["x"]}),
    "delta_not_object": _data({"choices": [{"delta": "x"}]}),
    "finish_reason_not_string": _data(_delta("", finish_reason=7)),
    "error_as_string": _data({"error": f"boom {ESCAPES}"}),
    "escape_stream_error": _data({"error": {"message": f"boom {ESCAPES}"}}),
    "binary_line": b"data: \xff\xfe\x00\x1b]0;PWNED\x07\xc3\n\n",
    "deep_nesting": _data(b"[" * 100_000 + b"]" * 100_000),
    # not errors: shapes a lenient client takes as they are
    "content_null": _data(_delta(None)),
    "escape_finish_reason": _data(_delta("", finish_reason=ESCAPES)),
    "usage_wrong_shapes": _data({"choices": [], "usage": {"prompt_tokens": "x", "completion_tokens": -1}}),
}

Send = Callable[[bytes], None]


def huge_chunk(send: Send) -> None:
    send(_data(_delta("y" * (20 * MIB))))


def endless_line(send: Send) -> None:
    """One line with no end, until the client hangs up."""
    send(b"data: ")
    deadline = time.monotonic() + HANG_UP_SECONDS
    while time.monotonic() < deadline:
        send(b"z" * 65536)


def slow_drip(send: Send) -> None:
    """A valid stream, one byte a second, until the client hangs up."""
    stream = _data(_delta("drip")) * 100
    deadline = time.monotonic() + HANG_UP_SECONDS
    for byte in stream:
        if time.monotonic() > deadline:
            return
        send(bytes([byte]))
        time.sleep(1.0)


def huge_reply(send: Send) -> None:
    """Many chunks of a fair size, more text in all than a pane takes."""
    for _ in range(24):
        send(_data(_delta("w " * (128 * 1024))))


STREAMS: dict[str, Callable[[Send], None]] = {
    "huge_chunk": huge_chunk,
    "endless_line": endless_line,
    "slow_drip": slow_drip,
    "huge_reply": huge_reply,
}


@functools.cache
def gzip_bomb(megabytes: int) -> bytes:
    """`megabytes` MiB of newlines (SSE's cheapest line), gzipped: ~1 KB a MiB."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join(packer.compress(b"\n" * MIB) for _ in range(megabytes)) + packer.flush()


# A reply sent gzipped although the client asked for identity: (status, body) for every chat request
PACKED: dict[str, tuple[int, Callable[[], bytes]]] = {"gzip_bomb": (200, lambda: gzip_bomb(200))}
MODES = (
    frozenset(LISTINGS) | frozenset(ERRORS) | frozenset(BAD_LINES) | frozenset(STREAMS) | frozenset(PACKED)
)

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
    def __init__(
        self,
        words: list[str] | None = None,
        api_key: str | None = None,
        metrics: bool = True,
        mode: str | None = None,
    ):
        if mode is not None and mode not in MODES:
            raise ValueError(f"no such hostile mode: {mode}")
        self.mode = mode
        self.words = words or ["Hello", " from", " the", " server", "."]
        self.api_key = api_key
        self.metrics = metrics
        self.refuse = ()  # fields a request must not carry: 400 naming them
        self.busy_times = 0  # answer 503 this many times first
        self.drop_after: int | None = None  # close the connection after this many words
        self.delay = 0.0  # seconds between words
        self.metrics_body: bytes | str | None = None  # served verbatim at /metrics when set
        self.spared: str | None = None  # a chat whose last message says this gets a normal reply
        self.thinking: list[str] = []  # sent before the words as reasoning deltas, in this delta field:
        self.reasoning_field = "reasoning_content"  # vLLM's and llama-server's (newer vLLM: "reasoning")
        self.bodies: list[dict[str, Any]] = []
        self.running = 0
        self.generated = 0
        self.sent = 0  # bytes of chat streams sent so far (what a test waits on, never a time)
        self.connections: set[socket.socket] = set()  # open client connections, kept-alive ones too
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop as a real server does: no new connections, and the open ones closed. A kept-alive
        connection's handler thread would otherwise go on answering the client that holds it."""
        self.httpd.shutdown()
        self.httpd.server_close()
        for connection in list(self.connections):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def mode_for(self, body: dict[str, Any]) -> str | None:
        """The hostile mode for this chat request: none for a chat the test spares."""
        messages = body.get("messages") or [{}]
        return None if self.spared is not None and messages[-1].get("content") == self.spared else self.mode

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                server.connections.add(self.connection)

            def finish(self) -> None:
                server.connections.discard(self.connection)
                super().finish()

            def log_message(self, *args: object) -> None:
                pass

            def reply(
                self, status: int, body: str | bytes, kind: str = "application/json", encoding: str = ""
            ) -> None:
                data = body.encode() if isinstance(body, str) else body
                self.send_response(status)
                self.send_header("Content-Type", kind)
                if encoding:
                    self.send_header("Content-Encoding", encoding)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except OSError:  # a client that read enough of a huge body and hung up
                    self.close_connection = True

            def authorized(self) -> bool:
                if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    self.reply(401, json.dumps({"error": {"message": "invalid api key"}}))
                    return False
                return True

            def do_GET(self) -> None:
                if not self.authorized():
                    return
                if self.path == "/v1/models":
                    listing = LISTINGS.get(server.mode or "", _listing(max_model_len=4096))
                    self.reply(*listing) if isinstance(listing, tuple) else self.reply(200, listing)
                elif self.path == "/metrics" and server.metrics_body is not None:
                    body = server.metrics_body
                    data = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
                    self.reply(200, data, "text/plain")
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
                mode = server.mode_for(body)
                if mode in ERRORS:
                    self.reply(*ERRORS[mode])
                    return
                if mode in PACKED:
                    status, body = PACKED[mode]
                    self.reply(status, body(), "text/event-stream", encoding="gzip")
                    return
                self.stream(body, mode)

            def stream(self, body: dict[str, Any], mode: str | None) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                server.running += 1
                try:
                    if mode in STREAMS:
                        STREAMS[mode](self.send)
                    else:
                        self.words_out(body, BAD_LINES.get(mode or ""))
                except OSError:  # the client went away (a cancel)
                    pass
                finally:
                    server.running -= 1
                self.close_connection = True

            def words_out(self, body: dict[str, Any], bad_line: bytes | None) -> None:
                for thought in server.thinking:
                    self.event({"choices": [{"index": 0, "delta": {server.reasoning_field: thought}}]})
                for n, word in enumerate(server.words):
                    if server.drop_after is not None and n == server.drop_after:
                        return
                    self.event({"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]})
                    if n == 0 and bad_line is not None:
                        self.send(bad_line)
                    server.generated += 1
                    time.sleep(server.delay)
                self.event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                usage = {"prompt_tokens": 11, "completion_tokens": len(server.words), "total_tokens": 0}
                if body.get("stream_options", {}).get("include_usage"):
                    self.event({"choices": [], "usage": usage})
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def event(self, chunk: dict[str, Any]) -> None:
                self.send(_data(chunk))

            def send(self, data: bytes) -> None:
                self.wfile.write(data)
                self.wfile.flush()
                server.sent += len(data)

        return Handler
