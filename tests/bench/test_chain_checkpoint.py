"""The chained checkpoint continues its cycle: the speculation bench's prompts set the acceptance,
and a draft chain's share of right successors sets a draft model's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.chain_checkpoint import chain_checkpoint, draft_chain_checkpoint
from bench.speculation import REPEAT, prompts
from engine import Engine, EngineConfig, SamplingParams
from model.arch.cache import HybridCache
from model.batch import SequenceChunk, build_forward_batch
from model.checkpoint.loader import load_model
from model.text.tokenizer import Tokenizer
from model.tiny.lfm2 import write_tiny_checkpoint


@pytest.mark.parametrize("quantize", ["none", "int4"])
def test_greedy_decoding_continues_the_cycle(tmp_path: Path, quantize: str) -> None:
    source = write_tiny_checkpoint(tmp_path / "random", vocab_size=2048)
    checkpoint, cycle = chain_checkpoint(source)
    [prompt] = prompts(cycle, 0.0, streams=1, seed=0)
    engine = Engine(
        load_model(checkpoint, "float32", quantize=quantize),
        Tokenizer.from_pretrained(checkpoint),
        EngineConfig(dtype="float32", quantize=quantize),
    )
    engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True))
    tokens: list[int] = []
    while engine.has_unfinished():
        for output in engine.step():
            tokens += output.new_token_ids
    start = cycle.index(prompt[0])
    assert tokens == cycle[start + REPEAT : start + REPEAT + 24]


def test_a_swapped_quote_differs_where_the_pattern_says() -> None:
    cycle = list(range(1000, 3000))
    [intact] = prompts(cycle, 0.0, streams=1, seed=0)
    [alternate] = prompts(cycle, None, streams=1, seed=0)
    quote = intact[: len(intact) - REPEAT]
    changed = [i for i, (a, b) in enumerate(zip(quote, alternate, strict=False)) if a != b]
    assert changed and all(i % 2 for i in changed)
    assert alternate[-REPEAT:] == intact[-REPEAT:]  # the repeat the reply continues is never swapped


@pytest.mark.parametrize("agreement", [1.0, 0.5, 0.0])
def test_a_draft_chain_names_the_next_token_after_its_share_of_the_cycle(tmp_path: Path, agreement) -> None:
    """Its argmax after each cycle token is the cycle's next one for ~`agreement` of them; the
    engine drafting from it keeps the target's tokens and accepts drafts accordingly."""
    target, cycle = chain_checkpoint(write_tiny_checkpoint(tmp_path / "random", vocab_size=2048))
    draft_path = draft_chain_checkpoint(target, cycle, agreement)
    draft = load_model(draft_path, "float32")
    tokenizer = Tokenizer.from_pretrained(target)
    logits = draft(*one_step_per_token(draft, cycle))
    right = (logits.argmax(-1) == torch.tensor(cycle).roll(-1)).float().mean().item()
    assert right == pytest.approx(agreement, abs=0.05)
    [prompt] = prompts(cycle, 0.0, streams=1, seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    model = load_model(target, "float32")
    plain = Engine(model, tokenizer, EngineConfig(dtype="float32", speculative="off")).generate(
        [prompt], params
    )
    engine = Engine(model, tokenizer, EngineConfig(dtype="float32"), load_model(draft_path, "float32"))
    assert engine.generate([prompt], params)[0].token_ids == plain[0].token_ids
    drafted, accepted = engine.metrics.spec_draft_tokens, engine.metrics.spec_accepted_tokens
    assert drafted > 0
    assert (accepted == drafted) if agreement == 1.0 else (accepted < drafted)


def one_step_per_token(model, tokens: list[int]) -> tuple:
    """A batch of one-token sequences (each its own first token) and a cache for it."""
    chunks = [SequenceChunk([t], 0, [i], HybridCache.ZERO_ROW, 1 + i) for i, t in enumerate(tokens)]
    batch = build_forward_batch(chunks, 1, model.config.conv_L_cache)
    cache = HybridCache(
        model.config, num_blocks=len(tokens), block_size=1, num_conv_rows=1 + len(tokens), dtype=model.dtype
    )
    return batch, cache
