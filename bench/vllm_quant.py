"""vLLM's copy of a bf16 checkpoint in a quantized compressed-tensors format, for bench/serve_compare.py.

vLLM's CPU build runs quantized weights only from a checkpoint already in a format it reads; two
of them have CPU kernels for LFM2's linears:

- ``w8a8`` ("int-quantized"): int8 weights, symmetric per output channel (``weight`` int8 [N, K],
  ``weight_scale`` fp32 [N, 1]), times int8 activations quantized per token at run time. The
  weights are lfm-chat's own int8 rows (model/quant/int8.py's ``quantize_rows``: scale =
  max |w| / 127), so both servers multiply the very same integers.
- ``w4a16`` ("pack-quantized"): int4 weights, symmetric, one bf16 scale per output row and
  group of 128 k (``weight_scale`` [N, K / 128]), q in [-8, 7] (w = q * scale, scale =
  max |w| / 7.5 as compressed-tensors' min-max observer sets it), stored + 8 in ``weight_packed``
  int32 [N, K / 8] with k % 8 == i in bits 4i..4i+3; ``weight_shape`` [N, K]. Activations stay
  bf16 (vLLM's CPUWNA16 kernel). lfm-chat's int4 differs: groups of 32 with a minimum
  (asymmetric) and per-token int8 activations (model/quant/int4.py).

Both round to nearest from the same bf16 weights (random weights: nothing to calibrate on). Every
linear of the layers is quantized, as lfm-chat quantizes them; the head is not: vLLM's LFM2 ties it
to the embedding and keeps it bf16 (lfm-chat quantizes its head too). The short convolution's
weights stay bf16 on both sides. Written with plain torch and safetensors, so it runs (and is
tested) without vLLM; the tensor names, packing and ``quantization_config`` follow
compressed-tensors 0.17's own code.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from bench.checkpoint import is_whole, write_whole
from model.quant.int8 import quantize_rows

VLLM_SCHEMES = ("w8a8", "w4a16")
# vLLM's scheme against each of lfm-chat's --quantize schemes: W8A8 is its only int8 scheme on CPU
VLLM_COUNTERPART = {"int8": "w8a8", "w8a8": "w8a8", "int4": "w4a16"}
INT4_GROUP = 128  # k values per scale: compressed-tensors' W4A16 preset
INT4_BITS = 4
INT4_PER_WORD = 32 // INT4_BITS
_INT4_LOW, _INT4_HIGH = -8, 7
_SOURCE_STAMP = ".source"  # the bf16 weights' size and mtime the copy was made from
_WEIGHTS = "model.safetensors"


def quantize_int8_channels(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] -> int8 ``weight`` [N, K] and fp32 ``weight_scale`` [N, 1]: lfm-chat's int8 rows."""
    quantized, scales = quantize_rows(weight)
    return quantized, scales[:, None]


