"""Tiny random LFM3 checkpoints, for tests: model/tiny/lfm2.py's files with an LFM3 config.

The tokenizer keeps LFM2's special tokens in LFM2's order but after the text tokens, as LFM3's
does (pad, bos and <|im_end|> are the last 14 ids' first, second and eighth), and config.json
names those ids. Windows are short, so a conversation of a few hundred tokens spans many.

    python -m model.tiny_lfm3 OUT_DIR [--preset NAME] [--seed N]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from model.arch.lfm2_config import ATTENTION, CONV, SLIDING
from model.arch.lfm3_config import Lfm3Config, RopeParameters
from model.text.tokenizer import BOS_TOKEN, IM_END, LFM2_SPECIAL_TOKENS
from model.tiny.lfm2 import save_random_checkpoint, write_preset_cli

# Named shapes for parity tests; each differs in head layout, window, RoPE, gate, norms and head tying.
TINY_LFM3_CONFIGS: dict[str, dict[str, Any]] = {
    "lfm3": {  # LFM3-1.7B's rhythm and options; head_dim 32 is not hidden / heads (16)
        "hidden_size": 64,
        "num_hidden_layers": 6,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "layer_types": [CONV, SLIDING, ATTENTION, CONV, SLIDING, ATTENTION],
        "sliding_window": 12,
    },
    "lfm3_plain": {  # no gate, no sandwich norms, untied, conv bias, MQA, other RoPE settings, odd window
        "hidden_size": 48,
        "num_hidden_layers": 4,
        "num_attention_heads": 3,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "layer_types": [SLIDING, CONV, ATTENTION, SLIDING],
        "sliding_window": 5,
        "use_attention_gate": False,
        "use_sandwich_norm": False,
        "tie_word_embeddings": False,
        "conv_bias": True,
        "rope_parameters": {
            SLIDING: RopeParameters("default", 500.0),
            ATTENTION: RopeParameters("proportional", 20_000.0, partial_rotary_factor=0.25, factor=2.0),
        },
    },
}


def write_tiny_lfm3_checkpoint(
    out_dir: str | Path,
    *,
    vocab_size: int = 512,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 4096,
    seed: int = 0,
    weight_std: float = 0.5,
    dtype: torch.dtype = torch.float32,
    tokenizer_text: str = "",
    **fields: Any,
) -> Path:
    """Write a random LFM3 checkpoint that both lfm-chat and transformers load; return its directory.

    ``fields`` are any other Lfm3Config fields (a preset's); ``intermediate_size`` defaults to 2x hidden.
    ``tokenizer_text``: as model/tiny/lfm2.py's `write_tiny_checkpoint` takes it.
    """
    first_special = vocab_size - len(LFM2_SPECIAL_TOKENS)
    hidden = fields.get("hidden_size", 64)
    config = Lfm3Config(
        vocab_size=vocab_size,
        intermediate_size=intermediate_size or 2 * hidden,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=first_special,
        bos_token_id=first_special + LFM2_SPECIAL_TOKENS.index(BOS_TOKEN),
        eos_token_id=[first_special + LFM2_SPECIAL_TOKENS.index(IM_END)],
        **fields,
    )
    return save_random_checkpoint(
        Path(out_dir),
        config,
        seed=seed,
        weight_std=weight_std,
        dtype=dtype,
        specials_last=True,
        tokenizer_text=tokenizer_text,
    )


def main(argv: list[str] | None = None) -> None:
    write_preset_cli(argv, "model.tiny.lfm3", TINY_LFM3_CONFIGS, write_tiny_lfm3_checkpoint, "LFM3")


if __name__ == "__main__":
    main()
