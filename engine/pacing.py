"""How many prompt tokens a step may add while streams decode, learned from measured step times.

A step costs roughly ``base + rows * per_row``: reading the weights costs ``base`` whatever the
batch, each row adds compute. Prompt chunks ride along with decodes as long as the step stays
within ``max_slowdown`` times a decode-only step. How many tokens that allows is a property of
the machine (a few on a compute-bound CPU, far more on a GPU: docs/ARCHITECTURE.md), so it is
measured, not configured:

    cap = (slowdown - 1) * decode_step_time / seconds_per_prefill_token
    slowdown = max_slowdown * max(1, queued / decoding)

The allowance grows once more requests wait for their prompt (``queued``) than streams
decode: one long prompt arriving next to four chats is paced, while thirty users waiting
behind one stream are not made to trickle in a dozen tokens a step.

Until a mixed step has been measured, a prompt-only step stands in for the token cost (its
whole time over its tokens: an overestimate, so the first paced chunk errs small). Without
it, the first long prompt after a burst of arrivals would ride along at the initial cap.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    token_cost: float | None = None

    def observe(self, step_time: float, decode_tokens: int, prefill_tokens: int) -> None:
        """Learn from one finished step."""
        if decode_tokens == 0:
            if self.token_cost is None and prefill_tokens > 0:
                self.token_cost = step_time / prefill_tokens
            return
        if prefill_tokens == 0:
            self.decode_step_time = _ewma(self.decode_step_time, step_time, self.weight)
        elif self.decode_step_time is not None:
            marginal = max(step_time - self.decode_step_time, 0.0) / prefill_tokens
            self.token_cost = _ewma(self.token_cost, marginal, self.weight)

    def cap(self, decoding: int = 1, queued: int = 0) -> int:
        """Prefill tokens allowed in the next step that also decodes."""
        if self.decode_step_time is None or self.token_cost is None:
            return self.initial_cap
        if self.token_cost <= 0:
            return self.ceiling
        slowdown = self.max_slowdown * max(1.0, queued / max(decoding, 1))
        allowed = (slowdown - 1) * self.decode_step_time / self.token_cost
        return int(min(self.ceiling, max(self.floor, allowed)))
