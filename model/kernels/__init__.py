"""Native CPU kernels, compiled once on first use for the widest instruction set the CPU has.

PyTorch's bf16 and int8 CPU kernels read weights at about half the memory bandwidth a 1-16 row
product could use; cpu_linear.cpp streams them at nearly all of it. cpu_attention.cpp attends
single-token queries straight from the paged KV pool, where SDPA needed a padded copy of every
context. cpu_layer_ops.cpp does the elementwise work between the linears (norms, SwiGLU's gate,
the short conv, RoPE) in one pass per group instead of dozens of small ATen ops
(docs/ARCHITECTURE.md has the figures).

Every source is written once over cpu_vec.h's vector layer and compiled for one instruction set
(``ISAS``, widest first). The build takes the widest one the CPU runs; ``LFM_CHAT_ISA=avx2``
forces a narrower one (tests build every set the machine can run). Builds go through
`torch.utils.cpp_extension`, cached under torch's extensions directory per instruction set and
digest of the sources (a changed source is a new build). Without a C++ compiler or any of these
instruction sets (ARM, old x86), `load()` returns None and the model keeps PyTorch's kernels:
slower, never wrong.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from pathlib import Path
from types import ModuleType

import torch

from model.cpu import cpu_flags

logger = logging.getLogger(__name__)

_SOURCE_FILES = ("cpu_linear.cpp", "cpu_attention.cpp", "cpu_layer_ops.cpp", "bindings.cpp")
SOURCES = tuple(Path(__file__).with_name(name) for name in _SOURCE_FILES)
DISABLE_ENV = "LFM_CHAT_NATIVE_KERNELS"  # "0": PyTorch's kernels only (A/B benchmarks, fallback tests)
ISA_ENV = "LFM_CHAT_ISA"  # force one instruction set, e.g. "avx2" on an AVX-512 machine

# Instruction set -> the /proc/cpuinfo flags it needs, widest first. The compiler flags name
# these sets rather than -march=native, so a cached build also runs on the next machine that
# has them (a shared home directory, a copied cache).
ISAS: dict[str, tuple[str, ...]] = {
    "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni", "fma"),
    "avxvnni": ("avx2", "fma", "avx_vnni"),
    "avx2": ("avx2", "fma"),
}
# -ffp-contract=off: no fused multiply-add where the PyTorch code rounds between multiply and add.
_COMMON_CFLAGS = ["-O3", "-fopenmp", "-ffp-contract=off"]


def compile_flags(isa: str) -> list[str]:
    """-m flags naming exactly the instruction set's features (avx512_bf16 -> -mavx512bf16)."""
    return [*_COMMON_CFLAGS, *(f"-m{flag.replace('_', '')}" for flag in ISAS[isa])]


def missing_flags(isa: str, flags: frozenset[str] | None = None) -> list[str]:
    """What ``isa`` needs that the CPU (or the given flags) lacks."""
    flags = cpu_flags() if flags is None else flags
    return [flag for flag in ISAS[isa] if flag not in flags]


def runnable_isas(flags: frozenset[str] | None = None) -> list[str]:
    """The instruction sets this CPU (or one with ``flags``) can run, widest first."""
    flags = cpu_flags() if flags is None else flags
    return [isa for isa in ISAS if not missing_flags(isa, flags)]


def wanted_for(dtype: torch.dtype, device: torch.device | str) -> bool:
    """The kernels serve bf16 models on CPU; every other combination keeps PyTorch's own."""
    return dtype == torch.bfloat16 and torch.device(device).type == "cpu"


def _chosen_isa() -> tuple[str | None, str | None]:
    """The instruction set to build (LFM_CHAT_ISA, else the widest runnable), or None and why not."""
    forced = os.environ.get(ISA_ENV, "").strip().lower()
    if forced:
        if forced not in ISAS:
            return None, f"{ISA_ENV}={forced} is not one of {', '.join(ISAS)}"
        return forced, None
    runnable = runnable_isas()
    if runnable:
        return runnable[0], None
    return None, f"this CPU lacks {', '.join(missing_flags('avx2'))} (and AVX-512)"


@functools.cache
def availability(isa: str | None = None) -> tuple[ModuleType | None, str | None]:
    """The compiled kernels for ``isa`` (None: the chosen one), or None and why not.

    No reason is given when the kernels were turned off on purpose (LFM_CHAT_NATIVE_KERNELS=0).
    """
    if os.environ.get(DISABLE_ENV) == "0":
        return None, None
    if isa is None:
        isa, reason = _chosen_isa()
        if isa is None:
            logger.info("native CPU kernels off: %s", reason)
            return None, reason
    missing = missing_flags(isa)
    if missing:
        reason = f"this CPU lacks {', '.join(missing)}"
        logger.info("native CPU kernels (%s) off: %s", isa, reason)
        return None, reason
    return build(isa)


def load(isa: str | None = None) -> ModuleType | None:
    """The compiled kernels, or None where they cannot run here (`unavailable_reason()` says why)."""
    return availability(isa)[0]


def unavailable_reason(isa: str | None = None) -> str | None:
    """Why `load()` returns None (None when the kernels run, or were turned off on purpose)."""
    return availability(isa)[1]


def clear_cache() -> None:
    """Forget what was decided, so a changed environment (tests) is looked at again."""
    availability.cache_clear()


def _put_ninja_on_path() -> None:
    """torch's builder runs `ninja` from PATH; the ninja package installs it beside the venv's python,
    which is not on PATH unless the venv is activated."""
    try:
        import ninja
    except ImportError:
        return
    if ninja.BIN_DIR not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join((ninja.BIN_DIR, os.environ.get("PATH", "")))


def _digest(sources: tuple[Path, ...], isa: str) -> str:
    """Sources, headers and flags in the build's name: two installs (a checkout and a wheel) with
    different sources get their own builds instead of rebuilding over each other on every load."""
    files = sorted({*sources, *Path(__file__).parent.glob("*.h")})
    digest = hashlib.sha256(" ".join(compile_flags(isa)).encode())
    for path in files:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:10]


def build(isa: str, sources: tuple[Path, ...] = SOURCES) -> tuple[ModuleType | None, str | None]:
    """Compile ``sources`` for ``isa`` (cached by torch); on failure None and the reason."""
    try:
        from torch.utils.cpp_extension import load as load_extension

        _put_ninja_on_path()
        module = load_extension(
            name=f"lfm_chat_cpu_kernels_{isa}_{_digest(sources, isa)}",
            sources=[str(source) for source in sources],
            extra_cflags=compile_flags(isa),
            extra_ldflags=["-fopenmp"],
            extra_include_paths=[str(Path(__file__).parent)],
            verbose=False,
        )
    except Exception as exc:  # no compiler, no ninja, a failed build: fall back, say why once
        lines = str(exc).strip().splitlines()
        reason = f"the build failed: {lines[-1] if lines else type(exc).__name__}"
        logger.warning("native CPU kernels unavailable (%s); using PyTorch's slower kernels", reason)
        return None, reason
    return module, None
