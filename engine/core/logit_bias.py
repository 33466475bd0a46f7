"""A request's logit_bias as tensors, built once when it is added, and its addition to the logits.

The bias is added to the raw logits before anything else the sampler does (penalties, temperature,
filters), as OpenAI and vLLM apply it, to every row the request samples or verifies from. The
addition is elementwise on the request's own row, so it never depends on the batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class LogitBias:
    token_ids: torch.Tensor  # int64 [k], distinct
    values: torch.Tensor  # float32 [k]

    @classmethod
    def of(cls, bias: Mapping[int, float], device: torch.device | str = "cpu") -> LogitBias | None:
        """The tensors of a SamplingParams.logit_bias; None when it is empty."""
        if not bias:
            return None
        ids = torch.tensor(list(bias), dtype=torch.long, device=device)
        return cls(ids, torch.tensor(list(bias.values()), dtype=torch.float32, device=device))


def apply_logit_bias(logits: torch.Tensor, biases: Sequence[LogitBias | None]) -> torch.Tensor:
    """``logits`` [B, V] with row i's bias added; the same tensor (untouched) when no row has one."""
    if all(bias is None for bias in biases):
        return logits
    out = logits.clone()
    for row, bias in enumerate(biases):
        if bias is not None:
            out[row].index_add_(0, bias.token_ids, bias.values.to(out.dtype))
    return out
