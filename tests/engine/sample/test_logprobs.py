"""Logprobs and logit_bias through the real engine: raw logprobs equal transformers' own, and
neither depends on the batch, on chunking or on speculative verification."""

from __future__ import annotations

import pytest
import torch
import transformers

from engine import SamplingParams, SamplingParamsError
from engine.core.sampling_params import MAX_LOGIT_BIAS_ENTRIES

TOL = 1e-4


@pytest.fixture(scope="module")
def reference(tiny_ckpt) -> transformers.PreTrainedModel:
    return transformers.AutoModelForCausalLM.from_pretrained(tiny_ckpt, dtype=torch.float32).eval()


@torch.no_grad()
def reference_logprobs(
    ref: transformers.PreTrainedModel, prompt: list[int], output: list[int]
) -> torch.Tensor:
    """transformers' float32 log-softmax at each position that emitted an output token."""
    logits = ref(torch.tensor([prompt + output])).logits[0].float()
    return logits[len(prompt) - 1 : len(prompt) + len(output) - 1].log_softmax(dim=-1)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0, logprobs=5, max_tokens=8, ignore_eos=True),
        # raw logprobs: temperature, filters and penalties never change them
        SamplingParams(
            temperature=0.7,
            top_k=5,
            repetition_penalty=1.5,
            seed=3,
            logprobs=20,
            max_tokens=8,
            ignore_eos=True,
        ),
    ],
    ids=["greedy", "sampled"],
)
def test_top_logprobs_equal_the_log_softmax_of_transformers_logits(
    tiny_ckpt, make_engine, prompts, reference, params
):
    prompt = prompts([21], seed=40)[0]
    out = make_engine(tiny_ckpt).generate([prompt], params)[0]
    assert [entry.token_id for entry in out.logprobs] == out.token_ids
    expected = reference_logprobs(reference, prompt, out.token_ids)
    for entry, row in zip(out.logprobs, expected, strict=True):
        assert entry.logprob == pytest.approx(float(row[entry.token_id]), abs=TOL)
        top_values, top_ids = row.topk(params.logprobs)
        assert [token for token, _ in entry.top] == top_ids.tolist()
        assert [value for _, value in entry.top] == pytest.approx(top_values.tolist(), abs=TOL)


def test_logprobs_are_off_unless_asked_and_zero_gives_the_sampled_token_alone(
    tiny_ckpt, make_engine, prompts
):
    engine = make_engine(tiny_ckpt)
    prompt = prompts([9], seed=41)[0]
    off, zero = engine.generate(
        [prompt] * 2, [SamplingParams(max_tokens=4), SamplingParams(max_tokens=4, logprobs=0)]
    )
    assert off.logprobs is None and off.new_logprobs == []
    assert len(zero.logprobs) == len(zero.token_ids) and all(entry.top == () for entry in zero.logprobs)
    assert all(entry.logprob <= 0 for entry in zero.logprobs)


def test_streamed_deltas_carry_the_logprobs_of_their_new_tokens(tiny_ckpt, make_engine, prompts):
    engine = make_engine(tiny_ckpt)
    engine.add_request(prompts([12], seed=42)[0], SamplingParams(max_tokens=10, logprobs=2, ignore_eos=True))
    deltas, last = [], None
    while engine.has_unfinished():
        for out in engine.step():
            assert [entry.token_id for entry in out.new_logprobs] == out.new_token_ids
            deltas += out.new_logprobs
            last = out
    assert deltas == last.logprobs and len(deltas) == 10


