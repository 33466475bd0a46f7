"""Checkpoints to benchmark when no --model is given: random weights at LFM2-350M's exact shape, or tiny.

Real weights cannot be downloaded on the build machines, and speed depends on the shape, not
on the values, so a random checkpoint with the published 350M hyper-parameters measures the
same work. It is generated once (~700 MB, bf16) into the user cache and reused.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import platformdirs
import torch

from model.config import ATTENTION, CONV
from model.tiny import write_tiny_checkpoint

# LiquidAI/LFM2-350M's config.json: block_ff_dim 6656 auto-adjusts to 4608, given here directly.
LFM2_350M_SHAPE = {
    "hidden_size": 1024,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "layer_types": [ATTENTION if i in (2, 5, 8, 10, 12, 14) else CONV for i in range(16)],
    "vocab_size": 65536,
    "intermediate_size": 4608,
    "block_auto_adjust_ff_dim": False,
    "max_position_embeddings": 128000,
    "weight_std": 0.02,  # the usual init scale: activations stay in a realistic range
}
_COMPLETE = ".complete"  # written last, so an interrupted generation is never mistaken for a checkpoint


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("lfm-chat")) / "bench"


def random_350m_checkpoint(cache_dir: Path | None = None, note: Callable[[str], None] = print) -> Path:
    """The cached random 350M-shape checkpoint, generated on first use."""
    root = cache_dir or default_cache_dir()
    target = root / "lfm2-350m-shape-random-bf16"
    if (target / _COMPLETE).is_file():
        return target
    note(f"generating a random-weight LFM2-350M-shape checkpoint in {target} (once, ~700 MB)...")
    root.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=root))
    try:
        write_tiny_checkpoint(partial, **LFM2_350M_SHAPE, dtype=torch.bfloat16)
        (partial / _COMPLETE).touch()
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def tiny_checkpoint(directory: Path) -> Path:
    """A tiny random checkpoint for smoke runs, with room for the full-size prompts too."""
    return write_tiny_checkpoint(directory, max_position_embeddings=32768)
