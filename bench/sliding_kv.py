"""KV memory of one long LFM3 conversation: the sliding-window layers' blocks stay bounded.

    python -m bench.sliding_kv                      LFM3-1.7B shape, a 16k-token conversation
    python -m bench.sliding_kv --tiny --tokens 2048 --threads 1   a smoke run in seconds

Runs the conversation through the engine (turns of a prompt then a reply, each turn resuming from
the prefix cache) and reports, at the end and at the peak over every step: the sliding-window
pool's blocks held by the request, what those bytes would be if those layers kept every position
(as the full-attention pool does), and the full-attention pool's bytes, for scale.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.checkpoint import random_checkpoint, tiny_checkpoint
from engine import Engine, EngineConfig, SamplingParams
from model.arch.cache import HybridCache
from model.arch.lfm3_config import Lfm3Config

MIB = 2**20


@dataclass(slots=True)
class KvFigures:
    tokens: int
    window: int
    block_size: int
    sliding_blocks_peak: int  # held by the conversation, at most, over every step
    sliding_bytes_peak: int
    sliding_bytes_unbounded: int  # every position of the sliding layers, as the full pool keeps them
    sliding_pool_bytes: int  # the whole sliding pool (held + cached for prefix hits)
    full_bytes: int  # full-attention KV + conv snapshots held at the end


def run_conversation(
    checkpoint: Path, tokens: int, turns: int, reply: int, block_size: int, seed: int
) -> KvFigures:
    """One conversation of ``tokens`` tokens in ``turns`` turns, each a user message then ``reply`` tokens."""
    engine = Engine.from_pretrained(
        checkpoint, EngineConfig(block_size=block_size, max_model_len=tokens + block_size, max_num_seqs=1)
    )
    config = engine.model_config
    if not isinstance(config, Lfm3Config) or config.attention_window is None:
        raise SystemExit(f"{checkpoint} has no sliding-window layers")
    rng = random.Random(seed)
    per_turn = tokens // turns
    conversation: list[int] = []
    peak = 0
    for _ in range(turns):
        conversation += [rng.randrange(0, config.vocab_size - 64) for _ in range(per_turn - reply)]
        engine.add_request(conversation, SamplingParams(temperature=0.0, max_tokens=reply, ignore_eos=True))
        while engine.has_unfinished():
            for out in engine.step():
                if out.finished:
                    conversation += out.token_ids
            peak = max(peak, engine.snapshot().sliding_blocks_used)
    dtype = engine.config.torch_dtype
    sliding_block = HybridCache.bytes_per_sliding_block(config, block_size, dtype)
    blocks_of_context = -(-len(conversation) // block_size)
    return KvFigures(
        tokens=len(conversation),
        window=config.sliding_window,
        block_size=block_size,
        sliding_blocks_peak=peak,
        sliding_bytes_peak=peak * sliding_block,
        sliding_bytes_unbounded=blocks_of_context * sliding_block,
        sliding_pool_bytes=engine.config.num_sliding_blocks * sliding_block,
        full_bytes=blocks_of_context * HybridCache.bytes_per_block(config, block_size, dtype),
    )


def report(figures: KvFigures) -> str:
    bound = -(-(figures.window - 1) // figures.block_size) + 1
    return "\n".join(
        [
            f"conversation: {figures.tokens} tokens; window {figures.window}, blocks of {figures.block_size}",
            f"sliding-window KV held, peak: {figures.sliding_blocks_peak} blocks (bound {bound}),"
            f" {figures.sliding_bytes_peak / MIB:.1f} MiB",
            f"sliding-window KV if every position were kept: {figures.sliding_bytes_unbounded / MIB:.1f} MiB",
            f"sliding-window pool (held + cached windows): {figures.sliding_pool_bytes / MIB:.1f} MiB",
            f"full-attention KV + conv snapshots held: {figures.full_bytes / MIB:.1f} MiB",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sliding_kv", description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--reply", type=int, default=128, help="tokens generated per turn")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument(
        "--tiny", action="store_true", help="a tiny LFM3 (window 12) instead of the 1.7B shape"
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not 0 < args.reply < args.tokens // args.turns:
        parser.error("--reply must be at least 1 and shorter than a turn (--tokens / --turns)")
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="lfm-sliding-kv-") as scratch:
        checkpoint = (
            tiny_checkpoint(Path(scratch), "lfm3-1.7b") if args.tiny else random_checkpoint("lfm3-1.7b")
        )
        figures = run_conversation(
            checkpoint, args.tokens, args.turns, args.reply, args.block_size, args.seed
        )
    print(report(figures))


if __name__ == "__main__":
    main()
