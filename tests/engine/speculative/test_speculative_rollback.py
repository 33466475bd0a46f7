"""A step whose drafts were partly rejected leaves the conv state and the KV exactly as a run that
never drafted has them at the same length (on the native kernels, where a verify step runs the
decode stack's kernels; bit for bit)."""

from __future__ import annotations

import torch

from engine import SamplingParams
from tests.engine.conftest import random_prompt

GREEDY = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)


def cache_state(engine) -> tuple[int, list[int], list[torch.Tensor]]:
    """The running request's computed length, tokens, and every conv row and KV entry it owns."""
    (request,) = engine.scheduler.running
    cache, n, size = engine.runner.cache, request.num_computed_tokens, engine.config.block_size
    slots = torch.tensor([request.block_table[p // size] * size + p % size for p in range(n)])
    assert len(request.block_table) == -(-n // size)  # no block kept for a rejected draft
    tensors = [state[request.conv_slot].clone() for state in cache.conv]
    tensors += [kv.index_select(0, slots) for kv in (*cache.k, *cache.v)]
    return n, list(request.token_ids), tensors


def step_until_rejected(engine) -> None:
    while engine.has_unfinished():
        engine.step()
        step = engine.metrics.last_step
        if step.accepted_tokens < step.draft_tokens and engine.scheduler.running:
            return
    raise AssertionError("no draft was rejected")


def test_rejected_drafts_leave_conv_state_and_kv_as_if_never_drafted(tiny_ckpt, make_engine, native_models):
    config = {"dtype": "bfloat16", "max_num_seqs": 1, "block_size": 4}
    first = random_prompt(20, 7)
    reply = make_engine(tiny_ckpt, speculative="off", **config).generate([first], GREEDY)[0].token_ids
    prompt = first + reply + first  # the reply mostly repeats: drafts accepted, then one rejected
    plain = make_engine(tiny_ckpt, speculative="off", **config)
    spec = make_engine(tiny_ckpt, speculative="ngram", **config)

    spec.add_request(prompt, GREEDY)
    step_until_rejected(spec)
    assert spec.metrics.spec_accepted_tokens > 0
    length, tokens, drafted = cache_state(spec)

    plain.add_request(prompt, GREEDY)
    plain.step()  # the prompt, in one chunk as in `spec`
    while plain.scheduler.running[0].num_computed_tokens < length:
        plain.step()
    plain_length, plain_tokens, never_drafted = cache_state(plain)
    assert (plain_length, plain_tokens) == (length, tokens)
    for got, want in zip(drafted, never_drafted, strict=True):
        assert torch.equal(got, want)
