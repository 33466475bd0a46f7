"""Token embeddings read row by row from the checkpoint file, instead of held in memory.

A decode step looks up one row per sequence, so the table is almost never needed whole. With
a tied head, the head's copy is packed for oneDNN (model/native/linears.py), a blocked layout that
cannot serve row lookups; keeping the plain table as well would cost 128 MB at 350M. Reading
the rows with ``pread`` costs a few microseconds each from the page cache and adds nothing to
the process's memory. (A memory map would not: the kernel maps 64 KB around every page read,
so random rows soon make most of the table resident.)
"""

from __future__ import annotations

import ctypes
import os

import torch
from torch import nn

from model.checkpoint.tensor_location import TensorLocation
from model.errors import CheckpointError

FILE_READS_SUPPORTED = hasattr(os, "preadv")  # POSIX; on Windows the table stays in memory


class FileEmbedding(nn.Module):
    """``F.embedding(ids, table)`` where ``table`` stays in its safetensors file (CPU only).

    ``dtype``: the model's, when the rows widen to it (bf16 rows of a float32 model); default the file's.
    """

    def __init__(self, table: TensorLocation, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.table = table
        self.dtype = table.dtype if dtype is None else dtype
        self.num_embeddings, self.embedding_dim = table.shape
        self.row_bytes = self.embedding_dim * torch.empty((), dtype=table.dtype).element_size()
        self._file = table.path.open("rb", buffering=0)  # kept open: a deleted file stays readable

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1).tolist()
        if flat and not 0 <= min(flat) <= max(flat) < self.num_embeddings:
            raise IndexError(f"token id out of range for an embedding of {self.num_embeddings} rows")
        rows = torch.empty(len(flat), self.embedding_dim, dtype=self.table.dtype)
        buffer = memoryview((ctypes.c_char * max(rows.nbytes, 1)).from_address(rows.data_ptr())).cast("B")
        fd, size = self._file.fileno(), self.row_bytes
        for i, token in enumerate(flat):
            if os.preadv(fd, [buffer[i * size : (i + 1) * size]], self.table.offset + token * size) != size:
                raise CheckpointError(f"{self.table.path} changed on disk while in use (row {token})")
        return rows.to(self.dtype).view(*ids.shape, self.embedding_dim)
