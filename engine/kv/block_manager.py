"""Who owns which KV block and conv-state row, and the prefix cache over full blocks.

Only bookkeeping lives here (ids, refcounts, hashes); the tensors are `model.arch.cache.HybridCache`
and each pool's blocks are an `engine.block_pool.BlockPool`.

KV blocks. A request's block table lists the blocks holding its positions in order::

    positions   0..15      16..31     32..40
    table       [  7   ,     2    ,    11   ]     block_size = 16, block 11 partly filled

Prefix cache. A full block is keyed by a hash chained over every token before it, so equal
keys mean equal prefixes (the block's own tokens are compared too, against collisions)::

    h0 = H(ROOT, tokens[0:16])   h1 = H(h0, tokens[16:32])   h2 = H(h1, tokens[32:48]) ...

A block is registered only after the step that filled it, when both its KV and the conv
snapshot at its end are written. Each request also holds a conv-state running slot, and each
KV block names a snapshot row: both numbered by `engine.conv_rows.ConvRows`.

Sliding-window layers (LFM3) keep their KV in a second pool, indexed by position the same way
(``sliding_table``). The next query, at position p, sees positions p - W + 1 .. p only, so once
a step is done every block wholly before p - W + 1 is released (-1 in the table)::

    W = 20, block_size 16, 45 tokens computed (next p = 45, window from 26):
    table          [ 7 ,  2 , 11 ]
    sliding_table  [ -1,  4 ,  9 ]      block 0 (positions 0..15) released: a request holds at most
                                        ceil((W - 1) / block_size) + 1 sliding blocks between steps

Its full blocks are cached under the same chain hashes. A cached prefix of P tokens is resumed
only if, besides the full blocks for [0, P) and the conv snapshot at P, the sliding blocks of
the window before P (positions P - W + 1 .. P - 1) are cached: then every layer's state at P is
exactly what computing the prefix would give, and older sliding blocks are never read again.
Otherwise the match backs off to the longest prefix whose window is there.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.conv_rows import ZERO_ROW, ConvRows
from engine.core.request import Request
from engine.kv.block_pool import Block, BlockPool

_ROOT_HASH = 0x1F3D5B79
RELEASED = -1  # a sliding-window table entry whose block was released (or never taken)


def chain_hash(previous: int | None, token_ids: tuple[int, ...]) -> int:
    """Key of a full block: its tokens and (through `previous`) everything before it."""
    return hash((_ROOT_HASH if previous is None else previous, token_ids))


@dataclass(frozen=True, slots=True)
class BranchCopies:
    """What a forked branch needs copied in the cache tensors: (source, destination) of each."""

    conv_row: tuple[int, int]  # the request's running slot -> the branch's
    block: tuple[int, int] | None = None  # its partly filled last KV block (None: it ends on a boundary)
    sliding_block: tuple[int, int] | None = None  # the same in the sliding-window layers' pool


class BlockManager:
    """Allocates KV blocks and conv slots to requests; keeps the prefix cache."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        max_num_seqs: int,
        enable_prefix_caching: bool,
        num_sliding_blocks: int = 0,
        sliding_window: int | None = None,
        draft_rows: int = 0,
    ):
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.pool = BlockPool(num_blocks)
        # the sliding-window layers' pool, None for a model without such layers
        self.sliding = BlockPool(num_sliding_blocks) if sliding_window is not None else None
        self.sliding_window = sliding_window
        self.conv_rows = ConvRows(max_num_seqs, num_blocks, draft_rows)

    # ------------------------------------------------------------------ sizes (the full pool's)
    @property
    def blocks(self) -> list[Block]:
        return self.pool.blocks

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation may take: truly free plus evictable cached ones."""
        return self.pool.num_free

    @property
    def num_cached_blocks(self) -> int:
        """Blocks held only by the prefix cache (no request references them)."""
        return self.pool.num_cached

    @property
    def num_used_blocks(self) -> int:
        """Blocks referenced by at least one request."""
        return self.pool.num_used

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def first_window_block(self, position: int) -> int:
        """The first sliding block a query at ``position`` reads (0 without a window)."""
        if self.sliding_window is None:
            return 0
        return max(0, position - self.sliding_window + 1) // self.block_size

    # ------------------------------------------------------------------ allocation
    def match_prefix(self, request: Request) -> int:
        """Take the cached blocks that start `request`'s tokens; return how many tokens they cover.

        At least one token is always left to compute (sampling needs its hidden state), so a
        fully cached sequence backs off by one block. Sets `conv_src_row` to the snapshot at
        the end of the last matched block.
        """
        assert not request.block_table, "match_prefix on a request that already holds blocks"
        if not self.enable_prefix_caching:
            return 0
        keys, matched = self._cached_prefix(request)
        usable = self._resumable(request, keys, len(matched))
        for key, block_id in zip(keys[:usable], matched[:usable], strict=False):
            self.pool.reference(block_id)
            request.block_table.append(block_id)
            request.block_hashes.append(key)
        if self.sliding is not None:
            first = self.first_window_block(usable * self.block_size)
            request.sliding_table = [RELEASED] * first
            for index in range(first, usable):
                # _resumable kept only prefixes whose window blocks are all cached
                tokens = self._block_tokens(request, index)
                block_id = self.sliding.cached(keys[index], tokens)  # type: ignore[assignment]
                self.sliding.reference(block_id)
                request.sliding_table.append(block_id)
            request.sliding_start = first
        if request.block_table:
            request.conv_src_row = self.conv_rows.snapshot_row(request.block_table[-1])
        return usable * self.block_size

    def allocate(self, request: Request, num_tokens: int) -> bool:
        """Grow the block tables to cover positions [0, num_tokens); False (and no change) if short."""
        missing = self.blocks_needed(num_tokens) - len(request.block_table)
        if missing > self._free_everywhere():
            return False
        for _ in range(missing):
            request.block_table.append(self.pool.take())
            if self.sliding is not None:
                request.sliding_table.append(self.sliding.take())
        return True

    def max_tokens_allocatable(self, request: Request, reserve: int = 0) -> int:
        """How far `request`'s tables could reach with every free block but ``reserve`` added to them."""
        return (len(request.block_table) + max(0, self._free_everywhere() - reserve)) * self.block_size

    def trim(self, request: Request) -> None:
        """Release the blocks past `request`'s computed tokens: a verify step took them for drafts
        that were rejected, and a sequence that never drafted would not hold them."""
        keep = self.blocks_needed(request.num_computed_tokens)
        while len(request.block_table) > keep:
            self.pool.release(request.block_table.pop())
            if self.sliding is not None:
                self.sliding.release(request.sliding_table.pop())

    def fork(self, request: Request, branch: Request) -> BranchCopies | None:
        """Give ``branch`` (holding nothing) the cache state of ``request``'s computed tokens: its full
        blocks shared by reference, a fresh block and a slot for what the caller copies (the partly
        filled last block, the conv state). None, and no change, if no slot or block is free."""
        assert not branch.block_table and branch.conv_slot is None, "fork into a branch that holds blocks"
        full, partial = divmod(request.num_computed_tokens, self.block_size)
        if self.conv_rows.num_free_slots == 0 or (partial and self._free_everywhere() == 0):
            return None
        for index in range(full):
            self.pool.reference(request.block_table[index])
            branch.block_table.append(request.block_table[index])
            if self.sliding is not None:
                if request.sliding_table[index] != RELEASED:
                    self.sliding.reference(request.sliding_table[index])
                branch.sliding_table.append(request.sliding_table[index])
        branch.block_hashes = request.block_hashes[:full]
        branch.sliding_start = request.sliding_start
        block: tuple[int, int] | None = None
        sliding_block: tuple[int, int] | None = None
        if partial:  # the last block is inside any window, so never released
            block = (request.block_table[full], self.pool.take())
            branch.block_table.append(block[1])
            if self.sliding is not None:
                sliding_block = (request.sliding_table[full], self.sliding.take())
                branch.sliding_table.append(sliding_block[1])
        self.acquire_slot(branch)
        branch.conv_src_row = branch.running_slot
        return BranchCopies((request.running_slot, branch.running_slot), block, sliding_block)

    def acquire_slot(self, request: Request) -> None:
        assert request.conv_slot is None
        request.conv_slot = self.conv_rows.acquire_slot()

    def release_out_of_window(self, request: Request) -> None:
        """Release the sliding blocks no future query of `request` reads (wholly before its window)."""
        if self.sliding is None:
            return
        first = self.first_window_block(request.num_computed_tokens)
        for index in range(request.sliding_start, first):
            self.sliding.release(request.sliding_table[index])
            request.sliding_table[index] = RELEASED
        request.sliding_start = max(first, request.sliding_start)

    def free(self, request: Request) -> None:
        """Drop every block reference and the conv slot of `request`; it starts over from the zero row.

        Blocks are released last-first, so a sequence's tail is evicted before its head and a
        shared prefix outlives the turns built on it.
        """
        for block_id in reversed(request.block_table):
            self.pool.release(block_id)
        if self.sliding is not None:
            for block_id in reversed(request.sliding_table[request.sliding_start :]):
                self.sliding.release(block_id)
        request.block_table.clear()
        request.block_hashes.clear()
        request.sliding_table.clear()
        request.sliding_start = 0
        request.conv_src_row = ZERO_ROW  # a snapshot row is only valid while its block is held
        if request.conv_slot is not None:
            self.conv_rows.release_slot(request.conv_slot)
            request.conv_slot = None

    # ------------------------------------------------------------------ prefix cache
    def register_full_blocks(self, request: Request) -> None:
        """Cache every block of `request` that the last step completed (KV and snapshot written),
        in each pool under the same key."""
        if not self.enable_prefix_caching:
            return
        previous = request.block_hashes[-1] if request.block_hashes else None
        for index in range(len(request.block_hashes), request.num_computed_tokens // self.block_size):
            tokens = self._block_tokens(request, index)
            key = chain_hash(previous, tokens)
            request.block_hashes.append(key)
            self.pool.register(request.block_table[index], key, tokens)
            if self.sliding is not None and request.sliding_table[index] != RELEASED:
                self.sliding.register(request.sliding_table[index], key, tokens)
            previous = key

    # ------------------------------------------------------------------ internals
    def _block_tokens(self, request: Request, index: int) -> tuple[int, ...]:
        return tuple(request.token_ids[index * self.block_size : (index + 1) * self.block_size])

    def _free_everywhere(self) -> int:
        """Blocks one more table entry can take: the fewest free of the pools it takes from."""
        free = self.pool.num_free
        return free if self.sliding is None else min(free, self.sliding.num_free)

    def _cached_prefix(self, request: Request) -> tuple[list[int], list[int]]:
        """Keys and full-pool blocks of the longest cached run of `request`'s leading full blocks,
        leaving at least one token to compute."""
        keys: list[int] = []
        matched: list[int] = []
        previous = None
        for index in range((request.num_tokens - 1) // self.block_size):
            tokens = self._block_tokens(request, index)
            key = chain_hash(previous, tokens)
            block_id = self.pool.cached(key, tokens)
            if block_id is None:
                break
            keys.append(key)
            matched.append(block_id)
            previous = key
        return keys, matched

    def _resumable(self, request: Request, keys: list[int], matched: int) -> int:
        """The most of the ``matched`` leading blocks a request can resume after: all of them, or
        with sliding-window layers, the longest prefix whose last window is cached in their pool."""
        if self.sliding is None:
            return matched
        for usable in range(matched, 0, -1):
            window = range(self.first_window_block(usable * self.block_size), usable)
            if all(self.sliding.cached(keys[i], self._block_tokens(request, i)) is not None for i in window):
                return usable
        return 0
