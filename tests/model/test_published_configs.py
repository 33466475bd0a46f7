"""The Hub's config.json files, as published (tests/model/fixtures/configs, reconstructed offline: see
each file's _comment), read by our config classes as transformers' AutoConfig reads them: a field the
Hub has and we misread fails here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from model.arch.lfm2_config import Lfm2Config
from model.arch.lfm2_moe_config import Lfm2MoeConfig
from model.arch.lfm3_config import Lfm3Config
from model.arch.registry import load_config

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
PUBLISHED = sorted(path.name for path in FIXTURES.glob("*.json"))
SHARED = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "layer_types", "max_position_embeddings", "norm_eps", "conv_L_cache", "conv_bias",
    "tie_word_embeddings", "pad_token_id", "bos_token_id",
)  # fmt: skip
OWN = {
    Lfm2Config: ("block_auto_adjust_ff_dim", "block_multiple_of", "block_ffn_dim_multiplier"),
    Lfm2MoeConfig: (
        "moe_intermediate_size", "num_experts", "num_experts_per_tok", "num_dense_layers", "norm_topk_prob",
        "use_expert_bias", "routed_scaling_factor",
    ),
    Lfm3Config: ("head_dim", "sliding_window", "use_sandwich_norm", "use_attention_gate", "attention_bias"),
}  # fmt: skip


@pytest.fixture(params=PUBLISHED)
def published(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    shutil.copy(FIXTURES / request.param, tmp_path / "config.json")
    return tmp_path


def test_we_read_every_published_config_as_transformers_does(published: Path):
    transformers = pytest.importorskip("transformers")
    ours = load_config(published)
    theirs = transformers.AutoConfig.from_pretrained(published)
    for name in (*SHARED, *OWN[type(ours)]):
        assert getattr(ours, name) == getattr(theirs, name), name
    eos = theirs.eos_token_id
    assert ours.eos_token_id == (eos if isinstance(eos, list) else [eos])
    assert ours.head_dim == getattr(theirs, "head_dim", theirs.hidden_size // theirs.num_attention_heads)
    if isinstance(ours, Lfm3Config):
        rope = {kind: entry.to_dict() for kind, entry in ours.rope_parameters.items()}
        assert rope == theirs.rope_parameters
    else:
        assert ours.rope_theta == theirs.rope_parameters["rope_theta"]


def test_the_published_shapes_are_the_models_sizes(published: Path):
    """What the fields mean, as the model cards give it: LFM2-1.2B's FFN width is block_ff_dim's
    12288 auto-adjusted to 8192 (its stale intermediate_size says 8192 before adjusting)."""
    config = load_config(published)
    raw = json.loads((published / "config.json").read_text())
    if "block_ff_dim" in raw:
        assert (config.intermediate_size, config.ffn_dim) == (12288, 8192)
    if isinstance(config, Lfm3Config):
        assert (config.norm_eps, config.attention_window) == (1e-6, 256)
    if isinstance(config, Lfm2MoeConfig):
        assert (config.num_experts, config.num_experts_per_tok, config.ffn_dim) == (32, 4, 7168)
