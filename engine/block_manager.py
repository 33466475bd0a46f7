"""Who owns which KV block and conv-state row, and the prefix cache over full blocks.

Only bookkeeping lives here (ids, refcounts, hashes); the tensors are `model.cache.HybridCache`.

KV blocks. A request's block table lists the blocks holding its positions in order::

    positions   0..15      16..31     32..40
    table       [  7   ,     2    ,    11   ]     block_size = 16, block 11 partly filled

Prefix cache. A full block is keyed by a hash chained over every token before it, so equal
keys mean equal prefixes (the block's own tokens are compared too, against collisions)::

    h0 = H(ROOT, tokens[0:16])   h1 = H(h0, tokens[16:32])   h2 = H(h1, tokens[32:48]) ...

A block is registered only after the step that filled it, when both its KV and the conv
snapshot at its end are written. Blocks nobody references stay cached and are reused by a
later request with the same prefix; they are evicted least-recently-released, and only when
the free list is empty.

Each request also holds a conv-state running slot, and each KV block names a snapshot row:
both numbered by `engine.conv_rows.ConvRows`.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

from engine.conv_rows import ZERO_ROW, ConvRows
from engine.request import Request

_ROOT_HASH = 0x1F3D5B79


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None  # set while the block is in the prefix cache
    token_ids: tuple[int, ...] = ()


def chain_hash(previous: int | None, token_ids: tuple[int, ...]) -> int:
    """Key of a full block: its tokens and (through `previous`) everything before it."""
    return hash((_ROOT_HASH if previous is None else previous, token_ids))


class BlockManager:
    """Allocates KV blocks and conv slots to requests; keeps the prefix cache."""

    def __init__(self, num_blocks: int, block_size: int, max_num_seqs: int, enable_prefix_caching: bool):
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: deque[int] = deque(range(num_blocks))  # unreferenced, not cached
        self._evictable: OrderedDict[int, None] = OrderedDict()  # unreferenced, cached; oldest first
        self._cached: dict[int, int] = {}  # chain hash -> block id
        self.conv_rows = ConvRows(max_num_seqs, num_blocks)

    # ------------------------------------------------------------------ sizes
    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation may take: truly free plus evictable cached ones."""
        return len(self._free) + len(self._evictable)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks held only by the prefix cache (no request references them)."""
        return len(self._evictable)

    @property
    def num_used_blocks(self) -> int:
        """Blocks referenced by at least one request."""
        return self.num_blocks - self.num_free_blocks

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

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
        tokens, size = request.token_ids, self.block_size
        previous = None
        for index in range((len(tokens) - 1) // size):
            chunk = tuple(tokens[index * size : (index + 1) * size])
            key = chain_hash(previous, chunk)
            block_id = self._cached.get(key)
            if block_id is None or self.blocks[block_id].token_ids != chunk:
                break
            self._reference(block_id)
            request.block_table.append(block_id)
            request.block_hashes.append(key)
            previous = key
        if request.block_table:
            request.conv_src_row = self.conv_rows.snapshot_row(request.block_table[-1])
        return len(request.block_table) * size

    def allocate(self, request: Request, num_tokens: int) -> bool:
        """Grow the block table to cover positions [0, num_tokens); False (and no change) if short."""
        missing = self.blocks_needed(num_tokens) - len(request.block_table)
        if missing > self.num_free_blocks:
            return False
        for _ in range(missing):
            request.block_table.append(self._take_block())
        return True

    def max_tokens_allocatable(self, request: Request) -> int:
        """How far `request`'s table could reach with every free block added to it."""
        return (len(request.block_table) + self.num_free_blocks) * self.block_size

    def acquire_slot(self, request: Request) -> None:
        assert request.conv_slot is None
        request.conv_slot = self.conv_rows.acquire_slot()

    def free(self, request: Request) -> None:
        """Drop every block reference and the conv slot of `request`; it starts over from the zero row.

        Blocks are released last-first, so a sequence's tail is evicted before its head and a
        shared prefix outlives the turns built on it.
        """
        for block_id in reversed(request.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.hash is None:
                    self._free.append(block_id)
                else:
                    self._evictable[block_id] = None
        request.block_table.clear()
        request.block_hashes.clear()
        request.conv_src_row = ZERO_ROW  # a snapshot row is only valid while its block is held
        if request.conv_slot is not None:
            self.conv_rows.release_slot(request.conv_slot)
            request.conv_slot = None

    # ------------------------------------------------------------------ prefix cache
    def register_full_blocks(self, request: Request) -> None:
        """Cache every block of `request` that the last step completed (KV and snapshot written).

        If another request already cached the same prefix, the existing block stays the cached
        one and this copy is freed normally when its owner lets go.
        """
        if not self.enable_prefix_caching:
            return
        size, tokens = self.block_size, request.token_ids
        previous = request.block_hashes[-1] if request.block_hashes else None
        for index in range(len(request.block_hashes), request.num_computed_tokens // size):
            chunk = tuple(tokens[index * size : (index + 1) * size])
            key = chain_hash(previous, chunk)
            request.block_hashes.append(key)
            if key not in self._cached:
                block = self.blocks[request.block_table[index]]
                block.hash, block.token_ids = key, chunk
                self._cached[key] = block.block_id
            previous = key

    # ------------------------------------------------------------------ internals
    def _reference(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self._evictable[block_id]
        block.ref_count += 1

    def _take_block(self) -> int:
        """A free block, else the least recently released cached one (dropping its cache entry)."""
        if self._free:
            block_id = self._free.popleft()
        else:
            block_id, _ = self._evictable.popitem(last=False)
            block = self.blocks[block_id]
            del self._cached[block.hash]
            block.hash, block.token_ids = None, ()
        self.blocks[block_id].ref_count = 1
        return block_id
