"""A checkpoint at a real model's shape whose greedy continuation is known: for speculation benchmarks.

Random weights cannot show a real draft acceptance rate, so speed is measured as a function of
acceptance instead. With every layer's output projection zeroed, the residual stream is the
current token's embedding, so the next token depends on the current token alone; the (untied)
head's rows then chain a long cycle of tokens: after c_k comes c_(k+1). A prompt that quotes
stretches of the cycle, some of its tokens swapped, makes the n-gram drafter right exactly where
the quote is intact. Every weight is still read each step (zeros cost what random values cost),
so a step's time is the real model's.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file

from model.checkpoint.weights import SINGLE_FILE, save_state_dict

CHAIN_FILE = "chain.json"  # the cycle's tokens, in order
ZEROED = ("out_proj.weight", "out_proj.bias", "feed_forward.w2.weight")
FIRST_TOKEN = 1000  # below: the tokenizer's special and byte tokens stay out of the cycle
HEAD_SCALE = 10.0  # the chosen logit is ~HEAD_SCALE * |h|; every other one is a fraction of that


def chain_checkpoint(random_checkpoint: Path, seed: int = 0) -> tuple[Path, list[int]]:
    """The chained copy of `random_checkpoint` (written once beside it) and its cycle."""
    out = random_checkpoint.with_name(random_checkpoint.name + "-chain")
    if not (out / CHAIN_FILE).is_file():
        _write(random_checkpoint, out, seed)
    return out, json.loads((out / CHAIN_FILE).read_text(encoding="utf-8"))


def _write(source: Path, out: Path, seed: int) -> None:
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    weights = load_file(str(source / SINGLE_FILE))
    for name, tensor in weights.items():
        if name.endswith(ZEROED):
            tensor.zero_()
    embed = weights["model.embed_tokens.weight"]
    norm = weights["model.embedding_norm.weight"].float()
    generator = torch.Generator().manual_seed(seed)
    first = min(FIRST_TOKEN, config["vocab_size"] // 2)  # a tiny test vocabulary keeps half
    cycle = first + torch.randperm(config["vocab_size"] - first, generator=generator)
    rows = embed[cycle].float()
    hidden = rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + config.get("norm_eps", 1e-5)) * norm
    head = torch.zeros_like(embed)
    head[cycle.roll(-1)] = (HEAD_SCALE * hidden / hidden.norm(dim=-1, keepdim=True)).to(embed.dtype)
    weights["lm_head.weight"] = head
    with tempfile.TemporaryDirectory(dir=source.parent) as staging:
        target = Path(staging) / "checkpoint"
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.safetensors*"))
        config["tie_word_embeddings"] = False
        (target / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        save_state_dict(weights, target)
        (target / CHAIN_FILE).write_text(json.dumps(cycle.tolist()), encoding="utf-8")
        shutil.rmtree(out, ignore_errors=True)
        target.rename(out)
