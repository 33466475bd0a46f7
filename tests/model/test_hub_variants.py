"""Variants of the checkpoints transformers writes, beyond each family's usual shape: every config field
transformers' modeling code reads either changes our model as it changes transformers' (same logits
within 1e-4 in fp32), or is refused with a sentence naming it. Also a damaged shard index, and the
stop ids of a save_pretrained generation_config.json."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine import Engine, EngineConfig, SamplingParams
from model.arch.lfm2_config import ATTENTION, CONV, SLIDING
from model.arch.registry import load_config
from model.checkpoint.loader import load_model
from model.checkpoint.weights import INDEX_FILE
from model.errors import CheckpointError

transformers = pytest.importorskip("transformers")

# the reference harness needs transformers, hence after the skip above
from tests.model.test_hub_format import (  # noqa: E402
    FP32_TOL,
    HEAD,
    assert_same_answer,
    prompt,
    saved_by_transformers,
)

LFM2 = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
    "layer_types": [CONV, ATTENTION, CONV], "eos_token_id": 7, **HEAD,
}  # fmt: skip
MOE = {
    "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 3,
    "layer_types": [CONV, ATTENTION, CONV], "num_experts": 4, "num_experts_per_tok": 2, "num_dense_layers": 1,
    "eos_token_id": 7, **HEAD,
}  # fmt: skip
LFM3 = {
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4, "head_dim": 32, "sliding_window": 6,
    "layer_types": [CONV, SLIDING, ATTENTION, SLIDING], "pad_token_id": 0, "bos_token_id": 1,
    "eos_token_id": 7, **HEAD,
}  # fmt: skip
EMBEDDING = "model.embed_tokens.weight"
FAMILIES = {"lfm2": (LFM2, "Lfm2Config"), "lfm2_moe": (MOE, "Lfm2MoeConfig"), "lfm3": (LFM3, "Lfm3Config")}


def config_of(family: str, **fields):
    """transformers' config of ``family``'s tiny shape with ``fields`` changed."""
    base, name = FAMILIES[family]
    return getattr(transformers, name)(**{**base, **fields})


def edit_config(path: Path, **fields) -> None:
    """Set (None: drop) config.json keys, as a hand-edited or older checkpoint has them."""
    raw = json.loads((path / "config.json").read_text())
    for key, value in fields.items():
        raw.pop(key) if value is None else raw.__setitem__(key, value)
    (path / "config.json").write_text(json.dumps(raw))


def assert_same_logits(path: Path) -> None:
    """Our loader's last-position fp32 logits against transformers' own reading of the same files."""
    from tests.model.test_parity import SequenceChunk, blocks, new_cache, run

    reference = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    model = load_model(path)
    ids = prompt(23, 1)
    ours = run(model, new_cache(model), [SequenceChunk(ids, 0, blocks(0), 0, 1)])[0]
    with torch.no_grad():
        theirs = reference(torch.tensor([ids])).logits[0, -1].float()
    assert (ours - theirs).abs().max().item() <= FP32_TOL


PROPORTIONAL = {"rope_type": "proportional", "rope_theta": 20_000.0, "partial_rotary_factor": 0.75}
# (family, config fields) that change the math: each must change ours as it changes transformers'
VARIANTS = {
    "lfm2-tied": ("lfm2", {"tie_word_embeddings": True}),
    "lfm2-conv4-bias": ("lfm2", {"conv_L_cache": 4, "conv_bias": True}),
    "lfm2-ffn-rules": ("lfm2", {"block_ffn_dim_multiplier": 1.5, "block_multiple_of": 32}),
    "lfm2-rope-theta": ("lfm2", {"rope_parameters": {"rope_type": "default", "rope_theta": 500.0}}),
    "moe-untied-all-moe": ("lfm2_moe", {"tie_word_embeddings": False, "num_dense_layers": 0}),
    "moe-all-dense": ("lfm2_moe", {"num_dense_layers": 3}),
    "moe-plain-routing": ("lfm2_moe", {"norm_topk_prob": False, "use_expert_bias": False}),
    "moe-scaled-routing": ("lfm2_moe", {"routed_scaling_factor": 2.5, "num_experts_per_tok": 4}),
    "lfm3-no-sliding": ("lfm3", {"layer_types": [CONV, ATTENTION, CONV, ATTENTION], "sliding_window": None}),
    "lfm3-no-full": ("lfm3", {"layer_types": [CONV, SLIDING, CONV, SLIDING], "conv_bias": True}),
    "lfm3-default-layer-types": ("lfm3", {"layer_types": None, "num_hidden_layers": 6}),
    "lfm3-rope-per-type": (
        "lfm3",
        {"rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 500.0},
                             "full_attention": PROPORTIONAL}},
    ),
    "lfm3-gated-no-sandwich": ("lfm3", {"use_sandwich_norm": False, "norm_eps": 1e-2, "head_dim": 64}),
}  # fmt: skip


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_config_variant_answers_as_transformers(tmp_path: Path, variant: str):
    family, fields = VARIANTS[variant]
    saved_by_transformers(config_of(family, **fields), tmp_path)
    assert_same_logits(tmp_path)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_save_loads_as_float32(tmp_path: Path, family: str, dtype: torch.dtype):
    """save_pretrained of a bf16/fp16 model (config.json says which): upcast to fp32, the same model."""
    model = saved_by_transformers(config_of(family), tmp_path)
    model.to(dtype).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == str(dtype).removeprefix("torch.")
    assert_same_logits(tmp_path)


@pytest.mark.parametrize("family", ["lfm2", "lfm2_moe"])
def test_an_explicit_head_dim_is_honoured_as_transformers_does(tmp_path: Path, family: str):
    """transformers' Lfm2/Lfm2Moe attention reads config.head_dim when config.json has it."""
    reference = saved_by_transformers(config_of(family, head_dim=32), tmp_path)
    assert reference.model.layers[1].self_attn.q_proj.weight.shape == (4 * 32, 64)
    assert_same_answer(tmp_path, reference)


