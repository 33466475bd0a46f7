"""Compressed bodies from a server that compresses although asked not to: each endpoint the app
reads (the model listing, the chat stream, an error status's body, /metrics) is unpacked a piece
at a time and counted, so a 200 KB gzip bomb (200 MB unpacked) fails that one request with one
sentence instead of taking the app's memory and minutes; an honest compressed stream still works.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import queue
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.backend.base import Prompt
from app.backend.http_errors import ServerError
from app.backend.remote import RemoteBackend
from app.backend.unpack import BodyRefused, Unpacker
from app.core.conversation import ChatSettings
from engine import TokenEvent
from tests.waiting import HANG_GUARD, wait_for

UNPACKED = 200 << 20


def bomb() -> bytes:
    """200 MiB of newlines (SSE's cheapest line), gzipped to ~200 KB."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"\n" * (1 << 20)
    return b"".join(packer.compress(block) for _ in range(UNPACKED >> 20)) + packer.flush()


BOMB = bomb()
LISTING = json.dumps({"data": [{"id": "fake"}]}).encode()
CHUNKS = [
    {"choices": [{"delta": {"content": w}, "finish_reason": r}]}
    for w, r in (("Hello", None), (" there", None), ("", "stop"))
]
HONEST = b"".join(b"data: %s\n\n" % json.dumps(chunk).encode() for chunk in CHUNKS)


class BombServer:
    """GET /v1/models, GET /metrics, POST /v1/chat/completions: each gzipped whatever was asked,
    and a bomb where `bombs` names the path ("error" makes the chat a 500 with a bomb for body)."""

    def __init__(self, bombs: set[str]) -> None:
        self.bombs = bombs
        self.encodings: list[str | None] = []  # the Accept-Encoding each request sent
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def answer(self, status: int, plain: bytes, name: str) -> None:
                server.encodings.append(self.headers.get("Accept-Encoding"))
                body = BOMB if name in server.bombs else gzip.compress(plain)
                self.send_response(status)
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the client gave up on the bomb: as it should
                    self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self.answer(200, LISTING, "models")
                else:
                    self.answer(200, b"# nothing\n", "metrics")

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                if "error" in server.bombs:
                    self.answer(500, b"", "error")
                else:
                    self.answer(200, HONEST, "stream")

        return Handler


@contextlib.contextmanager
def serving(*bombs: str) -> Iterator[BombServer]:
    server = BombServer(set(bombs))
    try:
        yield server
    finally:
        server.close()


def chat(backend: RemoteBackend) -> list[TokenEvent]:
    inbox: queue.Queue[TokenEvent] = queue.Queue()
    settings = ChatSettings(max_tokens=16)
    backend.submit(Prompt([{"role": "user", "content": "Hi"}]), settings, 16, "pane-1", inbox.put)
    events = [inbox.get(timeout=HANG_GUARD)]
    while not events[-1].finished:
        events.append(inbox.get(timeout=HANG_GUARD))
    return events


@contextlib.contextmanager
def connected(server: BombServer) -> Iterator[RemoteBackend]:
    backend = RemoteBackend.connect(server.url, None, None, poll_interval=0.02)
    try:
        yield backend
    finally:
        backend.close()


def test_an_honest_compressed_stream_is_read_and_identity_is_asked_for() -> None:
    with serving() as server, connected(server) as backend:
        events = chat(backend)
        assert "".join(e.text for e in events) == "Hello there"
        assert events[-1].finish_reason == "stop"
    assert server.encodings and set(server.encodings) == {"identity"}


def test_a_bomb_for_a_model_listing_is_one_sentence() -> None:
    with serving("models") as server, pytest.raises(ServerError) as refused:
        RemoteBackend.connect(server.url, None, None)
    assert str(refused.value) == f"The server at {server.url} answered GET /v1/models with over 4 MiB."


@pytest.mark.parametrize("where", ["stream", "error"])
def test_a_bomb_in_a_reply_ends_that_reply_with_one_sentence(where: str) -> None:
    with serving(where) as server, connected(server) as backend:
        last = chat(backend)[-1]
        assert last.finish_reason == "error" and last.error is not None
        assert "\n" not in last.error and len(last.error) < 300
        if where == "stream":
            assert last.error == "the server's reply unpacks to over 4 MiB: not read further"
        else:
            assert last.error.startswith("the server said 500: ")
        server.bombs.clear()  # the backend is still sound: the next reply comes whole
        assert "".join(e.text for e in chat(backend)) == "Hello there"


def test_a_bomb_for_metrics_is_said_on_the_dashboard() -> None:
    with serving("metrics") as server, connected(server) as backend:
        snap = wait_for(lambda: (s := backend.snapshot()) and s.note and s, "a dashboard note")
        assert snap.note == "the server's /metrics is larger than 1 MiB: ignored"


@pytest.mark.parametrize("encoding", ["br", "zstd", "gzip, br"])
def test_a_coding_never_asked_for_is_refused(encoding: str) -> None:
    with pytest.raises(BodyRefused, match=f"came encoded as '{encoding}', which this client cannot unpack"):
        Unpacker(encoding, 1 << 20, "the reply")


def test_deflate_with_and_without_zlibs_header_unpacks_in_bounded_pieces() -> None:
    plain = b"x" * (1 << 20)
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    for packed in (zlib.compress(plain), raw.compress(plain) + raw.flush()):
        pieces = list(Unpacker("deflate", 2 << 20, "it").feed(packed))
        assert b"".join(pieces) == plain and max(map(len, pieces)) <= 64 * 1024


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_garbage_said_to_be_compressed_is_refused(encoding: str) -> None:
    with pytest.raises(BodyRefused, match=r"^the reply is not valid compressed data$"):
        list(Unpacker(encoding, 1 << 20, "the reply").feed(b"data: not packed at all\n\n"))
