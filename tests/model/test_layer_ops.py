"""The fused elementwise kernels (cpu_layer_ops.cpp) against the PyTorch code they replace.

Each module of model/arch/layers.py runs once as it is (its PyTorch reference) and once as its
model/native/layers.py subclass, on the same bf16 inputs. Where both sides do the same fp32
operations in the same order, results must be bit for bit equal; the RMSNorm's mean of
squares is summed in another order, so a normalized value may differ by one bf16 ulp.
"""

from __future__ import annotations

import copy
from types import ModuleType

import pytest
import torch

from model.arch.cache import HybridCache
from model.arch.layers import Attention, RMSNorm, RotaryTable, ShortConv, SwiGLU
from model.arch.lfm2 import Lfm2ForCausalLM
from model.arch.lfm2_config import Lfm2Config
from model.arch.lfm3 import rotary_table
from model.arch.lfm3_config import RopeParameters
from model.batch import SequenceChunk, build_forward_batch
from model.checkpoint.loader import load_model
from model.native.accelerate import ROW_QUERY_LIMIT, undo_native_kernels, use_native_kernels
from model.native.layers import NATIVE_SUBCLASS, NativeAttention, use_native_layers

BF16_ULP = 2**-7  # relative spacing of bf16 values


def bf16(*shape: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(torch.bfloat16)


def with_kernels(module: torch.nn.Module, native: ModuleType) -> torch.nn.Module:
    return use_native_layers(copy.deepcopy(module), native)


def assert_within_an_ulp(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal but for a few elements, each at most one bf16 ulp off."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    diff = (actual.float() - expected.float()).abs()
    assert (diff <= BF16_ULP * expected.float().abs()).all()
    assert (diff == 0).float().mean() >= 0.98


def config(
    hidden: int = 40, heads: int = 4, kv_heads: int = 2, conv_bias: bool = False, taps: int = 3
) -> Lfm2Config:
    """A small config; hidden 40 is not a multiple of 16, so every loop's masked tail runs."""
    return Lfm2Config(
        conv_L_cache=taps,
        vocab_size=64,
        hidden_size=hidden,
        intermediate_size=72,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        layer_types=["conv", "full_attention"],
        conv_bias=conv_bias,
        block_auto_adjust_ff_dim=False,
    )


def randomized(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5 + (1.0 if p.dim() == 1 else 0.0))
    return module.to(torch.bfloat16).eval().requires_grad_(False)


BLOCK = 4
# prefill from scratch, a chunk continuing a prefix (with a conv snapshot mid-chunk), two
# decode tokens, one of them writing its state back into the row it read from
CHUNKS = [
    SequenceChunk(list(range(7)), 0, [1, 2], conv_src_row=0, conv_dst_row=1),
    SequenceChunk([3, 4, 5], 5, [3, 4], conv_src_row=2, conv_dst_row=3, snapshots=[(0, 4)]),
    SequenceChunk([9], 8, [5, 6, 7], conv_src_row=5, conv_dst_row=5),
    SequenceChunk([8], 2, [8], conv_src_row=6, conv_dst_row=7),
]


@pytest.mark.parametrize("width", [64, 40, 1024])
def test_rms_norm_adds_the_residual_in_place_and_normalizes(native, width):
    norm = randomized(RMSNorm(width, 1e-5), seed=1)
    hidden, residual = bf16(9, width, seed=2, scale=3.0), bf16(9, width, seed=3)
    torch_hidden, native_hidden = hidden.clone(), hidden.clone()
    expected = norm(torch_hidden, residual)
    actual = with_kernels(norm, native)(native_hidden, residual)
    assert torch.equal(native_hidden, torch_hidden)  # the residual add: one rounding, same on both sides
    assert not torch.equal(native_hidden, hidden)
    assert_within_an_ulp(actual, expected)
    assert_within_an_ulp(
        with_kernels(norm, native)(hidden.clone()), norm(hidden.clone())
    )  # without a residual


def test_swiglu_gate_matches_silu_times_up(native):
    ffn = randomized(SwiGLU(40, 72), seed=4)
    x = bf16(11, 40, seed=5, scale=2.0)
    assert_within_an_ulp(with_kernels(ffn, native)(x), ffn(x))


@pytest.mark.parametrize("taps", [3, 7])  # LFM2's and LFM3's
@pytest.mark.parametrize("conv_bias", [False, True])
def test_short_conv_matches_bit_for_bit_including_state_writes(native, conv_bias, taps):
    conv = randomized(ShortConv(config(conv_bias=conv_bias, taps=taps)), seed=6)
    batch = build_forward_batch(CHUNKS, BLOCK, taps)
    x = bf16(batch.num_tokens, 40, seed=7)
    state = bf16(8, taps - 1, 40, seed=8)
    torch_state, native_state = state.clone(), state.clone()
    expected = conv(x, batch, torch_state)
    actual = with_kernels(conv, native)(x, batch, native_state)
    assert torch.equal(actual, expected)
    assert torch.equal(native_state, torch_state)
    assert not torch.equal(native_state, state)


# (hidden, heads, kv_heads): head_dim 16 (RoPE halves of 8), 40 (a masked tail), 64 with 3 q per kv head,
# and LFM3's head_dim 128 with its full layers' proportional RoPE (only a quarter of the pairs turn)
PROPORTIONAL = RopeParameters("proportional", 1e6, partial_rotary_factor=0.5)


@pytest.mark.parametrize(
    ("hidden", "heads", "kv_heads", "rope"),
    [(64, 4, 2, None), (80, 2, 1, None), (384, 6, 2, None), (512, 4, 1, PROPORTIONAL)],
)
def test_attention_projection_writes_the_same_cache_and_queries(native, hidden, heads, kv_heads, rope):
    cfg = config(hidden=hidden, heads=heads, kv_heads=kv_heads)
    attention = randomized(Attention(cfg), seed=9)
    batch = build_forward_batch(CHUNKS, BLOCK, 3)
    table = RotaryTable(cfg.head_dim, cfg.rope_theta) if rope is None else rotary_table(cfg.head_dim, rope)
    rope = table.at(batch.positions)
    x = bf16(batch.num_tokens, hidden, seed=10)
    pool = (9 * BLOCK, cfg.num_key_value_heads, cfg.head_dim)
    caches = {side: (bf16(*pool, seed=11), bf16(*pool, seed=12)) for side in ("torch", "native")}
    q_torch = attention._project(x, batch, rope, *caches["torch"])
    q_native = with_kernels(attention, native)._project(x, batch, rope, *caches["native"])
    assert_within_an_ulp(q_native, q_torch)
    assert_within_an_ulp(caches["native"][0], caches["torch"][0])
    assert torch.equal(caches["native"][1], caches["torch"][1])  # v is copied as it is


def test_each_row_is_computed_alone(native):
    """Batch invariance: a token's result is the same bits whatever else is in the batch."""
    hidden, residual, weight = bf16(6, 1024, seed=13), bf16(6, 1024, seed=14), bf16(1024, seed=15)
    gate_up = bf16(6, 2 * 72, seed=16)
    together = native.add_rms_norm(hidden.clone(), residual, weight, 1e-5)
    gated = native.swiglu(gate_up)
    for row in range(6):
        alone = native.add_rms_norm(hidden[row : row + 1].clone(), residual[row : row + 1], weight, 1e-5)
        assert torch.equal(alone, together[row : row + 1])
        assert torch.equal(native.swiglu(gate_up[row : row + 1]), gated[row : row + 1])


def test_bad_indices_are_refused(native):
    conv = with_kernels(randomized(ShortConv(config()), seed=6), native)
    batch = build_forward_batch(CHUNKS, BLOCK, 3)
    x, state = bf16(batch.num_tokens, 40), bf16(8, 2, 40)
    batch.conv_write_rows = batch.conv_write_rows.clone()
    batch.conv_write_rows[0] = 8
    with pytest.raises(RuntimeError, match="outside the conv state"):
        conv(x, batch, state)
    attention = with_kernels(randomized(Attention(config(hidden=64)), seed=9), native)
    batch = build_forward_batch(CHUNKS, BLOCK, 3)
    rope = RotaryTable(16, 10000.0).at(batch.positions)
    small_pool = (bf16(4, 2, 16), bf16(4, 2, 16))  # slots 0-3; the batch writes up to slot 34
    with pytest.raises(RuntimeError, match="outside the pool"):
        attention._project(bf16(batch.num_tokens, 64), batch, rope, *small_pool)


def test_whole_model_greedy_tokens_match_the_pytorch_elementwise_path(native_models, tiny_ckpt_factory):
    """The same bf16 model with the fused loops on and off: same argmax at every position."""
    path = tiny_ckpt_factory("default", dtype=torch.bfloat16)
    fused = load_model(path, dtype="bfloat16")
    reference = load_model(path, dtype="bfloat16")
    undo_native_kernels(reference)  # the linears keep their kernels
    assert fused.model.layers[0].operator_norm.kernels is native_models
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(20, fused.config.vocab_size, (24,), generator=generator).tolist()
    logits = {}
    for name, model in (("native", fused), ("reference", reference)):
        cache = HybridCache(model.config, num_blocks=16, block_size=BLOCK, num_conv_rows=4, dtype=model.dtype)
        batch = build_forward_batch([SequenceChunk(ids, 0, list(range(1, 8)), 0, 1)], BLOCK, 3)
        batch.logits_index = torch.arange(batch.num_tokens)
        logits[name] = model(batch, cache)
    assert torch.equal(logits["native"].argmax(-1), logits["reference"].argmax(-1))
    scale = logits["reference"].abs().max()
    assert (logits["native"] - logits["reference"]).abs().max() <= 0.05 * scale


@pytest.mark.parametrize("paged_attention", [True, False])
def test_native_layers_swap_in_place_sharing_every_parameter(native, paged_attention):
    """use_native_kernels changes classes, never copies a weight, and swaps back the same way."""
    model = Lfm2ForCausalLM(config()).to(torch.bfloat16)
    before = dict(model.named_parameters())
    classes = {name: type(module) for name, module in model.named_modules()}
    use_native_kernels(model, native, paged_attention=paged_attention)
    assert model.row_query_limit == (ROW_QUERY_LIMIT if paged_attention else 1)
    after = dict(model.named_parameters())
    assert after.keys() == before.keys() and all(after[name] is before[name] for name in before)
    for name, module in model.named_modules():
        subclass = NATIVE_SUBCLASS.get(classes[name])
        if subclass is None or name.endswith(("q_layernorm", "k_layernorm")):
            # linears are the loader's business; q/k norms run inside attention_prep
            assert type(module) is classes[name], name
        elif subclass is NativeAttention and not paged_attention:
            assert type(module) is Attention and not hasattr(module, "kernels")
        else:
            assert type(module) is subclass and module.kernels is native, name
    undo_native_kernels(model)
    assert {name: type(module) for name, module in model.named_modules()} == classes
    assert not any(getattr(module, "kernels", None) is not None for module in model.modules())
    assert all(after[name] is param for name, param in model.named_parameters())
