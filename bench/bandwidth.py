"""The memory-bandwidth limit of one-stream decode, so every table shows the ceiling beside the figure.

One stream's decode step reads every active weight once, so it cannot beat
read bandwidth / bytes a step reads. The bandwidth is measured here (a multi-threaded sum over a
buffer far larger than any cache, best of a few rounds); the bytes come from the loaded model in
the run's own scheme (bench.decode_bytes.active_bytes), never from a guess per dtype.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from bench.decode_bytes import active_bytes

PROBE_BYTES = 512 * 2**20  # far past the L3 of any CPU this runs on
PROBE_ROUNDS = 3  # timed rounds after one untimed warm-up; the best is kept
GB = 1e9


@dataclass(frozen=True, slots=True)
class Bandwidth:
    gb_per_s: float
    threads: int
    probe_bytes: int

    def describe(self) -> str:
        return (
            f"{self.gb_per_s:.1f} GB/s ({self.threads}-thread read of {self.probe_bytes / 2**20:.0f} MB, "
            f"best of {PROBE_ROUNDS})"
        )


def measure_read_bandwidth(threads: int) -> Bandwidth:
    """Best-of-PROBE_ROUNDS GB/s of summing a PROBE_BYTES float32 buffer on `threads` threads."""
    buffer = torch.ones(PROBE_BYTES // 4, dtype=torch.float32)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        buffer.sum()  # warm-up: page faults and thread start-up are not bandwidth
        best = min(_timed_sum(buffer) for _ in range(PROBE_ROUNDS))
    finally:
        torch.set_num_threads(previous)
    return Bandwidth(buffer.nbytes / best / GB, threads, buffer.nbytes)


def _timed_sum(buffer: torch.Tensor) -> float:
    began = time.perf_counter()
    buffer.sum()
    return time.perf_counter() - began


@dataclass(frozen=True, slots=True)
class DecodeLimit:
    """What one decode step of one stream reads, and the tokens/s that bandwidth allows at most."""

    scheme: str  # the weights' format, e.g. "bfloat16" or "bfloat16 + int4"
    step_bytes: int
    tok_per_s: float

    def describe(self) -> str:
        return (
            f"a one-stream decode step reads {self.step_bytes / 1e6:,.1f} MB of weights ({self.scheme}), "
            f"so at most {self.tok_per_s:.1f} tok/s"
        )


def decode_limit(model: nn.Module, scheme: str, bandwidth: Bandwidth) -> DecodeLimit:
    step_bytes = active_bytes(model)
    return DecodeLimit(scheme, step_bytes, bandwidth.gb_per_s * GB / step_bytes)
