"""How many prompt tokens a step may add while streams decode, learned from measured step times.

A step costs roughly ``base + rows * per_row``: reading the weights costs ``base`` whatever the
batch, each row adds compute. Prompt chunks ride along with decodes as long as the step stays
within ``max_slowdown`` times a decode-only step. How many tokens that allows is a property of
the machine (a few on a compute-bound CPU, far more on a GPU: docs/ARCHITECTURE.md), so it is
measured, not configured:

    cap = (slowdown - 1) * decode_step_time / seconds_per_prefill_token
    slowdown = max_slowdown * (1 + (queued - 1) / decoding)

``max_slowdown`` is what reading one waiting prompt may cost the streams; each further request
waiting for its prompt (``queued``) widens it by ``max_slowdown / decoding``. While the
streams keep decoding, the queue's prompts cost them the same total time in any chunking:
pacing only spreads it out, and every waiting user sees nothing until their prompt is read. So
one long prompt beside four chats is paced at 1.8x, eight prompts waiting behind eight streams
come in at 3.4x, and thirty behind one stream are not trickled in at all.

The decode-only time is measured, not inferred: when there is none yet, or it was measured with
under half or over twice the streams now decoding (where compute shows, a step of sixteen rows
costs several times a step of one), the cap is 0 for one step and that step decodes alone. A
burst of arrivals would otherwise never leave a decode-only step to learn from, and every prompt
in the queue would trickle in at the initial cap until the last one had started.

Until a mixed step has been measured, a prompt-only step stands in for the token cost (its
whole time over its tokens: an overestimate, so the first paced chunk errs small). Without
it, the first long prompt after a burst of arrivals would ride along at the initial cap.
"""

from __future__ import annotations

from dataclasses import dataclass

STALE_RATIO = 2.0  # a decode-only time measured at rows outside [n / 2, 2n] is re-measured for n rows


def _ewma(old: float | None, new: float, weight: float) -> float:
    return new if old is None else (1 - weight) * old + weight * new


@dataclass(slots=True)
class PrefillPacer:
    """Tracks decode-only step time and the marginal cost of a prefill token; derives the cap."""

    max_slowdown: float
    initial_cap: int
    floor: int
    ceiling: int
    weight: float = 0.2
    decode_step_time: float | None = None
    decode_rows: int = 0  # streams decoding when decode_step_time was last measured
    token_cost: float | None = None

    def observe(self, step_time: float, decode_tokens: int, prefill_tokens: int) -> None:
        """Learn from one finished step."""
        if decode_tokens == 0:
            if self.token_cost is None and prefill_tokens > 0:
                self.token_cost = step_time / prefill_tokens
            return
        if prefill_tokens == 0:
            known = self._decode_time(decode_tokens)
            self.decode_step_time = _ewma(known, step_time, self.weight)
            self.decode_rows = decode_tokens
        elif (decode_time := self._decode_time(decode_tokens)) is not None:
            marginal = max(step_time - decode_time, 0.0) / prefill_tokens
            self.token_cost = _ewma(self.token_cost, marginal, self.weight)

    def cap(self, decoding: int = 1, queued: int = 0) -> int:
        """Prefill tokens allowed in the next step that also decodes (0: measure a decode-only step)."""
        decode_time = self._decode_time(max(decoding, 1))
        if decode_time is None:
            return 0
        if self.token_cost is None:
            return self.initial_cap
        if self.token_cost <= 0:
            return self.ceiling
        slowdown = self.max_slowdown * (1 + max(queued - 1, 0) / max(decoding, 1))
        allowed = (slowdown - 1) * decode_time / self.token_cost
        return int(min(self.ceiling, max(self.floor, allowed)))

    def _decode_time(self, rows: int) -> float | None:
        """The decode-only step time measured, if it fits a step of `rows` decoding streams."""
        if self.decode_step_time is None:
            return None
        fits = self.decode_rows / STALE_RATIO <= rows <= self.decode_rows * STALE_RATIO
        return self.decode_step_time if fits else None
