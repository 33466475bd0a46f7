"""The settings one benchmark invocation runs under, shared by the parent and its RSS subprocesses."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from bench.workloads import BuildContext, Workload
from model.arch.registry import load_config


@dataclass(frozen=True, slots=True)
class RunSettings:
    checkpoint: Path
    dtype: str  # resolved: "bfloat16" or "float32"
    threads: int
    quick: bool
    seed: int = 0
    poisson_rate: float | None = None  # requests/s; None until calibrated on the first engine's warm-up
    quantize: str = "none"  # our engine's linears: "none", "int8" (weight-only), "w8a8" or "int4"
    hf_dtype: str | None = None  # transformers' dtype where it differs (its fastest on this CPU)
    sampling: str = "greedy"  # bench/sampling.py: "greedy" or "chat" (the app's defaults), both engines
    weights_12bit: bool = False  # our engine's bf16 linears in 12 bits (model/quant/bf12.py), same logits

    @property
    def scheme(self) -> str:
        """Our engine's weight format: the dtype, and the quantization (or 12 bits) where there is one."""
        if self.quantize != "none":
            return f"{self.dtype} + {self.quantize}"
        return f"{self.dtype} 12-bit" if self.weights_12bit else self.dtype

    def dtype_of(self, engine: str) -> str:
        return self.hf_dtype if engine == "transformers" and self.hf_dtype else self.dtype

    def build_context(self, workload: Workload, repetition: int) -> BuildContext:
        """Identical prompts for both engines within a repetition, fresh ones in the next."""
        rng = random.Random(f"{self.seed}:{workload.name}:{repetition}")
        vocab_size = load_config(self.checkpoint).vocab_size
        return BuildContext(rng, self.quick, vocab_size, self.poisson_rate or 1.0)
