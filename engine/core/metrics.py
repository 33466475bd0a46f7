"""Figures for the dashboard and the benchmarks: per request, per step, and rolling per engine.

Everything is recorded by the engine thread as plain numbers; engine/loop/snapshot.py freezes them for
other threads. Times are `time.monotonic()` seconds.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass

BUCKET_SECONDS = 0.5  # throughput history resolution
HISTORY_BUCKETS = 120  # one minute of history
RATE_BUCKETS = 6  # tokens_per_s averages the last 3 seconds


@dataclass(slots=True)
class RequestMetrics:
    """Latency and cache figures of one request: a fixed handful of numbers, however long the reply.

    Every stream event carries a copy, so nothing here may grow per token: a per-token list
    would make a reply's events cost memory quadratic in its length. The mean inter-token
    latency needs no list: the gaps between consecutive tokens sum to last - first.
    """

    arrival_time: float
    prompt_tokens: int
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    finished_time: float | None = None
    cached_prompt_tokens: int = 0
    generated_tokens: int = 0
    preemptions: int = 0

    def on_token(self, now: float) -> None:
        if self.first_token_time is None:
            self.first_token_time = now
        self.last_token_time = now
        self.generated_tokens += 1

    @property
    def queue_time(self) -> float | None:
        return None if self.first_scheduled_time is None else self.first_scheduled_time - self.arrival_time

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def _decode_span(self) -> float:
        """Seconds from the first token to the last (0 before the second token)."""
        if self.first_token_time is None or self.last_token_time is None:
            return 0.0
        return self.last_token_time - self.first_token_time

    @property
    def mean_itl(self) -> float | None:
        """Mean gap between consecutive tokens; None before the second token."""
        gaps = self.generated_tokens - 1
        return self._decode_span / gaps if gaps > 0 else None

    @property
    def tokens_per_s(self) -> float:
        """Decode rate after the first token (the first token's wait is TTFT, not throughput)."""
        span = self._decode_span
        return (self.generated_tokens - 1) / span if span > 0 else 0.0

    def copy(self) -> RequestMetrics:
        """A copy that stays valid while the engine thread keeps updating this one."""
        return dataclasses.replace(self)


@dataclass(slots=True)
class StepStats:
    """What one engine step did."""

    num_seqs: int = 0
    decode_tokens: int = 0
    prefill_tokens: int = 0
    generated_tokens: int = 0
    step_time: float = 0.0
    drafts: int = 0  # decode chunks that carried drafted tokens (speculative decoding)
    draft_tokens: int = 0  # drafted tokens verified
    accepted_tokens: int = 0  # of those, accepted

    @property
    def tokens(self) -> int:
        """Tokens scheduled: prompt tokens and fed-back tokens (drafts are counted apart)."""
        return self.decode_tokens + self.prefill_tokens


class ThroughputMeter:
    """Generated tokens counted in fixed time buckets; idle time shows up as empty buckets.

    bucket:  [t0, t0+0.5) [.., ..) ... [current)
    history: completed buckets as tokens/s, newest last
    """

    def __init__(self, now: float) -> None:
        self._buckets: deque[int] = deque([0], maxlen=HISTORY_BUCKETS + 1)
        self._current_start = now

    def _advance(self, now: float) -> None:
        elapsed = int((now - self._current_start) // BUCKET_SECONDS)
        for _ in range(min(elapsed, HISTORY_BUCKETS + 1)):
            self._buckets.append(0)
        self._current_start += elapsed * BUCKET_SECONDS

    def add(self, tokens: int, now: float) -> None:
        self._advance(now)
        self._buckets[-1] += tokens

    def history(self, now: float) -> tuple[float, ...]:
        self._advance(now)
        completed = list(self._buckets)[:-1]
        return tuple(count / BUCKET_SECONDS for count in completed)

    def rate(self, now: float) -> float:
        """Tokens/s over the last RATE_BUCKETS completed buckets plus the current partial one."""
        self._advance(now)
        recent = list(self._buckets)[-(RATE_BUCKETS + 1) :]
        span = (len(recent) - 1) * BUCKET_SECONDS + (now - self._current_start)
        return sum(recent) / span if span > 0 else 0.0


class EngineMetrics:
    """Engine-wide counters since start, the last step, and rolling throughput."""

    def __init__(self, now: float) -> None:
        self.steps = 0
        self.prompt_tokens = 0
        self.cached_prompt_tokens = 0
        # prompt tokens computed (a recompute after preemption again; prefix hits and forks never)
        self.prefill_tokens = 0
        self.preemptions = 0
        # speculative decoding since start (vLLM's spec_decode_num_*_total)
        self.spec_drafts = 0
        self.spec_draft_tokens = 0
        self.spec_accepted_tokens = 0
        self.last_step = StepStats()
        self.throughput = ThroughputMeter(now)

    def record_step(self, stats: StepStats, now: float) -> None:
        self.steps += 1
        self.last_step = stats
        self.prefill_tokens += stats.prefill_tokens
        self.spec_drafts += stats.drafts
        self.spec_draft_tokens += stats.draft_tokens
        self.spec_accepted_tokens += stats.accepted_tokens
        self.throughput.add(stats.generated_tokens, now)

    def record_admission(self, prompt_tokens: int, cached_prompt_tokens: int) -> None:
        """Count a request's prompt once, when it is first scheduled (not again after a preemption)."""
        self.prompt_tokens += prompt_tokens
        self.cached_prompt_tokens += cached_prompt_tokens

    @property
    def prefix_hit_rate(self) -> float:
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
