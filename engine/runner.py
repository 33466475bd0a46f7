"""Turns a scheduled step into one forward over a packed batch, then one batched sample.

The runner owns the model, the cache tensors and the sampler, and makes no decisions: which
tokens, which blocks, which conv rows and which chunks sample were all decided by the
scheduler. A prefill chunk that does not reach the end of its request asks for no logits.
"""

from __future__ import annotations

import torch

from engine.request import Request
from engine.sampler import Sampler, SamplingRow
from engine.scheduler import ScheduledChunk
from model.arch.lfm2 import Lfm2ForCausalLM
from model.batch import SequenceChunk, build_forward_batch
from model.cache import HybridCache


def _sampling_row(request: Request) -> SamplingRow:
    """Token history is copied only for requests whose penalties read it."""
    if not request.params.has_penalties:
        return SamplingRow(request.params, request.generator)
    return SamplingRow(request.params, request.generator, request.prompt_token_ids, request.output_token_ids)


class ModelRunner:
    def __init__(self, model: Lfm2ForCausalLM, cache: HybridCache, device: torch.device | str) -> None:
        self.model = model
        self.cache = cache
        self.device = torch.device(device)
        self.sampler = Sampler(model.kernels)
        # float32 logits, reused every step and grown to the most sampling rows seen
        self._logits = torch.empty(0, model.config.vocab_size, device=self.device)

    def run(self, chunks: list[ScheduledChunk]) -> list[int]:
        """Compute every chunk; return one sampled token per chunk with want_logits, in order."""
        sequences = [self._sequence_chunk(chunk) for chunk in chunks]
        batch = build_forward_batch(
            sequences,
            self.cache.block_size,
            self.model.config.conv_L_cache,
            self.device,
            row_query_limit=self.model.row_query_limit,
            sliding_window=self.model.config.attention_window,
        )
        logits = self.model(batch, self.cache, self._logits_buffer(batch.logits_index.numel()))
        sampling = [chunk.request for chunk in chunks if chunk.want_logits]
        if not sampling:
            return []
        return self.sampler.sample(logits, [_sampling_row(request) for request in sampling])

    def _logits_buffer(self, rows: int) -> torch.Tensor:
        if self._logits.shape[0] < rows:
            self._logits = torch.empty(rows, self._logits.shape[1], device=self.device)
        return self._logits[:rows]

    @staticmethod
    def _sequence_chunk(chunk: ScheduledChunk) -> SequenceChunk:
        request = chunk.request
        return SequenceChunk(
            token_ids=request.token_ids[chunk.start : chunk.start + chunk.num_tokens],
            start_pos=chunk.start,
            block_table=request.block_table,
            conv_src_row=chunk.conv_src_row,
            conv_dst_row=request.conv_slot,
            snapshots=chunk.snapshots,
            want_logits=chunk.want_logits,
            sliding_table=request.sliding_table,
        )
