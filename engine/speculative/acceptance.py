"""Which drafted tokens a verify step keeps, so the output distribution is exactly the model's.

A request with drafts x_1..x_d fed [t, x_1..x_d] and got logits at each of those 1 + d rows:
row i is the model's next-token distribution after x_1..x_i. Each row is processed as the
sampler would process that position alone (penalties over the history including the drafts
before it, then temperature, top-k/p, min-p), and:

* greedy: keep x_i while it equals row i-1's argmax; the first argmax that differs (or the
  bonus after the last draft) is the model's own next token, so the tokens are the ones plain
  decoding gives.
* sampled: the draft is a point mass q(x) = 1, so the standard rejection rule reduces to: keep
  x_i with probability p(x_i); on rejection draw from p with x_i removed and renormalised (the
  residual max(0, p - q) normalised). Every emitted token is then distributed exactly as p.

Uniforms come from the request's own generator, so a seeded request stays reproducible.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import ModuleType

import torch

from engine.sample.sampler import SamplingRow, greedy_tokens, processed_logits, sample_from


def position_rows(row: SamplingRow, drafts: Sequence[int]) -> list[SamplingRow]:
    """The request's sampling row at each of its 1 + d verified positions (history grown by the
    drafts before it; shared, not copied, when no penalty reads the history)."""
    if not row.params.has_penalties:
        return [row] * (len(drafts) + 1)
    output = list(row.output_ids)
    return [dataclasses.replace(row, output_ids=output + list(drafts[:i])) for i in range(len(drafts) + 1)]


def accept(
    logits: torch.Tensor, drafts: Sequence[int], row: SamplingRow, kernels: ModuleType | None = None
) -> list[int]:
    """The tokens to emit from one request's 1 + d verified rows: the accepted drafts, then one more.

    ``logits`` float32 [1 + d, V]; ``row`` the request's params, generator and history.
    """
    processed = processed_logits(logits, position_rows(row, drafts), kernels)
    if row.params.is_greedy:
        return _accept_greedy(greedy_tokens(processed, kernels).tolist(), drafts)
    return accept_sampled(processed.softmax(dim=-1), drafts, row.generator)


def _accept_greedy(best: list[int], drafts: Sequence[int]) -> list[int]:
    for i, draft in enumerate(drafts):
        if draft != best[i]:
            return best[: i + 1]
    return best


def accept_sampled(probs: torch.Tensor, drafts: Sequence[int], generator: torch.Generator) -> list[int]:
    """The rejection rule over processed probabilities ``probs`` [1 + d, V] (rows sum to 1)."""
    emitted: list[int] = []
    for i, draft in enumerate(drafts):
        p = probs[i]
        u = torch.rand((), generator=generator, device=generator.device)
        if float(u) < float(p[draft]):
            emitted.append(draft)
            continue
        residual = p.clone()
        residual[draft] = 0.0
        # p(draft) below 1 only by rounding: nothing else is possible, so the draft stands
        emitted.append(_draw(residual, generator) if bool(residual.any()) else draft)
        return emitted
    emitted.append(_draw(probs[len(drafts)], generator))
    return emitted


def _draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One token from (unnormalised) ``probs`` by the sampler's inverse-CDF draw."""
    return int(sample_from(probs.log()[None], [generator])[0])
