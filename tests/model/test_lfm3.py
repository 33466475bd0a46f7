"""LFM3's config, checkpoint layout, tokenizer layout and RoPE tables against transformers' Lfm3 classes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from model.arch.lfm2_config import ATTENTION, SLIDING
from model.arch.lfm3 import rotary_table
from model.arch.lfm3_config import Lfm3Config
from model.arch.registry import architecture, config_from_dict, load_config
from model.checkpoint.loader import load_model
from model.checkpoint.weights import load_state_dict
from model.errors import CheckpointError
from model.text.tokenizer import LFM2_SPECIAL_TOKENS, Tokenizer
from model.tiny.lfm3 import TINY_LFM3_CONFIGS

PRESETS = sorted(TINY_LFM3_CONFIGS)


def test_an_empty_config_means_what_transformers_defaults_mean():
    """LFM3-1.7B's shape: every field transformers fills in, we fill in alike."""
    transformers = pytest.importorskip("transformers")
    ours = config_from_dict({"model_type": "lfm3"})
    theirs = transformers.Lfm3Config()
    assert isinstance(ours, Lfm3Config) and architecture("lfm3").label == "LFM3"
    for name in (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "layer_types", "sliding_window", "conv_L_cache", "norm_eps",
        "tie_word_embeddings", "pad_token_id", "bos_token_id", "use_sandwich_norm", "use_attention_gate",
        "max_position_embeddings", "conv_bias",
    ):  # fmt: skip
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.eos_token_id == [theirs.eos_token_id]
    assert {kind: rope.to_dict() for kind, rope in ours.rope_parameters.items()} == theirs.rope_parameters
    assert ours.ffn_dim == theirs.intermediate_size and ours.attention_window == 256


@pytest.mark.parametrize("preset", PRESETS)
def test_what_we_write_transformers_reads_and_we_read_back(tiny_ckpt_factory, preset):
    transformers = pytest.importorskip("transformers")
    path = tiny_ckpt_factory(preset)
    ours = load_config(path)
    theirs = transformers.AutoConfig.from_pretrained(path)
    assert Lfm3Config.from_dict(ours.to_dict()) == ours
    assert (ours.layer_types, ours.head_dim, ours.sliding_window) == (
        theirs.layer_types,
        theirs.head_dim,
        theirs.sliding_window,
    )
    assert (ours.use_attention_gate, ours.use_sandwich_norm) == (
        theirs.use_attention_gate,
        theirs.use_sandwich_norm,
    )


@pytest.mark.parametrize("preset", PRESETS)
def test_rope_tables_have_transformers_frequencies(tiny_ckpt_factory, preset):
    """Proportional RoPE: the first pairs turn (exponent over the whole head_dim), the rest stay put."""
    transformers = pytest.importorskip("transformers")
    path = tiny_ckpt_factory(preset)
    ours = load_config(path)
    from transformers.models.lfm3.modeling_lfm3 import Lfm3RotaryEmbedding

    theirs = Lfm3RotaryEmbedding(transformers.AutoConfig.from_pretrained(path))
    for kind in (ATTENTION, SLIDING):
        expected = getattr(theirs, f"{kind}_inv_freq")
        assert torch.equal(rotary_table(ours.head_dim, ours.rope_parameters[kind]).inv_freq, expected), kind
    full = ours.rope_parameters[ATTENTION]
    assert 0 < full.rotated_pairs(ours.head_dim) < ours.head_dim // 2


@pytest.mark.parametrize("preset", PRESETS)
def test_checkpoint_loads_in_both_with_the_same_tensors(tiny_ckpt_factory, preset):
    transformers = pytest.importorskip("transformers")
    path = tiny_ckpt_factory(preset)
    config = load_config(path)
    ours = load_state_dict(path, config, torch.float32)
    reference, info = transformers.Lfm3ForCausalLM.from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    reference_weights = reference.state_dict()  # the gate is g_proj in transformers' memory
    in_memory = {name.replace(".self_attn.gate_proj.", ".self_attn.g_proj."): t for name, t in ours.items()}
    assert all(torch.equal(reference_weights[name], tensor) for name, tensor in in_memory.items())
    assert any(name.endswith("gate_proj.weight") for name in ours) == config.use_attention_gate
    assert any("post_ffn_norm" in name for name in ours) == config.use_sandwich_norm


def test_rope_entries_fall_back_to_the_top_level_values_as_transformers_standardizes_them():
    transformers = pytest.importorskip("transformers")
    raw = {
        "model_type": "lfm3",
        "rope_theta": 5e5,
        "partial_rotary_factor": 0.25,
        "rope_parameters": {SLIDING: {"rope_type": "default"}, ATTENTION: {"rope_type": "proportional"}},
    }
    ours = config_from_dict(raw).rope_parameters
    theirs = transformers.Lfm3Config(**{k: v for k, v in raw.items() if k != "model_type"}).rope_parameters
    assert {kind: rope.to_dict() for kind, rope in ours.items()} == {
        kind: {k: v for k, v in entry.items() if kind == ATTENTION or k != "partial_rotary_factor"}
        for kind, entry in theirs.items()
    }


def test_tokenizer_keeps_lfm2s_specials_after_the_text_tokens_as_config_names_them(tiny_ckpt_factory):
    path = tiny_ckpt_factory("lfm3")
    config = load_config(path)
    tok = Tokenizer.from_pretrained(path, extra_stop_ids=config.eos_token_id)
    first = config.vocab_size - len(LFM2_SPECIAL_TOKENS)
    assert [tok.token_to_id(t) for t in LFM2_SPECIAL_TOKENS] == list(range(first, config.vocab_size))
    assert (config.pad_token_id, config.bos_token_id) == (first, tok.bos_token_id)
    assert tok.stop_token_ids == {tok.token_to_id("<|im_end|>")} == set(config.eos_token_id)
    assert tok.encode("hello", add_special_tokens=True)[0] == tok.bos_token_id
    assert tok.encode_chat([{"role": "user", "content": "hi"}])[0] == tok.bos_token_id


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}, "each attention layer type"),
        ({"rope_parameters": {SLIDING: {"rope_type": "yarn", "rope_theta": 1e4}}}, "rope type 'yarn'"),
        ({"rope_parameters": {SLIDING: {"rope_type": "default", "rope_theta": -1}}}, "rope rope_theta of"),
        ({"attention_bias": True}, "attention_bias true is not supported"),
        ({"sliding_window": None}, "need a sliding_window"),
        ({"sliding_window": 0}, "sliding_window must be"),
        ({"head_dim": 31}, "RoPE needs it even"),
        ({"layer_types": ["conv", "linear_attention"], "num_hidden_layers": 2}, "unknown layer types"),
        ({"use_attention_gate": "yes"}, "use_attention_gate must be true or false"),
    ],
)
def test_unsupported_or_broken_fields_are_one_clear_error(change, message):
    base = {"model_type": "lfm3", "num_hidden_layers": 5}
    with pytest.raises(CheckpointError, match=message) as caught:
        config_from_dict({**base, **change})
    assert "\n" not in str(caught.value) and str(caught.value).startswith("invalid LFM3 config")


def test_a_checkpoint_missing_a_sandwich_norm_is_refused_by_name(tiny_ckpt_factory, tmp_path: Path):
    path = Path(shutil.copytree(tiny_ckpt_factory("lfm3"), tmp_path / "ckpt"))
    raw = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**raw, "use_sandwich_norm": False}))
    with pytest.raises(CheckpointError, match=r"unexpected tensor model\.layers\.0\.post_ffn_norm\.weight"):
        load_model(path)
