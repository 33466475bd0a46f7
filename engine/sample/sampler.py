"""Batched sampling: one token per row of a [B, V] logits tensor, each row with its own params.

Pipeline (as in Hugging Face / vLLM)::

    logit_bias -> penalties -> greedy? argmax
              -> temperature -> top-k -> top-p -> min-p -> inverse CDF at the row's own uniform draw

Batch invariance is built in, not hoped for: every step is elementwise, a per-row kernel
(max, topk, sort, softmax, cumsum) or a draw from the row's own generator, so a request's token
depends only on its own logits, params, history and generator state, never on its neighbours.
Rows whose params are defaults skip the work they do not need (penalties, sorting).
"""

from __future__ import annotations

import array
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TypeGuard

import torch

from engine.core.logit_bias import LogitBias, apply_logit_bias
from engine.core.request import Request
from engine.core.sampling_params import SamplingParams

# How many of a row's most likely tokens top-p inspects before falling back to a full sort.
NUCLEUS_PREFIX = 256


# Greedy picks take the max of each block of this many logits first, then the argmax inside
# the winning block: torch's CPU argmax over a whole vocabulary is much slower than its amax
# (docs/ARCHITECTURE.md has the figure).
ARGMAX_BLOCK = 1024


def greedy_tokens(logits: torch.Tensor, kernels: ModuleType | None = None) -> torch.Tensor:
    """``logits.argmax(-1)`` for [B, V] logits, the first index on ties: by the native kernels'
    ``argmax_rows`` where given (float32 on CPU), else in two vectorized passes."""
    if _kernels_take(kernels, logits):
        return kernels.argmax_rows(logits.contiguous())
    rows, vocab = logits.shape
    if vocab % ARGMAX_BLOCK:
        return logits.argmax(dim=-1)
    blocks = logits.view(rows, vocab // ARGMAX_BLOCK, ARGMAX_BLOCK)
    best_block = blocks.amax(dim=-1).argmax(dim=-1)  # the first block holding the row's max
    inside = blocks[torch.arange(rows, device=logits.device), best_block].argmax(dim=-1)
    return best_block * ARGMAX_BLOCK + inside


def _kernels_take(kernels: ModuleType | None, logits: torch.Tensor) -> TypeGuard[ModuleType]:
    """The native sampling kernels read float32 logits on the CPU."""
    return kernels is not None and logits.dtype == torch.float32 and logits.device.type == "cpu"


def make_generator(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator:
    """One generator per request, so its draws never depend on what else is in the batch.

    An unseeded request takes its seed from torch's global RNG: still a private stream, and a
    test can make it reproducible with `torch.manual_seed`.
    """
    generator = torch.Generator(device=device)
    generator.manual_seed(seed if seed is not None else int(torch.randint(2**63 - 1, ())))
    return generator


@dataclass(slots=True)
class SamplingRow:
    """What the sampler needs about one request for one step (the sequences are not copied)."""

    params: SamplingParams
    generator: torch.Generator
    prompt_ids: Sequence[int] = ()
    output_ids: Sequence[int] = ()
    logit_bias: LogitBias | None = None


def sampling_row(request: Request) -> SamplingRow:
    """The request's row for the sampler; its token history is copied only where penalties read it."""
    if not request.params.has_penalties:
        return SamplingRow(request.params, request.generator, logit_bias=request.logit_bias)
    history = (request.prompt_token_ids, request.output_token_ids)
    return SamplingRow(request.params, request.generator, *history, request.logit_bias)


def _biased(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    return apply_logit_bias(logits, [row.logit_bias for row in rows])


def _column(values: Sequence[float], like: torch.Tensor) -> torch.Tensor:
    """Per-row scalars as a [rows, 1] tensor that broadcasts over the vocabulary."""
    return torch.tensor(values, dtype=like.dtype, device=like.device).unsqueeze(1)


def _merge(logits: torch.Tensor, picked: list[int], sub: torch.Tensor) -> torch.Tensor:
    """`logits` with rows `picked` replaced by `sub`, leaving the caller's tensor untouched."""
    if len(picked) == logits.shape[0]:
        return sub
    out = logits.clone()
    out[picked] = sub
    return out


def _history_ids(rows: Sequence[SamplingRow]) -> tuple[torch.Tensor, list[int]]:
    """Every history token a penalty looks at, row after row, and each row's (prompt, output) counts.

    Prompts are included only for rows with a repetition penalty, the one penalty that reads
    them. Ids go through array.array: torch.tensor on a long Python list is several times slower.
    """
    flat = array.array("q")
    spans: list[int] = []
    for row in rows:
        prompt = row.prompt_ids if row.params.repetition_penalty != 1.0 else ()
        output = row.output_ids if row.params.has_penalties else ()
        flat.extend(prompt)
        flat.extend(output)
        spans += (len(prompt), len(output))
    tokens = torch.frombuffer(flat, dtype=torch.int64) if flat else torch.empty(0, dtype=torch.int64)
    return tokens, spans


def _history(rows: Sequence[SamplingRow], device: torch.device) -> tuple[torch.Tensor, ...]:
    """(row, token, is_output) for every history token a penalty looks at."""
    tokens, spans = _history_ids(rows)
    span_sizes = torch.tensor(spans)
    row_index = torch.arange(len(rows)).repeat_interleave(2).repeat_interleave(span_sizes)
    is_output = torch.tensor([0.0, 1.0]).repeat(len(rows)).repeat_interleave(span_sizes)
    return row_index.to(device), tokens.to(device), is_output.to(device)


def apply_penalties(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    """Repetition (HF: prompt + output), presence and frequency (OpenAI: output) penalties.

    Only the logits of tokens in a row's history change, so the work is gathered to those
    entries instead of spanning the vocabulary. Returns `logits` itself when no row asks for a
    penalty, so default requests pay nothing.
    """
    picked = [i for i, row in enumerate(rows) if row.params.has_penalties]
    if not picked:
        return logits
    sub_rows = [rows[i] for i in picked]
    sub = logits[picked]
    row_index, tokens, is_output = _history(sub_rows, logits.device)
    counts = torch.zeros_like(sub).index_put_((row_index, tokens), is_output.to(sub.dtype), accumulate=True)
    count = counts[row_index, tokens]

    def per_entry(values: list[float]) -> torch.Tensor:
        return torch.tensor(values, dtype=sub.dtype, device=sub.device)[row_index]

    repetition = per_entry([row.params.repetition_penalty for row in sub_rows])
    frequency = per_entry([row.params.frequency_penalty for row in sub_rows])
    presence = per_entry([row.params.presence_penalty for row in sub_rows])
    values = sub[row_index, tokens]
    # x / 1 and x * 1 are exact, so rows without a repetition penalty pass through unchanged.
    values = torch.where(values > 0, values / repetition, values * repetition)
    values = values - frequency * count - presence * (count > 0)
    sub[row_index, tokens] = values  # a token listed twice receives the same value twice
    return _merge(logits, picked, sub)


def apply_top_k(logits: torch.Tensor, top_k: Sequence[int]) -> torch.Tensor:
    """Mask to -inf everything below each row's k-th largest logit (k <= 0 or >= vocab: off).

    A cut-off rather than a scatter of the top-k indices, so tokens tied with the k-th are all
    kept and the result does not depend on how topk orders ties.
    """
    vocab = logits.shape[-1]
    picked = [i for i, k in enumerate(top_k) if 0 < k < vocab]
    if not picked:
        return logits
    sub = logits[picked]
    k = torch.tensor([top_k[i] for i in picked], device=logits.device).unsqueeze(1)
    cutoff = sub.topk(int(k.max())).values.gather(1, k - 1)
    return _merge(logits, picked, sub.masked_fill(sub < cutoff, float("-inf")))


def apply_top_p(logits: torch.Tensor, top_p: Sequence[float]) -> torch.Tensor:
    """Keep each row's nucleus: the most likely tokens until their mass reaches p (p = 1: off).

    Sorting a 65k vocabulary is the expensive part, so the nucleus is first looked for among the
    NUCLEUS_PREFIX most likely tokens and the full sort only runs when a row's nucleus is wider.
    Both paths see the same probabilities in the same order and cumsum is sequential, so they
    agree exactly: which path a neighbour forces never changes a row's result.
    """
    picked = [i for i, p in enumerate(top_p) if p < 1.0]
    if not picked:
        return logits
    sub = logits[picked]
    probs = sub.softmax(dim=-1)
    p = _column([top_p[i] for i in picked], probs)
    ranked = probs.topk(min(NUCLEUS_PREFIX, probs.shape[-1])).values
    mass = ranked.cumsum(dim=-1)
    if bool((mass[:, -1:] < p).any()):
        ranked = probs.sort(dim=-1, descending=True).values
        mass = ranked.cumsum(dim=-1)
    # The token at rank j is kept while the mass strictly before it is still below p.
    keep = 1 + (mass[:, :-1] < p).sum(dim=-1, keepdim=True)
    cutoff = ranked.gather(1, keep - 1)
    return _merge(logits, picked, sub.masked_fill(probs < cutoff, float("-inf")))


def apply_min_p(logits: torch.Tensor, min_p: Sequence[float]) -> torch.Tensor:
    """Mask tokens whose probability is below min_p x the top token's probability.

    Done in logit space (p_i / p_max = exp(l_i - l_max)), so it needs a max, not a softmax.
    """
    if not any(m > 0 for m in min_p):
        return logits
    cutoff = logits.amax(dim=-1, keepdim=True) + _column(min_p, logits).log()  # log(0) = -inf: off
    return logits.masked_fill(logits < cutoff, float("-inf"))


def process_logits(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    """Temperature -> top-k -> top-p -> min-p for non-greedy rows; -inf marks excluded tokens."""
    params = [row.params for row in rows]
    if any(p.temperature != 1.0 for p in params):
        logits = logits / _column([p.temperature for p in params], logits)
    logits = apply_top_k(logits, [p.top_k for p in params])
    logits = apply_top_p(logits, [p.top_p for p in params])
    return apply_min_p(logits, [p.min_p for p in params])


def sample_from(logits: torch.Tensor, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """Draw one token per row from softmax(logits) by inverting the row's CDF at a uniform u.

    u comes from the row's own generator, which is what makes sampling batch invariant. One
    uniform per row instead of an Exp(1) per vocabulary entry (the exponential race) halves
    the cost. u is taken in (0, 1], so the token found always has non-zero probability.
    """
    cdf = logits.softmax(dim=-1).cumsum(dim=-1)
    u = torch.stack([torch.rand((), generator=g, device=g.device) for g in generators]).to(cdf.device)
    target = ((1.0 - u) * cdf[:, -1]).unsqueeze(1)
    return torch.searchsorted(cdf, target).squeeze(1).clamp_max(cdf.shape[-1] - 1)


def _native_inputs(rows: Sequence[SamplingRow], draw: bool) -> tuple[torch.Tensor, ...]:
    """The kernels' params [B, 8], flat history and spans [B, 2] for ``rows``; with ``draw``, each
    sampled row's uniform from its own generator (greedy rows draw none)."""
    params = []
    for row in rows:
        p = row.params
        greedy = p.is_greedy
        uniform = float(torch.rand((), generator=row.generator)) if draw and not greedy else 0.0
        temperature = 0.0 if greedy else p.temperature
        penalties = (p.repetition_penalty, p.frequency_penalty, p.presence_penalty)
        params.append((temperature, p.top_k, p.top_p, p.min_p, *penalties, uniform))
    history, spans = _history_ids(rows)
    return torch.tensor(params, dtype=torch.float32), history, torch.tensor(spans).view(-1, 2)


def native_sample(kernels: ModuleType, logits: torch.Tensor, rows: Sequence[SamplingRow]) -> list[int]:
    """The pipeline above in the native kernels' ``sample_rows``, a few passes per row: the same
    steps in the same order, each row drawing one uniform from its own generator (greedy rows none).

    Penalties match PyTorch's bit for bit; softmax masses are summed in another order, so a draw
    landing within rounding of a boundary between two tokens may pick the other one.
    """
    return kernels.sample_rows(logits.contiguous(), *_native_inputs(rows, draw=True)).tolist()


def processed_logits(
    logits: torch.Tensor, rows: Sequence[SamplingRow], kernels: ModuleType | None
) -> torch.Tensor:
    """Each row as the draw sees it: logit_bias and penalties, then for sampled rows temperature,
    top-k, top-p and min-p (-inf where excluded); greedy rows after the penalties only. By the
    kernels' ``process_rows`` where they take the logits. ``rows`` share one request's params
    (speculative verify positions)."""
    logits = _biased(logits, rows)
    if _kernels_take(kernels, logits):
        params, history, spans = _native_inputs(rows, draw=False)
        return kernels.process_rows(logits.contiguous(), params, history, spans)
    logits = apply_penalties(logits, rows)
    return logits if all(row.params.is_greedy for row in rows) else process_logits(logits, rows)


class Sampler:
    """The runner's single entry point: logits of the sampling rows in, one token id per row out.

    ``kernels``: the model's native kernels (None: PyTorch's only). Rows that are all greedy
    without penalties take their ``argmax_rows``; any other step their ``sample_rows``.
    """

    def __init__(self, kernels: ModuleType | None = None) -> None:
        self.kernels = kernels

    def sample(self, logits: torch.Tensor, rows: Sequence[SamplingRow]) -> list[int]:
        """Pick one token for each row of float32 `logits` [B, V], row i using `rows[i]`."""
        if logits.dim() != 2 or logits.shape[0] != len(rows):
            raise ValueError(f"logits must be [len(rows)={len(rows)}, vocab], got {tuple(logits.shape)}")
        logits = _biased(logits, rows)
        plain_greedy = all(row.params.is_greedy and not row.params.has_penalties for row in rows)
        if not plain_greedy and _kernels_take(self.kernels, logits):
            return native_sample(self.kernels, logits, rows)
        logits = apply_penalties(logits, rows)
        greedy = [i for i, row in enumerate(rows) if row.params.is_greedy]
        if len(greedy) == len(rows):
            return greedy_tokens(logits, self.kernels).tolist()
        drawn = [i for i, row in enumerate(rows) if not row.params.is_greedy]
        tokens = torch.empty(len(rows), dtype=torch.long, device=logits.device)
        if greedy:
            tokens[greedy] = greedy_tokens(logits[greedy], self.kernels)
        drawn_rows = [rows[i] for i in drawn]
        processed = process_logits(logits[drawn], drawn_rows)
        tokens[drawn] = sample_from(processed, [row.generator for row in drawn_rows])
        return tokens.tolist()
