"""The sampler against direct, loop-by-loop reference computations on small vocabularies."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import pytest
import torch

from engine.core.sampling_params import SamplingParams
from engine.sample.sampler import (
    ARGMAX_BLOCK,
    NUCLEUS_PREFIX,
    Sampler,
    SamplingRow,
    apply_penalties,
    apply_top_p,
    greedy_tokens,
    make_generator,
    process_logits,
)
from model.native import kernels
from tests.conftest import RUNNABLE_ISAS


@pytest.fixture(params=[None, *RUNNABLE_ISAS], ids=lambda isa: isa or "pytorch")
def sampler(request: pytest.FixtureRequest) -> Sampler:
    """PyTorch's pipeline, and the native kernels' (sample_rows) of every instruction set the CPU runs."""
    if request.param is None:
        return Sampler()
    module, reason = kernels.availability(request.param)
    assert module is not None, f"the {request.param} kernels did not build on a CPU that runs them: {reason}"
    return Sampler(module)


def make_row(seed: int = 0, prompt: Sequence[int] = (), output: Sequence[int] = (), **params) -> SamplingRow:
    return SamplingRow(SamplingParams(seed=seed, **params), make_generator(seed), prompt, output)


def random_logits(rows: int, vocab: int, seed: int, scale: float = 2.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rows, vocab, generator=generator) * scale


def ref_penalize(
    logits: list[float], prompt, output, repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0
) -> list[float]:
    """Hugging Face repetition penalty over prompt + output, then OpenAI presence/frequency over output."""
    out = list(logits)
    for tok in set(prompt) | set(output):
        out[tok] = out[tok] / repetition_penalty if out[tok] > 0 else out[tok] * repetition_penalty
    for tok, count in Counter(output).items():
        out[tok] -= frequency_penalty * count + presence_penalty
    return out


def ref_distribution(logits: list[float], temperature=1.0, top_k=0, top_p=1.0, min_p=0.0) -> dict[int, float]:
    """The distribution a row samples from: temperature, top-k, top-p, min-p, each renormalising."""
    scaled = [value / temperature for value in logits]
    order = sorted(range(len(scaled)), key=lambda i: -scaled[i])
    kept = order[:top_k] if top_k > 0 else order

    def normalise(tokens: list[int]) -> dict[int, float]:
        weights = {t: math.exp(scaled[t] - scaled[order[0]]) for t in tokens}
        total = sum(weights.values())
        return {t: w / total for t, w in weights.items()}

    if top_p < 1.0:
        probs, nucleus, mass = normalise(kept), [], 0.0
        for tok in kept:
            nucleus.append(tok)
            mass += probs[tok]
            if mass >= top_p:
                break
        kept = nucleus
    probs = normalise(kept)
    top = max(probs.values())
    return normalise([t for t in kept if probs[t] >= min_p * top])


def finite_tokens(row: torch.Tensor) -> set[int]:
    return set(torch.isfinite(row).nonzero().flatten().tolist())


# ---------------------------------------------------------------- penalties


def test_penalties_match_reference_per_row():
    cases = [
        dict(repetition_penalty=1.5),
        dict(presence_penalty=0.7),
        dict(frequency_penalty=0.4),
        dict(repetition_penalty=0.8, presence_penalty=-0.5, frequency_penalty=1.5),
        dict(),  # a default row in the same batch must come out untouched
    ]
    logits = random_logits(len(cases), 20, seed=1)
    prompt, output = [0, 1, 2, 2, 9], [3, 3, 3, 4, 9, 0]
    rows = [make_row(prompt=prompt, output=output, **case) for case in cases]
    penalized = apply_penalties(logits, rows)
    for i, case in enumerate(cases):
        expected = ref_penalize(logits[i].tolist(), prompt, output, **case)
        torch.testing.assert_close(penalized[i], torch.tensor(expected), msg=f"row {case}")


def test_presence_and_frequency_ignore_prompt_tokens():
    logits = random_logits(1, 10, seed=2)
    row = make_row(prompt=[5, 6], output=[7], presence_penalty=1.0, frequency_penalty=1.0)
    penalized = apply_penalties(logits, [row])
    assert torch.equal(penalized[0, [5, 6]], logits[0, [5, 6]])
    assert penalized[0, 7] == pytest.approx(logits[0, 7].item() - 2.0)


def test_penalties_without_history_change_nothing():
    logits = random_logits(2, 10, seed=6)
    rows = [make_row(repetition_penalty=2.0), make_row(presence_penalty=1.0, frequency_penalty=1.0)]
    assert torch.equal(apply_penalties(logits, rows), logits)


def test_default_rows_skip_penalties_entirely():
    logits = random_logits(3, 10, seed=3)
    rows = [make_row(prompt=[1, 2], output=[3]) for _ in range(3)]
    assert apply_penalties(logits, rows) is logits


# ---------------------------------------------------------------- temperature, top-k, top-p, min-p

FILTER_CASES = [
    dict(top_k=5),
    dict(top_k=-1),
    dict(top_p=0.6),
    dict(min_p=0.1),
    dict(temperature=0.5, top_k=10, top_p=0.8, min_p=0.05),
    dict(temperature=2.0, top_p=0.9),
    dict(top_k=3, top_p=0.999),
    dict(),
]


def test_filters_match_reference_per_row_in_one_batch():
    logits = random_logits(len(FILTER_CASES), 32, seed=4)
    rows = [make_row(**case) for case in FILTER_CASES]
    processed = process_logits(logits, rows)
    for i, case in enumerate(FILTER_CASES):
        allowed = ref_distribution(logits[i].tolist(), **case)
        assert finite_tokens(processed[i]) == set(allowed), f"row {case}"
        kept = sorted(allowed)
        temperature = case.get("temperature", 1.0)
        torch.testing.assert_close(processed[i, kept], logits[i, kept] / temperature, msg=f"row {case}")


def test_top_k_keeps_tokens_tied_with_the_cutoff():
    logits = torch.tensor([[3.0, 2.0, 2.0, 1.0, 0.0]])
    processed = process_logits(logits, [make_row(top_k=2)])
    assert finite_tokens(processed[0]) == {0, 1, 2}


def test_top_p_wider_than_the_prefix_matches_reference():
    logits = random_logits(1, 3 * NUCLEUS_PREFIX, seed=7, scale=0.3)
    processed = apply_top_p(logits, [0.8])
    allowed = ref_distribution(logits[0].tolist(), top_p=0.8)
    assert len(allowed) > NUCLEUS_PREFIX  # the full-sort fallback really ran
    assert finite_tokens(processed[0]) == set(allowed)


def test_top_p_row_is_unchanged_when_a_neighbour_forces_the_full_sort():
    peaked = random_logits(1, 3 * NUCLEUS_PREFIX, seed=8, scale=4.0)
    flat = random_logits(1, 3 * NUCLEUS_PREFIX, seed=9, scale=0.3)
    alone = apply_top_p(peaked, [0.9])
    together = apply_top_p(torch.cat([flat, peaked]), [0.95, 0.9])
    assert len(finite_tokens(alone[0])) < NUCLEUS_PREFIX < len(finite_tokens(together[0]))
    assert torch.equal(together[1], alone[0])


@pytest.mark.parametrize("case", [dict(temperature=0.7, top_k=4), dict(top_p=0.75), dict(min_p=0.3)])
def test_sample_frequencies_follow_reference_distribution(case, sampler):
    draws = 3000
    logits = torch.tensor([[1.5, 1.0, 0.7, 0.2, -0.3, -1.0]]).expand(draws, -1)
    rows = [make_row(seed=i, **case) for i in range(draws)]
    counts = Counter(sampler.sample(logits, rows))
    expected = ref_distribution(logits[0].tolist(), **case)
    assert set(counts) <= set(expected)
    for tok, prob in expected.items():
        assert counts[tok] / draws == pytest.approx(prob, abs=0.04), f"token {tok}"


# ---------------------------------------------------------------- greedy


def test_greedy_rows_take_argmax_in_a_mixed_batch(sampler):
    logits = random_logits(4, 50, seed=5)
    rows = [make_row(temperature=0.0), make_row(top_p=0.5), make_row(temperature=1e-7), make_row(seed=9)]
    tokens = sampler.sample(logits, rows)
    assert tokens[0] == logits[0].argmax().item()
    assert tokens[2] == logits[2].argmax().item()


@pytest.mark.parametrize("vocab", [3 * ARGMAX_BLOCK, 65536, 1000])
def test_greedy_tokens_are_torch_argmax_including_ties(vocab):
    logits = random_logits(5, vocab, seed=11)
    top = logits.max() + 1
    logits[0, [7, vocab - 1]] = top  # tied in different blocks: the first wins
    logits[1, [vocab - 3, vocab - 2]] = top  # tied inside the last block
    logits[2] = 0.0  # all tied
    tokens = Sampler().sample(logits, [make_row(temperature=0.0) for _ in range(5)])
    assert tokens == logits.argmax(dim=-1).tolist()
    assert tokens[:3] == [7, vocab - 3, 0]
    assert torch.equal(greedy_tokens(logits[3:]), logits[3:].argmax(dim=-1))


@pytest.mark.parametrize("vocab", [65536, 3 * ARGMAX_BLOCK + 5, 1000, 7, 1])
def test_the_native_argmax_is_torch_argmax_ties_nan_and_infinities_included(native, vocab):
    """Every row a case: ties across and inside blocks, all equal, all negative, NaN (torch takes the
    first NaN), +inf and -inf, and the tail past the last whole vector or block."""
    logits = random_logits(10, vocab, seed=12)
    top = logits.max() + 1
    last = vocab - 1
    logits[0, [min(7, last), last]] = top
    logits[1, [max(last - 2, 0), max(last - 1, 0)]] = top
    logits[2] = 0.0
    logits[3] = -logits[3].abs() - 1.0
    logits[4, [last, 0]] = torch.tensor([math.nan, top])  # NaN after the max: the NaN still wins
    logits[5, last // 2] = math.inf
    logits[6] = -math.inf
    logits[7, last] = top  # the max in the tail
    logits[8, 0] = -math.inf
    for rows in (logits, logits[4:5], logits[7:8]):
        assert torch.equal(native.argmax_rows(rows.contiguous()), rows.argmax(dim=-1))
    tokens = Sampler(native).sample(logits, [make_row(temperature=0.0) for _ in range(10)])
    assert tokens == logits.argmax(dim=-1).tolist()


def test_the_native_argmax_refuses_what_it_cannot_read(native):
    with pytest.raises(RuntimeError, match="contiguous float32"):
        native.argmax_rows(torch.zeros(2, 8, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="contiguous float32"):
        native.argmax_rows(torch.zeros(8))


def test_greedy_takes_argmax_of_penalized_logits():
    logits = torch.tensor([[4.0, 3.5, 1.0, -2.0]])
    row = make_row(temperature=0.0, output=[0, 0], frequency_penalty=0.5)
    expected = ref_penalize(logits[0].tolist(), [], [0, 0], frequency_penalty=0.5)
    assert Sampler().sample(logits, [row]) == [max(range(4), key=expected.__getitem__)] == [1]


def test_sampling_leaves_the_callers_logits_untouched():
    logits = random_logits(3, 40, seed=10)
    before = logits.clone()
    rows = [
        make_row(output=[1, 1, 2], temperature=0.5, top_k=9, top_p=0.8, min_p=0.1, repetition_penalty=1.3),
        make_row(output=[3], temperature=0.0, presence_penalty=1.0),
        make_row(),
    ]
    Sampler().sample(logits, rows)
    assert torch.equal(logits, before)


def test_rejects_logits_that_do_not_match_rows():
    with pytest.raises(ValueError, match="len\\(rows\\)=2"):
        Sampler().sample(torch.zeros(3, 8), [make_row(), make_row()])


# ---------------------------------------------------------------- seeds and batch invariance

VOCAB, STEPS = 300, 40


def step_logits(stream: int, step: int) -> torch.Tensor:
    """A fixed logits sequence per stream, standing in for the model's output at each step."""
    return random_logits(1, VOCAB, seed=stream * 1000 + step)[0]


