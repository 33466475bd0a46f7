"""Tiny checkpoints: loadable by lfm-chat and by transformers, deterministic, vocab sizes that agree."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from model.arch.lfm2_config import ATTENTION, CONV, Lfm2Config
from model.arch.registry import config_from_dict, load_config
from model.checkpoint.weights import checkpoint_tensors, load_state_dict
from model.errors import CheckpointError
from model.text.tokenizer import LFM2_SPECIAL_TOKENS, Tokenizer
from model.tiny.lfm2 import TINY_CONFIGS, main, tiny_tokenizer_json, write_tiny_checkpoint
from tests.conftest import TINY_PRESETS

TinyCheckpointFactory = Callable[..., Path]


def _tensors(ckpt: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(ckpt / "model.safetensors"), framework="pt") as f:
        return {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 - safe_open has no __iter__


def test_presets_cover_the_architecture_variants() -> None:
    configs = [Lfm2Config(**c) for c in TINY_CONFIGS.values()]
    assert len(configs) >= 3
    assert {c.layer_types[0] for c in configs} == {CONV, ATTENTION}
    assert {c.tie_word_embeddings for c in configs} == {True, False}
    assert {c.conv_bias for c in configs} == {True, False}
    assert {c.num_attention_heads == c.num_key_value_heads for c in configs} == {True, False}
    assert len({c.hidden_size for c in configs}) == len(configs)


@pytest.mark.parametrize("preset", sorted(TINY_CONFIGS))
def test_preset_loads_in_lfm_chat_and_transformers(
    tiny_ckpt_factory: TinyCheckpointFactory, preset: str
) -> None:
    transformers = pytest.importorskip("transformers")
    ckpt = tiny_ckpt_factory(preset)
    config = load_config(ckpt)
    ours = load_state_dict(ckpt, config, torch.float32)
    reference, info = transformers.Lfm2ForCausalLM.from_pretrained(ckpt, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert reference.config.layer_types == config.layer_types
    reference_weights = reference.state_dict()
    for name, tensor in ours.items():
        assert torch.equal(reference_weights[name], tensor), name
    assert Tokenizer.from_pretrained(ckpt).vocab_size == config.vocab_size == reference.config.vocab_size


def test_tokenizer_layout_matches_lfm2(tiny_ckpt: Path) -> None:
    tok = Tokenizer.from_pretrained(tiny_ckpt, extra_stop_ids=load_config(tiny_ckpt).eos_token_id)
    assert [tok.token_to_id(t) for t in LFM2_SPECIAL_TOKENS] == list(range(len(LFM2_SPECIAL_TOKENS)))
    assert all(tok.is_special(i) for i in range(len(LFM2_SPECIAL_TOKENS)))
    assert tok.stop_token_ids == {tok.token_to_id("<|im_end|>")}
    assert tok.bos_token_id == tok.token_to_id("<|startoftext|>")


@pytest.mark.parametrize("vocab_size", [300, 1024])
def test_any_vocab_size_is_exact(tmp_path: Path, vocab_size: int) -> None:
    ckpt = write_tiny_checkpoint(tmp_path, vocab_size=vocab_size, hidden_size=16, num_hidden_layers=2)
    tok = Tokenizer.from_pretrained(ckpt)
    assert tok.vocab_size == load_config(ckpt).vocab_size == vocab_size
    assert tok.decode(tok.encode("round trip ✓ 🙂")) == "round trip ✓ 🙂"


def test_vocab_too_small_for_bytes_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least"):
        write_tiny_checkpoint(tmp_path, vocab_size=128)


def test_deterministic_per_seed(tmp_path: Path) -> None:
    small = {"hidden_size": 16, "num_hidden_layers": 2}
    a = _tensors(write_tiny_checkpoint(tmp_path / "a", seed=3, **small))
    b = _tensors(write_tiny_checkpoint(tmp_path / "b", seed=3, **small))
    c = _tensors(write_tiny_checkpoint(tmp_path / "c", seed=4, **small))
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert not torch.equal(a["model.embed_tokens.weight"], c["model.embed_tokens.weight"])
    # the in-process cache must not hide a non-deterministic training run
    assert tiny_tokenizer_json.__wrapped__(512) == tiny_tokenizer_json(512)


def test_dtype_is_written_and_declared(tmp_path: Path) -> None:
    ckpt = write_tiny_checkpoint(tmp_path, hidden_size=16, num_hidden_layers=2, dtype=torch.bfloat16)
    assert {t.dtype for t in _tensors(ckpt).values()} == {torch.bfloat16}
    assert json.loads((ckpt / "config.json").read_text())["dtype"] == "bfloat16"


def test_cli_writes_a_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main([str(tmp_path / "demo"), "--preset", "lfm2_like", "--seed", "1"])
    config = load_config(tmp_path / "demo")
    assert config.layer_types == TINY_CONFIGS["lfm2_like"]["layer_types"]
    assert str(tmp_path / "demo") in capsys.readouterr().out


def _header_shapes(ckpt: Path) -> dict[str, tuple[int, ...]]:
    return {name: location.shape for name, location in checkpoint_tensors(ckpt).items()}


def _keys_the_loader_reads(raw: dict) -> set[str]:
    """The config.json keys whose removal changes what the loader makes of ``raw``."""
    parsed = config_from_dict(raw)
    return {key for key in raw if key != "model_type" and _parsed_without(raw, key) != parsed}


def _parsed_without(raw: dict, key: str) -> object:
    try:
        return config_from_dict({k: v for k, v in raw.items() if k != key})
    except CheckpointError:
        return None


def _ids(value: object) -> object:
    return value if isinstance(value, list) else [value]  # eos_token_id: an id or a list of them


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("preset", sorted(TINY_PRESETS))
def test_our_writer_and_save_pretrained_write_the_same_checkpoint(
    tmp_path: Path, preset: str, dtype: torch.dtype
) -> None:
    """lfm-chat's writer (the one --demo and machines without transformers use) and transformers'
    save_pretrained, given the same weights: the same tensor names and shapes, the same values of every
    config key the loader reads, and the same model when loaded."""
    pytest.importorskip("transformers")
    from tests.transformers_writer import resave_with_transformers

    write, fields = TINY_PRESETS[preset]
    ours = write(tmp_path / "ours", **{**fields, "dtype": dtype})
    theirs = resave_with_transformers(ours, tmp_path / "theirs")
    assert _header_shapes(ours) == _header_shapes(theirs)
    raw_ours, raw_theirs = (json.loads((p / "config.json").read_text()) for p in (ours, theirs))
    for key in _keys_the_loader_reads(raw_ours) | _keys_the_loader_reads(raw_theirs):
        if key == "eos_token_id":
            assert _ids(raw_ours.get(key)) == _ids(raw_theirs.get(key))
        else:
            assert raw_ours.get(key) == raw_theirs.get(key), key
    assert load_config(ours) == load_config(theirs)
