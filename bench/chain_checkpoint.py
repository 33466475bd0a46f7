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

from model.arch.lfm2_config import ATTENTION, CONV
from model.checkpoint.weights import SINGLE_FILE, save_state_dict
from model.tiny.lfm2 import write_tiny_checkpoint

CHAIN_FILE = "chain.json"  # the cycle's tokens, in order
ZEROED = ("out_proj.weight", "out_proj.bias", "feed_forward.w2.weight")
FIRST_TOKEN = 1000  # below: the tokenizer's special and byte tokens stay out of the cycle
HEAD_SCALE = 10.0  # the chosen logit is ~HEAD_SCALE * |h|; every other one is a fraction of that
# a draft model's shape: a 256-wide LFM2 with the target's vocabulary (~70 MB of bf16 weights, most
# of them the embedding and the head), as a small model of a family drafts for a large one
DRAFT_SHAPE = {
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "layer_types": [CONV, ATTENTION, CONV, ATTENTION],
    "weight_std": 0.02,
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def chain_checkpoint(random_checkpoint: Path, seed: int = 0) -> tuple[Path, list[int]]:
    """The chained copy of `random_checkpoint` (written once beside it) and its cycle."""
    out = random_checkpoint.with_name(random_checkpoint.name + "-chain")
    if not (out / CHAIN_FILE).is_file():
        config = json.loads((random_checkpoint / "config.json").read_text(encoding="utf-8"))
        first = min(FIRST_TOKEN, config["vocab_size"] // 2)  # a tiny test vocabulary keeps half
        generator = torch.Generator().manual_seed(seed)
        cycle = first + torch.randperm(config["vocab_size"] - first, generator=generator)
        _write(random_checkpoint, out, cycle, cycle.roll(-1))
    return out, json.loads((out / CHAIN_FILE).read_text(encoding="utf-8"))


def draft_chain_checkpoint(target: Path, cycle: list[int], agreement: float, seed: int = 0) -> Path:
    """A small model (LFM2 at DRAFT_SHAPE) with `target`'s tokenizer whose argmax follows `cycle`
    after a share `agreement` of its tokens; after the others it names another token of the cycle
    (their successors permuted among themselves), so its drafts there are rejected. Written once."""
    out = target.with_name(f"{target.name}-draft-{agreement:g}")
    if (out / CHAIN_FILE).is_file():
        return out
    config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(dir=target.parent) as staging:
        small = write_tiny_checkpoint(
            Path(staging) / "random", **DRAFT_SHAPE, vocab_size=config["vocab_size"], dtype=torch.bfloat16
        )
        for name in TOKENIZER_FILES:
            shutil.copy2(target / name, small / name)
        order = torch.tensor(cycle)
        successors = order.roll(-1)
        generator = torch.Generator().manual_seed(seed)
        wrong = torch.nonzero(torch.rand(len(cycle), generator=generator) >= agreement).flatten()
        successors[wrong] = successors[wrong.roll(1)]  # a cyclic shift: no wrong token keeps its own
        _write(small, out, order, successors)
    return out


def _write(source: Path, out: Path, tokens: torch.Tensor, successors: torch.Tensor) -> None:
    """A copy of `source` whose argmax after ``tokens[i]`` is ``successors[i]`` (a permutation)."""
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    weights = load_file(str(source / SINGLE_FILE))
    for name, tensor in weights.items():
        if name.endswith(ZEROED):
            tensor.zero_()
    embed = weights["model.embed_tokens.weight"]
    norm = weights["model.embedding_norm.weight"].float()
    rows = embed[tokens].float()
    hidden = rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + config.get("norm_eps", 1e-5)) * norm
    head = torch.zeros_like(embed)
    head[successors] = (HEAD_SCALE * hidden / hidden.norm(dim=-1, keepdim=True)).to(embed.dtype)
    weights["lm_head.weight"] = head
    with tempfile.TemporaryDirectory(dir=source.parent) as staging:
        target = Path(staging) / "checkpoint"
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.safetensors*"))
        config["tie_word_embeddings"] = False
        (target / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        save_state_dict(weights, target)
        (target / CHAIN_FILE).write_text(json.dumps(tokens.tolist()), encoding="utf-8")
        shutil.rmtree(out, ignore_errors=True)
        target.rename(out)
