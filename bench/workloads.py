"""The named workloads of issue 5: how each builds its requests and which figures it reports.

Every workload is built fresh for each repetition from a seeded RNG, so the two engines of one
repetition see identical prompts while different repetitions never share a prefix (a repeated
prompt would turn the next run's prefill into a prefix-cache hit). `--quick` shrinks every
length for a smoke run; the full sizes are the ones the issue's targets are stated for.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from bench import stats
from bench.scenario import RequestSpec, RequestTrace, Scenario
from model.text.tokenizer import LFM2_SPECIAL_TOKENS

FIRST_PLAIN_ID = len(LFM2_SPECIAL_TOKENS)  # prompts avoid special ids, stop tokens among them
POISSON_CONCURRENCY = 4  # the arrival rate aims at this many requests in flight on our engine


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    unit: str
    higher_is_better: bool


@dataclass(frozen=True, slots=True)
class BuildContext:
    rng: random.Random
    quick: bool
    vocab_size: int
    poisson_rate: float  # requests per second

    def size(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def prompt(self, length: int) -> tuple[int, ...]:
        return tuple(self.rng.randrange(FIRST_PLAIN_ID, self.vocab_size) for _ in range(length))


Measure = Callable[[list[RequestTrace]], dict[str, float | None]]


@dataclass(frozen=True, slots=True)
class Workload:
    """A workload; `isolated` ones run once per engine in a fresh process, to measure its peak RSS."""

    name: str
    title: str
    hf_method: str
    metrics: tuple[Metric, ...]
    build: Callable[[BuildContext], Scenario]
    measure: Measure
    isolated: bool = False
    uses_arrival_rate: bool = False  # BuildContext.poisson_rate matters (it is calibrated only if so)
    by_default: bool = True  # run when --workloads is not given (the long contexts are asked for by name)


TOK_S, MS, RATIO, MIB = "tok/s", "ms", "x", "MiB"
PEAK_RSS_LOAD, PEAK_RSS_RUN = "peak RSS, load", "peak RSS, load + run"


def _batch(specs: list[RequestSpec]) -> Scenario:
    return Scenario(tuple(specs), (tuple(range(len(specs))),))


def _one_by_one(specs: list[RequestSpec]) -> Scenario:
    return Scenario(tuple(specs), tuple((i,) for i in range(len(specs))))


# ---------------------------------------------------------------- single stream
def _build_single(ctx: BuildContext) -> Scenario:
    return _batch([RequestSpec(ctx.prompt(ctx.size(128, 32)), ctx.size(128, 16))])


def _measure_single(traces: list[RequestTrace]) -> dict[str, float | None]:
    (trace,) = traces
    return {
        "decode": stats.decode_rate(traces),
        "prefill": len(trace.prompt) / trace.ttft,
        "TTFT": stats.ms(trace.ttft),
    }


# ---------------------------------------------------------------- 8 concurrent chats
def _build_chats(ctx: BuildContext) -> Scenario:
    stagger = ctx.size(2, 1)  # chat j arrives once chat 0 has produced j * stagger tokens
    new = ctx.size(128, 16)
    specs = [RequestSpec(ctx.prompt(ctx.size(128, 32)), new)]
    specs += [RequestSpec(ctx.prompt(ctx.size(128, 32)), new, after=(0, j * stagger)) for j in range(1, 8)]
    return _batch(specs)


def _measure_chats(traces: list[RequestTrace]) -> dict[str, float | None]:
    itls = stats.all_itls(traces)
    return {
        "output": stats.output_rate(traces),
        "decode": stats.decode_rate(traces),
        "TTFT p50": stats.ms(stats.percentile([t.ttft for t in traces], 50)),
        "ITL p50": stats.ms(stats.percentile(itls, 50)),
        "ITL p99": stats.ms(stats.percentile(itls, 99)),
    }


# ---------------------------------------------------------------- 8 streams together (llama-batched-bench)
def _build_batch8(ctx: BuildContext) -> Scenario:
    new = ctx.size(128, 16)
    return _batch([RequestSpec(ctx.prompt(ctx.size(128, 32)), new) for _ in range(8)])


def _measure_batch8(traces: list[RequestTrace]) -> dict[str, float | None]:
    itl_p50 = stats.percentile(stats.all_itls(traces), 50)
    return {"decode": stats.batch_decode_rate(traces), "ITL p50": stats.ms(itl_p50)}


# ---------------------------------------------------------------- mixed-length requests, all at once
def _mixed(count: int, new_tokens: int) -> Workload:
    """`count` requests with prompts of 32-256 tokens and `new_tokens` each, arriving together."""

    def build(ctx: BuildContext) -> Scenario:
        low, high = ctx.size(32, 8), ctx.size(256, 64)
        new = ctx.size(new_tokens, 16)
        return _batch([RequestSpec(ctx.prompt(ctx.rng.randint(low, high)), new) for _ in range(count)])

    return Workload(
        name=f"mixed{count}",
        title=f"{count} requests, prompts 32-256, {new_tokens} new each",
        hf_method=f"static padded batch of {count}",
        metrics=(Metric("wall", "s", False), Metric("output", TOK_S, True)),
        build=build,
        measure=_measure_mixed,
    )


def _measure_mixed(traces: list[RequestTrace]) -> dict[str, float | None]:
    return {
        "wall": max(t.token_times[-1] for t in traces) - min(t.arrival for t in traces),
        "output": stats.output_rate(traces),
    }


# ---------------------------------------------------------------- Poisson arrivals
POISSON_NEW_TOKENS = {False: 64, True: 16}  # by quick


def poisson_rate(step_seconds: float, quick: bool) -> float:
    """Arrivals per second that keep ~POISSON_CONCURRENCY requests in flight at `step_seconds` per token.

    Busy but not saturated: with a 32-sequence batch the engine has room to spare, while one
    request at a time (the transformers baseline) falls behind, as a real server would.
    """
    return POISSON_CONCURRENCY / (POISSON_NEW_TOKENS[quick] * step_seconds)


def _build_poisson(ctx: BuildContext) -> Scenario:
    low, high = ctx.size(64, 16), ctx.size(256, 64)
    new = POISSON_NEW_TOKENS[ctx.quick]
    arrival, specs = 0.0, []
    for _ in range(ctx.size(16, 8)):
        specs.append(RequestSpec(ctx.prompt(ctx.rng.randint(low, high)), new, arrival_s=arrival))
        arrival += ctx.rng.expovariate(ctx.poisson_rate)
    return _one_by_one(specs)


def _measure_poisson(traces: list[RequestTrace]) -> dict[str, float | None]:
    ttfts, itls = [t.ttft for t in traces], stats.all_itls(traces)
    return {
        "TTFT p50": stats.ms(stats.percentile(ttfts, 50)),
        "TTFT p99": stats.ms(stats.percentile(ttfts, 99)),
        "ITL p50": stats.ms(stats.percentile(itls, 50)),
        "ITL p99": stats.ms(stats.percentile(itls, 99)),
        "output": stats.output_rate(traces),
    }


# ---------------------------------------------------------------- a long prompt arrives mid-decode
def _build_long_prompt(ctx: BuildContext) -> Scenario:
    new = ctx.size(128, 32)
    streams = [RequestSpec(ctx.prompt(ctx.size(128, 32)), new) for _ in range(4)]
    long = RequestSpec(ctx.prompt(ctx.size(2048, 256)), ctx.size(16, 4), after=(0, ctx.size(32, 8)))
    return Scenario((*streams, long), ((0, 1, 2, 3), (4,)))


def _measure_long_prompt(traces: list[RequestTrace]) -> dict[str, float | None]:
    *streams, long = traces
    before = stats.itls_between(streams, 0.0, long.arrival)
    during = stats.itls_between(streams, long.arrival, long.token_times[0])
    p99_during, p50_before = stats.percentile(during, 99), stats.percentile(before, 50)
    return {
        "ITL p50 before": stats.ms(p50_before),
        "ITL p99 before": stats.ms(stats.percentile(before, 99)),
        "ITL p50 during": stats.ms(stats.percentile(during, 50)),
        "ITL p99 during": stats.ms(p99_during),
        "p99 during / p50 before": stats.ratio(p99_during, p50_before),
        "long prompt TTFT": stats.ms(long.ttft),
    }


# ---------------------------------------------------------------- multi-turn conversation
def _build_multi_turn(ctx: BuildContext) -> Scenario:
    """Three turns over >= 1k tokens of history, then a cold prompt as long as turn 3's."""
    first, reply, user = ctx.size(1024, 128), ctx.size(32, 8), ctx.size(64, 16)
    specs = [RequestSpec(ctx.prompt(first), reply)]
    for turn in (1, 2):
        specs.append(RequestSpec(ctx.prompt(user), reply, after=(turn - 1, reply), continues=turn - 1))
    cold_length = first + 2 * (reply + user)  # turn 3's full prompt
    specs.append(RequestSpec(ctx.prompt(cold_length), 2, after=(2, reply)))
    return _one_by_one(specs)


