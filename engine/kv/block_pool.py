"""One pool of KV blocks: reference counts, a free list, and the prefix cache over full blocks.

Only ids live here; the tensors are `model.arch.cache.HybridCache`'s. A model with sliding-window
layers (LFM3) has two pools, one per kind of attention layer, with the same rules (the block
manager, engine/kv/block_manager.py, decides which blocks a request holds in each).

Blocks nobody references stay cached, under the chain hash of the prefix they end, and are
reused by a later request with that prefix; they are evicted least-recently-released, and only
when the free list is empty.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import cast


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None  # set while the block is in the prefix cache
    token_ids: tuple[int, ...] = ()


class BlockPool:
    """Hands out blocks of one pool and keeps its cached ones."""

    def __init__(self, num_blocks: int) -> None:
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: deque[int] = deque(range(num_blocks))  # unreferenced, not cached
        self._evictable: OrderedDict[int, None] = OrderedDict()  # unreferenced, cached; oldest first
        self._cached: dict[int, int] = {}  # chain hash -> block id

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free(self) -> int:
        """Blocks an allocation may take: truly free plus evictable cached ones."""
        return len(self._free) + len(self._evictable)

    @property
    def num_cached(self) -> int:
        """Blocks held only by the prefix cache (no request references them)."""
        return len(self._evictable)

    @property
    def num_used(self) -> int:
        """Blocks referenced by at least one request."""
        return self.num_blocks - self.num_free

    def take(self) -> int:
        """A free block, else the least recently released cached one (dropping its cache entry)."""
        if self._free:
            block_id = self._free.popleft()
        else:
            block_id, _ = self._evictable.popitem(last=False)
            block = self.blocks[block_id]
            del self._cached[cast(int, block.hash)]  # an evictable block is a cached one
            block.hash, block.token_ids = None, ()
        self.blocks[block_id].ref_count = 1
        return block_id

    def reference(self, block_id: int) -> None:
        """One more user of a (cached) block."""
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self._evictable[block_id]
        block.ref_count += 1

    def release(self, block_id: int) -> None:
        """One user fewer; a block nobody holds is free again, or stays cached if it is hashed."""
        block = self.blocks[block_id]
        block.ref_count -= 1
        if block.ref_count == 0:
            if block.hash is None:
                self._free.append(block_id)
            else:
                self._evictable[block_id] = None

    def cached(self, key: int, token_ids: tuple[int, ...]) -> int | None:
        """The cached block ending the prefix ``key`` (its own tokens compared too, against collisions)."""
        block_id = self._cached.get(key)
        if block_id is None or self.blocks[block_id].token_ids != token_ids:
            return None
        return block_id

    def register(self, block_id: int, key: int, token_ids: tuple[int, ...]) -> None:
        """Cache a full, computed block under ``key``, unless another block already holds that prefix
        (this copy is then freed normally when its owner lets go)."""
        if key not in self._cached:
            block = self.blocks[block_id]
            block.hash, block.token_ids = key, token_ids
            self._cached[key] = block_id
