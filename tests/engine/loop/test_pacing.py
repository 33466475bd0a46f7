"""Prefill pacing: the cap follows measured step costs so decode steps stay within the slowdown."""

from __future__ import annotations

import pytest

from engine import Engine, EngineConfig, SamplingParams
from engine.loop.pacing import PrefillPacer
from tests.engine.conftest import random_prompt


def pacer(**kwargs) -> PrefillPacer:
    return PrefillPacer(**{"max_slowdown": 2.0, "initial_cap": 32, "floor": 8, "ceiling": 256, **kwargs})


def test_cap_measures_a_decode_only_step_first_then_starts_at_the_initial_value():
    p = pacer()
    assert p.cap() == 0  # no decode-only time yet: the next step decodes alone
    p.observe(0.050, decode_tokens=4, prefill_tokens=0)
    assert p.cap(decoding=4) == 32
    p.observe(0.040, decode_tokens=4, prefill_tokens=10)
    assert p.cap(decoding=4) != 32


def test_a_burst_of_arrivals_is_not_left_at_the_initial_cap():
    """Sixteen prompts arriving together leave no decode-only step of their own: the pacer asks for
    one, then lets the queue in fast while one stream decodes, then paces as streams pile up."""
    p = pacer(weight=1.0, max_slowdown=1.8)
    p.observe(1.2, decode_tokens=0, prefill_tokens=256)  # the first prompts, alone: ~4.7 ms a token
    assert p.cap(decoding=1, queued=15) == 0
    p.observe(0.055, decode_tokens=1, prefill_tokens=0)
    assert p.cap(decoding=1, queued=15) == 256  # (1.8 * 15 - 1) * 55 ms / 4.7 ms, at the ceiling
    p.observe(0.055 + 255 * 0.0045, decode_tokens=1, prefill_tokens=255)
    assert p.cap(decoding=2, queued=14) == 152  # within 2x of one row: (1.8 * 7.5 - 1) * 55 ms / 4.5 ms
    assert p.cap(decoding=3, queued=13) == 0  # three streams: the one-stream time no longer fits
    p.observe(0.110, decode_tokens=3, prefill_tokens=0)
    assert p.cap(decoding=3, queued=13) == int((1.8 * (1 + 12 / 3) - 1) * 0.110 / 0.0045)


def test_a_decode_time_measured_at_other_row_counts_does_not_price_prefill_tokens():
    p = pacer(weight=1.0)
    p.observe(0.060, decode_tokens=4, prefill_tokens=0)
    p.observe(0.060 + 32 * 0.004, decode_tokens=4, prefill_tokens=32)
    p.observe(0.5, decode_tokens=16, prefill_tokens=32)  # sixteen rows: not the four-row step's cost
    assert p.token_cost == pytest.approx(0.004)
    p.observe(0.070, decode_tokens=6, prefill_tokens=0)  # within 2x: blended, not restarted
    assert p.decode_step_time == pytest.approx(0.070) and p.decode_rows == 6


def test_a_prompt_only_step_seeds_the_token_cost_until_a_mixed_step_is_measured():
    """Four prompts arriving together leave no mixed step to learn from; the next prompt is paced anyway."""
    p = pacer(weight=1.0)
    p.observe(2.0, decode_tokens=0, prefill_tokens=500)  # 4 ms a token, weights read included
    p.observe(0.060, decode_tokens=4, prefill_tokens=0)
    assert p.cap(decoding=4, queued=1) == 15  # (2 - 1) * 60 ms / 4 ms, not the initial 32
    p.observe(0.060 + 15 * 0.002, decode_tokens=4, prefill_tokens=15)
    p.observe(3.0, decode_tokens=0, prefill_tokens=500)  # measured interference wins from now on
    assert p.cap(decoding=4, queued=1) == 30


@pytest.mark.parametrize(("per_token", "expected"), [(0.004, 15), (0.0005, 120), (0.1, 8), (0.00001, 256)])
def test_cap_keeps_a_mixed_step_within_the_slowdown(per_token, expected):
    """base 60 ms decode step; cap = (2 - 1) * 60 ms / cost per token, clamped to [floor, ceiling]."""
    p = pacer(weight=1.0)
    p.observe(0.060, decode_tokens=4, prefill_tokens=0)
    p.observe(0.060 + 32 * per_token, decode_tokens=4, prefill_tokens=32)
    assert p.cap(decoding=4) == expected


def test_more_waiting_prompts_per_decoding_stream_allow_bigger_chunks():
    p = pacer(weight=1.0)
    p.observe(0.060, decode_tokens=4, prefill_tokens=0)
    p.observe(0.060 + 32 * 0.004, decode_tokens=4, prefill_tokens=32)
    assert p.cap(decoding=4, queued=1) == 15  # one prompt waiting: slowdown 2, (2 - 1) * 60 ms / 4 ms
    assert p.cap(decoding=4, queued=3) == 30  # two more: slowdown 2 * (1 + 2 / 4) = 3, twice the headroom
    assert p.cap(decoding=2, queued=6) == 90  # slowdown 2 * (1 + 5 / 2) = 7: (6 * 60 ms) / 4 ms
    assert p.cap(decoding=2, queued=62) == 256  # a crowd waiting behind two streams: no pacing
    assert p.cap(decoding=1, queued=31) == 0  # a quarter of the measured rows: measure again


def test_engine_paces_prefill_from_its_own_steps(tiny_ckpt):
    engine = Engine.from_pretrained(tiny_ckpt, EngineConfig(dtype="float32", max_num_batched_tokens=128))
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    engine.add_request([10, 11, 12], params)
    for _ in range(5):
        engine.step()  # decode-only steps: the decode cost is learned
    engine.add_request(list(range(20, 400)), params)
    while engine.has_unfinished():
        engine.step()
    assert engine.pacer.decode_step_time is not None and engine.pacer.token_cost is not None
    assert engine.prefill_cap == engine.pacer.cap(*engine.scheduler.demand())


def test_a_burst_of_prompts_gets_a_decode_only_step_to_measure(tiny_ckpt):
    """Sixteen prompts at once: once the first decodes, one step decodes alone to measure it, then
    the queue comes in paced by that measurement (not left at the start value)."""
    engine = Engine.from_pretrained(
        tiny_ckpt, EngineConfig(dtype="float32", max_num_seqs=16, max_num_batched_tokens=64)
    )
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    for seed in range(16):
        engine.add_request(random_prompt(40, seed=seed), params)
    engine.step()  # prompt tokens only: the first prompt whole, part of the second
    assert engine.scheduler.demand() == (1, 15)
    assert engine.prefill_cap == 0
    waiting = [r.num_uncomputed_tokens for r in engine.scheduler.running[1:]] + [
        r.num_prompt_tokens for r in engine.scheduler.waiting
    ]
    engine.step()
    assert engine.pacer.decode_step_time is not None and engine.pacer.decode_rows == 1
    assert [r.num_uncomputed_tokens for r in engine.scheduler.running[1:]] + [
        r.num_prompt_tokens for r in engine.scheduler.waiting
    ] == waiting  # no prompt token was read beside the measured decode
    assert engine.prefill_cap > 0
    while engine.has_unfinished():
        engine.step()


def test_fixed_cap_when_pacing_is_off(tiny_ckpt):
    engine = Engine.from_pretrained(
        tiny_ckpt, EngineConfig(max_decode_slowdown=None, max_prefill_with_decodes=12)
    )
    assert engine.pacer is None and engine.prefill_cap == 12
    with pytest.raises(ValueError, match="max_decode_slowdown"):
        EngineConfig(max_decode_slowdown=0.5)
