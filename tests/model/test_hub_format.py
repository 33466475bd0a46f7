"""Checkpoints as the Hub holds them: written by transformers' own ``save_pretrained`` from a model it
made itself (no file of lfm-chat's writer involved), for every family, gated and ungated LFM3, single
file and sharded. Each loads through lfm-chat's loader and engine and answers as transformers does:
fp32 logits within 1e-4 and the same greedy tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine import Engine, EngineConfig, SamplingParams
from model.arch.lfm2_config import ATTENTION, CONV, SLIDING
from model.checkpoint.loader import load_model
from model.checkpoint.weights import INDEX_FILE, SINGLE_FILE
from model.errors import CheckpointError
from model.text.tokenizer import LFM2_SPECIAL_TOKENS
from model.tiny.lfm2 import write_tiny_tokenizer

transformers = pytest.importorskip("transformers")

FP32_TOL = 1e-4
VOCAB = 320
HEAD = {
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": VOCAB,
    "max_position_embeddings": 512,
}
# transformers' own config classes, filled in as a user's fine-tune would be
FAMILIES = {
    "lfm2": lambda: transformers.Lfm2Config(
        hidden_size=64, intermediate_size=128, num_hidden_layers=3, layer_types=[CONV, ATTENTION, CONV],
        tie_word_embeddings=False, conv_bias=True, eos_token_id=7, **HEAD,
    ),
    "lfm2_moe": lambda: transformers.Lfm2MoeConfig(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        layer_types=[CONV, ATTENTION, CONV], num_experts=4, num_experts_per_tok=2, num_dense_layers=1,
        eos_token_id=7, **HEAD,
    ),
    "lfm3": lambda: transformers.Lfm3Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=4, head_dim=32, sliding_window=6,
        layer_types=[CONV, SLIDING, ATTENTION, SLIDING], pad_token_id=0, bos_token_id=1, eos_token_id=7,
        **HEAD,
    ),
    "lfm3_ungated": lambda: transformers.Lfm3Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=4, head_dim=16, sliding_window=5,
        layer_types=[SLIDING, CONV, ATTENTION, CONV], use_attention_gate=False, use_sandwich_norm=False,
        tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=7, **HEAD,
    ),
}  # fmt: skip


def saved_by_transformers(config, out: Path, **save_options) -> transformers.PreTrainedModel:
    """transformers' model of ``config`` with peaked random weights (no greedy ties), written by its
    save_pretrained, with a tiny tokenizer beside it; returns the model."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" not in name:
                parameter.normal_(0.0, 0.3)
    model.save_pretrained(out, **save_options)
    write_tiny_tokenizer(out, VOCAB, specials_last=False, model_max_length=512)
    return model


@torch.no_grad()
def reference_logits(model: transformers.PreTrainedModel, ids: list[int]) -> torch.Tensor:
    return model(torch.tensor([ids])).logits[0, -1].float()


