"""The rejection rule for a point-mass draft keeps the sampled distribution exactly the model's:
each emitted token is distributed as the processed p of its position, whatever was drafted."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from engine.core.sampling_params import SamplingParams
from engine.sample.sampler import SamplingRow, process_logits
from engine.speculative.acceptance import accept
from model.native import kernels
from tests.conftest import RUNNABLE_ISAS

TRIALS = 20_000
TOLERANCE = 0.02  # total variation; the sampling error at 20k trials is ~0.005


def frequencies(tokens: list[int], vocab: int) -> torch.Tensor:
    return torch.bincount(torch.tensor(tokens, dtype=torch.long), minlength=vocab).double() / len(tokens)


def total_variation(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().sum() / 2)


@pytest.fixture(params=[None, *RUNNABLE_ISAS], ids=lambda isa: isa or "pytorch")
def sampling_kernels(request: pytest.FixtureRequest) -> ModuleType | None:
    """None: PyTorch's processing of the verified rows; else each instruction set's process_rows."""
    if request.param is None:
        return None
    module, reason = kernels.availability(request.param)
    assert module is not None, f"the {request.param} kernels did not build on a CPU that runs them: {reason}"
    return module


@pytest.mark.slow
def test_accepted_and_resampled_tokens_follow_the_processed_distribution(sampling_kernels):
    logits = torch.tensor([[2.0, 1.5, 1.0, 0.2, -1.0, 0.5], [0.1, 0.3, 2.5, 1.0, 0.0, -2.0]])
    params = SamplingParams(temperature=0.7, top_k=4, seed=5)
    row = SamplingRow(params, torch.Generator().manual_seed(5))
    p = process_logits(logits, [row, row]).softmax(dim=-1).double()
    drafts = [1]  # the second most likely token at position 0: often rejected
    firsts, seconds = [], []
    for _ in range(TRIALS):
        emitted = accept(logits.clone(), drafts, row, sampling_kernels)
        firsts.append(emitted[0])
        if emitted[0] == drafts[0]:  # accepted: the bonus token is drawn from position 1
            seconds.append(emitted[1])
    vocab = logits.shape[1]
    assert total_variation(frequencies(firsts, vocab), p[0]) < TOLERANCE
    assert total_variation(frequencies(seconds, vocab), p[1]) < TOLERANCE
    # the draft was accepted about p(draft) of the time, and rejected otherwise
    assert abs(len(seconds) / TRIALS - float(p[0, drafts[0]])) < TOLERANCE
    assert frequencies(firsts, vocab)[4] == 0  # top-k removed it, resampling never brings it back


def test_greedy_acceptance_keeps_drafts_up_to_the_first_argmax_that_differs(sampling_kernels):
    logits = torch.full((4, 8), -1.0)
    logits[0, 3] = logits[1, 5] = logits[2, 6] = logits[3, 1] = 1.0
    row = SamplingRow(SamplingParams(temperature=0.0), torch.Generator())
    assert accept(logits, [3, 5, 2], row, sampling_kernels) == [3, 5, 6]
    assert accept(logits, [3, 5, 6], row, sampling_kernels) == [3, 5, 6, 1]  # all accepted, then the bonus
    assert accept(logits, [0, 5, 6], row, sampling_kernels) == [3]
