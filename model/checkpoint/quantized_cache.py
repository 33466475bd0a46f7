"""Quantized weights kept on disk, so a launch after the first reads them instead of quantizing again.

    <cache dir>/<checkpoint digest>-<scheme>-<instruction set>-<dtype>.safetensors
    <cache dir>/digests/*.json    remembered checkpoint digests (model/checkpoint/digest.py)

The cache dir is ``$LFM_CHAT_QUANTIZED_CACHE`` (``0`` turns the cache off) or ``quantized/`` in
the user cache dir. A file holds a quantized model's whole state except the embedding table,
which the checkpoint already holds: the quantized layers' buffers (packed for the kernels that
will run them) and their plain attributes (sizes), the norms and the conv weights. Its header's
metadata holds everything the tensors depend on (`CacheKey`) and a CRC-32 of the rest. A file
whose key differs (another format version, a changed quantization source or kernel build),
whose checksum fails, that is cut short, or that does not fit the model is deleted and rebuilt,
never used; each of those cases says so in the log.

A cached model is rebuilt without running the quantizing constructors at all: the model is
built on the meta device (free), each linear is replaced by its layer class made with
``__new__`` and given the saved attributes and tensors, and the other tensors are assigned. (The
constructors on meta tensors would need no data either, but PyTorch runs meta elementwise ops
through Python decompositions that import torch._dynamo: +2.5 s and +70 MB on first use.)
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import logging
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import platformdirs
import torch
from safetensors.torch import save_file
from torch import nn

from model.checkpoint.atomic_write import remove_abandoned, replacing
from model.checkpoint.digest import checkpoint_digest
from model.checkpoint.progress import FractionDone
from model.checkpoint.weights import file_tensors, read_tensor
from model.errors import CheckpointError
from model.native.kernels import layout
from model.quant.apply import CONVERTED_LINEARS
from model.quant.linear import QuantizedLinear

logger = logging.getLogger(__name__)

CACHE_ENV = "LFM_CHAT_QUANTIZED_CACHE"
FORMAT_VERSION = "1"  # of the file itself: its metadata fields and checksum
_CHECKSUM, _LAYERS = "crc32", "layers"

_KEY_WORDS = {  # CacheKey's fields as a log line names them
    "checkpoint": "checkpoint contents",
    "isa": "instruction set",
    "kernels": "kernel build",
    "code": "quantization code",
    "format": "file format version",
}


def default_dir() -> Path | None:
    """``$LFM_CHAT_QUANTIZED_CACHE``, else the user cache dir's ``quantized``; None when turned off."""
    value = os.environ.get(CACHE_ENV, "")
    if value == "0":
        return None
    return Path(value) if value else platformdirs.user_cache_path("lfm-chat") / "quantized"


@dataclass(frozen=True, slots=True)
class CacheKey:
    """Everything the cached tensors depend on; a file made under any other key is stale."""

    checkpoint: str  # content digest of config.json and the weight files
    scheme: str
    isa: str  # the kernels' instruction set, or "torch" where they do not run the linears
    kernels: str  # the kernels' build (named by a digest of their sources and flags)
    dtype: str
    code: str  # digest of the sources that quantize and pack: the scheme's classes and layout.py
    format: str = FORMAT_VERSION

    @classmethod
    def of(
        cls,
        checkpoint_dir: Path,
        scheme: str,
        kernels: ModuleType | None,
        dtype: torch.dtype,
        cache_dir: Path,
    ) -> CacheKey:
        return cls(
            checkpoint=checkpoint_digest(checkpoint_dir, cache_dir / "digests"),
            scheme=scheme,
            isa="torch" if kernels is None else kernels.ISA,
            kernels="none" if kernels is None else kernels.__name__,
            dtype=str(dtype).removeprefix("torch."),
            code=_code_digest(scheme),
        )

    @property
    def file_name(self) -> str:
        """Stable across upgrades (those change the key, not the name), so a rebuild replaces the file."""
        return f"{self.checkpoint[:16]}-{self.scheme}-{self.isa}-{self.dtype}.safetensors"

    def metadata(self) -> dict[str, str]:
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}


