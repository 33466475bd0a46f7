"""Checkpoint tensors: the expected name/shape table, and loading ``*.safetensors`` against it.

Names are the Hugging Face ones as on disk (``model.layers.N.self_attn.q_proj.weight``...): what
``save_pretrained`` writes and the Hub holds; the other names transformers also loads are mapped to
them first (model/checkpoint/names.py). Every problem is
reported by tensor name, because "size mismatch" alone never tells a user what is wrong.
"""

from __future__ import annotations

import ctypes
import dataclasses
import io
import itertools
import json
import math
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import torch
from safetensors.torch import save_file

from model.arch.lfm2_config import Lfm2Config
from model.checkpoint.names import on_disk_names
from model.checkpoint.tensor_location import TensorLocation
from model.errors import CheckpointError
from model.small_file import JSON_BYTES, read_small_file

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


MAX_FILE_NAME = 255  # bytes of a file name on common file systems: a longer one names no file


def index_weight_map(index: Path) -> dict[str, str]:
    """A shard index's weight_map (tensor name -> file), each file a plain name in the index's own
    directory: the index is data from the internet, and "/etc/..." or "../..." must name nothing."""
    try:
        weight_map = json.loads(read_small_file(index, JSON_BYTES))["weight_map"]
    except CheckpointError:
        raise
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise CheckpointError(f"{index} is not a valid safetensors index ({exc})") from None
    if not isinstance(weight_map, dict):
        raise CheckpointError(
            f"{index} is not a valid safetensors index (its weight_map must map tensor names to file names)"
        )
    for name, file in weight_map.items():
        if not _is_plain_file_name(file):
            raise CheckpointError(
                f"{index} maps tensor {name} to {json.dumps(file)[:300]}, not a file name in its directory"
            )
    return weight_map


def _is_plain_file_name(file: object) -> bool:
    return (
        isinstance(file, str)
        and file not in ("", ".", "..")
        and "\0" not in file
        and len(file.encode("utf-8", "replace")) <= MAX_FILE_NAME
        and Path(file).name == file
    )


def safetensors_files(checkpoint_dir: Path) -> list[Path]:
    """The weight files of a checkpoint: the index's shards, or the single file."""
    index = checkpoint_dir / INDEX_FILE
    if index.is_file():
        return [checkpoint_dir / name for name in sorted(set(index_weight_map(index).values()))]
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


def _read_header(file: BinaryIO, path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any], int]:
    """A .safetensors file's JSON header, its ``__metadata__``, and the offset where tensor data starts."""
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
    metadata = header.pop("__metadata__", None)
    return header, metadata if isinstance(metadata, dict) else {}, 8 + header_len


def _header_entry(path: Path, name: str, entry: Any, data_start: int, file_size: int) -> TensorLocation:
    """One header entry, checked against the file: a header may claim any size, the file may not."""
    try:
        dtype = SAFETENSORS_DTYPES[entry["dtype"]]
        shape = tuple(entry["shape"])
        begin, end = entry["data_offsets"]
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{path} is corrupt or truncated (bad header entry for {name})") from None
    if not all(_is_size(d) for d in (*shape, begin, end)) or begin > end:
        raise CheckpointError(f"{path} is corrupt or truncated (bad header entry for {name})")
    location = TensorLocation(path, data_start + begin, dtype, shape)
    if end - begin != location.nbytes:
        raise CheckpointError(
            f"{path} is corrupt or truncated (tensor {name} of shape {shape} needs {location.nbytes} bytes, "
            f"its header gives it {end - begin})"
        )
    if data_start + end > file_size:
        raise CheckpointError(f"{path} is corrupt or truncated (tensor {name} runs past the end of the file)")
    return location


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def file_tensors(path: Path) -> tuple[dict[str, TensorLocation], dict[str, Any]]:
    """Every tensor of one .safetensors file, from its header alone, each checked against the file,
    and the header's metadata. A bad file is a CheckpointError saying it is corrupt or truncated."""
    file_size = path.stat().st_size
    with path.open("rb") as file:
        header, metadata, data_start = _read_header(file, path)
    found = {name: _header_entry(path, name, entry, data_start, file_size) for name, entry in header.items()}
    return found, metadata


