"""The native kernels' sampling pipeline (sample_rows) against engine/sample/sampler.py's PyTorch one."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from engine.core.sampling_params import SamplingParams
from engine.sample.sampler import Sampler, SamplingRow, apply_top_p, make_generator, processed_logits
from engine.speculative.acceptance import position_rows

SETTINGS = [
    dict(temperature=0.3, min_p=0.15, repetition_penalty=1.05),  # the app's defaults
    dict(temperature=0.7, top_p=0.9),
    dict(temperature=1.0),
    dict(temperature=0.9, top_k=50, top_p=0.9, min_p=0.02, repetition_penalty=1.1, frequency_penalty=0.3),
    dict(top_p=0.5, presence_penalty=1.0),
    dict(temperature=0.0, repetition_penalty=1.3, frequency_penalty=0.5),  # greedy after penalties
    dict(top_k=1),
    dict(temperature=2.0, top_p=0.99, repetition_penalty=0.8),
]


def rows_for(settings: dict, seed: int, vocab: int) -> list[SamplingRow]:
    history = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, vocab, (50,), generator=history).tolist()
    output = torch.randint(0, vocab, (30,), generator=history).tolist()  # repeats: counts above 1
    return [SamplingRow(SamplingParams(**settings), make_generator(seed), prompt, output)]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
@pytest.mark.parametrize("vocab", [4096, 4099])  # 4099: rows whose tails are shorter than a vector
def test_native_rows_pick_the_tokens_pytorch_picks(native: ModuleType, settings: dict, vocab: int) -> None:
    """Same uniform draws from the same generators: the same token (the masses are summed in another
    order, which could move a draw that lands within rounding of a boundary; none here does)."""
    native_sampler, pytorch = Sampler(native), Sampler()
    for seed in range(60):
        scale = (0.3, 2.0, 8.0)[seed % 3]
        logits = torch.randn(1, vocab, generator=torch.Generator().manual_seed(seed)) * scale
        ours = native_sampler.sample(logits, rows_for(settings, seed, vocab))
        assert ours == pytorch.sample(logits, rows_for(settings, seed, vocab)), f"seed {seed}"


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_verified_positions_are_processed_as_pytorch_processes_them(
    native: ModuleType, settings: dict
) -> None:
    """A verify step's 1 + d rows (each position's history grown by the drafts before it), as the
    rejection rule reads them: the same values where both keep a token, and the same tokens kept but
    for at most one per row at the nucleus's edge, where the masses are summed in another order."""
    identical = 0
    for seed in range(20):
        logits = torch.randn(4, 4099, generator=torch.Generator().manual_seed(seed)) * (0.5, 3.0)[seed % 2]
        rows = position_rows(rows_for(settings, seed, 4099)[0], drafts=[7, 7, 4098])
        ours, theirs = processed_logits(logits, rows, native), processed_logits(logits, rows, None)
        both = torch.isfinite(ours) & torch.isfinite(theirs)
        assert torch.equal(ours[both], theirs[both]), f"seed {seed}"
        assert int((torch.isfinite(ours) != torch.isfinite(theirs)).sum(dim=1).max()) <= 1, f"seed {seed}"
        identical += torch.equal(ours, theirs)
    assert identical >= 19


def test_a_nucleus_of_thousands_of_tokens_keeps_pytorchs_set(native: ModuleType) -> None:
    """A flat distribution: PyTorch sorts the whole vocabulary, the kernel reads a histogram. Every
    draw lies inside PyTorch's nucleus, and draws spread over most of it."""
    logits = torch.randn(1, 8192, generator=torch.Generator().manual_seed(3)) * 0.3
    nucleus = set(torch.isfinite(apply_top_p(logits, [0.5])[0]).nonzero().flatten().tolist())
    assert 1000 < len(nucleus) < 8192
    params = SamplingParams(top_p=0.5)
    draws = Sampler(native).sample(
        logits.expand(4000, -1), [SamplingRow(params, make_generator(i)) for i in range(4000)]
    )
    assert set(draws) <= nucleus
    assert len(set(draws)) > len(nucleus) // 2


def test_a_row_with_nan_takes_torch_argmax_and_the_rest_still_sample(native: ModuleType) -> None:
    logits = torch.randn(2, 64, generator=torch.Generator().manual_seed(1))
    logits[0, 5] = float("nan")
    rows = [SamplingRow(SamplingParams(temperature=0.8, seed=i), make_generator(i)) for i in range(2)]
    tokens = Sampler(native).sample(logits, rows)
    assert tokens[0] == 5
    assert (
        tokens[1]
        == Sampler().sample(logits[1:], [SamplingRow(SamplingParams(temperature=0.8), make_generator(1))])[0]
    )


def test_bad_inputs_are_refused_with_a_sentence(native: ModuleType) -> None:
    logits = torch.zeros(1, 16)
    params = torch.tensor([[1.0, 0, 1.0, 0.0, 1.1, 0.0, 0.0, 0.5]])
    with pytest.raises(RuntimeError, match="outside the vocabulary"):
        native.sample_rows(logits, params, torch.tensor([3, 16]), torch.tensor([[1, 1]]))
    with pytest.raises(RuntimeError, match="spans cover 1 history entries, not 2"):
        native.sample_rows(logits, params, torch.tensor([3, 4]), torch.tensor([[1, 0]]))
    with pytest.raises(RuntimeError, match="params must be"):
        native.sample_rows(logits, params[:, :7].contiguous(), torch.tensor([3]), torch.tensor([[1, 0]]))