def prompt(length: int, seed: int) -> list[int]:
    first = len(LFM2_SPECIAL_TOKENS)
    return torch.randint(first, VOCAB, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def reference_greedy(model: transformers.PreTrainedModel, ids: list[int], n: int) -> list[int]:
    input_ids = torch.tensor([ids])
    out = model.generate(
        input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=n, do_sample=False,
        eos_token_id=None, pad_token_id=0,
    )  # fmt: skip
    return out[0, len(ids) :].tolist()


def assert_same_answer(path: Path, reference: transformers.PreTrainedModel) -> None:
    """Our loader's logits and our engine's greedy tokens, against transformers'."""
    model = load_model(path)
    from tests.model.test_parity import SequenceChunk, blocks, new_cache, run

    for seed in (1, 2):
        ids = prompt(23, seed)
        ours = run(model, new_cache(model), [SequenceChunk(ids, 0, blocks(0), 0, 1)])[0]
        assert (ours - reference_logits(reference, ids)).abs().max().item() <= FP32_TOL
    engine = Engine.from_pretrained(
        path, EngineConfig(dtype="float32", num_kv_blocks=64, block_size=16), progress=lambda *_: None
    )
    prompts = [prompt(17, 3), prompt(9, 4)]
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    answers = [output.token_ids for output in engine.generate(prompts, params)]
    assert answers == [reference_greedy(reference, ids, 12) for ids in prompts]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_save_pretrained_checkpoint_loads_and_answers_as_transformers(tmp_path: Path, family: str):
    reference = saved_by_transformers(FAMILIES[family](), tmp_path)
    assert_same_answer(tmp_path, reference)


@pytest.mark.parametrize("family", ["lfm3", "lfm2_moe"])
def test_a_sharded_save_pretrained_checkpoint_loads(tmp_path: Path, family: str):
    reference = saved_by_transformers(FAMILIES[family](), tmp_path, max_shard_size="40KB")
    index = json.loads((tmp_path / INDEX_FILE).read_text())
    assert len(set(index["weight_map"].values())) > 2
    assert_same_answer(tmp_path, reference)


@pytest.mark.parametrize("family", ["lfm3", "lfm2_moe"])
def test_transformers_in_memory_names_load_too(tmp_path: Path, family: str):
    """A state_dict saved as it is in transformers' memory (LFM3's g_proj, LFM2-MoE's stacked
    gate_up_proj/down_proj), as other tools write it: transformers loads it, so do we."""
    reference = saved_by_transformers(FAMILIES[family](), tmp_path)
    in_memory = {
        name: t.contiguous() for name, t in reference.state_dict().items() if name != "lm_head.weight"
    }
    assert any("g_proj" in name or "gate_up_proj" in name for name in in_memory)
    save_file(in_memory, str(tmp_path / SINGLE_FILE), metadata={"format": "pt"})
    assert_same_answer(tmp_path, reference)


def _rewrite(path: Path, change) -> None:
    tensors = load_file(str(path / SINGLE_FILE))
    change(tensors)
    save_file(tensors, str(path / SINGLE_FILE), metadata={"format": "pt"})


def test_a_stacked_expert_tensor_of_the_wrong_shape_is_refused_by_name(tmp_path: Path):
    reference = saved_by_transformers(FAMILIES["lfm2_moe"](), tmp_path)
    stacked = "model.layers.2.feed_forward.experts.gate_up_proj"
    save_file(
        {stacked: reference.state_dict()[stacked][:3].contiguous()}, str(tmp_path / "extra.safetensors")
    )
    (tmp_path / INDEX_FILE).write_text(
        json.dumps(
            {
                "weight_map": {
                    stacked: "extra.safetensors",
                    **dict.fromkeys(load_file(str(tmp_path / SINGLE_FILE)), SINGLE_FILE),
                }
            }
        )
    )
    with pytest.raises(
        CheckpointError, match=rf"tensor {stacked} has shape \(3, 64, 64\), expected \(4, 64, 64\)"
    ):
        load_model(tmp_path)


def test_a_tensor_under_both_its_names_is_refused_by_name(tmp_path: Path):
    saved_by_transformers(FAMILIES["lfm3"](), tmp_path)
    gate = "model.layers.1.self_attn.gate_proj.weight"
    in_memory = gate.replace("gate_proj", "g_proj")
    _rewrite(tmp_path, lambda tensors: tensors.update({in_memory: tensors[gate].clone()}))
    with pytest.raises(CheckpointError, match=f"holds tensor {gate} twice"):
        load_model(tmp_path)


def test_a_missing_gate_is_refused_by_its_on_disk_name(tmp_path: Path):
    saved_by_transformers(FAMILIES["lfm3"](), tmp_path)
    _rewrite(tmp_path, lambda tensors: tensors.pop("model.layers.2.self_attn.gate_proj.weight"))
    with pytest.raises(
        CheckpointError, match=r"missing tensor model\.layers\.2\.self_attn\.gate_proj\.weight$"
    ):
        load_model(tmp_path)
