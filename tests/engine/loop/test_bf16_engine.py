"""The engine serves bf16 and int8-quantized models end to end, and rejects unknown schemes up front."""

from __future__ import annotations

import pytest

from engine import Engine, EngineConfig, SamplingParams
from model.checkpoint import quantized_cache
from model.quant.int4 import Int4Linear
from model.quant.int8 import Int8Linear, W8A8Linear

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


@pytest.mark.parametrize("preset", ["default", "lfm3", "moe"])
@pytest.mark.parametrize(
    ("scheme", "layer"), [("int8", Int8Linear), ("w8a8", W8A8Linear), ("int4", Int4Linear)]
)
def test_quantized_engine_generates(tiny_ckpt_factory, preset, scheme, layer):
    engine = Engine.from_pretrained(
        tiny_ckpt_factory(preset), EngineConfig(dtype="bfloat16", quantize=scheme)
    )
    assert any(isinstance(m, layer) for m in engine.runner.model.modules())
    outs = engine.generate([[10, 11, 12], list(range(20, 60))], GREEDY)
    assert [len(o.token_ids) for o in outs] == [8, 8]
    assert all(o.finish_reason == "length" for o in outs)


@pytest.mark.parametrize("scheme", ["none", "int8", "w8a8", "int4"])
def test_bf16_batched_tokens_equal_each_prompt_alone(tiny_ckpt, make_engine, prompts, scheme, bf16_kernels):
    """A bf16 request's tokens do not depend on what it is batched with (native linears compute
    each row alone, on every instruction set; w8a8's and int4's per-token scales keep rows apart
    in torch's kernels too)."""
    if scheme == "int4" and bf16_kernels == "torch":
        # PyTorch's bf16 attention over a prompt in chunks differs from the whole prompt in the last
        # bits, and int4's activation rounding can turn that into another token. Float32 on PyTorch's
        # kernels, what such machines run, is exact: tests/engine/loop/test_batch_invariance.py.
        pytest.skip("bf16 on PyTorch's kernels is batch-invariant only up to rounding")
    batch = prompts([90, 5, 40, 130, 1, 77], seed=4)
    alone = make_engine(tiny_ckpt, dtype="bfloat16", quantize=scheme, max_num_seqs=1)
    together = make_engine(
        tiny_ckpt, dtype="bfloat16", quantize=scheme, max_num_seqs=4, max_num_batched_tokens=48
    )
    expected = [alone.generate([prompt], GREEDY)[0].token_ids for prompt in batch]
    assert [out.token_ids for out in together.generate(batch, GREEDY)] == expected


@pytest.mark.parametrize("scheme", ["none", "int8", "w8a8", "int4"])
def test_bf16_moe_batched_tokens_equal_each_prompt_alone(
    tiny_ckpt_factory, make_engine, prompts, native_models, scheme
):
    """On every native build, with bf16 and quantized experts: a request's tokens do not depend on
    what it is batched with. Each prompt is one chunk both ways (a chunk attending through SDPA
    rounds unlike the same tokens in other chunks, and an expert score near a tie turns that into
    another expert: tests/model/test_parity.py), so only the batch differs. Chunked prompts:
    test_batch_invariance.py, in fp32."""
    path = tiny_ckpt_factory("moe")
    batch = prompts([90, 5, 40, 130, 1, 77], seed=4)
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    whole = {"max_num_batched_tokens": 512, "max_prefill_with_decodes": 512, "max_decode_slowdown": None}
    alone = make_engine(path, dtype="bfloat16", quantize=scheme, max_num_seqs=1, **whole)
    together = make_engine(path, dtype="bfloat16", quantize=scheme, max_num_seqs=6, **whole)
    expected = [alone.generate([prompt], params)[0].token_ids for prompt in batch]
    assert [out.token_ids for out in together.generate(batch, params)] == expected


def test_unknown_quantization_is_a_clear_config_error():
    with pytest.raises(ValueError, match="quantize"):
        EngineConfig(quantize="fp4")


@pytest.mark.parametrize("scheme", ["int8", "w8a8"])
def test_a_relaunch_reads_the_quantized_weights_it_cached(tiny_ckpt, tmp_path, monkeypatch, scheme):
    """The second Engine skips loading and quantizing the checkpoint's linears, and answers the same."""
    monkeypatch.setenv(quantized_cache.CACHE_ENV, str(tmp_path))

    def launch() -> tuple[list[str], list[int]]:
        stages: list[str] = []
        config = EngineConfig(dtype="bfloat16", quantize=scheme)
        engine = Engine.from_pretrained(tiny_ckpt, config, progress=lambda stage, _: stages.append(stage))
        return stages, engine.generate([list(range(20, 60))], GREEDY)[0].token_ids

    (first, tokens), (second, again) = launch(), launch()
    assert f"quantizing weights ({scheme})" in first and "loading weights" in first
    assert f"loading cached {scheme} weights" in second
    assert not any(s.startswith(("quantizing", "loading weights")) for s in second)
    assert again == tokens