def test_a_tied_checkpoint_that_also_holds_lm_head_loads(tmp_path: Path):
    reference = saved_by_transformers(config_of("lfm3"), tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    tensors["lm_head.weight"] = reference.lm_head.weight.detach().clone()
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    assert_same_logits(tmp_path)


@pytest.mark.parametrize("family", ["lfm2", "lfm3"])
def test_a_tied_checkpoint_with_its_own_lm_head_uses_it_as_transformers_does(tmp_path: Path, family: str):
    """transformers ties the head only where lm_head.weight is absent or equal to the embedding: a
    different one (a fine-tune that trained both, config.json left tied) is the head it runs."""
    saved_by_transformers(config_of(family), tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    tensors["lm_head.weight"] = 0.3 * torch.randn_like(tensors[EMBEDDING])
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    assert_same_logits(tmp_path)


def test_a_tied_checkpoint_holding_only_lm_head_embeds_with_it(tmp_path: Path):
    """transformers ties whichever of the two the checkpoint holds."""
    saved_by_transformers(config_of("lfm2_moe"), tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    tensors["lm_head.weight"] = tensors.pop(EMBEDDING)
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    assert_same_logits(tmp_path)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_an_untied_checkpoint_without_lm_head_is_refused_by_name(tmp_path: Path, family: str):
    saved_by_transformers(config_of(family, tie_word_embeddings=False), tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    del tensors["lm_head.weight"]
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"missing tensor lm_head\.weight$"):
        load_model(tmp_path)


def test_the_published_lfm2_shape_loads_end_to_end(tmp_path: Path):
    """LFM2's older config.json: full_attn_idxs for layer_types, block_* names, tie_embedding."""
    saved_by_transformers(config_of("lfm2"), tmp_path)
    edit_config(
        tmp_path, layer_types=None, full_attn_idxs=[1], block_ff_dim=128, block_dim=64, num_heads=4,
        tie_embedding=True, tie_word_embeddings=None, block_norm_eps=1e-5, conv_dim=64,
    )  # fmt: skip
    theirs = transformers.AutoConfig.from_pretrained(tmp_path)
    assert load_config(tmp_path).layer_types == theirs.layer_types == [CONV, ATTENTION, CONV]
    assert_same_logits(tmp_path)


# ---------------------------------------------------------------------------------------------- RoPE
@pytest.mark.parametrize("family", ["lfm2", "lfm2_moe"])
@pytest.mark.parametrize("rope_type", ["linear", "dynamic", "yarn", "llama3"])
def test_a_scaled_rope_is_refused_by_name(tmp_path: Path, family: str, rope_type: str):
    """transformers applies these; lfm-chat runs default RoPE only, so it says so rather than differ."""
    saved_by_transformers(config_of(family), tmp_path)
    edit_config(tmp_path, rope_parameters={"rope_type": rope_type, "rope_theta": 1e4, "factor": 2.0})
    with pytest.raises(CheckpointError, match=f"rope type '{rope_type}'"):
        load_model(tmp_path)


def test_rope_scaling_wins_over_rope_parameters_as_in_transformers(tmp_path: Path):
    """An older key beside the new one: transformers' config takes ``rope_scaling`` first."""
    saved_by_transformers(config_of("lfm2"), tmp_path)
    edit_config(tmp_path, rope_scaling={"type": "linear", "factor": 2.0})
    assert transformers.AutoConfig.from_pretrained(tmp_path).rope_parameters["rope_type"] == "linear"
    with pytest.raises(CheckpointError, match="rope type 'linear'"):
        load_model(tmp_path)


def test_lfm3_rope_scaling_wins_over_rope_parameters_as_in_transformers(tmp_path: Path):
    saved_by_transformers(config_of("lfm3"), tmp_path)
    sliding = {"rope_type": "default", "rope_theta": 700.0}
    edit_config(tmp_path, rope_scaling={"sliding_attention": sliding, "full_attention": PROPORTIONAL})
    assert_same_logits(tmp_path)


def test_an_lfm3_rope_entry_without_theta_takes_transformers_default(tmp_path: Path):
    saved_by_transformers(config_of("lfm3"), tmp_path)
    edit_config(
        tmp_path,
        rope_parameters={"sliding_attention": {"rope_type": "default"}, "full_attention": PROPORTIONAL},
    )
    theirs = transformers.AutoConfig.from_pretrained(tmp_path).rope_parameters[SLIDING]["rope_theta"]
    assert load_config(tmp_path).rope_parameters[SLIDING].rope_theta == theirs == 1e6
    assert_same_logits(tmp_path)


# ------------------------------------------------------------------------------------- shard index
@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sharded")
    saved_by_transformers(config_of("lfm3"), path, max_shard_size="40KB")
    return path


def damaged(sharded: Path, tmp_path: Path, change) -> Path:
    """A copy of ``sharded`` whose index ``change(weight_map, directory)`` edited."""
    path = tmp_path / "ckpt"
    shutil.copytree(sharded, path)
    index = json.loads((path / INDEX_FILE).read_text())
    change(index["weight_map"], path)
    (path / INDEX_FILE).write_text(json.dumps(index))
    return path


@pytest.mark.parametrize("file", ["/etc/hostname", "../model.safetensors", "sub/x.safetensors", 5, None])
def test_an_index_naming_a_file_outside_the_checkpoint_is_refused(sharded: Path, tmp_path: Path, file):
    path = damaged(sharded, tmp_path, lambda weights, _: weights.update({EMBEDDING: file}))
    refusal = f"maps tensor {EMBEDDING} to {re.escape(json.dumps(file))}, not a file name"
    with pytest.raises(CheckpointError, match=refusal):
        load_model(path)


def test_an_index_that_is_not_a_map_is_refused(sharded: Path, tmp_path: Path):
    path = tmp_path / "ckpt"
    shutil.copytree(sharded, path)
    (path / INDEX_FILE).write_text(json.dumps({"weight_map": ["model-00001-of-00002.safetensors"]}))
    with pytest.raises(CheckpointError, match="weight_map must map tensor names to file names"):
        load_model(path)


def test_a_missing_shard_is_refused_by_name(sharded: Path, tmp_path: Path):
    def remove(weights, path):
        (path / weights[EMBEDDING]).unlink()

    path = damaged(sharded, tmp_path, remove)
    file = json.loads((path / INDEX_FILE).read_text())["weight_map"][EMBEDDING]
    with pytest.raises(CheckpointError, match=f"weight file .*{file} listed in the index is missing"):
        load_model(path)


def test_a_tensor_in_two_shards_is_refused_naming_both(sharded: Path, tmp_path: Path):
    def copy_embedding(weights, path):
        other = next(file for name, file in weights.items() if file != weights[EMBEDDING])
        tensors = load_file(str(path / other))
        tensors[EMBEDDING] = load_file(str(path / weights[EMBEDDING]))[EMBEDDING]
        save_file(tensors, str(path / other), metadata={"format": "pt"})

    path = damaged(sharded, tmp_path, copy_embedding)
    both = rf"holds tensor {EMBEDDING} twice \(in model-\d+-of-\d+\.safetensors and model-\d+"
    with pytest.raises(CheckpointError, match=both):
        load_model(path)


def test_an_index_mapping_a_tensor_to_the_wrong_shard_is_refused_by_name(sharded: Path, tmp_path: Path):
    def misplace(weights, _):
        weights[EMBEDDING] = next(file for file in weights.values() if file != weights[EMBEDDING])

    path = damaged(sharded, tmp_path, misplace)
    file = json.loads((path / INDEX_FILE).read_text())["weight_map"][EMBEDDING]
    with pytest.raises(CheckpointError, match=f"maps tensor {EMBEDDING} to {file}, which does not hold it"):
        load_model(path)


# ---------------------------------------------------------------------------------- stop tokens
def test_generation_config_stop_ids_are_honoured(tmp_path: Path):
    """A fine-tune's generation_config.json (as save_pretrained writes it) may list eos ids beyond
    config.json's: transformers' generate stops on them, so the engine must too."""
    reference = saved_by_transformers(config_of("lfm2"), tmp_path)
    ids = prompt(17, 3)
    greedy = reference.generate(
        torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), max_new_tokens=8,
        do_sample=False, eos_token_id=None, pad_token_id=0,
    )[0, len(ids) :].tolist()  # fmt: skip
    stop = greedy[3]
    generation = json.loads((tmp_path / "generation_config.json").read_text())
    generation["eos_token_id"] = [7, stop]
    (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    assert stop in load_config(tmp_path).eos_token_id
    engine = Engine.from_pretrained(
        tmp_path, EngineConfig(dtype="float32", num_kv_blocks=64, block_size=16), progress=lambda *_: None
    )
    answer = engine.generate([ids], SamplingParams(max_tokens=8, temperature=0.0))[0].token_ids
    assert answer == greedy[: greedy.index(stop) + 1]


@pytest.mark.parametrize("eos", ["7", [7, -1], {"a": 1}, [True]])
def test_a_bad_generation_config_eos_is_refused_by_name(tmp_path: Path, eos):
    saved_by_transformers(config_of("lfm2"), tmp_path)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    with pytest.raises(CheckpointError, match=r"generation_config\.json: eos_token_id must hold token ids"):
        load_config(tmp_path)