def _measure_multi_turn(traces: list[RequestTrace]) -> dict[str, float | None]:
    reused, cold = traces[-2].ttft, traces[-1].ttft
    return {
        "turn-3 TTFT": stats.ms(reused),
        "cold TTFT, same length": stats.ms(cold),
        "turn-3 / cold": reused / cold,
    }


# ---------------------------------------------------------------- one stream deep into a long context
DEPTH_NEW_TOKENS = 64
DEPTHS = {"depth4k": 4096, "depth16k": 16384, "depth32k": 32768, "depth64k": 65536}


def _depth(name: str, context: int) -> Workload:
    """One stream decoding after a `context`-token prompt: llama-bench's `-d context -n 64` for the
    decode rate, and `-p context` for the prompt's."""

    def build(ctx: BuildContext) -> Scenario:
        return _batch([RequestSpec(ctx.prompt(ctx.size(context, context // 16)), DEPTH_NEW_TOKENS)])

    return Workload(
        name=name,
        title=f"1 stream, {context}-token prompt, {DEPTH_NEW_TOKENS} new",
        hf_method="generate, batch of 1",
        metrics=(Metric("decode", TOK_S, True), Metric("prefill", TOK_S, True)),
        build=build,
        measure=_measure_depth,
        by_default=False,
    )


def _measure_depth(traces: list[RequestTrace]) -> dict[str, float | None]:
    (trace,) = traces
    return {"decode": stats.decode_rate(traces), "prefill": len(trace.prompt) / trace.ttft}


# ---------------------------------------------------------------- peak RSS, 8 chats x 2k tokens
def _build_rss(ctx: BuildContext) -> Scenario:
    new = ctx.size(64, 16)
    return _batch([RequestSpec(ctx.prompt(ctx.size(2048, 256) - new), new) for _ in range(8)])


def _measure_rss(traces: list[RequestTrace]) -> dict[str, float | None]:
    return {}  # the figures come from the process itself (bench.rss)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            name="single",
            title="1 stream, 128-token prompt, 128 new",
            hf_method="generate, batch of 1",
            metrics=(
                Metric("decode", TOK_S, True),
                Metric("prefill", TOK_S, True),
                Metric("TTFT", MS, False),
            ),
            build=_build_single,
            measure=_measure_single,
        ),
        Workload(
            name="chats8",
            title="8 chats x (128 + 128), arriving 2 steps apart",
            hf_method="static padded batch of 8, all at once (generate cannot admit late arrivals)",
            metrics=(
                Metric("output", TOK_S, True),
                Metric("decode", TOK_S, True),
                Metric("TTFT p50", MS, False),
                Metric("ITL p50", MS, False),
                Metric("ITL p99", MS, False),
            ),
            build=_build_chats,
            measure=_measure_chats,
        ),
        Workload(
            name="batch8",
            title="8 requests x (128 + 128) at once; decode once all 8 are decoding",
            hf_method="static padded batch of 8",
            metrics=(Metric("decode", TOK_S, True), Metric("ITL p50", MS, False)),
            build=_build_batch8,
            measure=_measure_batch8,
        ),
        _mixed(32, 128),
        _mixed(16, 64),
        Workload(
            name="poisson",
            title="16 requests, Poisson arrivals, prompts 64-256, 64 new",
            hf_method="one generate per request in arrival order (no continuous batching for LFM2)",
            metrics=(
                Metric("TTFT p50", MS, False),
                Metric("TTFT p99", MS, False),
                Metric("ITL p50", MS, False),
                Metric("ITL p99", MS, False),
                Metric("output", TOK_S, True),
            ),
            build=_build_poisson,
            measure=_measure_poisson,
            uses_arrival_rate=True,
        ),
        Workload(
            name="long_prompt",
            title="2048-token prompt arrives while 4 streams decode",
            hf_method="batch of 4 streams, then the long prompt alone: it waits, the streams are unaffected",
            metrics=(
                Metric("ITL p50 before", MS, False),
                Metric("ITL p99 before", MS, False),
                Metric("ITL p50 during", MS, False),
                Metric("ITL p99 during", MS, False),
                Metric("p99 during / p50 before", RATIO, False),
                Metric("long prompt TTFT", MS, False),
            ),
            build=_build_long_prompt,
            measure=_measure_long_prompt,
        ),
        Workload(
            name="multi_turn",
            title="3-turn chat, 1024-token first prompt (turn 3 has 1.2k of history)",
            hf_method="one generate per turn, full prompt each time (no prefix reuse across calls)",
            metrics=(
                Metric("turn-3 TTFT", MS, False),
                Metric("cold TTFT, same length", MS, False),
                Metric("turn-3 / cold", RATIO, False),
            ),
            build=_build_multi_turn,
            measure=_measure_multi_turn,
        ),
        Workload(
            name="rss",
            title="8 chats x 2k tokens of context; peak RSS (VmHWM) of a fresh process per engine, 1 run",
            hf_method="static padded batch of 8",
            metrics=(Metric(PEAK_RSS_LOAD, MIB, False), Metric(PEAK_RSS_RUN, MIB, False)),
            build=_build_rss,
            measure=_measure_rss,
            isolated=True,
        ),
        *(_depth(name, context) for name, context in DEPTHS.items()),
    )
}
