"""`--workloads quality`: how far each quantization moves the next-token distribution from bf16.

Teacher forcing, laid out as llama.cpp's ``llama-perplexity --kl-divergence`` lays it out, so its
figures for Q8_0/Q4_0/Q4_K_M (bench/llamacpp_quality.py) compare position for position: the
token stream is cut into chunks of ``context`` tokens, each chunk's first token becomes BOS, the
chunk runs as one prompt, and the next-token distributions of its second half are scored (the
positions ``context // 2`` to ``context - 2``, so every one has at least half a chunk before
it). For each scheme: the mean and 99th percentile over positions of KL(reference || quantized)
in nats, and how often both put the same token first. The reference is the unquantized model in
the run's dtype (bf16 where the native kernels run).

Random weights give flatter distributions than a trained model, so the report also gives the
reference's mean entropy against the uniform distribution's, and its mean top-1 probability:
the figures rank the schemes; a trained model's absolute KL values would differ.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.progress import Progress
from bench.report import render_table
from model.arch.cache import HybridCache
from model.arch.lfm2 import Lfm2ForCausalLM
from model.batch import SequenceChunk, build_forward_batch
from model.checkpoint.loader import load_model
from model.text.tokenizer import Tokenizer

NAME = "quality"
TITLE = "KL(bf16 || quantized) and top-1 agreement, teacher-forced, llama-perplexity's layout"
SIZES = {False: (512, 8), True: (64, 4)}  # by quick: (context, chunks): 2,040 or 124 positions
_BLOCK = 16


def plain_ids(tokenizer: Tokenizer) -> list[int]:
    """The ids text can tokenize to: not special (LFM2's, nor the random checkpoints' reserved ones)."""
    return [i for i in range(tokenizer.vocab_size) if not tokenizer.is_special(i)]


def random_stream(ids: Sequence[int], length: int, seed: int) -> list[int]:
    """``length`` ids drawn from ``ids``, the same for a seed."""
    rng = random.Random(f"{seed}:{NAME}")
    return [rng.choice(ids) for _ in range(length)]


def chunks_of(stream: Sequence[int], context: int, count: int, bos: int | None) -> list[list[int]]:
    """``count`` chunks of ``context`` tokens, each starting with BOS (as llama-perplexity runs them)."""
    if len(stream) < count * context:
        raise ValueError(f"{count} chunks of {context} need {count * context} tokens, not {len(stream)}")
    chunks = [list(stream[i * context : (i + 1) * context]) for i in range(count)]
    if bos is not None:
        for chunk in chunks:
            chunk[0] = bos
    return chunks


def scored_log_probs(model: Lfm2ForCausalLM, chunk: list[int]) -> torch.Tensor:
    """Log-probabilities [len(chunk) - 1 - len(chunk) // 2, vocab] (float32, computed in float64) at
    the scored positions: the chunk runs as one prompt, logits kept for its second half."""
    first = len(chunk) // 2
    blocks = -(-len(chunk) // _BLOCK)
    cache = HybridCache(model.config, blocks, _BLOCK, num_conv_rows=2, dtype=model.dtype)
    batch = build_forward_batch(
        [SequenceChunk(chunk, 0, list(range(blocks)), conv_src_row=0, conv_dst_row=1)],
        _BLOCK,
        model.config.conv_L_cache,
    )
    batch.logits_index = torch.arange(first, len(chunk) - 1)
    return torch.log_softmax(model(batch, cache).double(), dim=-1).float()


def log_probs_over(
    checkpoint: Path, dtype: str, scheme: str, chunks: list[list[int]]
) -> Iterator[torch.Tensor]:
    """`scored_log_probs` of each chunk, on the checkpoint loaded with ``scheme`` ("none": unquantized)."""
    model = load_model(checkpoint, dtype, quantize=scheme)
    for chunk in chunks:
        yield scored_log_probs(model, chunk)


@dataclass(slots=True)
class Divergence:
    """Per scored position: KL(reference || this) in nats, and whether both rank the same token first."""

    kl: torch.Tensor  # float64 [positions]
    same_top: torch.Tensor  # bool [positions]

    @classmethod
    def between(cls, reference: torch.Tensor, log_probs: torch.Tensor) -> Divergence:
        """From log-probabilities [positions, vocab] of the reference and of the compared model."""
        reference, log_probs = reference.double(), log_probs.double()
        kl = (reference.exp() * (reference - log_probs)).sum(-1)
        return cls(kl, reference.argmax(-1) == log_probs.argmax(-1))

    @classmethod
    def concat(cls, parts: list[Divergence]) -> Divergence:
        return cls(torch.cat([p.kl for p in parts]), torch.cat([p.same_top for p in parts]))

    def figures(self) -> dict[str, float]:
        return {
            "mean KL": self.kl.mean().item(),
            "p99 KL": torch.quantile(self.kl, 0.99).item(),
            "top-1 agreement": self.same_top.double().mean().item(),
        }


def peakedness(reference: list[torch.Tensor]) -> dict[str, float]:
    """How informative the reference distributions are: mean entropy (nats), the uniform bound, top-1 p."""
    entropy, top, count = 0.0, 0.0, 0
    for log_probs in reference:
        probs = log_probs.double().exp()
        entropy -= (probs * log_probs).sum().item()
        top += probs.amax(-1).sum().item()
        count += log_probs.shape[0]
    return {
        "entropy": entropy / count,
        "uniform entropy": math.log(reference[0].shape[-1]),
        "top-1 probability": top / count,
    }


@dataclass(slots=True)
class QualityResult:
    reference: str  # e.g. "bfloat16"
    positions: int
    peakedness: dict[str, float]
    schemes: dict[str, dict[str, float]]  # scheme -> figures


def run_quality(
    checkpoint: Path, dtype: str, schemes: list[str], chunks: list[list[int]], progress: Progress
) -> QualityResult:
    """The reference over every chunk, then each scheme over the same chunks, one model at a time."""
    with progress.run(f"{NAME:<12} reference ({dtype})"):
        reference = list(log_probs_over(checkpoint, dtype, "none", chunks))
    return compare_schemes(checkpoint, dtype, schemes, chunks, reference, progress)


def compare_schemes(
    checkpoint: Path,
    dtype: str,
    schemes: list[str],
    chunks: list[list[int]],
    reference: list[torch.Tensor],
    progress: Progress,
) -> QualityResult:
    """Each scheme's figures against the ``reference`` log-probabilities of ``chunks``.

    The reference stays in memory meanwhile: float32, 0.5 GB at LFM2's 65k vocabulary over 2,040
    positions.
    """
    figures = {}
    for scheme in schemes:
        with progress.run(f"{NAME:<12} {scheme}"):
            compared = log_probs_over(checkpoint, dtype, scheme, chunks)
            parts = [Divergence.between(r, q) for r, q in zip(reference, compared, strict=True)]
            figures[scheme] = Divergence.concat(parts).figures()
    positions = sum(r.shape[0] for r in reference)
    return QualityResult(dtype, positions, peakedness(reference), figures)


def default_chunks(checkpoint: Path, quick: bool, seed: int) -> list[list[int]]:
    """Random plain tokens in llama-perplexity's layout, at this run's size."""
    tokenizer = Tokenizer.from_pretrained(checkpoint)
    context, count = SIZES[quick]
    stream = random_stream(plain_ids(tokenizer), context * count, seed)
    return chunks_of(stream, context, count, tokenizer.bos_token_id)


def quality_report(result: QualityResult, markdown: bool) -> str:
    """The table, and a line on how peaked the reference distributions are."""
    headers = ["weights", "mean KL (nats) ↓", "p99 KL (nats) ↓", "top-1 agreement ↑"]
    rows = [
        [scheme, f"{f['mean KL']:.5f}", f"{f['p99 KL']:.5f}", f"{100 * f['top-1 agreement']:.2f}%"]
        for scheme, f in result.schemes.items()
    ]
    return "\n".join(
        [
            f"quality: against {result.reference}, over {result.positions} teacher-forced positions",
            "",
            render_table(headers, rows, markdown),
            "",
            peakedness_line(result.peakedness),
        ]
    )


def peakedness_line(peak: dict[str, float]) -> str:
    return (
        f"reference distributions: mean entropy {peak['entropy']:.2f} nats (uniform: "
        f"{peak['uniform entropy']:.2f}), mean top-1 probability {peak['top-1 probability']:.3g}"
    )
