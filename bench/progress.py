"""Progress on stderr, one line per run, so a long benchmark shows what it is doing and how far it got.

Plain lines rather than a live bar: they survive pipes, CI logs and pytest's capture alike. A
stage of unknown length (the first kernel build, writing a checkpoint, loading an engine) says
so when it starts and how long it has taken every HEARTBEAT_SECONDS, so the output is never
silent for minutes.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

HEARTBEAT_SECONDS = 10.0


class Progress:
    def __init__(self, total_runs: int, stream: TextIO | None = None) -> None:
        self.total = total_runs
        self.done = 0  # runs started
        self.finished = 0  # runs that ended with their figures
        self.stream = stream or sys.stderr

    def note(self, message: str) -> None:
        print(f"bench: {message}", file=self.stream, flush=True)

    @contextmanager
    def stage(self, label: str) -> Iterator[None]:
        """Announce a stage, say every HEARTBEAT_SECONDS that it is still going, and when it ended."""
        self.note(f"{label} ...")
        began, done = time.perf_counter(), threading.Event()

        def beat() -> None:
            while not done.wait(HEARTBEAT_SECONDS):
                self.note(f"{label}: still going, {time.perf_counter() - began:.0f} s")

        heart = threading.Thread(target=beat, name="bench-heartbeat", daemon=True)
        heart.start()
        try:
            yield
        finally:
            done.set()
            heart.join()
        self.note(f"{label}: done in {time.perf_counter() - began:.1f} s")

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
        self.finished += 1
        print(f" {time.perf_counter() - began:.2f} s", file=self.stream, flush=True)
