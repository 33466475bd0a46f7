"""Engine test fixtures: engines on tiny random checkpoints, prompts, and the transformers reference."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import transformers

from engine import Engine, EngineConfig, RequestMetrics, SamplingParams
from engine.core.request import Request
from model.text.tokenizer import LFM2_SPECIAL_TOKENS

FIRST_PLAIN_ID = len(LFM2_SPECIAL_TOKENS)  # random prompts avoid special ids (stop tokens among them)


@pytest.fixture(scope="session")
def make_engine() -> Callable[..., Engine]:
    """`make_engine(path, **EngineConfig fields)`: a float32 CPU engine with a small cache."""

    def make(path: Path, **overrides) -> Engine:
        fields = {"dtype": "float32", "num_kv_blocks": 256, "block_size": 16, **overrides}
        return Engine.from_pretrained(path, EngineConfig(**fields), progress=lambda stage, fraction: None)

    return make


def random_prompt(length: int, seed: int, vocab: int = 512) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(FIRST_PLAIN_ID, vocab, (length,), generator=generator).tolist()


@pytest.fixture(scope="session")
def prompts() -> Callable[..., list[list[int]]]:
    """`prompts(lengths, seed=0)`: one random prompt of plain (non-special) ids per length."""

    def make(lengths: list[int], seed: int = 0) -> list[list[int]]:
        return [random_prompt(n, seed * 1000 + i) for i, n in enumerate(lengths)]

    return make


@pytest.fixture(scope="session")
def reference_greedy() -> Callable[[Path, list[list[int]], int], list[list[int]]]:
    """`reference_greedy(path, prompts, n)`: transformers' greedy `generate` on each prompt alone
    (Lfm2ForCausalLM or Lfm3ForCausalLM, as the checkpoint says)."""
    models: dict[Path, transformers.PreTrainedModel] = {}

    def run(path: Path, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        if path not in models:
            models[path] = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
            models[path].generation_config.eos_token_id = None  # like ignore_eos: always max_new_tokens
        ref = models[path]
        outputs = []
        for prompt in prompts:
            # the explicit mask: without one, generate masks out every id equal to pad_token_id, which
            # in LFM3's vocabulary (specials last) is an ordinary token a reply may contain
            input_ids = torch.tensor([prompt])
            ids = ref.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=0,
            )[0, len(prompt) :].tolist()
            assert len(ids) == max_new_tokens, "the reference stopped early"
            outputs.append(ids)
        return outputs

    return run


@pytest.fixture(scope="session")
def new_request() -> Callable[..., Request]:
    """`new_request(tokens, max_tokens=16, stop_ids=(), **SamplingParams fields)`: a bare Request.

    For scheduler and block-manager tests, which need no model; arrival order = creation order.
    """
    arrivals = itertools.count()

    def make(tokens: list[int], max_tokens: int = 16, stop_ids=(), **params) -> Request:
        arrival = next(arrivals)
        return Request(
            request_id=f"r{arrival}",
            prompt_token_ids=list(tokens),
            params=SamplingParams(max_tokens=max_tokens, **params),
            arrival=arrival,
            max_tokens=max_tokens,
            stop_token_ids=frozenset(stop_ids),
            generator=torch.Generator(),
            metrics=RequestMetrics(arrival_time=0.0, prompt_tokens=len(tokens)),
        )

    return make
