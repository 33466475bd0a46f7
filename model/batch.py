"""Per-step metadata for a packed, ragged batch.

The engine describes each sequence's share of a step as a ``SequenceChunk``; this module
turns the list into index tensors ONCE per step. Every layer then reuses them, so the
forward pass runs no Python per token, and none per sequence for decode.

Packed layout for chunks A (3 new tokens after 5 cached) and B (1 decode token after 9):

    tokens     a5 a6 a7 b9          positions  5 6 7 9
    KV slots   blockA[0]*bs+5 ...   (each new token's K/V is written there first)
    attention  group 0: A's 3 queries over A's blocks (causal; slots past position 7 masked)
               group 1: every single-token chunk batched, padded to the most blocks
               (with row_query_limit >= 3, A's queries would join group 1 as three rows
               attending to 6, 7 and 8 positions: see build_forward_batch; with SDPA, rows
               of very different context widths form a group per power of two of blocks)
    conv ext   [state_A (L-1 rows) | state_B (L-1 rows) | a5 a6 a7 b9]
               each token's window = L consecutive entries of its own sequence

Sliding-window layers (LFM3) see the same step through ``ForwardBatch.sliding``: their own
pool's slots and block tables, and each query attends to positions [p - window + 1, p] only.
A query's context starts at the block holding its window's first position, so blocks before
it (released by the engine) are never read::

    window 5, block_size 4, query at p = 9:  blocks [b1 b2]  positions 4..9, start 1 (5 is first)
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import cast

import torch


@dataclass(slots=True)
class SequenceChunk:
    """One sequence's new tokens in a step, and where its cache lives."""

    token_ids: list[int]
    start_pos: int
    block_table: list[int]
    conv_src_row: int
    conv_dst_row: int
    snapshots: list[tuple[int, int]] = field(default_factory=list)
    want_logits: bool = True
    sliding_table: list[int] | None = None  # sliding-window pool's blocks (-1: released), same indexing
    num_logits: int = 1  # with want_logits: logits of this many last tokens (a verify step's 1 + drafts)


