"""Per-step metadata for a packed, ragged batch.

The engine describes each sequence's share of a step as a ``SequenceChunk``; this module
turns the list into index tensors ONCE per step. Every layer then reuses them, so the
forward pass runs no Python per token, and none per sequence for decode.

Packed layout for chunks A (3 new tokens after 5 cached) and B (1 decode token after 9):

    tokens     a5 a6 a7 b9          positions  5 6 7 9
    KV slots   blockA[0]*bs+5 ...   (each new token's K/V is written there first)
    attention  group 0: A's 3 queries over A's 8 context slots (causal)
               group 1: every single-token chunk batched, padded to the longest context
    conv ext   [state_A (L-1 rows) | state_B (L-1 rows) | a5 a6 a7 b9]
               each token's window = L consecutive entries of its own sequence
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass(slots=True)
class AttentionGroup:
    """Queries that share one attention call: gathered context, padding/causal mask."""

    query_index: torch.Tensor  # [G, Q] packed token rows
    kv_slots: torch.Tensor  # [G, C] cache slots of the full context (0 where padded)
    mask: torch.Tensor | None  # [G, 1, Q, C] True = attend; None when nothing needs masking


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


def _slots(block_table: list[int], positions: range, block_size: int) -> list[int]:
    return [block_table[p // block_size] * block_size + p % block_size for p in positions]


def _context_slots(block_table: list[int], context: int, block_size: int) -> torch.Tensor:
    """Cache slots of positions [0, context), without a Python loop over positions."""
    blocks = torch.tensor(block_table[: (context + block_size - 1) // block_size], dtype=torch.long)
    return (blocks[:, None] * block_size + torch.arange(block_size)).flatten()[:context]


def _check(chunk: SequenceChunk, block_size: int) -> None:
    end = chunk.start_pos + len(chunk.token_ids)
    if not chunk.token_ids:
        raise ValueError("a chunk needs at least one token")
    if len(chunk.block_table) * block_size < end:
        raise ValueError(f"block table covers {len(chunk.block_table) * block_size} positions, needs {end}")
    for offset, _ in chunk.snapshots:
        if not 0 <= offset < len(chunk.token_ids):
            raise ValueError(f"snapshot offset {offset} outside the chunk")


def build_forward_batch(
    chunks: list[SequenceChunk], block_size: int, conv_L_cache: int, device: torch.device | str = "cpu"
) -> ForwardBatch:
    """Lay out ``chunks`` as one packed batch; see the module docstring for the layout."""
    if not chunks:
        raise ValueError("a forward batch needs at least one chunk")
    state_len = conv_L_cache - 1
    num_chunks = len(chunks)
    ids: list[int] = []
    positions: list[int] = []
    write_slots: list[int] = []
    logits_rows: list[int] = []
    window: list[list[int]] = []
    write_index: list[list[int]] = []
    write_rows: list[int] = []
    decode: list[tuple[int, SequenceChunk]] = []
    groups: list[AttentionGroup] = []
    state_base = 0
    token_base = num_chunks * state_len
    for i, chunk in enumerate(chunks):
        _check(chunk, block_size)
        n = len(chunk.token_ids)
        first = len(ids)
        new_positions = range(chunk.start_pos, chunk.start_pos + n)
        ids.extend(chunk.token_ids)
        positions.extend(new_positions)
        write_slots.extend(_slots(chunk.block_table, new_positions, block_size))
        if chunk.want_logits:
            logits_rows.append(first + n - 1)
        # conv: the chunk's extended sequence is its L-1 state entries followed by its tokens
        ext = [state_base + i * state_len + j for j in range(state_len)]
        ext += [token_base + first + k for k in range(n)]
        window.extend(ext[k : k + conv_L_cache] for k in range(n))
        for offset, row in [*chunk.snapshots, (n - 1, chunk.conv_dst_row)]:
            write_index.append(ext[offset + 1 : offset + conv_L_cache])
            write_rows.append(row)
        if n == 1:
            decode.append((first, chunk))
        else:
            groups.append(_prefill_group(first, chunk, block_size, device))
    if decode:
        groups.append(_decode_group(decode, block_size, device))

    def as_tensor(values: list) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    return ForwardBatch(
        input_ids=as_tensor(ids),
        positions=as_tensor(positions),
        logits_index=as_tensor(logits_rows),
        kv_write_slots=as_tensor(write_slots),
        attention_groups=groups,
        conv_src_rows=as_tensor([c.conv_src_row for c in chunks]),
        conv_window=as_tensor(window),
        conv_write_index=as_tensor(write_index).view(-1, state_len),
        conv_write_rows=as_tensor(write_rows),
        num_tokens=len(ids),
    )


def _prefill_group(first: int, chunk: SequenceChunk, block_size: int, device) -> AttentionGroup:
    """A multi-token chunk attends causally over everything cached before it plus itself."""
    n = len(chunk.token_ids)
    context = chunk.start_pos + n
    kv = _context_slots(chunk.block_table, context, block_size).to(device)
    query_pos = torch.arange(chunk.start_pos, context, device=device)
    mask = torch.arange(context, device=device)[None, :] <= query_pos[:, None]
    return AttentionGroup(
        query_index=torch.arange(first, first + n, device=device)[None, :],
        kv_slots=kv[None, :],
        mask=mask[None, None],
    )


def _decode_group(decode: list[tuple[int, SequenceChunk]], block_size: int, device) -> AttentionGroup:
    """All single-token chunks in one call, contexts right-padded to the longest."""
    contexts = [c.start_pos + 1 for _, c in decode]
    longest = max(contexts)
    slots = torch.zeros((len(decode), longest), dtype=torch.long)
    for row, ((_, chunk), context) in enumerate(zip(decode, contexts, strict=True)):
        slots[row, :context] = _context_slots(chunk.block_table, context, block_size)
    mask = None
    if min(contexts) != longest:
        lengths = torch.tensor(contexts)
        mask = (torch.arange(longest)[None, :] < lengths[:, None])[:, None, None, :].to(device)
    return AttentionGroup(
        query_index=torch.tensor([[first] for first, _ in decode], dtype=torch.long, device=device),
        kv_slots=slots.to(device),
        mask=mask,
    )
