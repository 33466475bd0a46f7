"""Which conv-state row of `model.arch.cache.HybridCache` holds what: the one owner of row numbers.

LFM2's conv state is not positional, so besides one row per running sequence the engine keeps
a snapshot row per KV block, from which a cached prefix resumes exactly::

    row 0                       zeros (HybridCache.ZERO_ROW, never written): a fresh sequence
    rows 1 .. max_num_seqs      one running slot per RUNNING request, reused after it ends
    row 1 + max_num_seqs + b    the state after the last token of KV block b
                                (valid only while b is a full block in the prefix cache)
    after those, draft_rows     per running slot: the state after each token of a verify step
    rows per slot               but its last, so a rejected draft rolls back to the state
                                after the last accepted token (engine/speculative decoding)

A running slot is where each step writes the request's state; its source row (the zero row, a
snapshot, or its own slot) is read, so resuming never copies state and starting never zeroes.
"""

from __future__ import annotations

ZERO_ROW = 0  # the row model.arch.cache.HybridCache keeps zero (its ZERO_ROW); named here so that the
# scheduler's imports stay free of torch


class ConvRows:
    """Hands out running slots and names snapshot rows; the tensors themselves are HybridCache's."""

    def __init__(self, max_num_seqs: int, num_blocks: int, draft_rows: int = 0) -> None:
        self.max_num_seqs = max_num_seqs
        self.num_blocks = num_blocks
        self.draft_rows = draft_rows
        self.num_rows = 1 + max_num_seqs + num_blocks + max_num_seqs * draft_rows
        self._free_slots = list(range(max_num_seqs, 0, -1))  # pop() hands out row 1 first

    @property
    def free_slots(self) -> list[int]:
        """Running slots nobody holds (a copy, for tests and checks)."""
        return list(self._free_slots)

    @property
    def num_free_slots(self) -> int:
        return len(self._free_slots)

    def acquire_slot(self) -> int:
        return self._free_slots.pop()

    def release_slot(self, row: int) -> None:
        self._free_slots.append(row)

    def snapshot_row(self, block_id: int) -> int:
        return 1 + self.max_num_seqs + block_id

    def draft_row(self, slot: int, offset: int) -> int:
        """The row holding slot ``slot``'s state after token ``offset`` of its verify chunk."""
        assert 0 <= offset < self.draft_rows
        return 1 + self.max_num_seqs + self.num_blocks + (slot - 1) * self.draft_rows + offset
