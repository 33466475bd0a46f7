"""What a workload asks an engine to do, and what the engine is seen to do: requests in, traces out.

Both backends run the same `Scenario` and return one `RequestTrace` per request, timed by the
harness itself (not by either engine's own metrics), so every figure is measured the same way
on both sides. Times are seconds since the run started.

Arrivals come in two kinds, because some workloads are defined by the clock and others by
progress:

    arrival_s=2.5            arrives 2.5 s after the start (Poisson arrivals)
    after=(0, 32)            arrives once request 0 has produced 32 tokens (staggered chats,
                             a long prompt landing mid-decode, the next turn of a conversation)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request: its prompt tokens, how many tokens it must generate, when it arrives."""

    prompt: tuple[int, ...]
    max_new_tokens: int
    arrival_s: float = 0.0
    after: tuple[int, int] | None = None  # (request index, tokens produced) that triggers the arrival
    continues: int | None = None  # full prompt = that request's prompt + its output + `prompt`


@dataclass(frozen=True, slots=True)
class Scenario:
    """The requests of one run, plus how transformers (which cannot join a running batch) groups them.

    `hf_groups` lists request indices per `generate` call, run one after another; each group is
    one static padded batch.
    """

    requests: tuple[RequestSpec, ...]
    hf_groups: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        grouped = sorted(i for group in self.hf_groups for i in group)
        if grouped != list(range(len(self.requests))):
            raise ValueError("hf_groups must name every request exactly once")
        for i, spec in enumerate(self.requests):
            for ref in (spec.after[0] if spec.after else None, spec.continues):
                if ref is not None and not 0 <= ref < i:
                    raise ValueError(f"request {i} may only depend on an earlier request, not {ref}")
            if spec.after and spec.after[1] > self.requests[spec.after[0]].max_new_tokens:
                raise ValueError(f"request {i} waits for more tokens than request {spec.after[0]} makes")
            c = spec.continues
            if c is not None and spec.after != (c, self.requests[c].max_new_tokens):
                raise ValueError(f"request {i} continues request {c}, so it must arrive when that one ends")

    def context_lengths(self) -> list[int]:
        """Prompt + generated tokens of every request (known in advance: generation is fixed-length)."""
        lengths: list[int] = []
        for spec in self.requests:
            history = lengths[spec.continues] if spec.continues is not None else 0
            lengths.append(history + len(spec.prompt) + spec.max_new_tokens)
        return lengths


@dataclass(slots=True)
class RequestTrace:
    """What one request saw: when it arrived, its full prompt, and when each output token appeared."""

    arrival: float
    prompt: list[int]
    token_times: list[float] = field(default_factory=list)
    output: list[int] = field(default_factory=list)

    @property
    def ttft(self) -> float:
        return self.token_times[0] - self.arrival

    @property
    def itls(self) -> list[float]:
        times = self.token_times
        return [later - earlier for earlier, later in itertools.pairwise(times)]


Traces = list["RequestTrace | None"]


def full_prompt(spec: RequestSpec, traces: Traces) -> list[int]:
    """The tokens actually sent: a continuation carries the whole conversation so far."""
    if spec.continues is None:
        return list(spec.prompt)
    previous = traces[spec.continues]
    assert previous is not None, "a continuation is only built after the turn it continues"
    return [*previous.prompt, *previous.output, *spec.prompt]


def trigger_time(spec: RequestSpec, traces: Traces) -> float | None:
    """When a progress-triggered request arrives, or None while its trigger has not happened yet."""
    assert spec.after is not None
    index, tokens = spec.after
    trace = traces[index]
    if trace is None or len(trace.token_times) < tokens:
        return None
    return trace.token_times[tokens - 1]