def _code_digest(scheme: str) -> str:
    """The source files of the scheme's class and its model/ base classes, and of the panel layout."""
    classes = [c for c in inspect.getmro(CONVERTED_LINEARS[scheme]) if c.__module__.startswith("model.")]
    sources = {inspect.getsourcefile(c) for c in classes} | {inspect.getsourcefile(layout)}
    files = sorted(cast(set[str], sources))  # model/'s own modules: each has its source file
    digest = hashlib.sha256()
    for name in files:
        digest.update(Path(name).read_bytes())
    return digest.hexdigest()[:16]


class StaleCache(Exception):
    """A cache file that must not be used; the message says why."""


@dataclass(slots=True)
class CachedModel:
    """A cache file's contents: the tensors by state-dict name, and each quantized layer's record
    (its plain attributes, whether it runs on the kernels, which tensors are its parameters)."""

    tensors: dict[str, torch.Tensor]
    layers: dict[str, dict[str, Any]]


def read(path: Path, key: CacheKey, progress: FractionDone | None = None) -> CachedModel | None:
    """What is cached for ``key`` at ``path``, or None: no file, or a bad one (deleted, logged)."""
    if not path.is_file():
        return None
    try:
        return _read_checked(path, key, progress)
    except (StaleCache, CheckpointError, OSError, ValueError) as exc:
        discard(path, exc)
        return None


def _read_checked(path: Path, key: CacheKey, progress: FractionDone | None) -> CachedModel:
    locations, metadata = file_tensors(path)  # sizes checked against the file: a cut-short one fails here
    stored = {name: value for name, value in metadata.items() if name not in (_LAYERS, _CHECKSUM)}
    if stored != key.metadata():
        changed = sorted(name for name in key.metadata() if stored.get(name) != key.metadata()[name])
        raise StaleCache(
            f"stale, made for other {', '.join(_KEY_WORDS.get(n, n) for n in changed) or 'keys'}"
        )
    total = max(1, sum(location.nbytes for location in locations.values()))
    tensors, done = {}, 0
    with path.open("rb") as file:
        for name, location in sorted(locations.items(), key=lambda item: item[1].offset):
            tensors[name] = read_tensor(file, location, name)
            done += location.nbytes
            if progress is not None:
                progress(done / total)
    layers = metadata.get(_LAYERS, "")
    if metadata.get(_CHECKSUM) != checksum(tensors, layers):
        raise StaleCache("its checksum does not match its contents (corrupt)")
    return CachedModel(tensors, json.loads(layers))


def write(path: Path, key: CacheKey, model: nn.Module, scheme: str, skip: tuple[str, ...] = ()) -> None:
    """Cache ``model``'s state (but ``skip``), atomically; a cache that cannot be written is only logged.

    No fsync: a file cut short by a crash fails its checksum on the next read and is rebuilt.
    """
    tensors, layers = _snapshot(model, CONVERTED_LINEARS[scheme], skip)
    record = json.dumps(layers, sort_keys=True)
    metadata = {**key.metadata(), _LAYERS: record, _CHECKSUM: checksum(tensors, record)}
    try:
        remove_abandoned(path.parent)
        with replacing(path) as temporary:
            save_file(tensors, str(temporary), metadata=metadata)
    except OSError as exc:
        logger.warning("could not cache the quantized weights in %s: %s", path, exc)


def _snapshot(
    model: nn.Module, layer_class: type[QuantizedLinear], skip: tuple[str, ...]
) -> tuple[dict[str, torch.Tensor], dict[str, dict[str, Any]]]:
    """The tensors to save (contiguous, none sharing memory: safetensors refuses shared ones) and
    each quantized layer's record."""
    layers = {name: _record(layer) for name, layer in model.named_modules() if type(layer) is layer_class}
    tensors, seen = {}, set()
    for name, tensor in model.state_dict().items():
        if name in skip:
            continue
        tensor = tensor.detach().contiguous()
        if tensor.numel() and tensor.untyped_storage().data_ptr() in seen:
            tensor = tensor.clone()
        seen.add(tensor.untyped_storage().data_ptr())
        tensors[name] = tensor
    return tensors, layers


