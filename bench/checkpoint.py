"""Checkpoints to benchmark when no --model is given: random weights at a real model's exact shape, or tiny.

Real weights cannot be downloaded on the build machines, and speed depends on the shape, not
on the values, so a random checkpoint with the published hyper-parameters measures the same
work. Each is generated once (bf16) into the user cache and reused.

The work also depends on how many tokens a prompt is. The tests' tiny tokenizer knows almost no
English ("pocket" is 'Ġp', 'o', 'cke', 't': a 100-word prompt ~440 tokens), while LFM2's real one
has a token for each common word (~110). So the random checkpoints' tokenizer also learns
`PROMPT_VOCABULARY`, the words bench/serve_compare.py's prompts are made of, each word one token
with and without a leading space. The cached directory's name carries a digest of everything the
tokenizer trains on, so a change to it writes a new checkpoint instead of reusing one with the old
tokenizer (and the copies named after it, ``-vllm``, ``-chain``..., are new too).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
import torch

from bench.workloads import DEPTHS
from model.arch.lfm2_config import ATTENTION, CONV
from model.arch.lfm3_config import lfm3_layer_types
from model.tiny.lfm2 import tokenizer_training_text, write_tiny_checkpoint
from model.tiny.lfm2_moe import TINY_MOE_CONFIGS, write_tiny_moe_checkpoint
from model.tiny.lfm3 import TINY_LFM3_CONFIGS, write_tiny_lfm3_checkpoint

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
# LiquidAI/LFM3-1.7B: transformers' Lfm3Config defaults (its docstring names this checkpoint):
# 6 full-attention, 5 sliding-window (256) and 13 conv layers, head_dim 128, a 128k vocabulary.
LFM3_1_7B_SHAPE = {
    "hidden_size": 2048,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "layer_types": lfm3_layer_types(24),
    "sliding_window": 256,
    "vocab_size": 128000,
    "intermediate_size": 7680,
    "max_position_embeddings": 128000,
    "weight_std": 0.02,
}

# LiquidAI/LFM2-8B-A1B's config.json (transformers' Lfm2MoeConfig defaults are its MoE fields): 18
# conv and 6 attention layers, a dense SwiGLU in the first 2, then 32 experts of 1792, 4 per token.
# 8.3B parameters, 1.6B of them active per token (1.5B by the card, which leaves the embedding out).
LFM2_8B_A1B_SHAPE = {
    "hidden_size": 2048,
    "num_hidden_layers": 24,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "layer_types": [ATTENTION if i in (2, 6, 10, 14, 18, 21) else CONV for i in range(24)],
    "vocab_size": 65536,
    "intermediate_size": 7168,
    "moe_intermediate_size": 1792,
    "num_experts": 32,
    "num_experts_per_tok": 4,
    "num_dense_layers": 2,
    "max_position_embeddings": 128000,
    "weight_std": 0.02,
}


@dataclass(frozen=True, slots=True)
class RandomShape:
    """A real model's shape, and how to write a checkpoint of its architecture."""

    write: Callable[..., Path]
    fields: dict[str, Any]
    size: str  # said while it is generated
    tiny: dict[str, Any]  # the architecture's tiny smoke-test fields


SHAPES = {
    "lfm2-350m": RandomShape(write_tiny_checkpoint, LFM2_350M_SHAPE, "~700 MB", {}),
    "lfm3-1.7b": RandomShape(
        write_tiny_lfm3_checkpoint, LFM3_1_7B_SHAPE, "~3.4 GB", TINY_LFM3_CONFIGS["lfm3"]
    ),
    # written a shard at a time (model/checkpoint/weights.py's save_random_weights): never 17 GB in memory
    "lfm2-8b-a1b": RandomShape(
        write_tiny_moe_checkpoint, LFM2_8B_A1B_SHAPE, "~17 GB in 2 GB shards", TINY_MOE_CONFIGS["moe"]
    ),
}
DEFAULT_SHAPE = "lfm2-350m"
_COMPLETE = ".complete"  # written last, so an interrupted generation is never mistaken for a checkpoint

# Common English words, each a single token in LFM2's 65,536-entry tokenizer (split where used): the
# vocabulary of bench/serve_compare.py's prompts, and what the random checkpoints' tokenizer learns.
PROMPT_VOCABULARY = (
    "river stone light winter garden paper window market silver morning forest engine letter "
    "island question mountain story harbour lantern orchard meadow thunder velvet copper bridge "
    "candle valley pocket signal ladder compass feather shadow marble planet rocket saddle"
)


def tokenizer_text(words: str = PROMPT_VOCABULARY) -> str:
    """What the random checkpoints' tokenizer trains on besides its corpus: each word at a line's
    start and after a space ('word', 'Ġword' to the byte-level pre-tokenizer). Once each is enough:
    at these vocabulary sizes the trainer merges every pair it sees long before the ids run out, so
    every word it sees ends as one token (tests/bench/test_bench_tokenizer.py checks)."""
    return "".join(f"{word} {word}\n" for word in words.split())


def checkpoint_name(shape: str, text: str | None = None) -> str:
    """The cached directory of ``shape``'s random checkpoint whose tokenizer also trained on ``text``
    (`tokenizer_text()` by default): named after a digest of all its tokenizer's training text."""
    training = tokenizer_training_text(tokenizer_text() if text is None else text)
    return f"{shape}-shape-random-bf16-tok{hashlib.sha256(training.encode()).hexdigest()[:8]}"


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("lfm-chat")) / "bench"


def random_checkpoint(
    shape: str = DEFAULT_SHAPE, cache_dir: Path | None = None, note: Callable[[str], None] = print
) -> Path:
    """The cached random checkpoint of ``shape`` (a key of SHAPES), generated on first use."""
    spec = SHAPES[shape]
    root = cache_dir or default_cache_dir()
    target = root / checkpoint_name(shape)
    if is_whole(target):
        return target
    note(f"generating a random-weight {shape}-shape checkpoint in {target} (once, {spec.size})...")
    root.mkdir(parents=True, exist_ok=True)
    text = tokenizer_text()
    return write_whole(
        target, lambda partial: spec.write(partial, **spec.fields, dtype=torch.bfloat16, tokenizer_text=text)
    )


def is_whole(directory: Path) -> bool:
    """``directory`` was written to the end by `write_whole`."""
    return (directory / _COMPLETE).is_file()


def write_whole(target: Path, write: Callable[[Path], object]) -> Path:
    """``write`` a directory beside ``target``, mark it complete, then put it in ``target``'s place:
    a run stopped halfway leaves no directory that `is_whole` takes for a finished one."""
    partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=target.parent))
    try:
        write(partial)
        (partial / _COMPLETE).touch()
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def tiny_checkpoint(directory: Path, shape: str = DEFAULT_SHAPE) -> Path:
    """A tiny random checkpoint of ``shape``'s architecture for smoke runs, with room for the
    full-size prompts too."""
    spec = SHAPES[shape]
    return spec.write(directory, **spec.tiny, max_position_embeddings=2 * max(DEPTHS.values()))
