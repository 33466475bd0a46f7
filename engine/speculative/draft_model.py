"""Drafts from a smaller model that shares the target's tokenizer (``EngineConfig.draft_model``): a
`Proposer` (engine/core/drafting.py) the runner runs before each step is scheduled, for the decoding requests.

The draft model keeps its own cache (model/arch/cache.py's HybridCache: KV blocks and conv rows of
its own shape) and, for each request that drafts, a shadow of that request's sequence in it:

    committed row   conv state after tokens[:synced]; its KV at positions [0, synced)
    scratch row     conv state while drafting, thrown away after

A proposal feeds the tokens the shadow lacks (the last one through to the scratch row, the ones
before it into the committed row, by a snapshot of the same forward), then feeds each draft back
for the next: ``k`` drafts cost ``k`` forwards of the draft model, the first carrying the catch-up.
The committed state never holds a drafted token, so a rejected draft needs no rollback here: the
next proposal starts from the last token the target kept, and its KV overwrites the drafts'.

Drafts are the draft model's argmax, after the request's penalties where it has any (the target
ranks its tokens after them too): a deterministic proposal, so the target's acceptance rule
(engine/speculative/acceptance.py) keeps greedy output identical and sampled output exactly distributed.

A prompt longer than CATCH_UP_TOKENS is read in pieces over several steps before its request
drafts (a long paste must not stall every stream for the draft model's whole prefill). Shadows
live while their requests do; when the pool runs short, the least recently drafted is dropped
(it catches up again if it drafts later), and a request whose context alone exceeds the pool
drafts nothing.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from engine.core.request import Request
from engine.sample.sampler import SamplingRow, greedy_tokens, processed_logits, sampling_row
from engine.structured.masks import masked_after
from model.arch.cache import HybridCache
from model.arch.lfm2 import Lfm2ForCausalLM
from model.batch import SequenceChunk

if TYPE_CHECKING:
    from engine.core.structure import RequestGrammar

CATCH_UP_TOKENS = 256  # context tokens one request's shadow may read per step before it drafts


@dataclass(slots=True)
class _Shadow:
    committed_row: int
    scratch_row: int
    blocks: list[int] = field(default_factory=list)
    synced: int = 0  # tokens whose KV and conv state (committed row) the draft cache holds


class ModelDrafter:
    """Proposes drafts for requests from ``model``; owns its cache and every request's shadow.

    It runs only in the runner, beside the target's forward: the scheduler sees its drafts as ids."""

    def __init__(
        self,
        model: Lfm2ForCausalLM,
        num_blocks: int,
        block_size: int,
        max_shadows: int,
        device: torch.device | str = "cpu",
    ) -> None:
        self.model = model
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.device = torch.device(device)
        self.cache = HybridCache(
            model.config,
            num_blocks=num_blocks,
            block_size=block_size,
            num_conv_rows=1 + 2 * max_shadows,  # row 0: the zero state
            dtype=model.dtype,
            device=device,
            # sliding-window layers (LFM3) get a pool as large, indexed by the same block table: a
            # shadow releases nothing out of the window (a draft model's cache is small)
            num_sliding_blocks=num_blocks if model.config.attention_window is not None else 0,
        )
        self._free_blocks = list(range(num_blocks))
        self._free_rows = list(range(1, 1 + 2 * max_shadows))
        self._shadows: OrderedDict[str, _Shadow] = OrderedDict()  # least recently drafted first
        self._logits = torch.empty(1, model.config.vocab_size, device=self.device)

    @property
    def free_blocks(self) -> int:
        return len(self._free_blocks)

    def propose_for(self, request: Request, count: int) -> list[int]:
        """`propose` for a running request, its drafts picked as its sampling would rank them."""
        if count <= 0:  # paused or no room: called every step, so nothing is copied
            return []
        row = sampling_row(request)
        penalized = row if row.params.has_penalties else None
        return self.propose(request.request_id, request.token_ids, count, penalized, request.grammar)

    def propose(
        self,
        request_id: str,
        tokens: list[int],
        count: int,
        penalized: SamplingRow | None = None,
        grammar: RequestGrammar | None = None,
    ) -> list[int]:
        """Up to ``count`` drafts to follow request ``request_id``'s ``tokens`` (each call's a prefix of
        the next's); [] while its shadow catches up.

        Each draft is the draft model's argmax, after ``penalized``'s penalties where given (its
        history then runs on through the drafts): the target's own pick is after them, and the
        likelier a draft under the target's draw, the likelier it is accepted. For the same reason, a
        constrained request's ``grammar`` masks each pick (engine/structured/masks.py)."""
        if count <= 0:
            return []
        shadow = self._shadow(request_id, len(tokens) + count - 1)
        if shadow is None:
            return []
        missing = len(tokens) - 1 - shadow.synced
        if missing > CATCH_UP_TOKENS:
            end = shadow.synced + CATCH_UP_TOKENS
            self._feed(shadow, tokens[shadow.synced : end], shadow.synced, shadow.committed_row, logits=False)
            shadow.synced = end
            return []
        # tokens[synced:-1] into the committed row (a snapshot), the last one on into the scratch row
        fed = tokens[shadow.synced :]
        snapshots = [(len(fed) - 2, shadow.committed_row)] if len(fed) > 1 else []
        drafts: list[int] = []
        logits = self._feed(shadow, fed, shadow.synced, shadow.scratch_row, snapshots=snapshots)
        shadow.synced = len(tokens) - 1
        for position in range(len(tokens), len(tokens) + count):
            if grammar is not None:
                logits = masked_after(grammar, drafts, logits)
            drafts.append(self._pick(logits, penalized, drafts))
            if position < len(tokens) + count - 1:  # the last draft is not fed: nothing follows it
                logits = self._feed(shadow, drafts[-1:], position, shadow.scratch_row, src=shadow.scratch_row)
        return drafts

    def _pick(self, logits: torch.Tensor, penalized: SamplingRow | None, drafts: list[int]) -> int:
        if penalized is not None:
            history = dataclasses.replace(penalized, output_ids=[*penalized.output_ids, *drafts])
            logits = processed_logits(logits, [history], self.model.kernels)
        return int(greedy_tokens(logits, self.model.kernels)[0])

    def release(self, request_id: str) -> None:
        """Give back a finished request's shadow (a no-op for one that never drafted)."""
        shadow = self._shadows.pop(request_id, None)
        if shadow is not None:
            self._free_blocks.extend(shadow.blocks)
            self._free_rows += [shadow.committed_row, shadow.scratch_row]

    def _shadow(self, request_id: str, positions: int) -> _Shadow | None:
        """The request's shadow with blocks for ``positions``, made room for by dropping the least
        recently drafted others; None if the pool cannot hold that much."""
        needed = -(-positions // self.block_size)
        if needed > self.num_blocks:
            return None
        shadow = self._shadows.pop(request_id, None)
        if shadow is None:
            if not self._free_rows:
                self._evict_oldest()
            if not self._free_rows:
                return None
            shadow = _Shadow(self._free_rows.pop(), self._free_rows.pop())
        self._shadows[request_id] = shadow  # now the most recent
        while len(shadow.blocks) < needed:
            if not self._free_blocks and not self._evict_oldest(keep=request_id):
                self.release(request_id)
                return None
            shadow.blocks.append(self._free_blocks.pop())
        return shadow

    def _evict_oldest(self, keep: str | None = None) -> bool:
        victim = next((rid for rid in self._shadows if rid != keep), None)
        if victim is None:
            return False
        self.release(victim)
        return True

    def _feed(
        self,
        shadow: _Shadow,
        token_ids: list[int],
        start: int,
        dst: int,
        src: int | None = None,
        snapshots: list[tuple[int, int]] | None = None,
        logits: bool = True,
    ) -> torch.Tensor:
        """One forward of ``token_ids`` at ``start``; the logits [1, V] after the last one (no rows without).

        The conv state comes from ``src`` (default: the committed row, or zeros at position 0)."""
        if src is None:
            src = shadow.committed_row if start > 0 else HybridCache.ZERO_ROW
        chunk = SequenceChunk(
            token_ids=list(token_ids),
            start_pos=start,
            block_table=shadow.blocks,
            conv_src_row=src,
            conv_dst_row=dst,
            snapshots=snapshots or [],
            want_logits=logits,
            sliding_table=shadow.blocks if self.cache.num_sliding_blocks else None,
        )
        batch = self.model.build_batch([chunk], self.block_size, self.device)
        return self.model(batch, self.cache, self._logits if logits else self._logits[:0])