def checkpoint_tensors(checkpoint_dir: Path) -> dict[str, TensorLocation]:
    """Every tensor of every weight file, from the headers alone, each checked against its file."""
    found: dict[str, TensorLocation] = {}
    for path in safetensors_files(checkpoint_dir):
        if not path.is_file():
            raise CheckpointError(f"weight file {path} listed in the index is missing")
        for name, location in file_tensors(path)[0].items():
            if name in found:
                raise CheckpointError(
                    f"checkpoint {checkpoint_dir} holds tensor {name} twice "
                    f"(in {found[name].path.name} and {path.name})"
                )
            found[name] = location
    index = checkpoint_dir / INDEX_FILE
    if index.is_file():
        for name, file in index_weight_map(index).items():
            if name not in found or found[name].path.name != file:
                raise CheckpointError(f"{index} maps tensor {name} to {file}, which does not hold it")
    return found


def locate_tensor(checkpoint_dir: Path, name: str) -> TensorLocation | None:
    """The file position of ``name`` (None if absent), from an already validated checkpoint."""
    return checkpoint_tensors(checkpoint_dir).get(name)


def read_tensor(file: io.BufferedIOBase, location: TensorLocation, name: str) -> torch.Tensor:
    """Read one tensor's bytes straight into a fresh (anonymous) tensor of its checked size."""
    tensor = torch.empty(location.shape, dtype=location.dtype)
    if location.nbytes:
        file.seek(location.offset)
        buffer = (ctypes.c_char * location.nbytes).from_address(tensor.data_ptr())
        if file.readinto(buffer) != location.nbytes:
            raise CheckpointError(f"{location.path} is corrupt or truncated (tensor {name} is cut short)")
    return tensor


EMBEDDING = "model.embed_tokens.weight"
HEAD = "lm_head.weight"
COMPARE_BYTES = 1 << 24  # read per step when comparing two tensors in their files


def with_checkpoint_head(config: Lfm2Config, found: dict[str, TensorLocation]) -> Lfm2Config:
    """``config`` untied where the checkpoint holds a head of its own: transformers ties the head to the
    embedding only where lm_head.weight is absent or holds the same values (else it warns and runs both)."""
    head, table = found.get(HEAD), found.get(EMBEDDING)
    if not config.tie_word_embeddings or head is None or table is None or _same_values(head, table):
        return config
    return dataclasses.replace(config, tie_word_embeddings=False)


def _same_values(a: TensorLocation, b: TensorLocation) -> bool:
    """Whether two tensors of the checkpoint hold the same values, compared a slice at a time."""
    if a.shape != b.shape:
        return False
    with a.path.open("rb") as file_a, b.path.open("rb") as file_b:
        if a.dtype != b.dtype:
            left, right = read_tensor(file_a, a, HEAD), read_tensor(file_b, b, EMBEDDING)
            return torch.equal(left.float(), right.float())
        file_a.seek(a.offset)
        file_b.seek(b.offset)
        for start in range(0, a.nbytes, COMPARE_BYTES):
            size = min(COMPARE_BYTES, a.nbytes - start)
            if file_a.read(size) != file_b.read(size):
                return False
    return True


def _check_against_config(found: dict[str, TensorLocation], config: Lfm2Config, checkpoint_dir: Path) -> None:
    """Names, shapes and dtypes from the headers against config.json, before a byte is allocated."""
    shapes = config.expected_shapes()
    for name, shape in shapes.items():
        location = found.get(name)
        if location is not None and location.shape != shape:
            raise CheckpointError(
                f"tensor {name} has shape {location.shape}, expected {shape} from config.json"
            )
        if location is not None and not location.dtype.is_floating_point:
            raise CheckpointError(f"tensor {name} is stored as {location.dtype}, not as floating point")
    known = shapes.keys() | ({"lm_head.weight"} if config.tie_word_embeddings else set())
    _refuse(checkpoint_dir, "is missing tensor", [n for n in shapes if n not in found])
    _refuse(checkpoint_dir, "has unexpected tensor", [n for n in found if n not in known])


def _refuse(checkpoint_dir: Path, problem: str, names: list[str]) -> None:
    """CheckpointError naming the first of ``names`` and counting the rest (nothing if empty)."""
    if names:
        more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
        raise CheckpointError(f"checkpoint {checkpoint_dir} {problem} {names[0]}{more}")


