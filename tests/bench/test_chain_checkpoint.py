"""The chained checkpoint continues its cycle: the speculation bench's prompts set the acceptance."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chain_checkpoint import chain_checkpoint
from bench.speculation import REPEAT, prompts
from engine import Engine, EngineConfig, SamplingParams
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
