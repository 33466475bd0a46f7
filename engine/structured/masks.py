"""Each step's token masks for the constrained rows: computed by llguidance, applied before sampling.

The runner calls, around one step's forward::

    pending = masks.start(sampling)     # before the forward: the masks, into one bitmask
    logits  = model(batch)
    masks.apply(pending, logits)        # disallowed tokens of constrained rows -> -inf
    tokens  = sample / accept(logits)
    masks.advance(sampling, emitted)    # each matcher consumes the tokens its request emitted

A chunk's logits rows are its fed token's and then one per draft. The mask of the row after draft i
is the matcher's after drafts 1..i: llguidance's executor advances through the drafts the grammar
allows, writes one mask per row, and rolls the matcher back. A draft the grammar rejects is then
itself outside the preceding row's mask, so acceptance rejects it like any wrong draft, and rows
past it are never read (they are left all-allowed, never NaN). Only `advance` moves a matcher, by
the tokens emitted, so a recompute after preemption or a prefix-cache hit never feeds it twice.

The masks of all constrained rows are one call on llguidance's thread pool, made before the forward
on the engine's thread. Computing them on a thread of our own beside the forward was measured
(bench/structured.py, 2 busy cores): the step then waited tens of milliseconds per token for that
thread to be scheduled beside torch's, against the 0.1-0.5 ms per token the masks take to compute.
Rows of unconstrained requests are never touched.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import llguidance
import numpy as np
import torch

from engine.core.request import Request, RequestStatus
from engine.core.schedule import ScheduledChunk
from engine.core.structure import RequestGrammar

_Job = tuple[llguidance.LLMatcher, int, list[int]]  # a matcher, its first row, its drafts


@dataclass(slots=True)
class PendingMasks:
    """This step's masks being computed: the constrained rows and their bitmask [rows, words]."""

    rows: list[int]
    bitmask: np.ndarray


class GrammarMasks:
    """The runner's constrained-decoding hook (the module docstring shows the calls)."""

    def __init__(self) -> None:
        self._executor: llguidance.LLExecutor | None = None
        # for bench/structured.py: what the steps spent applying masks, and computing them
        self.mask_seconds = 0.0
        self.compute_seconds = 0.0

    def start(self, sampling: list[ScheduledChunk]) -> PendingMasks | None:
        """Begin the masks of ``sampling``'s constrained chunks (None: the step has none)."""
        jobs: list[_Job] = [
            (grammar.matcher, first, list(chunk.drafts))
            for chunk, first in zip(sampling, _first_rows(sampling), strict=True)
            if (grammar := chunk.request.grammar) is not None
        ]
        if not jobs:
            return None
        if self._executor is None:
            self._executor = llguidance.LLExecutor()
        # every grammar is over the engine's one tokenizer, so its masks are all this wide
        grammars = (chunk.request.grammar for chunk in sampling)
        words = next(grammar.mask_words for grammar in grammars if grammar is not None)
        rows_total = sum(1 + len(chunk.drafts) for chunk in sampling)
        bitmask = np.full((rows_total, words), -1, dtype=np.int32)  # all allowed until written
        rows = [first + i for _, first, drafts in jobs for i in range(1 + len(drafts))]
        self._compute(self._executor, jobs, bitmask)
        return PendingMasks(rows, bitmask)

    def _compute(self, executor: llguidance.LLExecutor, jobs: list[_Job], bitmask: np.ndarray) -> None:
        """All the jobs' masks into ``bitmask``: the plain rows in one call, the drafting ones in another
        (llguidance's draft variant refuses an empty draft list)."""
        plain = [(matcher, row) for matcher, row, drafts in jobs if not drafts]
        drafting = [job for job in jobs if job[2]]
        began = time.perf_counter()
        address, row_bytes, rows = bitmask.ctypes.data, bitmask.shape[1] * 4, bitmask.shape[0]
        if plain:
            executor.unsafe_compute_mask_ptr(plain, address, row_bytes, rows)
        if drafting:
            executor.unsafe_compute_mask_ptr_with_draft_token(drafting, address, row_bytes, rows)
        self.compute_seconds += time.perf_counter() - began

    def apply(self, pending: PendingMasks | None, logits: torch.Tensor) -> None:
        """Set the disallowed tokens of every constrained row of ``logits`` [rows, V] to -inf."""
        if pending is None:
            return
        began = time.perf_counter()
        biases = mask_biases(pending.bitmask[pending.rows], logits.shape[1])
        for row, bias in zip(pending.rows, biases, strict=True):
            add_bias(logits[row], bias)
        self.mask_seconds += time.perf_counter() - began

    def advance(self, sampling: list[ScheduledChunk], emitted: list[list[int]]) -> None:
        """Feed each constrained request's matcher the tokens it emitted; a matcher llguidance put in
        an error state (a limit reached mid-reply) fails its request with llguidance's reason."""
        self.feed([chunk.request for chunk in sampling], emitted)

    def feed(self, requests: list[Request], emitted: list[list[int]]) -> None:
        """`advance` for requests sampled outside a chunk (the branches of n, from their parent's row)."""
        for request, tokens in zip(requests, emitted, strict=True):
            if request.grammar is not None:
                _consume(request, request.grammar.matcher, tokens)