def test_logprobs_do_not_depend_on_the_batch_chunking_or_speculation(tiny_ckpt, make_engine, prompts):
    """Alone without drafts, then in a crowd with small chunks and n-gram verification."""
    plain = make_engine(tiny_ckpt, speculative="off")
    params = SamplingParams(temperature=0, logprobs=3, max_tokens=24, ignore_eos=True)
    # P + C + P, C the greedy reply to P: the model mostly repeats C, so n-gram drafts are accepted
    first = prompts([20], seed=43)[0]
    target = first + plain.generate([first], params)[0].token_ids + first
    alone = plain.generate([target], params)[0]

    engine = make_engine(tiny_ckpt, max_num_seqs=4, max_num_batched_tokens=24, block_size=8)
    crowd = prompts([50, 7, 33], seed=44)
    noise = SamplingParams(temperature=1.0, max_tokens=20, logprobs=1, ignore_eos=True)
    outs = engine.generate([crowd[0], target, *crowd[1:]], [noise, params, noise, noise])
    assert engine.metrics.spec_accepted_tokens > 0, "the test meant to cover verified drafts"
    assert outs[1].token_ids == alone.token_ids
    for ours, theirs in zip(outs[1].logprobs, alone.logprobs, strict=True):
        assert ours.token_id == theirs.token_id
        assert ours.logprob == pytest.approx(theirs.logprob, abs=TOL)  # the forward rounds per shape
        assert [t for t, _ in ours.top] == [t for t, _ in theirs.top]


def test_logit_bias_forces_and_forbids_tokens(tiny_ckpt, make_engine, prompts):
    engine = make_engine(tiny_ckpt)
    prompt = prompts([15], seed=45)[0]
    greedy = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    plain = engine.generate([prompt], greedy)[0].token_ids

    forbidden = {token: -100.0 for token in set(plain)}
    avoided = engine.generate([prompt], SamplingParams(**{**_fields(greedy), "logit_bias": forbidden}))[0]
    assert not set(avoided.token_ids) & set(plain)

    forced = {77: 100.0}
    for temperature in (0.0, 1.0):
        params = SamplingParams(
            temperature=temperature, max_tokens=6, ignore_eos=True, logit_bias=forced, logprobs=1
        )
        out = engine.generate([prompt], params)[0]
        assert out.token_ids == [77] * 6
        # logprobs stay raw: the model's own view of token 77, not the biased certainty
        assert all(entry.logprob < -0.5 for entry in out.logprobs)


def test_logit_bias_is_batch_invariant(tiny_ckpt, make_engine, prompts):
    prompt = prompts([11], seed=46)[0]
    params = SamplingParams(
        temperature=0.8, seed=5, max_tokens=12, ignore_eos=True, logit_bias={30: 4.0, 31: -3.0}
    )
    alone = make_engine(tiny_ckpt).generate([prompt], params)[0].token_ids
    crowd = prompts([40, 9], seed=47)
    outs = make_engine(tiny_ckpt, max_num_batched_tokens=16).generate(
        [crowd[0], prompt, crowd[1]],
        [SamplingParams(max_tokens=10, logit_bias={30: -50.0}), params, SamplingParams()],
    )
    assert outs[1].token_ids == alone


def test_bad_logprobs_and_logit_bias_are_refused_naming_the_field(tiny_ckpt, make_engine):
    cases = [
        ({"logprobs": 21}, "logprobs"),
        ({"logprobs": -1}, "logprobs"),
        ({"logprobs": True}, "logprobs"),
        ({"logit_bias": {5: 101.0}}, "logit_bias"),
        ({"logit_bias": {5: float("nan")}}, "logit_bias"),
        ({"logit_bias": {-1: 1.0}}, "logit_bias"),
        ({"logit_bias": {"5": 1.0}}, "logit_bias"),
        ({"logit_bias": dict.fromkeys(range(MAX_LOGIT_BIAS_ENTRIES + 1), 1.0)}, "logit_bias"),
    ]
    for fields, name in cases:
        with pytest.raises(SamplingParamsError, match=f"SamplingParams.{name}"):
            SamplingParams(**fields)
    engine = make_engine(tiny_ckpt)
    vocab = engine.model_config.vocab_size
    with pytest.raises(SamplingParamsError, match=rf"logit_bias has token id {vocab}\b"):
        engine.add_request([5, 6], SamplingParams(logit_bias={1: 1.0, vocab: 1.0}))
    assert not engine.has_unfinished()


def _fields(params: SamplingParams) -> dict:
    return {name: getattr(params, name) for name in params.__slots__}