def _record(layer: nn.Module) -> dict[str, Any]:
    """A quantized layer's state besides its tensors: plain attributes, and whether it runs on the kernels.

    Anything else (a tensor kept as a plain attribute, a non-persistent buffer, a sublayer) could
    not be restored, so it is refused here, when the file is written.
    """
    attributes, kernels = {}, False
    for name, value in vars(layer).items():
        if name == "kernels":
            kernels = value is not None
        elif not name.startswith("_") and name != "training":
            if value is not None and not isinstance(value, bool | int | float | str):
                raise TypeError(f"{type(layer).__name__}.{name} ({type(value).__name__}) cannot be cached")
            attributes[name] = value
    if layer._modules or layer._non_persistent_buffers_set:
        raise TypeError(f"{type(layer).__name__} keeps state the quantized-weights cache cannot restore")
    return {"attributes": attributes, "kernels": kernels, "parameters": sorted(layer._parameters)}


def restore(
    model: nn.Module,
    cached: CachedModel,
    scheme: str,
    kernels: ModuleType | None,
    skip: tuple[str, ...] = (),
) -> None:
    """Put the cached state into ``model``, built on the meta device, in place; StaleCache unless
    it fits exactly (every linear a cached layer of its size, every other tensor's name, shape and
    dtype), so a file that somehow escaped its key never loads into the wrong places."""
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    if linears.keys() != cached.layers.keys():
        raise StaleCache("holds other layers than the model has")
    tensors = dict(cached.tensors)
    layers = {}
    for name, linear in linears.items():
        layer = _rebuilt(CONVERTED_LINEARS[scheme], cached.layers[name], kernels, _take(tensors, f"{name}."))
        if (layer.in_features, layer.out_features) != (linear.in_features, linear.out_features):
            raise StaleCache(f"holds {name} for another shape")
        layers[name] = layer
    expected = {
        name: t
        for name, t in model.state_dict().items()
        if name not in skip and name.rpartition(".")[0] not in linears
    }
    differ = sorted(expected.keys() ^ tensors.keys())
    if differ:
        raise StaleCache(f"{'lacks' if differ[0] in expected else 'has an unexpected'} tensor {differ[0]}")
    for name, meta in expected.items():
        found = tensors[name]
        if (found.shape, found.dtype) != (meta.shape, meta.dtype):
            raise StaleCache(
                f"holds {name} as {found.dtype} {tuple(found.shape)}, not {meta.dtype} {tuple(meta.shape)}"
            )
    for name, layer in layers.items():
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, layer)
    model.load_state_dict(tensors, strict=False, assign=True)


def _take(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """Remove and return the tensors under ``prefix``, by their names below it."""
    names = [name for name in tensors if name.startswith(prefix)]
    return {name.removeprefix(prefix): tensors.pop(name) for name in names}


def _rebuilt(
    layer_class: type[QuantizedLinear],
    record: dict[str, Any],
    kernels: ModuleType | None,
    tensors: dict[str, torch.Tensor],
) -> nn.Module:
    """The layer ``layer_class(linear, kernels)`` made, from its record and tensors, without quantizing."""
    if record["kernels"] and kernels is None:
        raise StaleCache("was packed for kernels that are not loaded")
    layer = layer_class.__new__(layer_class)
    nn.Module.__init__(layer)
    for name, value in record["attributes"].items():
        setattr(layer, name, value)
    layer.kernels = kernels if record["kernels"] else None
    for name, tensor in tensors.items():
        if name in record["parameters"]:
            layer.register_parameter(name, nn.Parameter(tensor, requires_grad=False))
        else:
            layer.register_buffer(name, tensor)
    return layer


def discard(path: Path, reason: object) -> None:
    """Delete a cache file that must not be used, saying why."""
    logger.warning("quantized-weights cache %s: %s; rebuilding it", path, reason)
    path.unlink(missing_ok=True)


def checksum(tensors: dict[str, torch.Tensor], layers: str) -> str:
    """CRC-32 of the layer records and of every tensor's name, dtype, shape and bytes, in name order.

    ~4x faster than sha256 here (0.1 s for 350M's int8 weights), and it only has to catch damage:
    a file made for anything else differs in its key.
    """
    crc = zlib.crc32(layers.encode())
    for name in sorted(tensors):
        tensor = tensors[name]
        crc = zlib.crc32(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode(), crc)
        data = tensor.contiguous().view(-1).view(torch.uint8).numpy()
        crc = zlib.crc32(data, crc)  # type: ignore[arg-type]  # a buffer (numpy's stubs say so on 3.12+)
    return f"{crc:08x}"