def generate(sampler: Sampler, subject: dict, seed: int, position: int, neighbours: list[dict]) -> list[int]:
    """Sample STEPS tokens for `subject` placed at `position` among `neighbours`, all with histories."""
    params = [*neighbours[:position], subject, *neighbours[position:]]
    rows = [
        make_row(seed=seed if i == position else 100 + i, prompt=[1, 2, 3], output=[], **p)
        for i, p in enumerate(params)
    ]
    for step in range(STEPS):
        streams = [0 if i == position else 1 + i for i in range(len(rows))]
        logits = torch.stack([step_logits(stream, step) for stream in streams])
        for row, token in zip(rows, sampler.sample(logits, rows), strict=True):
            row.output_ids.append(token)
    return list(rows[position].output_ids)


SUBJECTS = [
    dict(),
    dict(temperature=0.9, top_k=50, top_p=0.9, min_p=0.02, repetition_penalty=1.1, frequency_penalty=0.3),
]
NEIGHBOURS = [
    dict(temperature=0.0),
    dict(top_p=0.5, presence_penalty=1.0),
    dict(top_k=7),
    dict(min_p=0.2, temperature=1.5),
]


@pytest.mark.parametrize("subject", SUBJECTS)
def test_sampled_tokens_do_not_depend_on_batch_neighbours(subject, sampler):
    alone = generate(sampler, subject, seed=7, position=0, neighbours=[])
    assert len(set(alone)) > 5  # really sampling, not collapsing to one token
    assert generate(sampler, subject, seed=7, position=0, neighbours=NEIGHBOURS[:2]) == alone
    assert generate(sampler, subject, seed=7, position=3, neighbours=NEIGHBOURS) == alone
    assert generate(sampler, subject, seed=7, position=1, neighbours=NEIGHBOURS[::-1][:3]) == alone


def test_seed_determines_the_sequence(sampler):
    subject = dict(temperature=0.8)
    assert generate(sampler, subject, seed=11, position=0, neighbours=[]) == generate(
        sampler, subject, 11, 0, []
    )
    assert generate(sampler, subject, seed=11, position=0, neighbours=[]) != generate(
        sampler, subject, 12, 0, []
    )


def test_unseeded_generators_are_private_and_follow_torch_manual_seed():
    def two_streams() -> list[list[float]]:
        return [torch.rand(8, generator=make_generator(None)).tolist() for _ in range(2)]

    with torch.random.fork_rng():
        torch.manual_seed(0)
        first = two_streams()
        torch.manual_seed(0)
        assert two_streams() == first
    assert first[0] != first[1]