@dataclass(slots=True)
class AttentionGroup:
    """Queries that share one attention call: gathered context, padding/causal mask."""

    query_index: torch.Tensor  # [G, Q] packed token rows
    kv_blocks: torch.Tensor  # [G, NB] blocks holding the context (block 0 where padded)
    mask: torch.Tensor | None  # [G, 1, Q, NB * block_size] True = attend; None: attend to all (see sdpa_mask)
    context_lens: torch.Tensor | None = None  # [G] for single-query rows: end of each context (exclusive)
    context_starts: torch.Tensor | None = None  # [G] first position each row attends to; None: all 0
    padded: bool = False  # single-query rows: some row sees fewer keys than the padded width
    _gathered: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        """One block-table row per query row, checked once here for both attention paths.

        With fewer rows, SDPA's reshape would silently hand one sequence's context to another
        and the paged kernel would read past the table.
        """
        rows = self.query_index.shape[0]
        if self.kv_blocks.dim() != 2 or self.kv_blocks.shape[0] != rows:
            raise ValueError(f"block table of shape {tuple(self.kv_blocks.shape)} for {rows} query rows")
        if self.context_lens is not None and tuple(self.context_lens.shape) != (rows,):
            raise ValueError(f"{tuple(self.context_lens.shape)} context lengths for {rows} query rows")
        if self.context_starts is not None and self.context_lens is None:
            raise ValueError("context starts are given for single-query rows only")

    def sdpa_mask(self, block_size: int) -> torch.Tensor | None:
        """SDPA's attn_mask: a prefill group's causal ``mask``, or for padded single-query rows
        each row's keys [start, end) of the padded width (None while every row sees all of it).

        Rows' masks are made on first use and kept in ``mask`` for the step's other layers: only
        SDPA reads them, while the paged kernel and the native stack take the lengths, and
        building one every step cost a decode step several small tensor ops for nothing.
        """
        if self.padded and self.mask is None:
            assert self.context_lens is not None, "padded rows are single-query rows, which carry lengths"
            keys = torch.arange(self.kv_blocks.shape[1] * block_size, device=self.kv_blocks.device)[None, :]
            mask = keys < self.context_lens[:, None]
            if self.context_starts is not None:
                mask &= keys >= self.context_starts[:, None]
            self.mask = mask[:, None, None, :]
        return self.mask

    def gather_targets(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Where SDPA's layers gather this group's K and V blocks (rows of ``like``, a cache viewed
        one block a row): made by the step's first layer, refilled by the others.

        A fresh tensor a layer meant megabytes of new pages every call: at sixteen float32
        decode rows the gathers took a sixth of the step, three times what the copying costs.
        """
        shape = (self.kv_blocks.numel(), like.shape[1])
        held = self._gathered
        if held is None or held[0].shape != shape or held[0].dtype != like.dtype:
            held = self._gathered = (like.new_empty(shape), like.new_empty(shape))
        return held


@dataclass(slots=True)
class ForwardBatch:
    """Index tensors shared by every layer of one forward step."""

    input_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T]
    logits_index: torch.Tensor  # [S] packed rows whose logits are returned
    kv_write_slots: torch.Tensor  # [T] cache slot of each new token
    attention_groups: list[AttentionGroup]
    conv_src_rows: torch.Tensor  # [B] state row each chunk starts from
    conv_window: torch.Tensor  # [T, L] indices into ext = [src states (B*(L-1)) | tokens (T)]
    conv_write_index: torch.Tensor  # [W, L-1] indices into ext
    conv_write_rows: torch.Tensor  # [W] destination rows
    num_tokens: int
    block_size: int
    sliding: ForwardBatch | None = None  # the step as sliding-window layers see it (None: no such layers)

    def __post_init__(self) -> None:
        _check_block_size(self.block_size)

    def single_query_group(self) -> AttentionGroup | None:
        """The step's only attention group when every token attends as a single-query row (decode
        tokens, short prompt chunks), else None: what the paged kernel and the native stack take."""
        groups = self.attention_groups
        return groups[0] if len(groups) == 1 and groups[0].context_lens is not None else None


def _check_block_size(block_size: int) -> None:
    """Slots are block * block_size + offset: a size below 1 would divide by zero or alias every slot."""
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")


def _slots(block_table: list[int], positions: range, block_size: int) -> list[int]:
    return [block_table[p // block_size] * block_size + p % block_size for p in positions]


def _index_tensors(lists: list[list[int]], device: torch.device | str) -> list[torch.Tensor]:
    """Each list as an int64 tensor, all views of one buffer made by one copy.

    A decode step needs a dozen small index tensors, and with caches cold from the weights
    streaming past, each ``torch.tensor`` call cost ~10 µs of the step.
    """
    flat = torch.tensor(list(itertools.chain.from_iterable(lists)), dtype=torch.long, device=device)
    return list(flat.split([len(values) for values in lists]))


def _check(chunk: SequenceChunk, block_size: int, sliding: bool) -> None:
    end = chunk.start_pos + len(chunk.token_ids)
    if not chunk.token_ids:
        raise ValueError("a chunk needs at least one token")
    tables = {"block table": chunk.block_table}
    if sliding:
        if chunk.sliding_table is None:
            raise ValueError("a model with sliding-window layers needs each chunk's sliding_table")
        tables["sliding block table"] = chunk.sliding_table
    for name, table in tables.items():
        if len(table) * block_size < end:
            raise ValueError(f"{name} covers {len(table) * block_size} positions, needs {end}")
    for offset, _ in chunk.snapshots:
        if not 0 <= offset < len(chunk.token_ids):
            raise ValueError(f"snapshot offset {offset} outside the chunk")
    if not 1 <= chunk.num_logits <= len(chunk.token_ids):
        raise ValueError(f"logits of {chunk.num_logits} tokens asked of a chunk of {len(chunk.token_ids)}")


def build_forward_batch(
    chunks: list[SequenceChunk],
    block_size: int,
    conv_L_cache: int,
    device: torch.device | str = "cpu",
    row_query_limit: int = 1,
    sliding_window: int | None = None,
) -> ForwardBatch:
    """Lay out ``chunks`` as one packed batch; see the module docstring for the layout.

    Chunks of at most ``row_query_limit`` tokens attend as single-query rows, each over its own
    context. That is what a paged attention kernel wants (no gathered copy of the context per
    chunk); for SDPA, which gathers per row, the limit stays 1 (decode only), and the rows are
    grouped by context width where that gathers far fewer blocks (`_row_groups`).

    ``sliding_window``: the model has sliding-window layers; ``ForwardBatch.sliding`` gets
    their layout, from each chunk's ``sliding_table``.
    """
    if not chunks:
        raise ValueError("a forward batch needs at least one chunk")
    _check_block_size(block_size)
    state_len = conv_L_cache - 1
    num_chunks = len(chunks)
    ids: list[int] = []
    positions: list[int] = []
    logits_rows: list[int] = []
    window: list[int] = []  # [T, L] flat
    write_index: list[int] = []  # [W, L-1] flat
    write_rows: list[int] = []
    state_base = 0
    token_base = num_chunks * state_len
    for i, chunk in enumerate(chunks):
        _check(chunk, block_size, sliding_window is not None)
        n = len(chunk.token_ids)
        first = len(ids)
        ids.extend(chunk.token_ids)
        positions.extend(range(chunk.start_pos, chunk.start_pos + n))
        if chunk.want_logits:
            logits_rows.extend(range(first + n - chunk.num_logits, first + n))
        # conv: the chunk's extended sequence is its L-1 state entries followed by its tokens
        ext = [state_base + i * state_len + j for j in range(state_len)]
        ext += [token_base + first + k for k in range(n)]
        for k in range(n):
            window.extend(ext[k : k + conv_L_cache])
        for offset, row in [*chunk.snapshots, (n - 1, chunk.conv_dst_row)]:
            write_index.extend(ext[offset + 1 : offset + conv_L_cache])
            write_rows.append(row)

    layout = _AttentionLayout(block_size, row_query_limit, device)
    pools = [layout.plan(chunks, [c.block_table for c in chunks], None)]
    if sliding_window is not None:
        # with a window, every chunk carries a sliding table
        pools.append(layout.plan(chunks, [cast(list[int], c.sliding_table) for c in chunks], sliding_window))
    conv_src = [c.conv_src_row for c in chunks]
    step_lists = [ids, positions, logits_rows, conv_src, window, write_index, write_rows]
    tensors = _index_tensors(step_lists + [values for pool in pools for values in pool.lists()], device)
    input_ids, positions_t, logits_t, conv_src_t, window_t, write_index_t, write_rows_t = tensors[:7]
    pool_tensors = iter(tensors[7:])
    built = [pool.build(pool_tensors) for pool in pools]
    batch = ForwardBatch(
        input_ids=input_ids,
        positions=positions_t,
        logits_index=logits_t,
        kv_write_slots=built[0][0],
        attention_groups=built[0][1],
        conv_src_rows=conv_src_t,
        conv_window=window_t.view(len(ids), conv_L_cache),
        conv_write_index=write_index_t.view(-1, state_len),
        conv_write_rows=write_rows_t,
        num_tokens=len(ids),
        block_size=block_size,
    )
    if sliding_window is not None:
        batch.sliding = dataclasses.replace(batch, kv_write_slots=built[1][0], attention_groups=built[1][1])
    return batch


@dataclass(slots=True)
class _Row:
    """One single-query row: its packed row and the blocks of its context, which ends at ``end``
    and starts at ``start`` (both counted from the first of ``blocks``)."""

    packed: int
    blocks: list[int]
    end: int
    start: int


@dataclass(slots=True)
class _PoolPlan:
    """One pool's share of a step before its index tensors exist (they are made with the step's
    others, by one copy): write slots, single-query rows in their groups, and the prefill groups,
    already built."""

    write_slots: list[int]
    row_groups: list[list[_Row]]
    prefill_groups: list[AttentionGroup]
    block_size: int

    def lists(self) -> list[list[int]]:
        """Write slots, then per row group its packed indices, padded blocks [G, NB] flat, ends and starts."""
        out = [self.write_slots]
        for rows in self.row_groups:
            width = max(len(row.blocks) for row in rows)
            blocks = [block for row in rows for block in row.blocks + [0] * (width - len(row.blocks))]
            starts = [row.start for row in rows] if any(row.start for row in rows) else []
            out += [[row.packed for row in rows], blocks, [row.end for row in rows], starts]
        return out

    def build(self, tensors: Iterator[torch.Tensor]) -> tuple[torch.Tensor, list[AttentionGroup]]:
        """Write slots [T] and attention groups from ``lists()``'s tensors, taken in that order."""
        write_slots = next(tensors)
        groups = list(self.prefill_groups)
        for rows in self.row_groups:
            packed, blocks, ends, starts = (next(tensors) for _ in range(4))
            width = max(len(row.blocks) for row in rows) * self.block_size
            groups.append(
                AttentionGroup(
                    query_index=packed.view(-1, 1),
                    kv_blocks=blocks.view(len(rows), -1),
                    mask=None,
                    context_lens=ends,
                    context_starts=starts if starts.numel() else None,
                    padded=starts.numel() > 0 or any(row.end != width for row in rows),
                )
            )
        return write_slots, groups


