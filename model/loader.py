"""Build an ``Lfm2ForCausalLM`` from a local checkpoint directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from model import kernels as native_kernels
from model.architectures import architecture, load_config
from model.config import Lfm2Config
from model.file_embedding import FILE_READS_SUPPORTED, FileEmbedding
from model.kernels.layout import native_attention
from model.lfm2 import Lfm2ForCausalLM
from model.linears import bf16_cpu_linear, replace_linears
from model.memory import return_large_frees_to_os
from model.quantize import QUANTIZED_LINEARS, quantize_linears
from model.weights import load_state_dict, locate_tensor

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    """Map a user-facing dtype name to torch, with a clear error for anything else."""
    if isinstance(name, torch.dtype):
        return name
    if name not in DTYPES:
        raise ValueError(f"dtype {name!r} is not supported; use one of {', '.join(DTYPES)}")
    return DTYPES[name]


def build_model(
    config: Lfm2Config,
    state_dict: dict[str, torch.Tensor],
    device: torch.device | str = "cpu",
) -> Lfm2ForCausalLM:
    """Wrap validated checkpoint tensors (consumed) in the module, without a random init (meta device)."""
    causal_lm = architecture(config.model_type).causal_lm
    with torch.device("meta"):
        model = causal_lm(config)
    tensors = causal_lm.fuse_checkpoint(state_dict, config)  # consumes state_dict
    if config.tie_word_embeddings:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    model.load_state_dict(tensors, strict=True, assign=True)
    # The module owns the tensors now; the caller's dict must not keep them alive, or packing and
    # quantizing would hold both layouts of every weight at once (+520 MB peak at 350M).
    tensors.clear()
    model.tie_weights()
    return model.to(device).eval()


QUANTIZATIONS = ("none", *QUANTIZED_LINEARS)


def load_model(
    checkpoint_dir: str | Path,
    dtype: str | torch.dtype = "float32",
    device: torch.device | str = "cpu",
    progress: Callable[[int, int], None] | None = None,
    quantize: str = "none",
) -> Lfm2ForCausalLM:
    """Read config.json and the safetensors weights of a local LFM2 checkpoint.

    bf16 on CPU: linears use the native kernels (model/kernels, built on first use) or, where
    those cannot be built, oneDNN-packed weights (model/linears.py). ``quantize`` "int8"
    or "w8a8" stores every linear weight as int8 (model/quantize.py). Where the head no longer
    needs the plain embedding table, embedding rows are read from the checkpoint file instead
    of kept in memory (model/file_embedding.py).
    """
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize {quantize!r} is not supported; use one of {', '.join(QUANTIZATIONS)}")
    checkpoint_dir = Path(checkpoint_dir)
    config = load_config(checkpoint_dir)
    torch_dtype = parse_dtype(dtype)
    on_cpu = torch.device(device).type == "cpu"
    wants_kernels = native_kernels.wanted_for(torch_dtype, device)
    kernels = native_kernels.load() if wants_kernels else None
    return_large_frees_to_os()
    tensors = load_state_dict(checkpoint_dir, config, torch_dtype, progress)
    model = build_model(config, tensors, device)
    # Reading embedding rows from the file needs the table there in the model's dtype, on CPU.
    table = locate_tensor(checkpoint_dir, "model.embed_tokens.weight")
    from_file = table is not None and table.dtype == torch_dtype and on_cpu and FILE_READS_SUPPORTED
    make_linear = bf16_cpu_linear(kernels) if wants_kernels else None
    if quantize != "none":
        quantize_linears(model, quantize, kernels)  # the head gets its own int8 copy
    elif make_linear is not None:
        # A repacked tied head needs its own copy of the table (128 MB at 350M), paid back by
        # reading embedding rows from the file. Where that can't be done, the head stays
        # unpacked and shares the in-memory table (plain F.linear: slower decode).
        skip = ("lm_head",) if config.tie_word_embeddings and not from_file else ()
        replace_linears(model, make_linear, skip=skip)
    if kernels is not None:
        heads = (config.head_dim, config.num_attention_heads, config.num_key_value_heads)
        model.use_native_kernels(kernels, paged_attention=native_attention(*heads))
    head_shares_table = getattr(model.lm_head, "weight", None) is model.model.embed_tokens.weight
    if from_file and not head_shares_table:
        model.model.embed_tokens = FileEmbedding(table)
    return model
