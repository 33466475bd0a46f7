"""Native CPU kernels, compiled once on first use: linear layers, decode attention, layer ops.

PyTorch's bf16 and int8 CPU kernels read weights at about half the memory bandwidth a 1-16 row
product could use; cpu_linear.cpp streams them at nearly all of it. cpu_attention.cpp attends
single-token queries straight from the paged KV pool, where SDPA needed a padded copy of every
context. cpu_layer_ops.cpp does the elementwise work between the linears (norms, SwiGLU's gate,
the short conv, RoPE) in one pass per group instead of dozens of small ATen ops
(docs/ARCHITECTURE.md has the figures). The sources are built with
`torch.utils.cpp_extension` the first time a model needs them (~1 minute, cached under torch's
extensions directory, rebuilt only when a source changes). Without a C++ compiler or the CPU
instructions they use, `load()` returns None and the model keeps PyTorch's kernels: slower,
never wrong.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from types import ModuleType

import torch

from model.cpu import cpu_flags

logger = logging.getLogger(__name__)

_SOURCE_FILES = ("cpu_linear.cpp", "cpu_attention.cpp", "cpu_layer_ops.cpp", "bindings.cpp")
SOURCES = tuple(Path(__file__).with_name(name) for name in _SOURCE_FILES)
REQUIRED_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni")
DISABLE_ENV = "LFM_CHAT_NATIVE_KERNELS"  # "0": PyTorch's kernels only (A/B benchmarks, fallback tests)
# Named instruction sets, not -march=native: the cached build must also run on the next machine
# that has these flags (a shared home directory, a copied cache).
# -ffp-contract=off: no fused multiply-add where the PyTorch code rounds between multiply and add.
_CFLAGS = [
    "-O3",
    "-fopenmp",
    "-mfma",
    "-ffp-contract=off",
    *(f"-m{f.replace('_', '')}" for f in REQUIRED_FLAGS),
]


def missing_cpu_flags() -> list[str]:
    flags = cpu_flags()
    return [flag for flag in REQUIRED_FLAGS if flag not in flags]


def wanted_for(dtype: torch.dtype, device: torch.device | str) -> bool:
    """The kernels serve bf16 models on CPU; every other combination keeps PyTorch's own."""
    return dtype == torch.bfloat16 and torch.device(device).type == "cpu"


@functools.cache
def availability() -> tuple[ModuleType | None, str | None]:
    """The compiled kernels, or None and why not (no reason when turned off on purpose)."""
    if os.environ.get(DISABLE_ENV) == "0":
        return None, None
    missing = missing_cpu_flags()
    if missing:
        reason = f"this CPU lacks {', '.join(missing)}"
        logger.info("native CPU kernels off: %s", reason)
        return None, reason
    return build(SOURCES, "lfm_chat_cpu_kernels")


def load() -> ModuleType | None:
    """The compiled kernels, or None where they cannot run here (`unavailable_reason()` says why)."""
    return availability()[0]


def unavailable_reason() -> str | None:
    """Why `load()` returns None (None when the kernels run, or were turned off on purpose)."""
    return availability()[1]


def _put_ninja_on_path() -> None:
    """torch's builder runs `ninja` from PATH; the ninja package installs it beside the venv's python,
    which is not on PATH unless the venv is activated."""
    try:
        import ninja
    except ImportError:
        return
    if ninja.BIN_DIR not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join((ninja.BIN_DIR, os.environ.get("PATH", "")))


def build(sources: tuple[Path, ...], name: str) -> tuple[ModuleType | None, str | None]:
    """Compile ``sources`` as extension ``name`` (cached by torch); on failure None and the reason."""
    try:
        from torch.utils.cpp_extension import load as load_extension

        _put_ninja_on_path()
        module = load_extension(
            name=name,
            sources=[str(source) for source in sources],
            extra_cflags=_CFLAGS,
            extra_ldflags=["-fopenmp"],
            verbose=False,
        )
    except Exception as exc:  # no compiler, no ninja, a failed build: fall back, say why once
        lines = str(exc).strip().splitlines()
        reason = f"the build failed: {lines[-1] if lines else type(exc).__name__}"
        logger.warning("native CPU kernels unavailable (%s); using PyTorch's slower kernels", reason)
        return None, reason
    return module, None


PANEL = 64  # outputs per panel of the packed layout (cpu_linear.cpp)
PAIR, QUAD = 2, 4  # k values per group: bf16 panels hold pairs (vdpbf16ps), int8 ones quads (vpdpbusd)


def native_width(in_features: int) -> bool:
    """The kernels walk K in groups of 4 (w8a8's quads); every LFM2 width qualifies."""
    return in_features % QUAD == 0


def native_attention(head_dim: int, heads: int, kv_heads: int) -> bool:
    """What cpu_attention.cpp's decode_attention takes: head_dim <= 256, <= 16 queries per kv head."""
    return head_dim <= 256 and heads % kv_heads == 0 and heads // kv_heads <= 16


def pack_panels(weight: torch.Tensor, group: int) -> torch.Tensor:
    """[N, K] -> [ceil(N / 64), K / group, 64, group]: the layout cpu_linear.cpp streams.

    Rows past N are zero padding (their outputs are never stored). K must divide by 4.
    """
    n, k = weight.shape
    padded = -(-n // PANEL) * PANEL
    if padded != n:
        weight = torch.cat((weight, weight.new_zeros(padded - n, k)))
    return weight.view(padded // PANEL, PANEL, k // group, group).transpose(1, 2).contiguous()


def pad_outputs(values: torch.Tensor) -> torch.Tensor:
    """A per-output vector [N] padded with zeros to whole panels, as the kernels read it."""
    padded = -(-values.shape[0] // PANEL) * PANEL
    return torch.cat((values, values.new_zeros(padded - values.shape[0])))