def _byte_biases() -> np.ndarray:
    """[256, 8] float32: row b holds, for bit i of a byte b, 0 if it is set and -inf if not."""
    bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")
    return np.where(bits == 1, 0.0, -np.inf).astype(np.float32)


_BYTE_BIASES = _byte_biases()


def mask_biases(bitmask: np.ndarray, vocab: int) -> np.ndarray:
    """Float32 [rows, vocab] of 0 (allowed) and -inf from llguidance's bitmask [rows, words] (bit i
    of word w: id 32 w + i), by one lookup per byte of the words' little-endian bytes (the layout
    of every CPU torch runs on)."""
    as_bytes = np.ascontiguousarray(bitmask).view(np.uint8)
    return _BYTE_BIASES.take(as_bytes, axis=0).reshape(bitmask.shape[0], -1)[:, :vocab]


def add_bias(row: torch.Tensor, bias: np.ndarray) -> None:
    """``row`` += ``bias`` in place: -inf where the mask disallows, unchanged (+ 0) elsewhere.

    Added by numpy on the calling thread: every torch op on a 65k-vocabulary row is split across
    torch's threads, and on a busy machine each such op waited for a descheduled thread (a masked
    row took 30-90 ms on the build machine under load, against well under 1 ms this way)."""
    if row.device.type == "cpu" and row.dtype == torch.float32 and row.is_contiguous():
        values = row.numpy()
        np.add(values, bias, out=values)
    else:
        row += torch.from_numpy(bias).to(row)


def masked_after(grammar: RequestGrammar, drafts: list[int], logits: torch.Tensor) -> torch.Tensor:
    """``logits`` [1, V] masked as the grammar stands after ``drafts``: a draft model's next pick, so
    its drafts are ones the grammar allows. The matcher is left where it was; past a draft it rejects
    (or the end of the grammar) nothing is masked, for nothing there is ever accepted."""
    matcher = grammar.matcher
    if matcher.validate_tokens(drafts) < len(drafts) or matcher.is_stopped():
        return logits
    bitmask = np.empty((1, grammar.mask_words), dtype=np.int32)
    matcher.consume_tokens(drafts)
    matcher.unsafe_compute_mask_ptr(bitmask.ctypes.data, grammar.mask_words * 4)
    matcher.rollback(len(drafts))
    masked = logits.clone()
    add_bias(masked[0], mask_biases(bitmask, logits.shape[1])[0])
    return masked


def _first_rows(sampling: list[ScheduledChunk]) -> list[int]:
    """The logits row where each sampling chunk's rows begin (1 + its drafts rows each)."""
    return list(itertools.accumulate((1 + len(chunk.drafts) for chunk in sampling), initial=0))[:-1]


def _consume(request: Request, matcher: llguidance.LLMatcher, tokens: list[int]) -> None:
    """Feed ``tokens`` up to the grammar's end: once it is complete the only token it allows is the
    end-of-reply one, which stops the request, so anything after it (an accepted end-of-reply draft's
    bonus token) is never part of the reply."""
    for token in tokens:
        if matcher.is_stopped():
            return
        if not matcher.consume_token(token):
            _fail(request, matcher.get_error())
            return


def _fail(request: Request, reason: str) -> None:
    reason = reason.strip().splitlines()[0][:300] if reason.strip() else "a token it did not allow"
    request.error = f"the structure's grammar stopped the reply: {reason}"
    request.status = RequestStatus.FINISHED_ERROR
