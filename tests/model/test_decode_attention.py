"""The native decode attention reads the paged KV pool directly and matches dense attention; what
both attention paths are given is checked before either reads the pool."""

from __future__ import annotations

import pytest
import torch

from model.batch import AttentionGroup, ForwardBatch, SequenceChunk, build_forward_batch

BLOCK = 16


def paged_case(contexts: list[int], heads: int, kv_heads: int, dim: int = 64, seed: int = 0):
    """Random q and a KV pool whose blocks are handed out to the sequences in shuffled order."""
    gen = torch.Generator().manual_seed(seed)
    widths = [-(-c // BLOCK) for c in contexts]
    num_blocks = sum(widths) + 3
    order = torch.randperm(num_blocks, generator=gen).tolist()
    tables = torch.zeros(len(contexts), max(widths), dtype=torch.long)  # padding: block 0, never read
    for s, width in enumerate(widths):
        tables[s, :width] = torch.tensor([order.pop() for _ in range(width)])
    pool = (num_blocks * BLOCK, kv_heads, dim)
    k = torch.randn(pool, generator=gen).to(torch.bfloat16)
    v = torch.randn(pool, generator=gen).to(torch.bfloat16)
    q = torch.randn(len(contexts), heads, dim, generator=gen).to(torch.bfloat16)
    return q, k, v, tables, torch.tensor(contexts)


def dense_reference(q, k, v, tables, lens, starts=None) -> torch.Tensor:
    """fp32 softmax(q k^T / sqrt(d)) v over each sequence's context [start, len), GQA by repetition."""
    rep = q.shape[1] // k.shape[1]
    out = []
    starts = [0] * len(lens) if starts is None else starts.tolist()
    for s, (n, start) in enumerate(zip(lens.tolist(), starts, strict=True)):
        slots = torch.tensor([tables[s, t // BLOCK] * BLOCK + t % BLOCK for t in range(start, n)])
        ks = k[slots].float().repeat_interleave(rep, dim=1)  # [n, H, D]
        vs = v[slots].float().repeat_interleave(rep, dim=1)
        scores = torch.einsum("hd,nhd->hn", q[s].float(), ks) / q.shape[-1] ** 0.5
        out.append(torch.einsum("hn,nhd->hd", scores.softmax(-1), vs))
    return torch.stack(out)


HEAD_SHAPES = [(16, 8, 64), (4, 1, 16), (6, 6, 40), (12, 2, 128), (4, 2, 256)]  # (heads, kv_heads, dim)


@pytest.mark.parametrize(("heads", "kv_heads", "dim"), HEAD_SHAPES)
def test_matches_dense_attention_over_scattered_blocks(native, heads, kv_heads, dim):
    q, k, v, tables, lens = paged_case([1, 17, 100, 16, 333], heads, kv_heads, dim)
    out = native.decode_attention(q, k, v, tables, lens, BLOCK, q.shape[-1] ** -0.5)
    expected = dense_reference(q, k, v, tables, lens)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    assert (out.float() - expected).abs().max() <= 2**-7 * expected.abs().max()  # bf16 rounding


def test_a_sequence_does_not_depend_on_its_batch(native):
    q, k, v, tables, lens = paged_case([5, 64, 200, 31, 1300], heads=16, kv_heads=8, seed=1)
    together = native.decode_attention(q, k, v, tables, lens, BLOCK, 0.125)
    for s in range(len(lens)):
        width = -(-int(lens[s]) // BLOCK)
        own_table = tables[s : s + 1, :width].contiguous()  # no padding columns at all
        one_q = q[s : s + 1].contiguous()
        alone = native.decode_attention(one_q, k, v, own_table, lens[s : s + 1], BLOCK, 0.125)
        assert torch.equal(alone[0], together[s])


@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(16, 4, 128), (6, 6, 40)])
def test_a_long_context_split_into_pieces_matches_dense_attention(native, heads, kv_heads, dim):
    """Past 512 positions a context is taken in pieces (over the threads) and the pieces combined:
    one just over a piece, one of many pieces ending mid-piece, beside short rows."""
    q, k, v, tables, lens = paged_case([513, 7, 2300, 1024], heads, kv_heads, dim, seed=3)
    out = native.decode_attention(q, k, v, tables, lens, BLOCK, dim**-0.5)
    expected = dense_reference(q, k, v, tables, lens)
    assert (out.float() - expected).abs().max() <= 2**-7 * expected.abs().max()


def test_the_threads_taking_the_pieces_change_no_bit(native):
    q, k, v, tables, lens = paged_case([3000, 40, 1500], heads=8, kv_heads=2, dim=128, seed=4)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = native.decode_attention(q, k, v, tables, lens, BLOCK, 128**-0.5)
        torch.set_num_threads(max(2, threads))
        shared = native.decode_attention(q, k, v, tables, lens, BLOCK, 128**-0.5)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(alone, shared)


def test_one_peak_far_above_the_rest_does_not_drown_the_context(native):
    """The running softmax rescales what it summed when a later position's score is far higher (and
    the pieces when a later piece holds the peak): the result is that position's value."""
    q, k, v, tables, lens = paged_case([1800], heads=2, kv_heads=1, dim=64, seed=5)
    slot = int(tables[0, 1500 // BLOCK]) * BLOCK + 1500 % BLOCK
    k[slot, 0] = (q[0, 0].float() * 40).to(torch.bfloat16)  # head 0 looks only at position 1500
    out = native.decode_attention(q, k, v, tables, lens, BLOCK, 64**-0.5)
    expected = dense_reference(q, k, v, tables, lens)
    assert torch.allclose(out[0, 0].float(), v[slot, 0].float(), atol=2**-6)
    assert (out.float() - expected).abs().max() <= 2**-7 * expected.abs().max()


def test_a_windowed_row_attends_from_its_start_and_reads_no_block_before_it(native):
    """Sliding-window rows (LFM3): positions before the start count for nothing, and the blocks wholly
    before it may hold anything (the engine released them): -1 here, which the kernel would refuse."""
    lens = torch.tensor([40, 100, 17, 333, 9, 1400])
    starts = torch.tensor([0, 37, 16, 300, 8, 250])  # mid-block, aligned, the last position only; pieces
    q, k, v, tables, _ = paged_case(lens.tolist(), heads=8, kv_heads=2, dim=128, seed=2)
    for s, start in enumerate(starts.tolist()):
        tables[s, : start // BLOCK] = -1
    out = native.decode_attention(q, k, v, tables, lens, BLOCK, 128**-0.5, starts)
    expected = dense_reference(q, k, v, tables, lens, starts)
    assert (out.float() - expected).abs().max() <= 2**-7 * expected.abs().max()
    with pytest.raises(RuntimeError, match="context start"):
        native.decode_attention(q, k, v, tables, lens, BLOCK, 0.125, lens)


def test_bad_tables_are_refused_not_read(native):
    q, k, v, tables, lens = paged_case([20, 40], heads=4, kv_heads=2)
    with pytest.raises(RuntimeError, match="context length"):
        native.decode_attention(q, k, v, tables, lens + 100, BLOCK, 0.125)
    tables[0, 0] = 10_000
    with pytest.raises(RuntimeError, match="outside the KV pool"):
        native.decode_attention(q, k, v, tables, lens, BLOCK, 0.125)


def single_query_rows(rows: int, table_rows: int, lens: int | None = None) -> AttentionGroup:
    return AttentionGroup(
        query_index=torch.arange(rows)[:, None],
        kv_blocks=torch.zeros(table_rows, 2, dtype=torch.long),
        mask=None,
        context_lens=torch.ones(rows if lens is None else lens, dtype=torch.long),
    )


def test_a_block_table_needs_a_row_per_query_row():
    """Fewer rows once passed unchecked: SDPA's reshape mixed sequences, the kernel read past the table."""
    assert single_query_rows(3, 3).kv_blocks.shape == (3, 2)
    with pytest.raises(ValueError, match=r"block table of shape \(2, 2\) for 3 query rows"):
        single_query_rows(3, 2)
    with pytest.raises(ValueError, match="context lengths for 3 query rows"):
        single_query_rows(3, 3, lens=2)


def test_block_size_must_be_positive():
    """Block size 0 once reached `slots // block_size` (ZeroDivisionError) in the reference attention."""
    chunk = SequenceChunk([5, 6], start_pos=0, block_table=[1], conv_src_row=0, conv_dst_row=1)
    assert build_forward_batch([chunk], block_size=BLOCK, conv_L_cache=3).block_size == BLOCK
    with pytest.raises(ValueError, match="block_size must be at least 1, got 0"):
        build_forward_batch([chunk], block_size=0, conv_L_cache=3)
    batch = build_forward_batch([chunk], block_size=BLOCK, conv_L_cache=3)
    fields = {name: getattr(batch, name) for name in ForwardBatch.__slots__}
    with pytest.raises(ValueError, match="block_size must be at least 1, got 0"):
        ForwardBatch(**{**fields, "block_size": 0})
