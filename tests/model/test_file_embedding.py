"""Embedding rows read from the checkpoint file equal the in-memory table's, for any ids."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from model.arch.registry import load_config
from model.checkpoint.file_embedding import FileEmbedding
from model.checkpoint.weights import load_state_dict, locate_tensor
from model.errors import CheckpointError

NAME = "model.embed_tokens.weight"


@pytest.mark.parametrize("stored_as", [torch.float32, torch.bfloat16])
def test_rows_equal_the_loaded_table(tiny_ckpt_factory, stored_as):
    path = tiny_ckpt_factory("default", dtype=stored_as)
    table = load_state_dict(path, load_config(path), stored_as)[NAME]
    embedding = FileEmbedding(locate_tensor(path, NAME))
    ids = torch.tensor([[0, 5, 5], [table.shape[0] - 1, 17, 0]])
    assert torch.equal(embedding(ids), F.embedding(ids, table))
    assert embedding(torch.tensor([], dtype=torch.long)).shape == (0, table.shape[1])


def test_bf16_rows_widen_to_a_float32_models_table(tiny_ckpt_factory):
    """A bf16 checkpoint loaded as float32 reads its rows from the file, widened exactly."""
    path = tiny_ckpt_factory("default", dtype=torch.bfloat16)
    table = load_state_dict(path, load_config(path), torch.float32)[NAME]
    embedding = FileEmbedding(locate_tensor(path, NAME), torch.float32)
    ids = torch.tensor([[0, 5], [table.shape[0] - 1, 17]])
    assert embedding(ids).dtype == torch.float32
    assert torch.equal(embedding(ids), F.embedding(ids, table))


def test_out_of_range_ids_are_rejected_not_read_from_other_tensors(tiny_ckpt_factory):
    embedding = FileEmbedding(locate_tensor(tiny_ckpt_factory("default", dtype=torch.bfloat16), NAME))
    for bad in (embedding.num_embeddings, -1):
        with pytest.raises(IndexError, match="out of range"):
            embedding(torch.tensor([3, bad]))


def test_a_file_cut_short_under_a_running_engine_is_a_clear_error(tmp_path, tiny_ckpt_factory):
    source = tiny_ckpt_factory("default", dtype=torch.bfloat16)
    for file in source.iterdir():
        (tmp_path / file.name).write_bytes(file.read_bytes())
    embedding = FileEmbedding(locate_tensor(tmp_path, NAME))
    table_start = embedding.table.offset
    with open(tmp_path / "model.safetensors", "r+b") as file:
        file.truncate(table_start + embedding.row_bytes)  # only row 0 is left
    assert embedding(torch.tensor([0])).shape == (1, embedding.embedding_dim)
    with pytest.raises(CheckpointError, match="changed on disk"):
        embedding(torch.tensor([1]))
