"""Tiny random LFM2 checkpoints, for tests and the offline ``--demo``.

Real weights cannot be downloaded on build machines, so tests need a checkpoint that is
laid out exactly like a Hub one (config.json, model.safetensors, tokenizer.json,
tokenizer_config.json with LFM2's chat template) but takes milliseconds to make. The
tokenizer is a byte-level BPE trained here on a small mixed corpus, small enough that
emoji and CJK characters are split across tokens, so streaming code meets the hard case.

    python -m model.tiny OUT_DIR [--preset NAME] [--seed N]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer as BackendTokenizer
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

from model.arch.lfm2_config import ATTENTION, CONV, Lfm2Config
from model.checkpoint.weights import save_random_weights
from model.text.tokenizer import BOS_TOKEN, IM_END, LFM2_CHAT_TEMPLATE, LFM2_SPECIAL_TOKENS

# Named shapes for parity tests: each differs in width, head layout, layer pattern, head tying, conv bias.
TINY_CONFIGS: dict[str, dict[str, Any]] = {
    "default": {  # conv first, GQA 4:2, tied head
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "layer_types": [CONV, ATTENTION, CONV, ATTENTION],
    },
    "attn_first": {  # attention first, GQA 6:2, untied head, conv bias
        "hidden_size": 96,
        "num_hidden_layers": 5,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "layer_types": [ATTENTION, CONV, CONV, ATTENTION, CONV],
        "tie_word_embeddings": False,
        "conv_bias": True,
    },
    "lfm2_like": {  # LFM2-350M's rhythm (conv, conv, attn), multi-query attention, conv bias
        "hidden_size": 32,
        "num_hidden_layers": 6,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "layer_types": [CONV, CONV, ATTENTION, CONV, CONV, ATTENTION],
        "conv_bias": True,
    },
    "mha_plain_ffn": {  # full multi-head attention, untied, FFN width taken as-is (no auto-adjust)
        "hidden_size": 48,
        "num_hidden_layers": 3,
        "num_attention_heads": 3,
        "num_key_value_heads": 3,
        "layer_types": [ATTENTION, ATTENTION, CONV],
        "tie_word_embeddings": False,
        "block_auto_adjust_ff_dim": False,
        "intermediate_size": 80,
    },
}

_FFN_MULTIPLE = 16  # LFM2 rounds the FFN width to 256; 16 keeps that rule exercised at tiny widths

# Enough varied text for a few hundred merges. Emoji and CJK are rare, so most stay split into bytes.
_CORPUS = """\
The quick brown fox jumps over the lazy dog. A small model can still learn how words are built.
Liquid foundation models mix short convolutions with attention, which keeps the cache small.
Once upon a time, there was a little robot who wanted to write poems about the sea and the stars.
Please summarize the following paragraph in two sentences, then list three questions about it.
Hello! How are you today? I am fine, thank you. What would you like to talk about this evening?
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14159 -17 1e-5 0x1F; dates like 2025-01-31 and 12:30.
def fibonacci(n: int) -> int:
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)

for index, value in enumerate(values):
    print(f"{index}: {value!r}")
class Stack:
    def __init__(self) -> None:
        self.items = []
    def push(self, item):
        self.items.append(item)
