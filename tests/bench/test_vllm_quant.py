"""bench.vllm_quant: vLLM's W8A8 and W4A16 copies of a bf16 checkpoint give the bf16 weights back
within half a quantization step, by this file's reading of the compressed-tensors format and, where
vLLM's venv exists, by compressed-tensors' own decompressors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bench import serve_compare, vllm_quant
from bench.vllm_quant import INT4_GROUP
from model.quant import SCHEMES

# int4's largest positive weight of a group is 7.5 steps, clamped to 7; its bf16 scale, rounded to
# nearest (by up to 2^-8 of itself, as compressed-tensors casts it), can put it at 7.53
HALF_STEP = 0.5 + 7.5 * 2**-8


@pytest.fixture(scope="module")
def bf16_ckpt(tiny_ckpt_factory) -> Path:
    """vLLM's bf16 copy of a tiny checkpoint whose linears are whole 128-wide int4 groups, its head
    untied (a tied one is not in the file at all)."""
    made = tiny_ckpt_factory(
        hidden_size=128,
        intermediate_size=256,
        block_auto_adjust_ff_dim=False,
        tie_word_embeddings=False,
        dtype=torch.bfloat16,
    )
    return serve_compare.vllm_checkpoint(made)


def read_int8(tensors: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
    """int8 ``weight`` [N, K] times fp32 ``weight_scale`` [N, 1]."""
    assert tensors[f"{prefix}.weight"].dtype == torch.int8
    return tensors[f"{prefix}.weight"].float() * tensors[f"{prefix}.weight_scale"]


def read_int4(tensors: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
    """``weight_packed`` int32 [N, K / 8], k % 8 == i in bits 4i.., stored + 8; times one bf16
    scale per 128 k."""
    packed, scales = tensors[f"{prefix}.weight_packed"], tensors[f"{prefix}.weight_scale"]
    n, k = tensors[f"{prefix}.weight_shape"].tolist()
    assert packed.dtype == torch.int32 and packed.shape == (n, k // 8) and scales.dtype == torch.bfloat16
    q = torch.stack([(packed >> (4 * i)) & 15 for i in range(8)], dim=-1).view(n, k) - 8
    return q.float() * scales.float().repeat_interleave(INT4_GROUP, dim=1)


def steps(tensors: dict[str, torch.Tensor], prefix: str, scheme: str) -> torch.Tensor:
    """Each weight's quantization step, broadcast to the weight's shape."""
    scales = tensors[f"{prefix}.weight_scale"].float()
    return scales if scheme == "w8a8" else scales.repeat_interleave(INT4_GROUP, dim=1)


@pytest.mark.parametrize("scheme", vllm_quant.VLLM_SCHEMES)
def test_each_linear_dequantizes_to_its_bf16_weights_within_half_a_step_and_the_rest_is_kept(
    bf16_ckpt: Path, scheme: str
):
    original = load_file(bf16_ckpt / "model.safetensors")
    copy = vllm_quant.quantized_checkpoint(bf16_ckpt, scheme)
    written = load_file(copy / "model.safetensors")
    linears = [name for name, tensor in original.items() if vllm_quant.is_quantized(name, tensor)]
    assert any(".conv.in_proj." in name for name in linears) and any(".w2." in name for name in linears)
    read = read_int8 if scheme == "w8a8" else read_int4
    for name in linears:
        prefix = name.removesuffix(".weight")
        error = (read(written, prefix) - original[name].float()).abs()
        assert (error <= HALF_STEP * steps(written, prefix, scheme)).all(), name
    kept = {name for name in original if name not in linears}
    assert "lm_head.weight" in kept  # the config's ignore: vLLM reads it as bf16
    assert {
        n for n in kept if any(part in n for part in ("embed_tokens", "lm_head", ".conv.conv.", "norm"))
    } == kept
    assert all(torch.equal(written[name], original[name]) for name in kept)


@pytest.mark.parametrize("scheme", vllm_quant.VLLM_SCHEMES)
def test_the_config_says_compressed_tensors_and_the_copy_is_made_once(bf16_ckpt: Path, scheme: str):
    copy = vllm_quant.quantized_checkpoint(bf16_ckpt, scheme)
    config = json.loads((copy / "config.json").read_text())
    bf16_config = json.loads((bf16_ckpt / "config.json").read_text())
    assert {k: v for k, v in config.items() if k != "quantization_config"} == bf16_config
    quant = config["quantization_config"]
    assert quant["quant_method"] == "compressed-tensors" and quant["ignore"] == ["lm_head"]
    assert quant["format"] == {"w8a8": "int-quantized", "w4a16": "pack-quantized"}[scheme]
    group = quant["config_groups"]["group_0"]
    assert group["targets"] == ["Linear"] and group["weights"]["symmetric"]
    assert (group["input_activations"] is None) == (scheme == "w4a16")
    assert (copy / "tokenizer.json").is_file()
    made = (copy / "model.safetensors").stat().st_mtime_ns
    assert vllm_quant.quantized_checkpoint(bf16_ckpt, scheme) == copy
    assert (copy / "model.safetensors").stat().st_mtime_ns == made


def test_an_unknown_scheme_and_a_width_of_partial_groups_fail_with_a_sentence(bf16_ckpt: Path):
    with pytest.raises(ValueError, match="no vLLM scheme 'int3'"):
        vllm_quant.quantized_checkpoint(bf16_ckpt, "int3")
    with pytest.raises(ValueError, match="not a whole number of 128-wide groups"):
        vllm_quant.quantize_int4_groups(torch.zeros(32, 96))


# Run by vLLM's python: compressed-tensors' decompressor for each quantized linear, from the scheme
# parsed out of the config with its own QuantizationConfig model.
DECOMPRESS = """
import json, sys
from safetensors.torch import load_file, save_file
from compressed_tensors.compressors import BaseCompressor
from compressed_tensors.quantization import QuantizationConfig
copy, out = sys.argv[1:]
config = QuantizationConfig.model_validate(json.load(open(copy + "/config.json"))["quantization_config"])
compressor = BaseCompressor.get_value_from_registry(config.format)
tensors = load_file(copy + "/model.safetensors")
scheme = config.config_groups["group_0"]
done = {}
for name in tensors:
    if name.endswith(".weight_scale"):
        prefix = name.removesuffix(".weight_scale")
        local = {k[len(prefix) + 1:]: v for k, v in tensors.items() if k.startswith(prefix + ".")}
        done[prefix] = compressor.decompress(local, scheme)["weight"].contiguous()
