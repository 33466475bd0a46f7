"""Where a tensor's bytes lie in a checkpoint file: what the header reader finds and the name mapping
(names.py) and row reads (file_embedding.py) use, without loading the tensor."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True, slots=True)
class TensorLocation:
    """Where a tensor's bytes lie in a checkpoint file, for reading rows without loading it."""

    path: Path
    offset: int  # of element [0, 0...] from the start of the file
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize
