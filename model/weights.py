"""Checkpoint tensors: the expected name/shape table, and loading ``*.safetensors`` against it.

Names are the Hugging Face ones (``model.layers.N.self_attn.q_proj.weight``...), so a
checkpoint written by ``save_pretrained`` loads with no renaming. Every problem is
reported by tensor name, because "size mismatch" alone never tells a user what is wrong.
"""

from __future__ import annotations

import ctypes
import json
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch
from safetensors.torch import save_file

from model.config import ATTENTION, Lfm2Config
from model.errors import CheckpointError

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


def expected_shapes(config: Lfm2Config) -> dict[str, tuple[int, ...]]:
    """Every tensor an LFM2 checkpoint must hold, with its shape."""
    h, ffn, hd = config.hidden_size, config.ffn_dim, config.head_dim
    q_dim, kv_dim = config.num_attention_heads * hd, config.num_key_value_heads * hd
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (config.vocab_size, h),
        "model.embedding_norm.weight": (h,),
    }
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, h)
    for i, kind in enumerate(config.layer_types):
        p = f"model.layers.{i}."
        shapes[p + "operator_norm.weight"] = (h,)
        shapes[p + "ffn_norm.weight"] = (h,)
        shapes[p + "feed_forward.w1.weight"] = (ffn, h)
        shapes[p + "feed_forward.w3.weight"] = (ffn, h)
        shapes[p + "feed_forward.w2.weight"] = (h, ffn)
        if kind == ATTENTION:
            a = p + "self_attn."
            shapes[a + "q_proj.weight"] = (q_dim, h)
            shapes[a + "k_proj.weight"] = (kv_dim, h)
            shapes[a + "v_proj.weight"] = (kv_dim, h)
            shapes[a + "out_proj.weight"] = (h, q_dim)
            shapes[a + "q_layernorm.weight"] = (hd,)
            shapes[a + "k_layernorm.weight"] = (hd,)
        else:
            c = p + "conv."
            shapes[c + "in_proj.weight"] = (3 * h, h)
            shapes[c + "out_proj.weight"] = (h, h)
            shapes[c + "conv.weight"] = (h, 1, config.conv_L_cache)
            if config.conv_bias:
                shapes[c + "in_proj.bias"] = (3 * h,)
                shapes[c + "out_proj.bias"] = (h,)
                shapes[c + "conv.bias"] = (h,)
    return shapes


def safetensors_files(checkpoint_dir: Path) -> list[Path]:
    """The weight files of a checkpoint: the index's shards, or the single file."""
    index = checkpoint_dir / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{index} is not a valid safetensors index ({exc})") from None
        return [checkpoint_dir / name for name in sorted(set(weight_map.values()))]
    if (checkpoint_dir / SINGLE_FILE).is_file():
        return [checkpoint_dir / SINGLE_FILE]
    found = sorted(checkpoint_dir.glob("*.safetensors"))
    if not found:
        raise CheckpointError(f"no *.safetensors weights in {checkpoint_dir}")
    return found


SAFETENSORS_DTYPES = {
    "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}  # fmt: skip


def _read_header(file: BinaryIO, path: Path) -> tuple[dict[str, dict[str, Any]], int]:
    """The JSON header of a .safetensors file and the offset where tensor data starts."""
    size = path.stat().st_size
    prefix = file.read(8)
    if len(prefix) < 8:
        raise CheckpointError(f"{path} is corrupt or truncated (no header)")
    header_len = struct.unpack("<Q", prefix)[0]
    if header_len > size - 8:
        raise CheckpointError(f"{path} is corrupt or truncated (header runs past the end of the file)")
    try:
        header = json.loads(file.read(header_len))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(f"{path} is corrupt or truncated (unreadable header)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path} is corrupt or truncated (unreadable header)")
    header.pop("__metadata__", None)
    return header, 8 + header_len


def _read_tensor(file: BinaryIO, path: Path, name: str, entry: Any, data_start: int) -> torch.Tensor:
    """Read one tensor's bytes straight into a fresh (anonymous) tensor."""
    try:
        dtype = SAFETENSORS_DTYPES[entry["dtype"]]
        shape = [int(d) for d in entry["shape"]]
        begin, end = (int(o) for o in entry["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{path} is corrupt or truncated (bad header entry for {name})") from None
    tensor = torch.empty(shape, dtype=dtype)
    nbytes = tensor.numel() * tensor.element_size()
    if end - begin != nbytes or data_start + end > path.stat().st_size:
        raise CheckpointError(f"{path} is corrupt or truncated (tensor {name} is cut short)")
    if nbytes:
        file.seek(data_start + begin)
        if file.readinto((ctypes.c_char * nbytes).from_address(tensor.data_ptr())) != nbytes:
            raise CheckpointError(f"{path} is corrupt or truncated (tensor {name} is cut short)")
    return tensor


def iter_checkpoint_tensors(checkpoint_dir: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name, tensor) from every weight file, turning corruption into CheckpointError.

    Plain reads into anonymous memory rather than safetensors' memory map: pages of a mapped
    file count toward the process's RSS for as long as any tensor keeps the mapping alive,
    including pages of tensors already fused into new weights (~400 MB extra at 350M).
    """
    for path in safetensors_files(checkpoint_dir):
        if not path.is_file():
            raise CheckpointError(f"weight file {path} listed in the index is missing")
        with path.open("rb") as file:
            header, data_start = _read_header(file, path)
            for name, entry in sorted(header.items(), key=lambda item: item[1].get("data_offsets", [0])[0]):
                yield name, _read_tensor(file, path, name, entry, data_start)


@dataclass(frozen=True, slots=True)
class TensorLocation:
    """Where a tensor's bytes lie in a checkpoint file, for reading rows without loading it."""

    path: Path
    offset: int  # of element [0, 0...] from the start of the file
    dtype: torch.dtype
    shape: tuple[int, ...]


def locate_tensor(checkpoint_dir: Path, name: str) -> TensorLocation | None:
    """The file position of ``name`` (None if absent), from an already validated checkpoint."""
    for path in safetensors_files(checkpoint_dir):
        with path.open("rb") as file:
            header, data_start = _read_header(file, path)
        entry = header.get(name)
        if entry is not None:
            dtype, shape = SAFETENSORS_DTYPES[entry["dtype"]], tuple(int(d) for d in entry["shape"])
            return TensorLocation(path, data_start + int(entry["data_offsets"][0]), dtype, shape)
    return None


def load_state_dict(
    checkpoint_dir: Path,
    config: Lfm2Config,
    dtype: torch.dtype,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, torch.Tensor]:
    """Read and validate all tensors, converted to ``dtype``; raise on any missing/extra/mis-shaped one."""
    shapes = expected_shapes(config)
    ignorable = {"lm_head.weight"} if config.tie_word_embeddings else set()
    tensors: dict[str, torch.Tensor] = {}
    unexpected: list[str] = []
    for name, tensor in iter_checkpoint_tensors(checkpoint_dir):
        if name not in shapes:
            if name not in ignorable:
                unexpected.append(name)
            continue
        if tuple(tensor.shape) != shapes[name]:
            raise CheckpointError(
                f"tensor {name} has shape {tuple(tensor.shape)}, expected {shapes[name]} from config.json"
            )
        tensors[name] = tensor.to(dtype)
        if progress is not None:
            progress(len(tensors), len(shapes))
    missing = [n for n in shapes if n not in tensors]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"checkpoint {checkpoint_dir} is missing tensor {missing[0]}{more}")
    if unexpected:
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise CheckpointError(f"checkpoint {checkpoint_dir} has unexpected tensor {unexpected[0]}{more}")
    return tensors


def random_state_dict(config: Lfm2Config, seed: int = 0, std: float = 0.02) -> dict[str, torch.Tensor]:
    """Random weights in checkpoint layout (fp32), for tests and the offline demo.

    Norm weights are drawn around 1 so the network stays well-conditioned; matrices use
    ``std``. A larger std gives peakier logits, which keeps greedy tests free of ties.
    """
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in expected_shapes(config).items():
        if "norm" in name:
            out[name] = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith(".bias"):
            out[name] = 0.02 * torch.randn(shape, generator=gen)
        else:
            out[name] = std * torch.randn(shape, generator=gen)
    return out


def save_state_dict(tensors: dict[str, torch.Tensor], checkpoint_dir: Path) -> None:
    """Write one ``model.safetensors`` with transformers-compatible metadata."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    contiguous = {k: v.contiguous() for k, v in tensors.items()}
    save_file(contiguous, str(checkpoint_dir / SINGLE_FILE), metadata={"format": "pt"})