def quantize_int4_groups(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] (K a multiple of 128) -> ``weight_packed`` int32 [N, K / 8] and bf16 ``weight_scale``
    [N, K / 128]. Rounds against the bf16 scale vLLM multiplies by, so q * scale is within half a
    step of each weight, but for a group's largest positive one: 7.5 steps (a little more where
    the scale's cast to bf16 rounded it down) clamped to 7."""
    n, k = weight.shape
    if k % INT4_GROUP:
        raise ValueError(f"an input width of {k} is not a whole number of {INT4_GROUP}-wide groups")
    grouped = weight.float().view(n, k // INT4_GROUP, INT4_GROUP)
    scales = (grouped.abs().amax(-1) / 7.5).clamp(min=1e-8).to(torch.bfloat16)
    q = (grouped / scales.float()[..., None]).round_().clamp_(_INT4_LOW, _INT4_HIGH).to(torch.int32)
    nibbles = (q.view(n, k // INT4_PER_WORD, INT4_PER_WORD) - _INT4_LOW) << (
        torch.arange(INT4_PER_WORD, dtype=torch.int32) * INT4_BITS
    )
    return nibbles.sum(-1, dtype=torch.int32), scales  # disjoint bits: the sum is their OR (bit 31 wraps)


def quantized_tensors(name: str, weight: torch.Tensor, scheme: str) -> dict[str, torch.Tensor]:
    """One linear's ``<name>.weight`` as the scheme's tensors, named as compressed-tensors names them."""
    prefix = name.removesuffix(".weight")
    if scheme == "w8a8":
        q, scale = quantize_int8_channels(weight)
        return {f"{prefix}.weight": q, f"{prefix}.weight_scale": scale}
    packed, scales = quantize_int4_groups(weight)
    return {
        f"{prefix}.weight_packed": packed,
        f"{prefix}.weight_scale": scales,
        f"{prefix}.weight_shape": torch.tensor(weight.shape, dtype=torch.int64),
    }


def is_quantized(name: str, tensor: torch.Tensor) -> bool:
    """A linear's weight: 2-D, neither the embedding nor an untied head (the config's ``ignore``
    keeps vLLM's head in bf16); conv weights are 3-D, norms 1-D."""
    kept = ("embed_tokens", "lm_head")
    return name.endswith(".weight") and tensor.dim() == 2 and not any(part in name for part in kept)


def quantization_config(scheme: str) -> dict[str, object]:
    """config.json's ``quantization_config``, the fields compressed-tensors writes for its W8A8 and
    W4A16 presets targeting every Linear (vLLM reads ``format``, ``config_groups`` and ``ignore``)."""
    weights: dict[str, object] = {"type": "int", "symmetric": True, "dynamic": False, "actorder": None}
    if scheme == "w8a8":
        weights |= {"num_bits": 8, "strategy": "channel", "group_size": None}
        activations: dict[str, object] | None = {
            "num_bits": 8,
            "type": "int",
            "symmetric": True,
            "strategy": "token",
            "dynamic": True,
            "group_size": None,
        }
        fmt = "int-quantized"
    elif scheme == "w4a16":
        weights |= {"num_bits": INT4_BITS, "strategy": "group", "group_size": INT4_GROUP}
        activations, fmt = None, "pack-quantized"
    else:
        raise ValueError(f"no vLLM scheme {scheme!r}: one of {', '.join(VLLM_SCHEMES)}")
    group = {"targets": ["Linear"], "weights": weights, "input_activations": activations}
    return {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "quantization_status": "compressed",
        "config_groups": {"group_0": group},
        "ignore": ["lm_head"],
        "kv_cache_scheme": None,
    }


def _stamp(weights: Path) -> str:
    stat = weights.stat()
    return f"{stat.st_size} {stat.st_mtime_ns}"


def quantized_checkpoint(source: Path, scheme: str) -> Path:
    """vLLM's bf16 checkpoint ``source`` (serve_compare.vllm_checkpoint's copy) in ``scheme``, made
    once beside it (``<source>-<scheme>``) and remade when the bf16 weights change."""
    if scheme not in VLLM_SCHEMES:
        raise ValueError(f"no vLLM scheme {scheme!r}: one of {', '.join(VLLM_SCHEMES)}")
    target = source.parent / f"{source.name}-{scheme}"
    stamp = _stamp(source / _WEIGHTS)
    if is_whole(target) and (target / _SOURCE_STAMP).read_text() == stamp:
        return target

    def write(partial: Path) -> None:
        _write(source, partial, scheme)
        (partial / _SOURCE_STAMP).write_text(stamp)

    return write_whole(target, write)


def _write(source: Path, target: Path, scheme: str) -> None:
    """The quantized weights, the config with its quantization_config, and the tokenizer's files."""
    tensors: dict[str, torch.Tensor] = {}
    with safe_open(source / _WEIGHTS, framework="pt") as weights:
        for name in weights.keys():  # noqa: SIM118  (safe_open is not a mapping)
            tensor = weights.get_tensor(name)
            quantized = is_quantized(name, tensor)
            tensors |= quantized_tensors(name, tensor, scheme) if quantized else {name: tensor}
    save_file(tensors, target / _WEIGHTS, metadata={"format": "pt"})
    config = json.loads((source / "config.json").read_text())
    config["quantization_config"] = quantization_config(scheme)
    (target / "config.json").write_text(json.dumps(config, indent=2))
    for other in source.iterdir():
        if other.name not in (_WEIGHTS, "config.json") and not other.name.startswith("."):
            (target / other.name).symlink_to(other.resolve())