import json; data = json.loads('{"name": "lfm", "layers": [1, 2, 3], "ok": true}')
if (x > 0 && y < 10) { return x * y; } else { return -1; }
SELECT name, count(*) FROM users WHERE active = 1 GROUP BY name ORDER BY 2 DESC;
Emoji make chats friendly 🙂 and celebrations louder 🎉, rockets go 🚀, hearts ❤️ and thumbs 👍.
你好，世界。今天天气很好，我们去公园散步吧。机器学习模型可以生成文本。
こんにちは、元気ですか？日本語のテキストも少し入れておきます。
Café, naïve, résumé, Straße, smörgåsbord, and Ελληνικά letters need more than one byte each.
"""


def default_layer_types(num_hidden_layers: int) -> list[str]:
    """Conv and attention alternating, conv first (LFM2 starts with conv layers)."""
    return [CONV if i % 2 == 0 else ATTENTION for i in range(num_hidden_layers)]


def tokenizer_training_text(extra_text: str = "") -> str:
    """All the text `tiny_tokenizer_json` trains on: the corpus, then ``extra_text``."""
    return _CORPUS + extra_text


@lru_cache(maxsize=8)
def tiny_tokenizer_json(vocab_size: int, specials_last: bool = False, extra_text: str = "") -> str:
    """A byte-level BPE tokenizer with exactly ``vocab_size`` ids and LFM2's special tokens.

    They take ids 0..13 as in LFM2, or with ``specials_last`` the last 14 ids in the same order
    (LFM3 keeps them after its text tokens: pad 124893, bos 124894, <|im_end|> 124900).
    Cached as JSON text: training is deterministic, so every checkpoint of one vocab size
    shares the same tokenizer. If the corpus yields too few merges, reserved special tokens
    fill the remaining ids so the vocabulary matches the embedding table.

    ``extra_text`` is trained on after the corpus (`tokenizer_training_text`): the benchmarks'
    checkpoints learn their prompts' words with it; without it the tokenizer is the tests' own.
    """
    minimum = len(LFM2_SPECIAL_TOKENS) + 256
    if vocab_size < minimum:
        raise ValueError(f"vocab_size must be at least {minimum} (LFM2 specials + 256 byte tokens)")
    tok = BackendTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text_ids = vocab_size - len(LFM2_SPECIAL_TOKENS)
    trainer = trainers.BpeTrainer(
        vocab_size=text_ids if specials_last else vocab_size,
        special_tokens=[] if specials_last else list(LFM2_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(tokenizer_training_text(extra_text).splitlines(keepends=True), trainer)
    if specials_last:
        tok.add_special_tokens([f"<|reserved_{i}|>" for i in range(text_ids - tok.get_vocab_size(True))])
        tok.add_special_tokens(list(LFM2_SPECIAL_TOKENS))
    missing = vocab_size - tok.get_vocab_size(with_added_tokens=True)
    tok.add_special_tokens([f"<|reserved_{i}|>" for i in range(missing)])
    bos_id = tok.token_to_id(BOS_TOKEN)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A", pair=f"{BOS_TOKEN} $A $B", special_tokens=[(BOS_TOKEN, bos_id)]
    )
    return tok.to_str()


def _tokenizer_config(model_max_length: int) -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS_TOKEN,
        "eos_token": IM_END,
        "pad_token": "<|pad|>",
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "chat_template": LFM2_CHAT_TEMPLATE,
    }


def write_tiny_checkpoint(
    out_dir: str | Path,
    *,
    hidden_size: int = 64,
    num_hidden_layers: int = 4,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    layer_types: list[str] | None = None,
    vocab_size: int = 512,
    intermediate_size: int | None = None,
    block_auto_adjust_ff_dim: bool = True,
    tie_word_embeddings: bool = True,
    conv_bias: bool = False,
    max_position_embeddings: int = 2048,
    seed: int = 0,
    weight_std: float = 0.5,
    dtype: torch.dtype = torch.float32,
    tokenizer_text: str = "",
) -> Path:
    """Write a random LFM2 checkpoint that both lfm-chat and transformers load; return its directory.

    ``intermediate_size`` defaults to 4x hidden, which LFM2's auto-adjust turns into ~8/3x.
    ``weight_std`` is large for a tiny width so logits are peaked and greedy decoding has no ties.
    ``tokenizer_text`` is text the tokenizer trains on besides its corpus (`tiny_tokenizer_json`);
    the weights do not depend on it.
    """
    out = Path(out_dir)
    im_end_id = LFM2_SPECIAL_TOKENS.index(IM_END)
    config = Lfm2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        layer_types=list(layer_types or default_layer_types(num_hidden_layers)),
        max_position_embeddings=max_position_embeddings,
        conv_bias=conv_bias,
        block_auto_adjust_ff_dim=block_auto_adjust_ff_dim,
        block_multiple_of=_FFN_MULTIPLE,
        tie_word_embeddings=tie_word_embeddings,
        eos_token_id=[im_end_id],
    )
    return save_random_checkpoint(
        out, config, seed=seed, weight_std=weight_std, dtype=dtype, tokenizer_text=tokenizer_text
    )


def save_random_checkpoint(
    out: Path,
    config: Lfm2Config,
    *,
    seed: int,
    weight_std: float,
    dtype: torch.dtype,
    specials_last: bool = False,
    tokenizer_text: str = "",
) -> Path:
    """config.json, random weights of ``config``'s shapes and a tiny tokenizer (trained on
    ``tokenizer_text`` too), written to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    raw_config = config.to_dict()
    raw_config["dtype"] = str(dtype).removeprefix("torch.")
    (out / "config.json").write_text(json.dumps(raw_config, indent=2) + "\n", encoding="utf-8")
    save_random_weights(config, out, seed=seed, std=weight_std, dtype=dtype)
    write_tiny_tokenizer(
        out, config.vocab_size, specials_last, config.max_position_embeddings, tokenizer_text
    )
    return out


def write_tiny_tokenizer(
    out: Path, vocab_size: int, specials_last: bool, model_max_length: int, extra_text: str = ""
) -> None:
    """tokenizer.json (`tiny_tokenizer_json`) and tokenizer_config.json with LFM2's chat template."""
    tokenizer = tiny_tokenizer_json(vocab_size, specials_last, extra_text)
    (out / "tokenizer.json").write_text(tokenizer, encoding="utf-8")
    tokenizer_config = _tokenizer_config(model_max_length)
    (out / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config, indent=2) + "\n", encoding="utf-8"
    )


def write_preset_cli(
    argv: list[str] | None,
    module: str,
    presets: dict[str, dict[str, Any]],
    write: Callable[..., Path],
    label: str,
) -> None:
    """``python -m MODULE OUT_DIR [--preset NAME] [--seed N]``: one tiny checkpoint of ``presets``."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=f"Write a tiny random {label}.")
    parser.add_argument("out_dir", type=Path, help="directory to write the checkpoint into")
    parser.add_argument("--preset", choices=sorted(presets), default=next(iter(presets)))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = write(args.out_dir, seed=args.seed, **presets[args.preset])
    print(f"wrote tiny {label} checkpoint ({args.preset}) to {path}")


def main(argv: list[str] | None = None) -> None:
    write_preset_cli(argv, "model.tiny.lfm2", TINY_CONFIGS, write_tiny_checkpoint, "LFM2")


if __name__ == "__main__":
    main()
