"""The engine serves an int8-quantized model end to end, and rejects unknown schemes up front."""

from __future__ import annotations

import pytest

from engine import Engine, EngineConfig, SamplingParams
from model.quantize import Int8Linear


def test_int8_engine_generates(tiny_ckpt):
    engine = Engine.from_pretrained(tiny_ckpt, EngineConfig(dtype="bfloat16", quantize="int8"))
    assert any(isinstance(m, Int8Linear) for m in engine.runner.model.modules())
    outs = engine.generate(
        [[10, 11, 12], list(range(20, 60))], SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    )
    assert [len(o.token_ids) for o in outs] == [5, 5]
    assert all(o.finish_reason == "length" for o in outs)


def test_unknown_quantization_is_a_clear_config_error():
    with pytest.raises(ValueError, match="quantize"):
        EngineConfig(quantize="fp4")
