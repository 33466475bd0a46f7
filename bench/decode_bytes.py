"""Bytes of weights one 1-stream decode step reads, against the bytes of the active parameters.

    python -m bench.decode_bytes --shape lfm2-8b-a1b --quantize int8   the 8B-A1B-shape random checkpoint
    python -m bench.decode_bytes --model DIR                           any checkpoint
    python -m bench.decode_bytes --tiny --shape lfm2-8b-a1b            a smoke run in seconds

Decode at one stream is bound by the weight bytes a step streams, so an MoE decodes at the speed of
its active parameters only if a step reads no expert it did not route to. This runs one prompt
through the engine, then counts, during one decode step, the weights of every module that ran:
each module whose forward (or, for the head, fill_float) runs counts its own tensors once, an
embedding the rows it looked up. Weights read inside a fused kernel without their module being
called (the short convs' taps, attention's q/k norm weights: under 0.01% of a step) are not counted.

Active parameters: every weight outside the experts, ``num_experts_per_tok / num_experts`` of each
MoE layer's experts and one embedding row, in the bytes the loaded model stores each in.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from bench.checkpoint import DEFAULT_SHAPE, SHAPES, random_checkpoint, tiny_checkpoint
from engine import Engine, EngineConfig, SamplingParams
from model.arch.lfm2 import Embedding
from model.arch.lfm2_moe_config import Lfm2MoeConfig
from model.checkpoint.file_embedding import FileEmbedding
from model.checkpoint.hub import resolve_checkpoint
from model.quant import QUANTIZATIONS

MB = 1e6
EMBEDDINGS = (Embedding, FileEmbedding)


def own_bytes(module: nn.Module) -> int:
    """A module's own tensors (not its children's), or one row for an embedding."""
    if isinstance(module, FileEmbedding):
        return module.row_bytes
    if isinstance(module, Embedding):
        return module.weight[0].nbytes
    tensors = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
    return sum(tensor.nbytes for tensor in tensors)


def active_bytes(model: nn.Module) -> int:
    config = model.config
    share = config.num_experts_per_tok / config.num_experts if isinstance(config, Lfm2MoeConfig) else 1.0
    return round(
        sum(own_bytes(m) * (share if ".experts." in name else 1) for name, m in model.named_modules())
    )


class WeightReads:
    """The bytes each module reads while ``counting``, by module name (each counted once per step)."""

    def __init__(self, model: nn.Module) -> None:
        self.read: dict[str, int] = {}
        self.counting = False
        for name, module in model.named_modules():
            if isinstance(module, EMBEDDINGS):  # the rows looked up
                module.register_forward_hook(
                    lambda m, args, out, name=name: self.note(name, out[..., 0].numel() * own_bytes(m))
                )
            elif own_bytes(module):
                module.register_forward_hook(lambda m, args, out, name=name: self.note(name, own_bytes(m)))
                if hasattr(module, "fill_float"):  # the head's logits skip forward (model/native/linears.py)
                    module.fill_float = self._counted(module.fill_float, name, own_bytes(module))

    def note(self, name: str, nbytes: int) -> None:
        if self.counting:
            self.read[name] = nbytes

    def _counted(self, method: Callable, name: str, nbytes: int) -> Callable:
        def run(*args: object) -> object:
            self.note(name, nbytes)
            return method(*args)

        return run


@dataclass(frozen=True, slots=True)
class DecodeReads:
    label: str  # the model and its weights' format
    read: int  # bytes of weights one decode step read
    active: int  # bytes of the active parameters
    total: int  # bytes of every weight but the embedding
    step_ms: float
    experts_per_layer: float | None  # experts run per MoE layer; None without experts


def measure(checkpoint: Path, quantize: str, prompt_tokens: int) -> DecodeReads:
    """One request's prompt through the engine, then its next decode step, counted."""
    engine = Engine.from_pretrained(checkpoint, EngineConfig(quantize=quantize, max_num_seqs=1))
    model, config = engine.runner.model, engine.model_config
    reads = WeightReads(model)
    prompt = [(i * 7919) % (config.vocab_size - 64) + 32 for i in range(prompt_tokens)]
    engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    while not any(out.token_ids for out in engine.step()):  # the prompt, to its first token
        pass
    reads.counting = True
    began = time.perf_counter()
    engine.step()
    elapsed = time.perf_counter() - began
    reads.counting = False
    experts = None
    if isinstance(config, Lfm2MoeConfig):
        ran = [name for name in reads.read if ".experts." in name and name.endswith(".w2")]
        experts = len(ran) / (config.num_hidden_layers - config.num_dense_layers)
    return DecodeReads(
        label=f"{config.summary} · {engine.config.dtype} {quantize}",
        read=sum(reads.read.values()),
        active=active_bytes(model),
        total=sum(own_bytes(m) for m in model.modules() if not isinstance(m, EMBEDDINGS)),
        step_ms=elapsed * 1000,
        experts_per_layer=experts,
    )


def report(figures: DecodeReads) -> str:
    lines = [
        figures.label,
        f"one decode step, 1 stream: {figures.read / MB:,.1f} MB of weights read ({figures.step_ms:.1f} ms)",
        f"active parameters: {figures.active / MB:,.1f} MB (every weight but the embedding: "
        f"{figures.total / MB:,.1f} MB)",
        f"read / active: {figures.read / figures.active:.3f}",
    ]
    if figures.experts_per_layer is not None:
        lines.append(f"experts run per MoE layer: {figures.experts_per_layer:g}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.decode_bytes", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", metavar="PATH_OR_ID", help="checkpoint (default: --shape's random one)")
    source.add_argument("--tiny", action="store_true", help="a tiny checkpoint of --shape's architecture")
    parser.add_argument("--shape", choices=sorted(SHAPES), default=DEFAULT_SHAPE)
    parser.add_argument("--quantize", choices=QUANTIZATIONS, default="none")
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="lfm-decode-bytes-") as scratch:
        if args.tiny:
            checkpoint = tiny_checkpoint(Path(scratch), args.shape)
        else:
            checkpoint = resolve_checkpoint(args.model) if args.model else random_checkpoint(args.shape)
        print(report(measure(checkpoint, args.quantize, args.prompt_tokens)))


if __name__ == "__main__":
    main()
