"""bf16, float32 and int8 CPU linears: the native kernels (model/native/kernels) and the PyTorch fallbacks.

The native kernels sum in another order than oneDNN, so they are checked against fp32 products
(as exact as torch's own bf16 product), for bitwise row independence, and, for w8a8, for
equality with the torch path bit for bit.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from model.arch.cache import HybridCache
from model.arch.lfm2 import logits_into
from model.arch.registry import load_config
from model.batch import SequenceChunk, build_forward_batch
from model.checkpoint.file_embedding import FileEmbedding
from model.checkpoint.loader import build_model, load_model
from model.checkpoint.weights import load_state_dict
from model.native import kernels
from model.native.linears import (
    NativeFloatLinear,
    NativeLinear,
    PackedLinear,
    exact_narrowing,
    onednn_bf16_supported,
    onednn_float32_preferred,
)
from model.quant.int4 import Int4Linear
from model.quant.int8 import Int8Linear, W8A8Linear

needs_onednn_bf16 = pytest.mark.skipif(
    not onednn_bf16_supported(),
    reason="oneDNN does no bf16 on this CPU (no AVX-512 BW/VL/DQ or AVX-NE-CONVERT)",
)
SHAPES = [(100, 64), (1000, 1024), (64, 4608), (3, 12)]  # (N, K): partial panels, long K, tiny


@pytest.fixture
def torch_kernels_only(monkeypatch):
    """Load models as on a machine where the native kernels cannot be built."""
    monkeypatch.setenv(kernels.DISABLE_ENV, "0")
    kernels.clear_cache()
    yield
    kernels.clear_cache()


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


@pytest.mark.parametrize(("n", "k"), SHAPES)
@pytest.mark.parametrize("m", [1, 3, 5, 17, 70])
def test_native_bf16_product_is_as_exact_as_torchs(native, n, k, m):
    linear = bf16_linear(n, k)
    x = torch.randn(m, k, dtype=torch.bfloat16)
    exact = x.float() @ linear.weight.float().t()
    torch_error = (F.linear(x, linear.weight).float() - exact).abs().max().item()
    native_error = (NativeLinear(linear, native)(x).float() - exact).abs().max().item()
    # both round an fp32 sum to bf16 once; the sums differ only in order
    assert native_error <= 1.5 * torch_error + 1e-6


def test_native_linears_let_other_threads_run_meanwhile(native):
    """A kernel runs without the GIL: a prompt step's linears take up to hundreds of ms, through
    which the server's threads and the app's UI thread must not wait."""
    linear = NativeLinear(bf16_linear(4096, 4096), native)
    x = torch.randn(1024, 4096, dtype=torch.bfloat16)
    ticks: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.001)  # a thread waiting for the GIL gets it ~1 ms after asking
    ticker = threading.Thread(target=tick)
    try:
        ticker.start()
        while not ticks:
            time.sleep(0.001)
        began = time.perf_counter()
        linear(x)
        ended = time.perf_counter()
    finally:
        stop.set()
        ticker.join()
        sys.setswitchinterval(interval)
    # the quarter at each end may hold ticks from before the call started or after it ended
    quarter = (ended - began) / 4
    assert quarter > 0.005, "the product was too quick to tell"
    assert any(began + quarter < t < ended - quarter for t in ticks)


@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_native_w8a8_equals_the_torch_path_bit_for_bit(native, n, k):
    linear = bf16_linear(n, k, seed=1)
    fast, reference = W8A8Linear(linear, native), W8A8Linear(linear)
    for m in (1, 4, 37):
        x = torch.randn(m, k, dtype=torch.bfloat16) * torch.logspace(-2, 2, m)[:, None].to(torch.bfloat16)
        assert torch.equal(fast(x), reference(x))


@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_native_int8_matches_the_torch_path(native, n, k):
    linear = bf16_linear(n, k, seed=2)
    x = torch.randn(9, k, dtype=torch.bfloat16)
    fast, reference = Int8Linear(linear, native)(x).float(), Int8Linear(linear)(x).float()
    # same int8 weights and scales; only the order of the fp32 sums differs
    assert (fast - reference).abs().max() <= 2**-7 * reference.abs().max()


@pytest.mark.parametrize("layer", [NativeLinear, Int8Linear])
def test_avx512f_gives_the_avx2_builds_bits(layer):
    """Without AVX512-BF16 the 16-lane build widens each pair and sums every output in AVX2's order:
    twice the width, the same bits (so a CPU's answers do not depend on which of the two it runs)."""
    for isa in ("avx512f", "avx2"):
        if missing := kernels.missing_flags(isa):
            pytest.skip(f"this CPU cannot run the {isa} build: it lacks {', '.join(missing)}")
    wide, narrow = kernels.load("avx512f"), kernels.load("avx2")
    for n, k in SHAPES:
        linear = bf16_linear(n, k, seed=3)
        for m in (1, 5, 17):
            x = torch.randn(m, k, dtype=torch.bfloat16)
            assert torch.equal(layer(linear, wide)(x), layer(linear, narrow)(x))


@pytest.mark.parametrize("layer", [NativeLinear, Int8Linear, W8A8Linear, Int4Linear])
def test_native_rows_do_not_depend_on_their_batch(native, layer):
    """K spans several of the kernels' k-chunks, M several register tiles and a remainder."""
    module = layer(bf16_linear(200, 1280, seed=3), native)
    rows = torch.randn(11, 1280, dtype=torch.bfloat16)
    together = module(rows)
    for i in range(len(rows)):
        assert torch.equal(module(rows[i : i + 1]), together[i : i + 1])


@pytest.mark.parametrize("layer", [NativeLinear, Int8Linear, W8A8Linear, Int4Linear])
def test_native_layers_take_an_empty_batch(native, layer):
    """A step can hand a linear no rows (a batch with nothing to sample, an expert no token chose)."""
    module = layer(bf16_linear(200, 1280, seed=3), native)
    assert module(torch.empty(0, 1280, dtype=torch.bfloat16)).shape == (0, 200)


def assert_logits_written_into_a_float_buffer_equal(head: nn.Module) -> None:
    """The engine's reused logits buffer holds exactly ``head(x).float()``, whatever the head."""
    x = torch.randn(5, 256, dtype=torch.bfloat16)
    buffer = torch.full((5, 200), float("nan"))
    written = logits_into(head, x, buffer)
    assert written.data_ptr() == buffer.data_ptr()
    assert torch.equal(written, head(x).float())


@pytest.mark.parametrize("layer", [NativeLinear, Int8Linear, W8A8Linear, Int4Linear])
def test_native_logits_fill_a_float_buffer(native, layer):
    assert_logits_written_into_a_float_buffer_equal(layer(bf16_linear(200, 256, seed=4), native))


@pytest.mark.parametrize(
    "layer",
    [nn.Linear, pytest.param(PackedLinear, marks=needs_onednn_bf16), Int8Linear, W8A8Linear, Int4Linear],
)
def test_torch_logits_fill_a_float_buffer(layer):
    linear = bf16_linear(200, 256, seed=4)
    assert_logits_written_into_a_float_buffer_equal(linear if layer is nn.Linear else layer(linear))


def test_native_layers_keep_only_the_packed_weight(native):
    linear = bf16_linear(100, 64)
    assert not hasattr(W8A8Linear(linear, native), "weight_int8")
    assert not hasattr(Int4Linear(linear, native), "weight_int4")
    assert not hasattr(NativeLinear(linear, native), "weight")


@pytest.mark.parametrize("stored_as", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("preset", ["default", "attn_first"])
def test_bf16_model_on_native_kernels_is_as_exact_as_torch(
    native_models, tiny_ckpt_factory, preset, stored_as
):
    path = tiny_ckpt_factory(preset, dtype=stored_as)
    config = load_config(path)
    model = load_model(path, dtype="bfloat16")
    assert isinstance(model.model.layers[0].feed_forward.w13, NativeLinear)
    assert model.model.layers[0].feed_forward.w13.kernels is native_models
    # A tied head is repacked only where embedding lookups can read the file's bf16 table instead;
    # otherwise it keeps sharing the one in-memory table.
    served_from_file = stored_as == torch.bfloat16
    assert isinstance(model.lm_head, NativeLinear) == (served_from_file or not config.tie_word_embeddings)
    assert isinstance(model.model.embed_tokens, FileEmbedding) == served_from_file
    plain = build_model(config, load_state_dict(path, config, torch.bfloat16), torch.bfloat16)
    ids = torch.randint(0, config.vocab_size, (37,), generator=torch.Generator().manual_seed(3)).tolist()
    exact = logits(load_model(path), ids)
    torch_error = (logits(plain, ids) - exact).abs().max().item()
    native_error = (logits(model, ids) - exact).abs().max().item()
    assert native_error <= 1.5 * torch_error


@needs_onednn_bf16
@pytest.mark.parametrize(
    ("preset", "stored_as"), [("default", torch.float32), ("attn_first", torch.bfloat16)]
)
@pytest.mark.usefixtures("torch_kernels_only")
def test_without_native_kernels_onednn_packs_bit_for_bit(tiny_ckpt_factory, preset, stored_as):
    path = tiny_ckpt_factory(preset, dtype=stored_as)
    packed = load_model(path, dtype="bfloat16")
    config = load_config(path)
    plain = build_model(config, load_state_dict(path, config, torch.bfloat16), torch.bfloat16)
    assert any(isinstance(m, PackedLinear) for m in packed.modules())
    assert not any(isinstance(m, NativeLinear) for m in packed.modules())
    ids = torch.randint(0, config.vocab_size, (37,), generator=torch.Generator().manual_seed(3)).tolist()
    assert torch.equal(logits(packed, ids), logits(plain, ids))


@pytest.mark.usefixtures("torch_kernels_only")
def test_without_native_kernels_or_onednn_bf16_runs_plain_linears(tiny_ckpt_factory, monkeypatch):
    """Most AVX2 CPUs without a compiler: bf16 still loads and runs, on torch's own F.linear."""
    monkeypatch.setattr("model.native.linears.onednn_bf16_supported", lambda: False)
    path = tiny_ckpt_factory("default", dtype=torch.bfloat16)
    model = load_model(path, dtype="bfloat16")
    config = model.config
    assert not any(isinstance(m, (PackedLinear, NativeLinear)) for m in model.modules())
    plain = build_model(config, load_state_dict(path, config, torch.bfloat16), torch.bfloat16)
    ids = torch.randint(0, config.vocab_size, (37,), generator=torch.Generator().manual_seed(3)).tolist()
    assert torch.equal(logits(model, ids), logits(plain, ids))


def fp32_linear(n: int, k: int, seed: int = 0, bf16_values: bool = False) -> nn.Linear:
    """A float32 layer; ``bf16_values``: every weight one bf16 holds (a bf16 checkpoint loaded as float32)."""
    torch.manual_seed(seed)
    linear = nn.Linear(k, n, bias=False)
    if bf16_values:
        linear.weight.data = linear.weight.data.to(torch.bfloat16).float()
    return linear


@pytest.mark.parametrize("bf16_values", [True, False], ids=["bf16-values", "fp32-values"])
@pytest.mark.parametrize(("n", "k"), SHAPES)
@pytest.mark.parametrize("m", [1, 3, 5, 17, 70])
def test_native_float32_product_is_as_exact_as_torchs(native, n, k, m, bf16_values):
    linear = fp32_linear(n, k, bf16_values=bf16_values)
    x = torch.randn(m, k)
    exact = (x.double() @ linear.weight.double().t()).float()
    torch_error = (F.linear(x, linear.weight) - exact).abs().max().item()
    native = NativeFloatLinear(linear, native)
    assert native.packed_weight.dtype == (torch.bfloat16 if bf16_values else torch.float32)
    native_error = (native(x) - exact).abs().max().item()
    # fp32 sums of exact products either way (bf16 weights widen exactly); only their order differs
    assert native_error <= 2 * torch_error + 5e-7


def test_only_weights_bf16_holds_exactly_are_narrowed():
    held = torch.tensor([1.0, -0.5, 3.0, 2.0**-20])
    assert exact_narrowing(held).dtype == torch.bfloat16
    assert torch.equal(exact_narrowing(held).float(), held)
    assert exact_narrowing(held + 2.0**-12).dtype == torch.float32
    assert exact_narrowing(torch.tensor([float("nan"), 1.0])).dtype == torch.float32


@pytest.mark.parametrize("bf16_values", [True, False], ids=["bf16-values", "fp32-values"])
def test_native_float32_rows_do_not_depend_on_their_batch(native, bf16_values):
    module = NativeFloatLinear(fp32_linear(200, 256, seed=3, bf16_values=bf16_values), native)
    rows = torch.randn(11, 256)
    together = module(rows)
    for i in range(len(rows)):
        assert torch.equal(module(rows[i : i + 1]), together[i : i + 1])


def test_native_float32_logits_fill_a_float_buffer(native):
    head = NativeFloatLinear(fp32_linear(200, 256, seed=4, bf16_values=True), native)
    x = torch.randn(5, 256)
    buffer = torch.full((5, 200), float("nan"))
    written = logits_into(head, x, buffer)
    assert written.data_ptr() == buffer.data_ptr()
    assert torch.equal(written, head(x))


@pytest.mark.parametrize("stored_as", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("preset", ["default", "attn_first"])
def test_float32_model_on_native_kernels_matches_torchs_float32(
    native_models, tiny_ckpt_factory, preset, stored_as
):
    """A bf16 checkpoint's float32 model streams its weights as bf16 (exactly the values it widened
    to), an fp32 checkpoint's as fp32; either way the logits are torch's float32 ones."""
    path = tiny_ckpt_factory(preset, dtype=stored_as)
    config = load_config(path)
    model = load_model(path, dtype="float32")
    w13 = model.model.layers[0].feed_forward.w13
    assert isinstance(w13, NativeFloatLinear) and w13.kernels is native_models
    assert w13.packed_weight.dtype == stored_as
    # the table widens to float32 exactly from either: embedding rows come from the file, so a tied
    # head gets its own packed copy
    assert isinstance(model.lm_head, NativeFloatLinear)
    assert isinstance(model.model.embed_tokens, FileEmbedding)
    plain = build_model(config, load_state_dict(path, config, torch.float32), torch.float32)
    ids = torch.randint(0, config.vocab_size, (37,), generator=torch.Generator().manual_seed(3)).tolist()
    assert (logits(model, ids) - logits(plain, ids)).abs().max().item() <= 1e-4


@pytest.mark.skipif(not onednn_float32_preferred(), reason="F.linear is kept off x86 or without oneDNN")
@pytest.mark.parametrize("preset", ["default", "attn_first"])
@pytest.mark.usefixtures("torch_kernels_only")
def test_float32_without_native_kernels_multiplies_through_onednn(tiny_ckpt_factory, preset):
    """Not the BLAS's F.linear (slow at decode sizes on some CPUs): oneDNN's packed product, with
    float32 sums in another order, so the logits are torch's float32 ones to rounding."""
    path = tiny_ckpt_factory(preset, dtype=torch.float32)
    config = load_config(path)
    model = load_model(path, dtype="float32")
    assert isinstance(model.model.layers[0].feed_forward.w13, PackedLinear)
    assert not any(isinstance(m, NativeLinear) for m in model.modules())
    plain = build_model(config, load_state_dict(path, config, torch.float32), torch.float32)
    ids = torch.randint(0, config.vocab_size, (37,), generator=torch.Generator().manual_seed(3)).tolist()
    assert (logits(model, ids) - logits(plain, ids)).abs().max().item() <= 1e-4


@pytest.mark.usefixtures("torch_kernels_only")
def test_float32_without_native_kernels_or_onednn_keeps_plain_linears(tiny_ckpt, monkeypatch):
    monkeypatch.setattr("model.native.linears.onednn_float32_preferred", lambda: False)
    model = load_model(tiny_ckpt, dtype="float32")
    assert not any(isinstance(m, (PackedLinear, NativeLinear)) for m in model.modules())


@pytest.mark.parametrize(
    ("flags", "forced", "missing"),
    [
        ({"sse4_2", "avx512f"}, "", "avx2, fma"),  # an old x86 (or any ARM: no flags at all)
        ({"avx2"}, "", "fma"),
        ({"avx2", "fma"}, "avx512", "avx512f, avx512bw, avx512vl, avx512_bf16, avx512_vnni"),
        ({"avx2", "fma"}, "avx512f", "avx512f, avx512bw, avx512vl, avx512_vnni"),
        ({"avx2", "fma", "avx512f", "avx512bw", "avx512vl"}, "avx512f", "avx512_vnni"),  # Skylake-SP
        ({"avx2", "fma"}, "avxvnni", "avx_vnni"),
    ],
)
def test_a_cpu_without_the_instructions_falls_back(monkeypatch, caplog, flags, forced, missing):
    monkeypatch.setattr(kernels, "cpu_flags", lambda: frozenset(flags))
    monkeypatch.setenv(kernels.ISA_ENV, forced)
    kernels.clear_cache()
    try:
        with caplog.at_level(logging.INFO, logger="model.native.kernels"):
            assert kernels.load() is None
            assert f"this CPU lacks {missing}" in kernels.unavailable_reason()
    finally:
        kernels.clear_cache()
    assert missing in caplog.text


def test_an_unknown_forced_instruction_set_is_named(monkeypatch):
    monkeypatch.setenv(kernels.ISA_ENV, "neon")
    kernels.clear_cache()
    try:
        assert kernels.load() is None
        expected = f"{kernels.ISA_ENV}=neon is not one of avx512, avx512f, avxvnni, avx2"
        assert kernels.unavailable_reason() == expected
    finally:
        kernels.clear_cache()


def test_the_widest_runnable_set_is_the_default_and_a_narrower_one_can_be_forced(monkeypatch):
    runnable = kernels.runnable_isas()
    if not runnable:
        pytest.skip(f"native CPU kernels cannot run on this machine: {kernels.unavailable_reason()}")
    kernels.clear_cache()
    try:
        assert runnable[0] == kernels.load().ISA
        monkeypatch.setenv(kernels.ISA_ENV, runnable[-1])
        kernels.clear_cache()
        assert runnable[-1] == kernels.load().ISA
    finally:
        kernels.clear_cache()


def test_a_failed_build_falls_back_with_the_reason(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))
    broken = tmp_path / "broken.cpp"
    broken.write_text("this is not C++\n")
    with caplog.at_level(logging.WARNING, logger="model.native.kernels"):
        module, reason = kernels.build("avx2", (broken,))
    assert module is None and reason is not None and reason.startswith("the build failed")
    assert "native CPU kernels unavailable" in caplog.text
