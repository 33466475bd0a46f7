"""The random bench checkpoints' tokenizer: it knows serve_compare's prompt words as LFM2's real one
does (one token each), the tests' tiny tokenizer stays as it was, and the cached directory's name
changes with what the tokenizer trains on, so no checkpoint with an older tokenizer is reused."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

from bench import checkpoint, serve_compare
from bench.checkpoint import PROMPT_VOCABULARY, SHAPES, RandomShape, checkpoint_name, tokenizer_text
from model.tiny.lfm2 import tiny_tokenizer_json

LFM2_VOCAB = 65536  # LFM2-350M's, the bench shape's: trained in ~0.3 s


def bench_tokenizer() -> Tokenizer:
    return Tokenizer.from_str(tiny_tokenizer_json(LFM2_VOCAB, False, tokenizer_text()))


def token_count(tokenizer: Tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def test_every_prompt_word_is_one_token_with_and_without_its_leading_space():
    tokenizer = bench_tokenizer()
    split = [form for word in PROMPT_VOCABULARY.split() for form in (word, f" {word}")]
    assert [form for form in split if token_count(tokenizer, form) != 1] == []


def test_a_100_word_serve_compare_prompt_is_about_a_token_a_word():
    """LFM2's real tokenizer: ~1.1 tokens a word; the tests' tiny one took ~4.4."""
    tokenizer = bench_tokenizer()
    prompts = [serve_compare.prompt(client, 0, 8) for client in range(8)]
    counts = [token_count(tokenizer, text) for text in prompts]
    assert max(counts) <= 1.3 * serve_compare.PROMPT_WORDS
    tiny = Tokenizer.from_str(tiny_tokenizer_json(LFM2_VOCAB))
    assert statistics.mean(token_count(tiny, text) for text in prompts) > 3 * max(counts)


def test_the_tests_tiny_tokenizer_does_not_change_without_the_extra_text():
    default = tiny_tokenizer_json(LFM2_VOCAB)
    assert default == tiny_tokenizer_json.__wrapped__(LFM2_VOCAB, False, "")
    assert default != tiny_tokenizer_json(LFM2_VOCAB, False, tokenizer_text())
    assert "Ġpocket" not in Tokenizer.from_str(default).get_vocab()  # streaming tests want words split


def test_the_cached_name_changes_with_the_tokenizer_training_text():
    name = checkpoint_name("lfm2-350m")
    assert name.startswith("lfm2-350m-shape-random-bf16-tok")
    assert name != "lfm2-350m-shape-random-bf16"  # the name of the checkpoints with the tiny tokenizer
    assert name == checkpoint_name("lfm2-350m", tokenizer_text())
    fewer_words = tokenizer_text(PROMPT_VOCABULARY.rsplit(" ", 1)[0])
    assert checkpoint_name("lfm2-350m", fewer_words) != name
    assert checkpoint_name("lfm2-350m", "") != name


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_shape_writes_the_bench_tokenizer_beside_the_same_weights(
    shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """random_checkpoint through each architecture's writer, at its tiny size: the tokenizer it
    writes is the bench one, the directory is named after it, and the weights are those of the same
    seed without the extra text; vLLM's copy is named after, and reads, the new checkpoint."""
    spec = SHAPES[shape]
    tiny = {**spec.tiny, "vocab_size": 2048}
    monkeypatch.setitem(SHAPES, shape, RandomShape(spec.write, tiny, "tiny", spec.tiny))
    made = checkpoint.random_checkpoint(shape, cache_dir=tmp_path, note=lambda _: None)
    assert made.name == checkpoint_name(shape)
    tokenizer = Tokenizer.from_file(str(made / "tokenizer.json"))
    assert token_count(tokenizer, " pocket") == 1
    plain = spec.write(tmp_path / "plain", **tiny, dtype=torch.bfloat16)
    assert token_count(Tokenizer.from_file(str(plain / "tokenizer.json")), " pocket") > 1
    ours, theirs = load_file(made / "model.safetensors"), load_file(plain / "model.safetensors")
    assert ours.keys() == theirs.keys()
    assert all(ours[name].equal(theirs[name]) for name in ours)
    vllm = serve_compare.vllm_checkpoint(made)
    assert vllm.name == f"{made.name}-vllm"
    assert (vllm / "tokenizer.json").resolve() == (made / "tokenizer.json").resolve()
