"""bf16 and int8 CPU linears: the native kernels (model/kernels) and the PyTorch fallbacks.

The native kernels sum in another order than oneDNN, so they are checked against fp32 products
(as exact as torch's own bf16 product), for bitwise row independence, and, for w8a8, for
equality with the torch path bit for bit.
"""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from model import kernels
from model.batch import SequenceChunk, build_forward_batch
from model.cache import HybridCache
from model.config import Lfm2Config
from model.file_embedding import FileEmbedding
from model.linears import NativeLinear, PackedLinear, logits_into
from model.loader import build_model, load_model
from model.quantize import Int8Linear, W8A8Linear
from model.weights import load_state_dict

NATIVE = kernels.load()
needs_native = pytest.mark.skipif(NATIVE is None, reason="native CPU kernels cannot run on this machine")
SHAPES = [(100, 64), (1000, 1024), (64, 4608), (3, 12)]  # (N, K): partial panels, long K, tiny


@pytest.fixture
def torch_kernels_only(monkeypatch):
    """Load models as on a machine where the native kernels cannot be built."""
    monkeypatch.setenv(kernels.DISABLE_ENV, "0")
    kernels.availability.cache_clear()
    yield
    kernels.availability.cache_clear()


def logits(model, ids: list[int]) -> torch.Tensor:
    """Every prompt position's logits, then one decode step's."""
    cache = HybridCache(model.config, num_blocks=8, block_size=16, num_conv_rows=4, dtype=model.dtype)
    prompt = build_forward_batch([SequenceChunk(ids, 0, list(range(8)), 0, 1)], 16, model.config.conv_L_cache)
    prompt.logits_index = torch.arange(len(ids))
    decode = build_forward_batch([SequenceChunk([ids[0]], len(ids), list(range(8)), 1, 1)], 16, 3)
    return torch.cat((model(prompt, cache), model(decode, cache)))


