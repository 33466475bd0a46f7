"""The last few KB a server wrote to stderr: why it failed, in its own words, with bounded memory.

A server may write nothing, a line, or gigabytes; the pipe is drained continuously by a thread (a
full pipe would block the server) and only the tail is kept.
"""

from __future__ import annotations

import os
import threading
from typing import BinaryIO

from app.core.sanitize import strip_control

TAIL_BYTES = 4096
READ_BYTES = 65536


class StderrTail:
    """A pipe to give a subprocess as its stderr, and the last `limit` bytes that came through it."""

    def __init__(self, limit: int = TAIL_BYTES) -> None:
        read_end, write_end = os.pipe()
        self.writer: BinaryIO = os.fdopen(write_end, "wb", buffering=0)
        self._reader = os.fdopen(read_end, "rb", buffering=0)
        self._limit = limit
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, name="mcp-stderr", daemon=True)
        self._thread.start()

    def spawned(self) -> None:
        """The child holds its copy of the write end now: close ours, so EOF comes when it exits."""
        self.writer.close()

    def _drain(self) -> None:
        with self._reader:
            while chunk := self._reader.read(READ_BYTES):
                with self._lock:
                    self._tail += chunk
                    del self._tail[: -self._limit]

    def drained(self, timeout: float) -> None:
        """Wait (at most `timeout` s) until everything the exited server wrote has been read: its last
        words are the reason shown. A child it left behind may hold the pipe open: hence the bound."""
        self._thread.join(timeout)

    def text(self) -> str:
        """The tail, cleaned line by line: an escape sequence left open eats the rest of its line only
        (cleaned whole, it would hide every later line, the reason among them)."""
        with self._lock:
            raw = bytes(self._tail)
        lines = raw.decode("utf-8", errors="replace").split("\n")
        return "\n".join(strip_control(line) for line in lines)

    def last_line(self) -> str:
        """The last non-empty line, cleaned; "" when the server said nothing."""
        lines = [line.strip() for line in self.text().splitlines() if line.strip()]
        return lines[-1][:300] if lines else ""

    def close(self) -> None:
        if not self.writer.closed:
            self.writer.close()