class CheckpointTensors:
    """A checkpoint's tensors, checked against config.json from the headers alone, then read by name
    on demand: a layer at a time, so a model far larger than memory in bf16 can be quantized as it
    loads (model/checkpoint/loader.py).

    Plain reads into anonymous memory rather than safetensors' memory map: pages of a mapped file
    count toward the process's RSS for as long as any tensor keeps the mapping alive, including
    pages of tensors already fused into new weights (~400 MB extra at 350M).
    """

    def __init__(self, checkpoint_dir: Path, config: Lfm2Config) -> None:
        found = on_disk_names(checkpoint_tensors(checkpoint_dir), config.expected_shapes(), config.model_type)
        if config.tie_word_embeddings and EMBEDDING not in found and HEAD in found:
            found[EMBEDDING] = found.pop(HEAD)  # transformers ties whichever of the two is there
        self.found = found
        _check_against_config(self.found, config, checkpoint_dir)

    def read(self, names: list[str], dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """The tensors ``names``, in file order, each converted to ``dtype`` as read (None: as stored)."""
        tensors: dict[str, torch.Tensor] = {}
        for path in dict.fromkeys(self.found[name].path for name in names):
            with path.open("rb") as file:
                for _, name in sorted((self.found[n].offset, n) for n in names if self.found[n].path == path):
                    tensor = read_tensor(file, self.found[name], name)
                    tensors[name] = tensor if dtype is None else tensor.to(dtype)
        return tensors


def layer_groups(config: Lfm2Config) -> list[tuple[int | None, list[str]]]:
    """The checkpoint's tensor names by decoder layer, in layer order, then (None) the rest: the
    embedding, the final norm and an untied head."""
    groups: dict[int | None, list[str]] = {}
    for name in config.expected_shapes():
        layer = int(name.split(".")[2]) if name.startswith("model.layers.") else None
        groups.setdefault(layer, []).append(name)
    rest = groups.pop(None, [])
    return [*sorted(groups.items()), (None, rest)]


def load_state_dict(checkpoint_dir: Path, config: Lfm2Config, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every tensor, validated and converted to ``dtype``; raise on any missing/extra/mis-shaped one.

    Everything is checked from the headers first: a header claiming a huge tensor is an error,
    not an allocation.
    """
    return CheckpointTensors(checkpoint_dir, config).read(list(config.expected_shapes()), dtype)


def random_state_dict(
    config: Lfm2Config, seed: int = 0, std: float = 0.02, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """Random weights in checkpoint layout, for tests, benchmarks and the offline demo (`random_tensors`)."""
    return dict(random_tensors(config, seed, std, dtype))


def random_tensors(
    config: Lfm2Config, seed: int = 0, std: float = 0.02, dtype: torch.dtype = torch.float32
) -> Iterator[tuple[str, torch.Tensor]]:
    """Random weights in checkpoint layout, drawn one tensor at a time in expected_shapes' order.

    Norm weights are drawn around 1 so the network stays well-conditioned; matrices use
    ``std``. A larger std gives peakier logits, which keeps greedy tests free of ties. Drawn in
    fp32 and stored in ``dtype`` tensor by tensor, so a bf16 1.7B never exists in fp32 whole.
    """
    gen = torch.Generator().manual_seed(seed)
    for name, shape in config.expected_shapes().items():
        if "norm" in name:
            tensor = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith(".bias"):
            tensor = 0.02 * torch.randn(shape, generator=gen)
        else:
            tensor = std * torch.randn(shape, generator=gen)
        yield name, tensor.to(dtype)


def save_state_dict(tensors: dict[str, torch.Tensor], checkpoint_dir: Path) -> None:
    """Write one ``model.safetensors`` with transformers-compatible metadata."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    contiguous = {k: v.contiguous() for k, v in tensors.items()}
    save_file(contiguous, str(checkpoint_dir / SINGLE_FILE), metadata={"format": "pt"})


SHARD_BYTES = 2 << 30  # a sharded checkpoint's files hold at most this much each (one tensor may be more)


def save_random_weights(
    config: Lfm2Config, checkpoint_dir: Path, seed: int, std: float, dtype: torch.dtype
) -> None:
    """`random_tensors` written as they are drawn: one ``model.safetensors``, or shards of SHARD_BYTES
    and their index (as the Hub's larger checkpoints are), so a bf16 LFM2-8B-A1B (17 GB) is never
    in memory whole."""
    shards: list[list[str]] = [[]]
    size = 0
    for name, shape in config.expected_shapes().items():
        nbytes = math.prod(shape) * dtype.itemsize
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    tensors = random_tensors(config, seed, std, dtype)
    if len(shards) == 1:
        save_state_dict(dict(tensors), checkpoint_dir)
        return
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    total = 0
    for number, names in enumerate(shards, 1):
        shard = dict(itertools.islice(tensors, len(names)))
        file = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(checkpoint_dir / file), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(shard, file)
        total += sum(tensor.nbytes for tensor in shard.values())
        del shard  # before the next is drawn: two shards at once would double the peak
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (checkpoint_dir / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
