"""A tiny checkpoint that always gives the same reply, for tests of what a reply contains.

A random model writes gibberish; testing how thinking and tool calls are shown needs a model that
writes `<think>…</think>` on cue. With every layer's output projection zeroed, the residual stream
is the current token's embedding, so the next token depends on the current token alone, and
lm_head's rows chain a script: after token t_k comes t_(k+1). Everything else is real: the
checkpoint loads through the engine, the tokenizer and template are the family's.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer as BackendTokenizer

from model.checkpoint.weights import SINGLE_FILE, save_state_dict
from model.text.tokenizer import IM_END, Tokenizer
from model.tiny.lfm2 import tiny_tokenizer_json, write_tiny_checkpoint

FIXTURES = Path(__file__).resolve().parents[1] / "model" / "fixtures"
THINKING_TEMPLATE = FIXTURES / "lfm2.5-1.2b-instruct.jinja"  # strips the thinking of past replies
VOCAB = 512
ADDED = ["<think>", "</think>"]  # LFM2.5's vocabulary has them; the tiny base tokenizer does not


def write_scripted_checkpoint(out: Path, reply: str, template: Path = THINKING_TEMPLATE) -> Path:
    """A checkpoint whose every reply (after the generation prompt) is `reply`, then <|im_end|>."""
    write_tiny_checkpoint(out, vocab_size=VOCAB, tie_word_embeddings=False)
    backend = BackendTokenizer.from_str(tiny_tokenizer_json(VOCAB - len(ADDED)))
    backend.add_special_tokens(ADDED)
    (out / "tokenizer.json").write_text(backend.to_str(), encoding="utf-8")
    shutil.copyfile(template, out / "chat_template.jinja")

    tokenizer = Tokenizer.from_pretrained(out)
    start = tokenizer.encode("<|im_start|>assistant\n")[-1]
    chain = [start, *tokenizer.encode(reply), tokenizer.token_to_id(IM_END)]
    if len(set(chain)) != len(chain):
        raise ValueError(f"each token of a script must be distinct; {reply!r} repeats one")

    weights = load_file(str(out / SINGLE_FILE))
    for name, tensor in weights.items():
        if name.endswith(("out_proj.weight", "out_proj.bias", "feed_forward.w2.weight")):
            tensor.zero_()  # no layer adds to the residual stream
    embed, norm = weights["model.embed_tokens.weight"], weights["model.embedding_norm.weight"]
    head = torch.zeros_like(weights["lm_head.weight"])
    for current, following in itertools.pairwise(chain):
        hidden = embed[current] * torch.rsqrt(embed[current].pow(2).mean() + 1e-5) * norm
        head[following] = 10 * hidden / hidden.norm()  # the largest logit goes to the next token
    weights["lm_head.weight"] = head
    save_state_dict(weights, out)
    return out
