"""Tiny random LFM2-MoE checkpoints, for tests: model/tiny/lfm2.py's files with an lfm2_moe config.

Experts are few and narrow, so a prompt of a few dozen tokens sends tokens to every expert and a
batch makes several tokens share one; the tokenizer is LFM2's (special tokens first).

    python -m model.tiny_moe OUT_DIR [--preset NAME] [--seed N]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from model.arch.lfm2_config import ATTENTION, CONV
from model.arch.lfm2_moe_config import Lfm2MoeConfig
from model.text.tokenizer import IM_END, LFM2_SPECIAL_TOKENS
from model.tiny.lfm2 import save_random_checkpoint, write_preset_cli

# Named shapes for parity tests; each differs in routing options, dense layers, head layout and tying.
TINY_MOE_CONFIGS: dict[str, dict[str, Any]] = {
    "moe": {  # LFM2-8B-A1B's options: a dense first layer, expert bias, normalised top-k
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "layer_types": [CONV, CONV, ATTENTION, CONV],
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "num_dense_layers": 1,
    },
    "moe_plain": {  # every layer MoE, no bias, raw top-3 weights scaled, untied, conv bias, MQA
        "hidden_size": 48,
        "num_hidden_layers": 3,
        "num_attention_heads": 3,
        "num_key_value_heads": 1,
        "layer_types": [ATTENTION, CONV, ATTENTION],
        "num_experts": 6,
        "num_experts_per_tok": 3,
        "num_dense_layers": 0,
        "use_expert_bias": False,
        "norm_topk_prob": False,
        "routed_scaling_factor": 0.5,
        "tie_word_embeddings": False,
        "conv_bias": True,
    },
}


def write_tiny_moe_checkpoint(
    out_dir: str | Path,
    *,
    vocab_size: int = 512,
    intermediate_size: int | None = None,
    moe_intermediate_size: int | None = None,
    max_position_embeddings: int = 2048,
    seed: int = 0,
    weight_std: float = 0.5,
    dtype: torch.dtype = torch.float32,
    tokenizer_text: str = "",
    **fields: Any,
) -> Path:
    """Write a random LFM2-MoE checkpoint that both lfm-chat and transformers load; return its directory.

    ``fields`` are any other Lfm2MoeConfig fields (a preset's); the dense width defaults to 2x
    hidden, each expert's to hidden / 2. ``tokenizer_text``: as model/tiny/lfm2.py's
    `write_tiny_checkpoint` takes it.
    """
    hidden = fields.get("hidden_size", 64)
    config = Lfm2MoeConfig(
        vocab_size=vocab_size,
        intermediate_size=intermediate_size or 2 * hidden,
        moe_intermediate_size=moe_intermediate_size or hidden // 2,
        max_position_embeddings=max_position_embeddings,
        eos_token_id=[LFM2_SPECIAL_TOKENS.index(IM_END)],
        **fields,
    )
    return save_random_checkpoint(
        Path(out_dir), config, seed=seed, weight_std=weight_std, dtype=dtype, tokenizer_text=tokenizer_text
    )


def main(argv: list[str] | None = None) -> None:
    write_preset_cli(argv, "model.tiny.lfm2_moe", TINY_MOE_CONFIGS, write_tiny_moe_checkpoint, "LFM2-MoE")


if __name__ == "__main__":
    main()