def bf16_linear(n: int, k: int, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(k, n, bias=False).to(torch.bfloat16)


@needs_native
@pytest.mark.parametrize(("n", "k"), SHAPES)
@pytest.mark.parametrize("m", [1, 3, 5, 17, 70])
def test_native_bf16_product_is_as_exact_as_torchs(n, k, m):
    linear = bf16_linear(n, k)
    x = torch.randn(m, k, dtype=torch.bfloat16)
    exact = x.float() @ linear.weight.float().t()
    torch_error = (F.linear(x, linear.weight).float() - exact).abs().max().item()
    native_error = (NativeLinear(linear, NATIVE)(x).float() - exact).abs().max().item()
    # both round an fp32 sum to bf16 once; the sums differ only in order
    assert native_error <= 1.5 * torch_error + 1e-6


@needs_native
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_native_w8a8_equals_the_torch_path_bit_for_bit(n, k):
    linear = bf16_linear(n, k, seed=1)
    native, reference = W8A8Linear(linear, NATIVE), W8A8Linear(linear)
    for m in (1, 4, 37):
        x = torch.randn(m, k, dtype=torch.bfloat16) * torch.logspace(-2, 2, m)[:, None].to(torch.bfloat16)
        assert torch.equal(native(x), reference(x))


@needs_native
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_native_int8_matches_the_torch_path(n, k):
    linear = bf16_linear(n, k, seed=2)
    x = torch.randn(9, k, dtype=torch.bfloat16)
    native, reference = Int8Linear(linear, NATIVE)(x).float(), Int8Linear(linear)(x).float()
    # same int8 weights and scales; only the order of the fp32 sums differs
    assert (native - reference).abs().max() <= 2**-7 * reference.abs().max()


@needs_native
@pytest.mark.parametrize("layer", [NativeLinear, Int8Linear, W8A8Linear])
def test_native_rows_do_not_depend_on_their_batch(layer):
    module = layer(bf16_linear(200, 256, seed=3), NATIVE)
    rows = torch.randn(11, 256, dtype=torch.bfloat16)
    together = module(rows)
    for i in range(len(rows)):
        assert torch.equal(module(rows[i : i + 1]), together[i : i + 1])


@pytest.mark.parametrize("layer", [NativeLinear, Int8Linear, W8A8Linear, PackedLinear, nn.Linear])
def test_logits_written_into_a_float_buffer_equal_the_heads_output(layer):
    """The engine's reused logits buffer holds exactly ``head(x).float()``, whatever the head."""
    linear = bf16_linear(200, 256, seed=4)
    if layer is nn.Linear:
        head = linear
    elif layer is PackedLinear:
        head = PackedLinear(linear)
    elif NATIVE is None:
        pytest.skip("native CPU kernels cannot run on this machine")
    else:
        head = layer(linear, NATIVE)
    x = torch.randn(5, 256, dtype=torch.bfloat16)
    buffer = torch.full((5, 200), float("nan"))
    written = logits_into(head, x, buffer)
    assert written.data_ptr() == buffer.data_ptr()
    assert torch.equal(written, head(x).float())


@needs_native
def test_native_layers_keep_only_the_packed_weight():
    linear = bf16_linear(100, 64)
    assert not hasattr(W8A8Linear(linear, NATIVE), "weight_int8")
    assert not hasattr(NativeLinear(linear, NATIVE), "weight")


@needs_native
@pytest.mark.parametrize("stored_as", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("preset", ["default", "attn_first"])
def test_bf16_model_on_native_kernels_is_as_exact_as_torch(tiny_ckpt_factory, preset, stored_as):
    path = tiny_ckpt_factory(preset, dtype=stored_as)
    config = Lfm2Config.from_pretrained(path)
    native = load_model(path, dtype="bfloat16")
    assert isinstance(native.model.layers[0].feed_forward.w13, NativeLinear)
    # A tied head is repacked only where embedding lookups can read the file's bf16 table instead;
    # otherwise it keeps sharing the one in-memory table.
    served_from_file = stored_as == torch.bfloat16
    assert isinstance(native.lm_head, NativeLinear) == (served_from_file or not config.tie_word_embeddings)
    assert isinstance(native.model.embed_tokens, FileEmbedding) == served_from_file
    plain = build_model(config, load_state_dict(path, config, torch.bfloat16))
    ids = torch.randint(0, config.vocab_size, (37,), generator=torch.Generator().manual_seed(3)).tolist()
    exact = logits(load_model(path), ids)
    torch_error = (logits(plain, ids) - exact).abs().max().item()
    native_error = (logits(native, ids) - exact).abs().max().item()
    assert native_error <= 1.5 * torch_error


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
@pytest.mark.parametrize(
    ("preset", "stored_as"), [("default", torch.float32), ("attn_first", torch.bfloat16)]
)
@pytest.mark.usefixtures("torch_kernels_only")
def test_without_native_kernels_onednn_packs_bit_for_bit(tiny_ckpt_factory, preset, stored_as):
    path = tiny_ckpt_factory(preset, dtype=stored_as)
    packed = load_model(path, dtype="bfloat16")
    config = Lfm2Config.from_pretrained(path)
    plain = build_model(config, load_state_dict(path, config, torch.bfloat16))
    assert any(isinstance(m, PackedLinear) for m in packed.modules())
    assert not any(isinstance(m, NativeLinear) for m in packed.modules())
    ids = torch.randint(0, config.vocab_size, (37,), generator=torch.Generator().manual_seed(3)).tolist()
    assert torch.equal(logits(packed, ids), logits(plain, ids))


def test_float32_keeps_plain_linears(tiny_ckpt):
    model = load_model(tiny_ckpt, dtype="float32")
    assert not any(isinstance(m, (PackedLinear, NativeLinear)) for m in model.modules())


def test_a_cpu_without_the_instructions_falls_back(monkeypatch, caplog):
    monkeypatch.setattr(kernels, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    kernels.availability.cache_clear()
    try:
        with caplog.at_level(logging.INFO, logger="model.kernels"):
            assert kernels.load() is None
    finally:
        kernels.availability.cache_clear()
    assert "avx512_bf16" in caplog.text


def test_a_failed_build_falls_back_with_the_reason(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))
    broken = tmp_path / "broken.cpp"
    broken.write_text("this is not C++\n")
    with caplog.at_level(logging.WARNING, logger="model.kernels"):
        module, reason = kernels.build((broken,), "lfm_chat_test_broken")
    assert module is None and reason is not None and reason.startswith("the build failed")
    assert "native CPU kernels unavailable" in caplog.text
