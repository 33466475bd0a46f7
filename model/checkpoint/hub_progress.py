"""A Hub download's progress as one figure, for a UI that draws its own bar.

huggingface_hub reports progress through tqdm bars and lets a caller choose their class
(``tqdm_class``). Which bars it opens depends on its version: recent ones open byte bars for the
whole snapshot (one for bytes received, one for bytes written), older ones only a files bar. So
the class made here draws nothing; each of its bars tells a ``DownloadMeter``, which folds them
into one ``Transfer`` (bytes when there are byte bars, else files) and reports it, at most every
``interval`` seconds, to a callback that may run on any of the download's threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

BYTES = "B"  # the unit huggingface_hub gives its byte bars
_MB = 1e6


@dataclass(frozen=True, slots=True)
class Transfer:
    """How far a download is: ``done`` of ``total`` (None while unknown) bytes, or files."""

    done: float
    total: float | None
    unit: str  # BYTES or "files"

    @property
    def fraction(self) -> float | None:
        return min(self.done / self.total, 1.0) if self.total else None

    def __str__(self) -> str:
        if self.unit != BYTES:
            return f"{self.done:.0f} of {self.total:.0f} files" if self.total else f"{self.done:.0f} files"
        done = f"{self.done / _MB:,.1f} MB"
        return f"{done} of {self.total / _MB:,.1f} MB" if self.total else done


class _Discard:
    """Where the bars would print: nowhere (they exist only to be read)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


class DownloadMeter:
    """Collects the bars of one download and reports their sum; thread-safe."""

    def __init__(self, report: Callable[[Transfer], None], interval: float = 0.1) -> None:
        self._report = report
        self._interval = interval
        self._lock = threading.Lock()
        self._bars: dict[int, tuple[float, float | None, bool]] = {}  # id -> (n, total, counts bytes)
        self._last_report = -float("inf")

    def bar_class(self) -> type[tqdm]:
        """The class to pass as ``snapshot_download(tqdm_class=...)``."""
        meter = self

        class MeteredBar(tqdm):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs["file"] = _Discard()
                super().__init__(*args, **kwargs)
                meter.changed(self)

            def display(self, *args: Any, **kwargs: Any) -> bool:
                return True

            def update(self, n: float | None = 1) -> bool | None:
                shown = super().update(n)
                meter.changed(self)
                return shown

            def refresh(self, *args: Any, **kwargs: Any) -> None:  # the Hub sets .total, then refreshes
                super().refresh(*args, **kwargs)
                meter.changed(self)

            def close(self) -> None:
                super().close()
                meter.changed(self, final=True)

        return MeteredBar

    def changed(self, bar: tqdm, final: bool = False) -> None:
        """A bar moved: report the whole download unless one was reported less than ``interval`` ago."""
        with self._lock:
            self._bars[id(bar)] = (float(bar.n), float(bar.total) if bar.total else None, bar.unit == BYTES)
            now = time.monotonic()
            if not final and now - self._last_report < self._interval:
                return
            self._last_report = now
            transfer = self._transfer()
        self._report(transfer)

    def _transfer(self) -> Transfer:
        """Bytes when any byte bar exists (the furthest one: received and written bytes run side by side)."""
        byte_bars = [(n, total) for n, total, counts_bytes in self._bars.values() if counts_bytes]
        if byte_bars:
            totals = [total for _, total in byte_bars if total]
            return Transfer(max(n for n, _ in byte_bars), max(totals) if totals else None, BYTES)
        files = [(n, total) for n, total, _ in self._bars.values()]
        return Transfer(max(n for n, _ in files), max((t or 0 for _, t in files), default=0) or None, "files")
