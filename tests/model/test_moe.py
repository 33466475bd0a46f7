"""LFM2-MoE: config and checkpoint layout against transformers' Lfm2Moe classes, the router's native
kernels against its PyTorch code, and the sparse block's promises (only chosen experts run, a
token's output is its own whatever shares its experts). Logit parity: tests/model/test_parity.py;
the engine's guarantees: tests/engine (the "moe" presets)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from model.arch.lfm2_config import ATTENTION, CONV
from model.arch.lfm2_moe import Router, SparseMoe
from model.arch.lfm2_moe_config import Lfm2MoeConfig
from model.arch.registry import architecture, config_from_dict, load_config
from model.checkpoint.loader import load_model
from model.checkpoint.weights import load_state_dict
from model.errors import CheckpointError
from model.native.layers import NativeRouter
from model.quant.apply import QUANTIZED_LINEARS
from model.tiny.lfm2_moe import TINY_MOE_CONFIGS

PRESETS = sorted(TINY_MOE_CONFIGS)
ATTENTION_LAYERS = (2, 6, 10, 14, 18, 21)
# config.json of LiquidAI/LFM2-8B-A1B, as published
LFM2_8B_A1B = {
    "architectures": ["Lfm2MoeForCausalLM"],
    "bos_token_id": 1,
    "conv_L_cache": 3,
    "conv_bias": False,
    "dtype": "bfloat16",
    "eos_token_id": 7,
    "hidden_size": 2048,
    "intermediate_size": 7168,
    "layer_types": [ATTENTION if i in ATTENTION_LAYERS else CONV for i in range(24)],
    "max_position_embeddings": 128000,
    "model_type": "lfm2_moe",
    "moe_intermediate_size": 1792,
    "norm_eps": 1e-05,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_dense_layers": 2,
    "num_experts": 32,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_key_value_heads": 8,
    "pad_token_id": 0,
    "rope_theta": 1000000.0,
    "routed_scaling_factor": 1.0,
    "tie_embedding": True,
    "use_cache": True,
    "use_expert_bias": True,
    "vocab_size": 65536,
}


def test_the_8b_a1b_config_has_its_published_size():
    """8.3B parameters, 1.5B of them active per token (4 of 32 experts), the embedding counted once."""
    config = config_from_dict(LFM2_8B_A1B)
    assert isinstance(config, Lfm2MoeConfig) and architecture("lfm2_moe").label == "LFM2-MoE"
    assert config.summary == "LFM2-MoE · 4/32 experts per token"
    assert (config.head_dim, config.ffn_dim, config.eos_token_id) == (64, 7168, [7])
    shapes = config.expected_shapes()
    total = sum(torch.Size(shape).numel() for shape in shapes.values())
    experts = sum(torch.Size(shape).numel() for name, shape in shapes.items() if ".experts." in name)
    assert round(total / 1e9, 1) == 8.3
    assert round((total - experts * (1 - 4 / 32)) / 1e9, 1) == 1.6  # 1.56B: the card rounds to 1.5
    assert not any(".experts." in name for name in shapes if name.startswith("model.layers.1."))


def test_fields_mean_what_transformers_makes_of_them():
    transformers = pytest.importorskip("transformers")
    raw = {"model_type": "lfm2_moe", "layer_types": [CONV, ATTENTION] * 16}
    ours = config_from_dict(raw)
    theirs = transformers.Lfm2MoeConfig(layer_types=raw["layer_types"])
    for name in (
        "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "num_experts", "num_experts_per_tok",
        "num_dense_layers", "norm_topk_prob", "use_expert_bias", "routed_scaling_factor", "conv_L_cache",
        "norm_eps", "tie_word_embeddings", "pad_token_id", "bos_token_id", "max_position_embeddings",
    ):  # fmt: skip
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.rope_theta == theirs.rope_parameters["rope_theta"]


@pytest.mark.parametrize("preset", PRESETS)
def test_checkpoint_loads_in_both_with_the_same_tensors(tiny_ckpt_factory, preset):
    """Experts per expert (experts.E.w1/w2/w3), as the Hub's checkpoints and save_pretrained hold them."""
    transformers = pytest.importorskip("transformers")
    path = tiny_ckpt_factory(preset)
    config = load_config(path)
    assert Lfm2MoeConfig.from_dict(config.to_dict()) == config
    reference, info = transformers.Lfm2MoeForCausalLM.from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ours = load_state_dict(path, config, torch.float32)
    expected = reference.state_dict()
    for name, tensor in ours.items():
        layer, _, rest = name.partition(".feed_forward.experts.")
        if rest:  # transformers holds an MoE layer's experts in 3D: gate_up [E, 2I, h], down [E, h, I]
            expert, matrix = int(rest.split(".")[0]), rest.split(".")[1]
            gate_up, down = (
                expected[f"{layer}.feed_forward.experts.{n}"][expert] for n in ("gate_up_proj", "down_proj")
            )
            half = config.moe_intermediate_size
            theirs = {"w1": gate_up[:half], "w3": gate_up[half:], "w2": down}[matrix]
            assert torch.equal(theirs, tensor), name
        else:
            assert torch.equal(expected[name], tensor), name


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_experts_per_tok": 9}, r"num_experts_per_tok \(9\) exceeds num_experts \(8\)"),
        ({"num_experts": 0}, "num_experts must be an integer"),
        ({"num_experts_per_tok": 0}, "num_experts_per_tok must be an integer"),
        ({"num_dense_layers": 5}, r"num_dense_layers \(5\) exceeds num_hidden_layers \(4\)"),
        ({"routed_scaling_factor": 0}, "routed_scaling_factor must be a number"),
        ({"norm_topk_prob": "yes"}, "norm_topk_prob must be true or false"),
        ({"layer_types": None}, "no layer_types"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6}}, "rope type 'yarn'"),
    ],
)
def test_unsupported_or_broken_fields_are_one_clear_error(change, message):
    base = {"model_type": "lfm2_moe", "num_hidden_layers": 4, "layer_types": [CONV] * 4, "num_experts": 8}
    with pytest.raises(CheckpointError, match=message) as caught:
        config_from_dict({**base, **change})
    assert "\n" not in str(caught.value)


