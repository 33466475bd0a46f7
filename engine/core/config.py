"""Engine settings, and how the "auto" values are resolved against a model and a machine."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from engine.core.choices import (
    DEFAULT_SPECULATIVE,
    DTYPES,
    ENGINE_DTYPES,
    QUANTIZATIONS,
    SPECULATIVE,
    WEIGHTS_12BIT,
)
from engine.core.drafting import MAX_DRAFT_TOKENS
from model.arch.cache import HybridCache
from model.arch.lfm2_config import Lfm2Config
from model.checkpoint.loader import parse_dtype
from model.native import kernels as native_kernels
from model.quant.bf12 import FASTER_ON

DEFAULT_MAX_MODEL_LEN = 32768


@dataclass(slots=True)
class EngineConfig:
    """What the engine may use; fields left as None/"auto" are filled in by `resolve`."""

    device: str = "cpu"
    dtype: str = "auto"
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 256
    # prefill tokens allowed in a step that also decodes (the start value when paced, see below)
    max_prefill_with_decodes: int = 32
    # pace prefill so a step that also decodes takes at most this multiple of a decode-only step
    # while one prompt waits, widening with each further one (measured at run time,
    # engine/loop/pacing.py); None keeps max_prefill_with_decodes fixed.
    # 1.8 rather than 2: a long prompt's later chunks cost more than the running estimate (they
    # attend over more context), so at 2.0 the streams' worst gaps overshot (docs/ARCHITECTURE.md).
    max_decode_slowdown: float | None = 1.8
    block_size: int = 16
    max_model_len: int | None = None
    num_kv_blocks: int | None = None
    # blocks of the sliding-window layers' own pool (LFM3); None: sized from the window (see resolve)
    num_sliding_blocks: int | None = None
    kv_cache_memory_mb: int = 1024
    enable_prefix_caching: bool = True
    quantize: str = "none"  # "int8" (weight-only int8 linears), "w8a8" (int8 activations too) or "int4"
    # bf16 linears stored losslessly in 12 bits (model/quant/bf12.py), same logits: "on", "off", or
    # "auto": on where the kernels' instruction set measured faster with them (resolve decides)
    weights_12bit: str = "auto"
    num_threads: int | None = None
    seed: int = 0
    # "ngram": decoding requests draft from their own context and verify the drafts in the batch
    # (engine/core/drafting.py); "off": one token per request per step
    speculative: str = DEFAULT_SPECULATIVE
    # a smaller model with the same tokenizer (Hub id or directory) that drafts instead of the n-grams
    # (engine/speculative/draft_model.py); needs speculative on
    draft_model: str | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"EngineConfig.dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}")
        if self.quantize not in QUANTIZATIONS:
            raise ValueError(
                f"EngineConfig.quantize must be one of {', '.join(QUANTIZATIONS)}, not {self.quantize!r}"
            )
        if self.weights_12bit not in WEIGHTS_12BIT:
            choices = ", ".join(WEIGHTS_12BIT)
            raise ValueError(
                f"EngineConfig.weights_12bit must be one of {choices}, not {self.weights_12bit!r}"
            )
        if self.speculative not in SPECULATIVE:
            raise ValueError(
                f"EngineConfig.speculative must be one of {', '.join(SPECULATIVE)}, not {self.speculative!r}"
            )
        if self.draft_model is not None and self.speculative == "off":
            raise ValueError("EngineConfig.draft_model drafts for speculative decoding: set speculative on")
        positive = (
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_prefill_with_decodes",
            "block_size",
            "kv_cache_memory_mb",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"EngineConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_model_len", "num_kv_blocks", "num_threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"EngineConfig.{name} must be None or >= 1, got {value}")
        if self.num_sliding_blocks is not None and self.num_sliding_blocks < 0:  # 0: the model has no window
            raise ValueError(
                f"EngineConfig.num_sliding_blocks must be None or >= 0, got {self.num_sliding_blocks}"
            )
        if self.max_decode_slowdown is not None and not self.max_decode_slowdown > 1:
            raise ValueError(
                f"EngineConfig.max_decode_slowdown must be > 1 or None, got {self.max_decode_slowdown}"
            )
        # Every running sequence must be able to decode in every step, or a stream could stall.
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("EngineConfig.max_num_batched_tokens must be >= max_num_seqs")

    @property
    def max_drafts(self) -> int:
        """Drafted tokens a decoding request may verify per step: every running request's fit in the
        token budget together, so none is ever cut short by its neighbours (0: speculation off)."""
        if self.speculative == "off":
            return 0
        return max(0, min(MAX_DRAFT_TOKENS, self.max_num_batched_tokens // self.max_num_seqs - 1))

    @property
    def torch_dtype(self) -> torch.dtype:
        """The resolved dtype as a torch.dtype (only valid after `resolve`)."""
        return parse_dtype(self.dtype)

    def resolve(self, model_config: Lfm2Config, model_dtype: torch.dtype | None = None) -> EngineConfig:
        """A copy with dtype, num_kv_blocks, num_sliding_blocks, max_model_len and weights_12bit decided.

        dtype "auto" takes ``model_dtype`` when a model is already loaded, else the machine's best.

        The sliding-window pool (0 blocks without such layers) comes out of kv_cache_memory_mb
        first; the rest is the full-attention pool. max_model_len is capped by that pool, so any
        single request that passes admission can always finish alone: preemption can never loop
        on one oversized request.
        """
        loaded = {parse_dtype(name): name for name in ENGINE_DTYPES}.get(model_dtype)
        dtype = loaded if self.dtype == "auto" and loaded else resolve_dtype(self.dtype, self.device)
        sliding = self._sliding_blocks(model_config.attention_window)
        sliding_bytes = sliding * HybridCache.bytes_per_sliding_block(
            model_config, self.block_size, parse_dtype(dtype)
        )
        block_bytes = HybridCache.bytes_per_block(model_config, self.block_size, parse_dtype(dtype))
        budget = self.kv_cache_memory_mb * 2**20 - sliding_bytes
        blocks = self.num_kv_blocks or max(1, budget // block_bytes)
        positions = model_config.max_position_embeddings
        limit = min(self.max_model_len or DEFAULT_MAX_MODEL_LEN, positions, blocks * self.block_size)
        return dataclasses.replace(
            self,
            dtype=dtype,
            num_kv_blocks=blocks,
            num_sliding_blocks=sliding,
            max_model_len=limit,
            weights_12bit=self._weights_12bit(dtype),
        )

    def _weights_12bit(self, dtype: str) -> str:
        """ "on" where 12-bit weights would be loaded: a bf16, unquantized model on the CPU kernels,
        asked for or (auto) where their instruction set measured faster with them; else "off"."""
        if self.weights_12bit == "off" or self.quantize != "none" or dtype != "bfloat16":
            return "off"
        if not native_kernels.wanted_for(torch.bfloat16, self.device):
            return "off"
        isa, _ = native_kernels.chosen_isa()
        return "on" if self.weights_12bit == "on" or isa in FASTER_ON else "off"

    def _sliding_blocks(self, window: int | None) -> int:
        """The sliding-window pool: every running sequence's window plus what a step's chunks add,
        and as many windows again for the prefix cache (a finished turn's last window, which its
        next turn resumes from). It does not grow with the context: those layers never look back
        further than the window.
        """
        if window is None:
            return 0
        held = -(-(window - 1) // self.block_size) + 1  # blocks a sequence holds between steps
        if self.num_sliding_blocks is not None:
            if self.num_sliding_blocks <= held:
                raise ValueError(
                    f"EngineConfig.num_sliding_blocks must be > {held} for a {window}-position window "
                    f"in blocks of {self.block_size}, got {self.num_sliding_blocks}"
                )
            return self.num_sliding_blocks
        step = self.max_num_seqs + -(-self.max_num_batched_tokens // self.block_size)
        return 2 * self.max_num_seqs * held + step


def cpu_runs_bf16_fast() -> bool:
    """True where model/native/kernels built for this CPU (AVX-512 BF16 or AVX2 + FMA; built on first call).

    There bf16 weights stream at memory speed, half the bytes of float32, with fp32 sums.
    Without that build (ARM, old x86, no compiler) torch's bf16 matmuls are slower than
    float32 (docs/ARCHITECTURE.md has the figures for both).
    """
    return native_kernels.load() is not None


def resolve_dtype(dtype: str, device: str) -> str:
    """ "auto" means bf16 on CUDA or on a CPU the native kernels serve, float32 otherwise."""
    if dtype != "auto":
        return dtype
    if device.startswith("cuda"):
        return "bfloat16"
    return "bfloat16" if cpu_runs_bf16_fast() else "float32"