save_file(done, out)
"""


@pytest.mark.parametrize("scheme", vllm_quant.VLLM_SCHEMES)
def test_compressed_tensors_decompresses_the_copy_to_the_same_weights(
    bf16_ckpt: Path, scheme: str, tmp_path: Path
):
    if not serve_compare.VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM venv at {serve_compare.VLLM_PYTHON} (compressed-tensors lives there)")
    copy = vllm_quant.quantized_checkpoint(bf16_ckpt, scheme)
    out = tmp_path / "theirs.safetensors"
    subprocess.run(
        [str(serve_compare.VLLM_PYTHON), "-c", DECOMPRESS, str(copy), str(out)], check=True, timeout=300
    )
    theirs = load_file(out)
    written = load_file(copy / "model.safetensors")
    read = read_int8 if scheme == "w8a8" else read_int4
    assert len(theirs) == sum(name.endswith(".weight_scale") for name in written)
    for prefix, weight in theirs.items():
        assert torch.equal(weight, read(written, prefix).to(weight.dtype)), prefix


def test_every_lfm_chat_scheme_has_a_vllm_counterpart_and_serve_compare_starts_vllm_on_its_copy(
    bf16_ckpt: Path,
):
    assert set(vllm_quant.VLLM_COUNTERPART) == set(SCHEMES)
    assert set(vllm_quant.VLLM_COUNTERPART.values()) == set(vllm_quant.VLLM_SCHEMES)
    copy = vllm_quant.quantized_checkpoint(bf16_ckpt, "w4a16")
    spec = serve_compare.vllm_spec(Path("python"), copy, 8, 2, "w4a16")
    assert spec.name == "vLLM CPU (w4a16)"
    command = spec.command(8000)
    assert command[command.index("--model") + 1] == str(copy)
