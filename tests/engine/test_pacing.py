"""Prefill pacing: the cap follows measured step costs so decode steps stay within the slowdown."""

from __future__ import annotations

import pytest

from engine import Engine, EngineConfig, SamplingParams
from engine.pacing import PrefillPacer


def pacer(**kwargs) -> PrefillPacer:
    return PrefillPacer(**{"max_slowdown": 2.0, "initial_cap": 32, "floor": 8, "ceiling": 256, **kwargs})


def test_cap_is_the_start_value_until_both_costs_are_known():
    p = pacer()
    assert p.cap() == 32
    p.observe(0.050, decode_tokens=4, prefill_tokens=0)
    assert p.cap() == 32
    p.observe(0.040, decode_tokens=4, prefill_tokens=10)
    assert p.cap() != 32


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
    assert p.cap() == expected


def test_more_waiting_prompts_per_decoding_stream_allow_bigger_chunks():
    p = pacer(weight=1.0)
    p.observe(0.060, decode_tokens=4, prefill_tokens=0)
    p.observe(0.060 + 32 * 0.004, decode_tokens=4, prefill_tokens=32)
    assert p.cap(decoding=4, queued=1) == 15  # fewer waiting than decoding: slowdown 2
    assert p.cap(decoding=2, queued=6) == 75  # slowdown 6: (5 * 60 ms) / 4 ms
    assert p.cap(decoding=1, queued=31) == 256  # a crowd waiting behind one stream: no pacing


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


def test_fixed_cap_when_pacing_is_off(tiny_ckpt):
    engine = Engine.from_pretrained(
        tiny_ckpt, EngineConfig(max_decode_slowdown=None, max_prefill_with_decodes=12)
    )
    assert engine.pacer is None and engine.prefill_cap == 12
    with pytest.raises(ValueError, match="max_decode_slowdown"):
        EngineConfig(max_decode_slowdown=0.5)
