"""Progress on stderr, one line per run, so a long benchmark shows what it is doing and how far it got.

Plain lines rather than a live bar: they survive pipes, CI logs and pytest's capture alike.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


class Progress:
    def __init__(self, total_runs: int, stream: TextIO | None = None) -> None:
        self.total = total_runs
        self.done = 0
        self.stream = stream or sys.stderr

    def note(self, message: str) -> None:
        print(f"bench: {message}", file=self.stream, flush=True)

    @contextmanager
    def run(self, label: str) -> Iterator[None]:
        """Announce a run before it starts and its duration when it ends."""
        self.done += 1
        width = len(str(self.total))
        print(f"[{self.done:>{width}}/{self.total}] {label} ...", end="", file=self.stream, flush=True)
        began = time.perf_counter()
        try:
            yield
        except BaseException:
            print(" failed", file=self.stream, flush=True)
            raise
        print(f" {time.perf_counter() - began:.2f} s", file=self.stream, flush=True)
