"""Build an ``Lfm2ForCausalLM`` from a local checkpoint directory."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from model.arch.lfm2 import Lfm2ForCausalLM
from model.arch.lfm2_config import Lfm2Config
from model.arch.registry import architecture, load_config
from model.checkpoint import DTYPES
from model.checkpoint import quantized_cache as quantized
from model.checkpoint.file_embedding import FILE_READS_SUPPORTED, FileEmbedding
from model.checkpoint.progress import FractionDone, Progress
from model.checkpoint.weights import (
    EMBEDDING,
    CheckpointTensors,
    TensorLocation,
    checkpoint_tensors,
    layer_groups,
    locate_tensor,
    read_tensor,
    with_checkpoint_head,
)
from model.memory import return_large_frees_to_os
from model.native import kernels as native_kernels
from model.native.accelerate import use_native_kernels
from model.native.kernels.layout import native_attention
from model.native.linears import cpu_linear, replace_linears
from model.quant import BF12, QUANTIZATIONS
from model.quant.apply import quantize_linears
from model.quant.bf12 import packed_12bit


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    """Map a user-facing dtype name (one of ``DTYPES``) to torch, with a clear error for anything else."""
    if isinstance(name, torch.dtype):
        return name
    if name not in DTYPES:
        raise ValueError(f"dtype {name!r} is not supported; use one of {', '.join(DTYPES)}")
    return getattr(torch, name)


TensorSource = Callable[[list[str]], dict[str, torch.Tensor]]  # checkpoint names -> their tensors


def build_model(
    config: Lfm2Config,
    tensors: dict[str, torch.Tensor] | TensorSource,
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    convert: Callable[[nn.Module], object] | None = None,
    progress: FractionDone | None = None,
) -> Lfm2ForCausalLM:
    """The module of ``config``'s architecture holding a checkpoint's tensors, built a layer at a time.

    ``tensors``: the checkpoint's tensors (consumed), or a function reading them by name. The model
    starts on the meta device (no random init); then, for each decoder layer and last for the rest
    (embedding, final norm, head), its tensors are read, fused into the module's layout, cast to the
    dtype the module keeps each in (``empty``) and assigned, and ``convert`` (packing or quantizing
    linears) runs on that layer before the next is read. So the checkpoint's form of the weights
    exists one layer at a time: a bf16 LFM2-8B-A1B (16 GB) quantizes to int8 in ~9 GB.
    ``progress(fraction)`` after each layer, counted in weights.
    """
    causal_lm = architecture(config.model_type).causal_lm
    read = tensors if callable(tensors) else (lambda names: {name: tensors.pop(name) for name in names})
    model = causal_lm.empty(config, dtype)
    dtypes = {name: tensor.dtype for name, tensor in model.state_dict().items()}
    shapes = config.expected_shapes()
    groups = layer_groups(config)
    total, done = sum(math.prod(shape) for shape in shapes.values()), 0
    for layer, names in groups:
        part = read(names)
        if layer is not None:
            part = causal_lm.fuse_layer(part, config, layer)
        part = {name: tensor.to(dtypes[name]) for name, tensor in part.items()}
        if layer is None and config.tie_word_embeddings:
            part["lm_head.weight"] = part[EMBEDDING]
        model.load_state_dict(part, strict=False, assign=True)
        # The module owns the tensors now; this dict must not keep them alive, or packing and
        # quantizing would hold both layouts of the layer's weights at once.
        part.clear()
        if layer is None:
            model.tie_weights()
        if convert is not None:
            convert(model if layer is None else model.model.layers[layer])
        done += sum(math.prod(shapes[name]) for name in names)
        if progress is not None:
            progress(done / max(total, 1))
    unfilled = [name for name, tensor in model.state_dict().items() if tensor.is_meta]
    if unfilled:
        raise RuntimeError(f"{causal_lm.__name__} has tensors no checkpoint tensor filled: {unfilled[:3]}")
    return model.to(device).eval()


def load_model(
    checkpoint_dir: str | Path,
    dtype: str | torch.dtype = "float32",
    device: torch.device | str = "cpu",
    progress: Progress | None = None,
    quantize: str = "none",
    quantized_cache: Path | None = None,
    config: Lfm2Config | None = None,
    weights_12bit: bool = False,
) -> Lfm2ForCausalLM:
    """Read config.json and the safetensors weights of a local LFM2 checkpoint.

    ``config``: the checkpoint's config.json as model/arch/registry.py's ``load_config`` read it,
    where the caller has read it already (engine/loop/build.py's load path reads it once).

    bf16 on CPU: linears use the native kernels (model/native/kernels, built on first use) or, where
    those cannot be built, oneDNN-packed weights (model/native/linears.py). ``quantize`` "int8"
    or "w8a8" stores every linear weight as int8 (model/quant/int8.py); on CPU the result is kept
    in ``quantized_cache`` (a directory; default: model/checkpoint/quantized_cache.py's), and a later load
    reads it from there instead of quantizing again. Where the head no longer needs the plain
    embedding table, embedding rows are read from the checkpoint file instead of kept in memory
    (model/checkpoint/file_embedding.py). ``weights_12bit``: a bf16 model's linears the kernels run
    are stored in 12 bits where that is lossless enough (model/quant/bf12.py), the same numbers,
    converted once and cached as quantized weights are; elsewhere it changes nothing.

    ``progress(stage, fraction)`` names each stage ("loading weights", "quantizing weights
    (int8)", "loading cached int8 weights"...), with the fraction done or None.
    """
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize {quantize!r} is not supported; use one of {', '.join(QUANTIZATIONS)}")
    report = progress or (lambda stage, fraction: None)
    checkpoint_dir = Path(checkpoint_dir)
    config = with_checkpoint_head(config or load_config(checkpoint_dir), checkpoint_tensors(checkpoint_dir))
    torch_dtype = parse_dtype(dtype)
    on_cpu = torch.device(device).type == "cpu"
    wants_kernels = native_kernels.wanted_for(torch_dtype, device)
    kernels = native_kernels.load() if wants_kernels else None
    return_large_frees_to_os()
    # Reading embedding rows from the file needs the table there in the model's dtype (or bf16 rows
    # widened to a float32 model's, exactly), on CPU.
    table = locate_tensor(checkpoint_dir, EMBEDDING)
    from_file = (
        table is not None and widens_exactly(table.dtype, torch_dtype) and on_cpu and FILE_READS_SUPPORTED
    )
    twelve_bits = (
        quantize == "none" and weights_12bit and kernels is not None and torch_dtype == torch.bfloat16
    )
    scheme = BF12 if twelve_bits else quantize
    if scheme != "none":  # the head gets its own quantized (or 12-bit) copy
        cache_dir = (quantized_cache or quantized.default_dir()) if on_cpu else None
        # the quantized kernels take bf16 activations: a float32 model's quantized layers stay PyTorch's
        quant_kernels = kernels if torch_dtype == torch.bfloat16 else None
        load = _QuantizedLoad(checkpoint_dir, config, torch_dtype, scheme, quant_kernels, report)
        model = load.run(device, cache_dir, embedding=None if from_file else table)
        if twelve_bits:
            packed, total = packed_12bit(model)
            report(f"bf16 weights in 12 bits: {packed} of {total} tensors packed", None)
    else:
        make_linear = cpu_linear(kernels, torch_dtype) if wants_kernels else None
        # A repacked tied head needs its own copy of the table (128 MB at 350M), paid back by
        # reading embedding rows from the file. Where that can't be done, the head stays
        # unpacked and shares the in-memory table (plain F.linear: slower decode).
        skip = ("lm_head",) if config.tie_word_embeddings and not from_file else ()
        convert = None if make_linear is None else (lambda module: replace_linears(module, make_linear, skip))
        report("loading weights", 0.0)
        source = CheckpointTensors(checkpoint_dir, config).read
        model = build_model(
            config, source, torch_dtype, device, convert, lambda fraction: report("loading weights", fraction)
        )
    if kernels is not None:
        heads = (config.head_dim, config.num_attention_heads, config.num_key_value_heads)
        use_native_kernels(model, kernels, paged_attention=native_attention(*heads))
    head_shares_table = getattr(model.lm_head, "weight", None) is model.model.embed_tokens.weight
    if from_file and not head_shares_table:
        # a stand-in for the Embedding module; from_file means the table was found
        model.model.embed_tokens = FileEmbedding(table, torch_dtype)  # type: ignore[arg-type,assignment]
    return model


def widens_exactly(stored: torch.dtype, model_dtype: torch.dtype) -> bool:
    """A checkpoint tensor stored as ``stored`` becomes ``model_dtype`` without losing a bit."""
    return stored == model_dtype or (stored == torch.bfloat16 and model_dtype == torch.float32)


@dataclass(frozen=True, slots=True)
class _QuantizedLoad:
    """A quantized model: from the cache (model/checkpoint/quantized_cache.py) when it holds one,
    else quantized now and then cached."""

    checkpoint_dir: Path
    config: Lfm2Config
    dtype: torch.dtype
    scheme: str
    kernels: ModuleType | None
    report: Progress

    @property
    def label(self) -> str:
        """The weights' name in a stage: the scheme's, or "12-bit bf16"."""
        return "12-bit bf16" if self.scheme == BF12 else self.scheme

    def run(
        self, device: torch.device | str, cache_dir: Path | None, embedding: TensorLocation | None
    ) -> Lfm2ForCausalLM:
        """``embedding``: the table to hold in memory, or None when the caller reads rows from the file."""
        if cache_dir is None:
            return self.quantize(device)
        self.report(f"checking for cached {self.label} weights", None)
        key = quantized.CacheKey.of(self.checkpoint_dir, self.scheme, self.kernels, self.dtype, cache_dir)
        path = cache_dir / key.file_name
        model = self.from_cache(path, key, embedding)
        if model is None:
            model = self.quantize(device)
            self.report(f"saving the {self.label} weights for the next launch", None)
            quantized.write(path, key, model, self.scheme, skip=(EMBEDDING,))
        return model

    def from_cache(
        self, path: Path, key: quantized.CacheKey, embedding: TensorLocation | None
    ) -> Lfm2ForCausalLM | None:
        """The model from a valid cache file, else None; no linear weight of the checkpoint is read.

        Built on the meta device (no memory, no work), then given the cached layers and tensors.
        """
        stage = f"loading cached {self.label} weights"
        cached = quantized.read(path, key, lambda fraction: self.report(stage, fraction))
        if cached is None:
            return None
        model = architecture(self.config.model_type).causal_lm.empty(self.config, self.dtype)
        try:
            quantized.restore(model, cached, self.scheme, self.kernels, skip=(EMBEDDING,))
        except quantized.StaleCache as exc:
            quantized.discard(path, exc)
            return None
        if embedding is not None:
            with embedding.path.open("rb") as file:
                weight = read_tensor(file, embedding, EMBEDDING).to(self.dtype)
            model.model.embed_tokens.weight = nn.Parameter(weight, requires_grad=False)
        return model.eval()

    def quantize(self, device: torch.device | str) -> Lfm2ForCausalLM:
        """Read and quantize the checkpoint a layer at a time (build_model)."""
        self.report("loading weights", 0.0)
        source = CheckpointTensors(self.checkpoint_dir, self.config).read
        stage = "packing weights in 12 bits" if self.scheme == BF12 else f"quantizing weights ({self.scheme})"
        self.report(stage, 0.0)
        return build_model(
            self.config,
            source,
            self.dtype,
            device,
            lambda module: quantize_linears(module, self.scheme, self.kernels),
            lambda fraction: self.report(stage, fraction),
        )
