"""Runs the models: proposes each step's drafts, then turns the scheduled step into one forward
over a packed batch and one batched sample.

The runner owns the model, the cache tensors, the sampler and the proposer of drafts, and makes
no decisions: which tokens, which blocks, which conv rows and which chunks sample were all
decided by the scheduler, and so is how many drafts each request may be proposed. A prefill
chunk that does not reach the end of its request asks for no logits.

A decode chunk with drafts (speculative decoding) asks for logits at its fed token and at every
draft, and keeps the conv state after each of them but the last in its draft rows. Acceptance
(engine/speculative/acceptance.py) decides what it emits; when a draft was rejected, the state after the
last accepted token is copied back into the request's slot, so the conv state is exactly what
it would be had the rejected drafts never been fed (their KV lies past the sequence's length
and is overwritten before anything reads it).

Proposing (`propose`) comes before each step is scheduled, once the last step's tokens are
appended, counted and handed out: the proposer (the request's own n-grams, engine/speculative/ngram.py, or a
draft model, engine/speculative/draft_model.py) writes each decoding request's `spec_token_ids`, which
`schedule` trims and the forward verifies. Every model forward, the draft model's included,
happens here, never inside the scheduler.

Until the next run, the step's raw logits stay readable: the engine asks for the logprobs of what
a request emitted (engine/sample/logprobs.py) and for the first tokens of the branches forked from a
request whose prompt just ended (Engine.add_request's n), all drawn from the same rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import torch

from engine.core.events import TokenLogprob
from engine.core.request import Request
from engine.core.schedule import ScheduledChunk
from engine.sample.logprobs import token_logprobs
from engine.sample.sampler import Sampler, sampling_row
from engine.speculative.acceptance import accept
from engine.speculative.ngram import NgramProposer
from engine.speculative.proposer import Proposer
from engine.structured.masks import GrammarMasks
from model.arch.cache import HybridCache
from model.arch.lfm2 import Lfm2ForCausalLM
from model.batch import SequenceChunk


class ModelRunner:
    def __init__(
        self,
        model: Lfm2ForCausalLM,
        cache: HybridCache,
        device: torch.device | str,
        proposer: Proposer | None = None,
    ) -> None:
        """``proposer``: where drafts come from (default: each request's own n-grams)."""
        self.model = model
        self.cache = cache
        self.device = torch.device(device)
        self.sampler = Sampler(model.kernels)
        self.proposer: Proposer = proposer or NgramProposer()
        self.masks = GrammarMasks()  # constrained rows' token masks (engine/structured/masks.py)
        # float32 logits, reused every step and grown to the most sampling rows seen
        self._logits = torch.empty(0, model.config.vocab_size, device=self.device)
        self._last_logits = self._logits  # the latest run's logits rows ...
        self._first_row: dict[Request, int] = {}  # ... and each sampling request's first row in them

    def run(self, chunks: list[ScheduledChunk]) -> list[list[int]]:
        """Compute every chunk; return the tokens each chunk with want_logits emits, in order: one
        sampled token, or a verify chunk's accepted drafts and the token after them."""
        sequences = [self._sequence_chunk(chunk) for chunk in chunks]
        batch = self.model.build_batch(sequences, self.cache.block_size, self.device)
        sampling = [chunk for chunk in chunks if chunk.want_logits]
        masks = self.masks.start(sampling)  # the constrained rows' masks (engine/structured/masks.py)
        logits = self.model(batch, self.cache, self._logits_buffer(batch.logits_index.numel()))
        self.masks.apply(masks, logits)
        first_rows = itertools.accumulate((1 + len(chunk.drafts) for chunk in sampling), initial=0)
        self._last_logits = logits
        self._first_row = {chunk.request: row for chunk, row in zip(sampling, first_rows, strict=False)}
        if not any(chunk.drafts for chunk in sampling):
            rows = [sampling_row(chunk.request) for chunk in sampling]
            emitted = [[token] for token in self.sampler.sample(logits, rows)]
        else:
            emitted = self._verify(logits, sampling)
        self.masks.advance(sampling, emitted)
        return emitted

    def _verify(self, logits: torch.Tensor, sampling: list[ScheduledChunk]) -> list[list[int]]:
        """Plain rows sampled together; each verify chunk's 1 + d rows through acceptance."""
        first_rows = [self._first_row[chunk.request] for chunk in sampling]
        plain = [(chunk, row) for chunk, row in zip(sampling, first_rows, strict=True) if not chunk.drafts]
        params = [sampling_row(chunk.request) for chunk, _ in plain]
        plain_tokens = iter(self.sampler.sample(logits[[row for _, row in plain]], params) if plain else [])
        emitted = []
        for chunk, first in zip(sampling, first_rows, strict=True):
            if not chunk.drafts:
                emitted.append([next(plain_tokens)])
                continue
            rows = logits[first : first + 1 + len(chunk.drafts)]
            tokens = accept(rows, chunk.drafts, sampling_row(chunk.request), self.sampler.kernels)
            if len(tokens) <= len(chunk.drafts):  # a draft was rejected: roll the conv state back
                self.cache.copy_conv_row(chunk.draft_rows[len(tokens) - 1], chunk.request.running_slot)
            emitted.append(tokens)
        return emitted

    def token_logprobs(self, request: Request, tokens: list[int], top: int) -> list[TokenLogprob]:
        """Logprobs of the tokens ``request`` emitted in the latest run, token i from its row i."""
        first = self._first_row[request]
        return token_logprobs(self._last_logits[first : first + len(tokens)], tokens, top)

    def sample_branches(self, request: Request, branches: list[Request]) -> list[int]:
        """The first token of each branch, drawn (by its own generator) from the row where
        ``request``, whose prompt the branches share, sampled its first token in the latest run."""
        rows = [self._first_row[request]] * len(branches)
        tokens = self.sampler.sample(self._last_logits[rows], [sampling_row(branch) for branch in branches])
        self.masks.feed(branches, [[token] for token in tokens])  # the row was masked as they all start
        return tokens

    def _logits_buffer(self, rows: int) -> torch.Tensor:
        if self._logits.shape[0] < rows:
            self._logits = torch.empty(rows, self._logits.shape[1], device=self.device)
        return self._logits[:rows]

    @staticmethod
    def _sequence_chunk(chunk: ScheduledChunk) -> SequenceChunk:
        request = chunk.request
        return SequenceChunk(
            token_ids=request.token_ids[chunk.start : chunk.start + chunk.num_tokens - len(chunk.drafts)]
            + chunk.drafts,
            start_pos=chunk.start,
            block_table=request.block_table,
            conv_src_row=chunk.conv_src_row,
            conv_dst_row=request.running_slot,
            snapshots=chunk.snapshots + list(enumerate(chunk.draft_rows)),
            want_logits=chunk.want_logits,
            sliding_table=request.sliding_table,
            num_logits=1 + len(chunk.drafts),
        )

    # ------------------------------------------------------------------ drafts, before a step is scheduled
    def propose(self, allowances: Mapping[Request, int]) -> None:
        """Each decoding request's drafts for the step about to be scheduled, up to its allowance
        (the scheduler's), into ``spec_token_ids``; one allowed none gets none, so no stale
        proposal is ever verified."""
        for request, count in allowances.items():
            drafts = self.proposer.propose_for(request, count)
            if request.grammar is not None:  # a draft the grammar rejects would only waste its row
                drafts = request.grammar.allowed_prefix(drafts)
            request.spec_token_ids = drafts

    def release(self, request_id: str) -> None:
        """Give back what the proposer holds for a finished request (a draft model's shadow)."""
        self.proposer.release(request_id)
