"""A server's body, unpacked here and counted as it is unpacked.

Every request asks for `Accept-Encoding: identity`, but a hostile server (or a proxy) may compress
anyway, and httpx's own decoder unpacks each received chunk whole: 200 KB of gzip becomes 200 MB
in one call, before any cap of ours sees a byte. So bodies are read raw and unpacked here, a
bounded piece at a time, and a body that unpacks past its cap fails that one request with one
sentence. gzip and deflate are unpacked (zlib, no new dependency); any other coding (br, zstd) is
refused, since we never asked for it.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator

import httpx

IDENTITY = {"Accept-Encoding": "identity"}
PIECE = 64 * 1024  # bytes unpacked per step: memory held for a compressed chunk, whatever its ratio
WINDOWS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class BodyRefused(Exception):
    """The body is not valid compressed data, or in a coding we cannot unpack: the message says which."""


class BodyTooLarge(BodyRefused):
    """The body unpacks past its cap: the rest is not read."""


class Unpacker:
    """Raw chunks in, unpacked pieces of at most PIECE bytes out (a raw chunk as it is when not
    compressed); BodyTooLarge once more than `cap` bytes came out."""

    def __init__(self, encoding: str, cap: int, what: str) -> None:
        self.cap = cap
        self.what = what
        self.out = 0
        codings = [c.strip().lower() for c in encoding.split(",") if c.strip() not in ("", "identity")]
        if len(codings) > 1 or (codings and codings[0] not in WINDOWS):
            raise BodyRefused(f"{what} came encoded as {encoding[:40]!r}, which this client cannot unpack")
        self._zlib = zlib.decompressobj(WINDOWS[codings[0]]) if codings else None
        self._try_headerless = codings == ["deflate"]  # some servers send deflate without zlib's header

    def feed(self, raw: bytes) -> Iterator[bytes]:
        if self._zlib is None:
            yield self._count(raw)
            return
        data = raw
        while data:
            try:
                piece = self._zlib.decompress(data, PIECE)
            except zlib.error:
                if self.out or not self._try_headerless:
                    raise BodyRefused(f"{self.what} is not valid compressed data") from None
                self._try_headerless, self._zlib = False, zlib.decompressobj(-zlib.MAX_WBITS)
                continue
            data = self._zlib.unconsumed_tail
            if piece:
                yield self._count(piece)

    def _count(self, piece: bytes) -> bytes:
        self.out += len(piece)
        if self.out > self.cap:
            raise BodyTooLarge(f"{self.what} unpacks to over {self.cap / (1 << 20):g} MiB: not read further")
        return piece


def is_packed(response: httpx.Response) -> bool:
    return response.headers.get("content-encoding", "identity").strip().lower() != "identity"


def unpacker(response: httpx.Response, cap: int, what: str) -> Unpacker:
    return Unpacker(response.headers.get("content-encoding", "identity"), cap, what)


def unpacked(response: httpx.Response, cap: int, what: str) -> Iterator[bytes]:
    """The body of a streamed sync response, unpacked and counted."""
    body = unpacker(response, cap, what)
    for raw in response.iter_raw():
        yield from body.feed(raw)


async def aunpacked(response: httpx.Response, cap: int, what: str) -> AsyncIterator[bytes]:
    """The body of a streamed async response, unpacked and counted."""
    body = unpacker(response, cap, what)
    async for raw in response.aiter_raw():
        for piece in body.feed(raw):
            yield piece