def _row_groups(rows: list[_Row], by_width: bool) -> list[list[_Row]]:
    """Single-query rows as one attention group, or, ``by_width``, grouped by context width in
    powers of two of blocks where that gathers at most 3/4 of the blocks one group would.

    SDPA gathers every row's context padded to its group's widest: beside a long conversation, a
    short one's row would copy the long one's width. The paged kernel reads each row's own blocks
    and takes one group."""
    if not rows:
        return []
    if not by_width:
        return [rows]
    buckets: dict[int, list[_Row]] = {}
    for row in rows:
        buckets.setdefault((len(row.blocks) - 1).bit_length(), []).append(row)
    groups = list(buckets.values())
    gathered = sum(len(group) * max(len(row.blocks) for row in group) for group in groups)
    return groups if 4 * gathered <= 3 * len(rows) * max(len(row.blocks) for row in rows) else [rows]


@dataclass(slots=True)
class _AttentionLayout:
    """KV write slots and attention groups of one step over one pool (full or sliding-window)."""

    block_size: int
    row_query_limit: int
    device: torch.device | str

    def plan(self, chunks: list[SequenceChunk], tables: list[list[int]], window: int | None) -> _PoolPlan:
        """Slots, rows and prefill groups; ``window`` None: every query sees its whole prefix."""
        write_slots: list[int] = []
        rows: list[_Row] = []
        groups: list[AttentionGroup] = []
        first = 0
        for chunk, table in zip(chunks, tables, strict=True):
            n = len(chunk.token_ids)
            write_slots.extend(_slots(table, range(chunk.start_pos, chunk.start_pos + n), self.block_size))
            if n <= self.row_query_limit:
                rows.extend(self._row(first + k, table, chunk.start_pos + k, window) for k in range(n))
            else:
                groups.append(self._prefill_group(first, chunk, table, window))
            first += n
        # a limit of 1 means SDPA attends (module docstring): it gathers per group, so rows are grouped
        return _PoolPlan(write_slots, _row_groups(rows, self.row_query_limit == 1), groups, self.block_size)

    def _context(self, table: list[int], first_key: int, end: int) -> tuple[list[int], int]:
        """The blocks holding positions [first_key, end), and the position the first of them starts at."""
        first_block = first_key // self.block_size
        blocks = table[first_block : -(-end // self.block_size)]
        if blocks[0] < 0:  # released blocks (-1) lead a sliding table: the first is the one to check
            raise ValueError(f"the block table lacks a block of positions {first_key}..{end - 1}")
        return blocks, first_block * self.block_size

    def _row(self, packed: int, table: list[int], position: int, window: int | None) -> _Row:
        first_key = 0 if window is None else max(0, position - window + 1)
        blocks, base = self._context(table, first_key, position + 1)
        return _Row(packed, blocks, position + 1 - base, first_key - base)

    def _prefill_group(
        self, first: int, chunk: SequenceChunk, table: list[int], window: int | None
    ) -> AttentionGroup:
        """A multi-token chunk attends causally (within ``window``) over its cached context plus itself."""
        n = len(chunk.token_ids)
        end = chunk.start_pos + n
        first_key = 0 if window is None else max(0, chunk.start_pos - window + 1)
        blocks, base = self._context(table, first_key, end)
        key_pos = base + torch.arange(len(blocks) * self.block_size)[None, :]
        query_pos = torch.arange(chunk.start_pos, end)[:, None]
        mask = key_pos <= query_pos
        if window is not None:
            mask &= key_pos > query_pos - window
        return AttentionGroup(
            query_index=torch.arange(first, first + n, device=self.device)[None, :],
            kv_blocks=torch.tensor([blocks], dtype=torch.long, device=self.device),
            mask=mask[None, None].to(self.device),
        )