def test_a_checkpoint_without_its_expert_bias_is_refused_by_name(tiny_ckpt_factory, tmp_path: Path):
    path = Path(shutil.copytree(tiny_ckpt_factory("moe_plain"), tmp_path / "ckpt"))
    raw = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**raw, "use_expert_bias": True}))
    with pytest.raises(CheckpointError, match=r"missing tensor model\.layers\.0\.feed_forward\.expert_bias"):
        load_model(path)


@pytest.mark.parametrize("scheme", ["none", "int8"])
def test_expert_bias_stays_float32_in_a_bf16_model_as_in_transformers(tiny_ckpt_factory, scheme):
    """It decides between scores closer together than bf16's step; a cached quantized model keeps it too."""
    path = tiny_ckpt_factory("moe")
    name = "model.layers.1.feed_forward.expert_bias"
    stored = load_state_dict(path, load_config(path), torch.float32)[name]
    for _ in range(2):  # with int8, the second load reads the quantized-weights cache
        block = load_model(path, dtype="bfloat16", quantize=scheme).model.layers[1].feed_forward
        assert block.expert_bias.dtype == torch.float32 and torch.equal(block.expert_bias, stored)


def moe_block(path: Path, scheme: str = "none") -> SparseMoe:
    """The first MoE layer's feed-forward of the checkpoint, in bf16."""
    model = load_model(path, dtype="bfloat16", quantize=scheme)
    return next(m for m in model.modules() if isinstance(m, SparseMoe))


@pytest.mark.parametrize("preset", PRESETS)
def test_native_routing_is_the_pytorch_routing(native_models, tiny_ckpt_factory, preset):
    """Same experts in the same grouped order, weights within an fp32 rounding or two, the same sums."""
    block = moe_block(tiny_ckpt_factory(preset))
    assert isinstance(block.gate, NativeRouter)
    x = torch.randn(37, block.gate.weight.shape[1], generator=torch.Generator().manual_seed(0)).bfloat16()
    native = block.gate(x, block.expert_bias)
    reference = Router.forward(block.gate, x, block.expert_bias)
    assert native.counts == reference.counts and sum(native.counts) == 37 * block.gate.top_k
    assert torch.equal(native.positions, reference.positions) and torch.equal(native.tokens, reference.tokens)
    assert torch.allclose(native.weights, reference.weights, rtol=1e-6, atol=0)
    outputs = torch.randn(37 * block.gate.top_k, x.shape[1]).bfloat16()
    assert torch.equal(block.gate.combine(outputs, native), Router.combine(block.gate, outputs, native))


@pytest.mark.parametrize("scheme", ["none", *QUANTIZED_LINEARS])
def test_a_tokens_output_is_the_same_alone_and_in_any_batch(native_models, tiny_ckpt_factory, scheme):
    """Bit for bit, however many other tokens share its experts and in whatever order they come."""
    block = moe_block(tiny_ckpt_factory("moe"), scheme)
    x = torch.randn(24, block.gate.weight.shape[1], generator=torch.Generator().manual_seed(1)).bfloat16()
    alone = torch.cat([block(x[i : i + 1]) for i in range(len(x))])
    shuffled = torch.randperm(len(x), generator=torch.Generator().manual_seed(2))
    assert torch.equal(block(x), alone)
    assert torch.equal(block(x[shuffled]), alone[shuffled])
    assert torch.equal(block(x[:5]), alone[:5])


def test_only_the_chosen_experts_run(tiny_ckpt_factory):
    """A decode step's token reads its k experts' weights and no other expert's."""
    block = moe_block(tiny_ckpt_factory("moe"))
    ran: list[int] = []
    for index, expert in enumerate(block.experts):
        expert.register_forward_hook(lambda module, args, out, index=index: ran.append(index))
    x = torch.randn(1, block.gate.weight.shape[1]).bfloat16()
    routing = block.gate(x, block.expert_bias)
    block(x)
    chosen = [expert for expert, count in enumerate(routing.counts) if count]
    assert ran == chosen and len(chosen) == block.gate.top_k
