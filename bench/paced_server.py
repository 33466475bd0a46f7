"""An OpenAI-compatible stand-in that streams readable Markdown at a fixed rate per request.

What `--server` panes draw in bench.key_latency: a fast server (vLLM on a GPU streams 50-100
tokens a second a request) sending what a chat model writes, paragraphs, lists, code blocks and
a table, so the TUI's drawing is measured on text like a real reply, not on gibberish. Only
what the TUI asks for is served: GET /v1/models and streamed POST /v1/chat/completions.
`apart` runs it in a child process, as a real server runs: its threads then take no GIL time
from the app being measured.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import multiprocessing
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.sharedctypes import Synchronized
from typing import Any

MODEL = "paced"
REPLY = """## A long answer

Streaming text is **drawn as it arrives**, so each token should cost what it adds, with
`inline code`, *emphasis* and [a link](https://example.com) on the way.

1. The first point, which runs long enough to wrap in a narrow pane of a grid of eight.
2. The second point.
   - a nested item
   - another one

```python
def fibonacci(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
```

| model | tokens/s | note |
|-------|----------|------|
| small | 120 | fast |
| large | 35 | slow |

> A quotation, to end the section.

"""


def tokens() -> itertools.cycle[str]:
    """REPLY cut into word-sized pieces (a token is about a word), repeated without end."""
    pieces: list[str] = []
    for line in REPLY.splitlines(keepends=True):
        words = line.split(" ")
        pieces.extend(w + " " for w in words[:-1])
        pieces.append(words[-1])
    return itertools.cycle(pieces)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A client gone mid-request (the app quit with streams open) is expected, not news."""


class PacedServer:
    """Every chat request streams `max_tokens` tokens at `rate` a second; `sent` counts them all."""

    def __init__(self, rate: float, sent: Synchronized[int] | None = None) -> None:
        self.interval = 1.0 / rate
        self._sent = sent if sent is not None else multiprocessing.Value("q", 0)
        self.httpd = _QuietServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> PacedServer:
        threading.Thread(target=self.httpd.serve_forever, name="paced-server", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def sent(self) -> int:
        return int(self._sent.value)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                body = json.dumps({"object": "list", "data": [{"id": MODEL, "max_model_len": 32768}]})
                code = 200 if self.path == "/v1/models" else 404
                data = body.encode() if code == 200 else b"{}"
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                with contextlib.suppress(OSError):  # the app stopped the reply, or quit
                    self.stream(int(body.get("max_tokens") or 4000))

            def stream(self, count: int) -> None:
                due = time.monotonic()
                for piece in itertools.islice(tokens(), count):
                    self.event({"content": piece}, None)
                    with server._sent.get_lock():
                        server._sent.value += 1
                    due += server.interval
                    time.sleep(max(0.0, due - time.monotonic()))
                self.event({}, "stop")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def event(self, delta: dict[str, Any], finish: str | None) -> None:
                chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()

        return Handler


@dataclass(frozen=True)
class Apart:
    """A PacedServer in another process: its URL, and the tokens it has sent so far."""

    url: str
    counter: Synchronized[int]

    @property
    def sent(self) -> int:
        return int(self.counter.value)


def _serve(rate: float, sent: Synchronized[int], urls: multiprocessing.Queue[str]) -> None:
    with PacedServer(rate, sent) as server:
        urls.put(server.url)
        threading.Event().wait()  # until the parent terminates this process


@contextlib.contextmanager
def apart(rate: float) -> Iterator[Apart]:
    context = multiprocessing.get_context("spawn")
    sent = context.Value("q", 0)
    urls = context.Queue()
    process = context.Process(target=_serve, args=(rate, sent, urls), name="paced-server", daemon=True)
    process.start()
    try:
        yield Apart(urls.get(timeout=60), sent)
    finally:
        process.terminate()
        process.join()
