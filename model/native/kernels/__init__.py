"""Native CPU kernels, compiled once on first use for the widest instruction set the CPU has.

cpu_linear.cpp streams weights to the linears at memory speed, where PyTorch's bf16 and int8
CPU kernels do not; cpu_attention.cpp attends single-token queries straight from the paged KV
pool, where SDPA needed a padded copy of every context; cpu_layer_ops.cpp does the elementwise
work between the linears (norms, SwiGLU's gate, the short conv, RoPE) in one pass per group
instead of dozens of small ATen ops. docs/ARCHITECTURE.md has the figures.

Every source is written once over cpu_vec.h's vector layer and compiled for one instruction set
(``ISAS``, widest first). This module decides which set and whether the kernels run at all:
the widest set the CPU runs, or ``LFM_CHAT_ISA=avx2`` to force a narrower one (tests build
every set the machine can run). build.py compiles; layout.py packs weights for the linears.
Without a C++ compiler or any of these instruction sets (ARM, old x86), `load()` returns None
and the model keeps PyTorch's kernels: slower, never wrong.
"""

from __future__ import annotations

import functools
import logging
import os
from types import ModuleType

import torch

from model.native.cpu import cpu_flags
from model.native.kernels.build import ISAS, build, is_built

logger = logging.getLogger(__name__)

DISABLE_ENV = "LFM_CHAT_NATIVE_KERNELS"  # "0": PyTorch's kernels only (A/B benchmarks, fallback tests)
ISA_ENV = "LFM_CHAT_ISA"  # force one instruction set, e.g. "avx2" on an AVX-512 machine


def missing_flags(isa: str, flags: frozenset[str] | None = None) -> list[str]:
    """What ``isa`` needs that the CPU (or the given flags) lacks."""
    flags = cpu_flags() if flags is None else flags
    return [flag for flag in ISAS[isa] if flag not in flags]


def runnable_isas(flags: frozenset[str] | None = None) -> list[str]:
    """The instruction sets this CPU (or one with ``flags``) can run, widest first."""
    flags = cpu_flags() if flags is None else flags
    return [isa for isa in ISAS if not missing_flags(isa, flags)]


def wanted_for(dtype: torch.dtype, device: torch.device | str) -> bool:
    """The kernels serve bf16 and float32 models on CPU; every other combination keeps PyTorch's own."""
    return dtype in (torch.bfloat16, torch.float32) and torch.device(device).type == "cpu"


def chosen_isa() -> tuple[str | None, str | None]:
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
        isa, reason = chosen_isa()
        if isa is None:
            logger.info("native CPU kernels off: %s", reason)
            return None, reason
    missing = missing_flags(isa)
    if missing:
        reason = f"this CPU lacks {', '.join(missing)}"
        logger.info("native CPU kernels (%s) off: %s", isa, reason)
        return None, reason
    return build(isa)


def needs_build(isa: str | None = None) -> bool:
    """Whether `load()` compiles now (a first launch, or new sources): only then is a minute's wait
    worth saying. False where the kernels are off or cannot run (loading them is then instant)."""
    if os.environ.get(DISABLE_ENV) == "0":
        return False
    if isa is None:
        isa = chosen_isa()[0]
    return isa is not None and not missing_flags(isa) and not is_built(isa)


def load(isa: str | None = None) -> ModuleType | None:
    """The compiled kernels, or None where they cannot run here (`unavailable_reason()` says why)."""
    return availability(isa)[0]


def unavailable_reason(isa: str | None = None) -> str | None:
    """Why `load()` returns None (None when the kernels run, or were turned off on purpose)."""
    return availability(isa)[1]


def clear_cache() -> None:
    """Forget what was decided, so a changed environment (tests) is looked at again."""
    availability.cache_clear()
