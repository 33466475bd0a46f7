"""Decode rows attending through SDPA are grouped by context width, so a short conversation's row
does not gather a long one's context; the paged kernel's rows stay one group."""

from __future__ import annotations

import torch

from engine import SamplingParams
from model.batch import SequenceChunk, build_forward_batch
from tests.engine.conftest import random_prompt

BLOCK = 16


def decode_row(blocks: int, first_block: int) -> SequenceChunk:
    """One decode token at the end of a context spanning ``blocks`` blocks."""
    table = list(range(first_block, first_block + blocks))
    return SequenceChunk([5], blocks * BLOCK - 1, table, 0, 1)


def groups_of(widths: list[int], row_query_limit: int) -> list[list[int]]:
    """Each attention group's rows, as the context widths (in blocks) of the chunks they came from."""
    chunks, first = [], 1
    for width in widths:
        chunks.append(decode_row(width, first))
        first += width
    batch = build_forward_batch(chunks, BLOCK, 3, row_query_limit=row_query_limit)
    return [[widths[row] for row in group.query_index.flatten().tolist()] for group in batch.attention_groups]


def test_sdpa_rows_of_very_different_widths_are_grouped_by_width():
    assert sorted(groups_of([1, 40, 2, 33], row_query_limit=1)) == [[1], [2], [40, 33]]


def test_rows_of_similar_widths_stay_one_group():
    assert groups_of([10, 12, 16, 9], row_query_limit=1) == [[10, 12, 16, 9]]
    # two buckets, but splitting would save under a quarter of the gathered blocks
    assert groups_of([8, 9, 9, 9], row_query_limit=1) == [[8, 9, 9, 9]]


def test_paged_kernel_rows_stay_one_group():
    assert groups_of([1, 40, 2, 33], row_query_limit=16) == [[1, 40, 2, 33]]


def test_grouped_rows_decode_as_each_alone(tiny_ckpt, make_engine):
    """A 600-token conversation beside two short ones (float32 attends through SDPA): greedy
    tokens as each decodes alone."""
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    batch = [random_prompt(n, seed=40 + n) for n in (600, 5, 40)]
    alone = [make_engine(tiny_ckpt).generate([p], params)[0].token_ids for p in batch]
    together = make_engine(tiny_ckpt, max_num_batched_tokens=1024).generate(batch, params)
    assert [out.token_ids for out in together] == alone


def test_a_steps_layers_gather_into_the_same_two_tensors():
    """Each attention layer refills its group's K and V targets instead of allocating megabytes of
    fresh pages; another dtype or row width gets its own."""
    batch = build_forward_batch([decode_row(3, 1), decode_row(5, 4)], BLOCK, 3, row_query_limit=1)
    (group,) = batch.attention_groups
    cache_rows = torch.zeros(12, BLOCK * 2 * 4)  # a cache viewed one block a row
    k, v = group.gather_targets(cache_rows)
    assert k is not v and k.shape == v.shape == (group.kv_blocks.numel(), cache_rows.shape[1])
    again = group.gather_targets(cache_rows)
    assert again[0] is k and again[1] is v
    assert group.gather_targets(cache_rows.bfloat16())[0].dtype == torch.bfloat16
    assert group.gather_targets(torch.zeros(12, BLOCK * 4))[0].shape[1] == BLOCK * 4
