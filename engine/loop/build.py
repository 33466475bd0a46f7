"""The one load path: from a model source to the engine's parts, every stage reported to a UI.

    locate     a Hub repo id found in the Hub cache or downloaded (engine/loop/launch.py; a launch runs it
               before importing torch and passes the directory on); a local directory needs none
    config     config.json read once (model/arch/registry.py)
    kernels    the CPU kernels built (once per machine), before the config is resolved: "auto"
               asks whether bf16 runs fast on this CPU
    resolve    the config resolved once (engine/core/config.py): dtype, cache size, context
    weights    read, packed or quantized (model/checkpoint/loader.py, given the config read above)
    tokenizer  the checkpoint's, stopping on the config's eos ids too
    draft      the draft model, if the config names one: the one place one is loaded
    parts      block manager, cache tensors, scheduler, prefill pacer, model runner, output processor

`load_parts` runs them all (Engine.from_pretrained); `parts_for_model` starts from a model its
caller loaded (Engine(model, tokenizer, config)): the config is resolved once against that model,
and the same last two stages follow. The step loop (engine/loop/engine.py) only uses what they return.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from engine.core.config import EngineConfig
from engine.core.drafting import MAX_DRAFT_TOKENS
from engine.kv.block_manager import BlockManager
from engine.loop.output import OutputProcessor
from engine.loop.pacing import PrefillPacer
from engine.loop.runner import ModelRunner
from engine.loop.scheduler import Scheduler
from engine.speculative.draft_model import ModelDrafter
from model.arch.cache import HybridCache
from model.arch.lfm2 import Lfm2ForCausalLM
from model.arch.lfm2_config import Lfm2Config
from model.arch.registry import load_config
from model.checkpoint.hub import locate_checkpoint
from model.checkpoint.loader import load_model
from model.checkpoint.progress import Progress
from model.errors import CheckpointError
from model.native import kernels as native_kernels
from model.quant.bf12 import packed_12bit
from model.text.tokenizer import Tokenizer


def load_parts(
    name_or_path: str | Path, config: EngineConfig, progress: Progress | None = None
) -> EngineParts:
    """Every stage, from a local directory or Hub repo id to the parts (see the module's docstring).

    `progress(stage, fraction)` reports the stages to a UI; without it a Hub download shows
    huggingface_hub's own bars in the terminal.
    """
    report = progress or _silent
    path = Path(name_or_path).expanduser()
    if not path.is_dir():  # a directory is located (as a launch's is, before it imports torch)
        path = locate_checkpoint(str(name_or_path), progress)
    model_config = load_config(path)
    if config.device == "cpu" and native_kernels.runnable_isas():
        if native_kernels.needs_build():
            report("building CPU kernels (first launch only: about a minute)", None)
        native_kernels.load()
    resolved = config.resolve(model_config)
    if resolved.num_threads is not None:
        torch.set_num_threads(resolved.num_threads)
    model = load_model(
        path,
        resolved.dtype,
        resolved.device,
        progress=report,
        quantize=resolved.quantize,
        config=model_config,
        weights_12bit=resolved.weights_12bit == "on",
    )
    tokenizer = Tokenizer.from_pretrained(path, extra_stop_ids=model_config.eos_token_id)
    return _finish(model, tokenizer, resolved, None, report)


def parts_for_model(
    model: Lfm2ForCausalLM, tokenizer: Tokenizer, config: EngineConfig, draft: Lfm2ForCausalLM | None = None
) -> EngineParts:
    """The parts around a model its caller loaded, the config resolved once against it.

    Without `draft`, a config naming a draft model loads it here."""
    resolved = config.resolve(model.config, model_dtype=model.dtype)
    if model.dtype != resolved.torch_dtype:
        # Casting a loaded model would break its packed and quantized layers: load it right instead.
        raise ValueError(
            f"the model was loaded as {model.dtype} but the engine is set to {resolved.dtype}; "
            "load it with that dtype, or leave EngineConfig.dtype as auto"
        )
    return _finish(model, tokenizer, resolved, draft, _silent)


def _finish(
    model: Lfm2ForCausalLM,
    tokenizer: Tokenizer,
    config: EngineConfig,
    draft: Lfm2ForCausalLM | None,
    report: Progress,
) -> EngineParts:
    """Both paths' last stages: the draft model (unless given), then the parts."""
    if draft is None and config.draft_model is not None:
        draft = _load_draft_model(config.draft_model, tokenizer, config, report)
    report("allocating cache", None)
    return build_parts(model, tokenizer, config, draft)


def _silent(stage: str, fraction: float | None) -> None:
    """A Progress that shows nothing."""


def _load_draft_model(
    name_or_path: str, tokenizer: Tokenizer, config: EngineConfig, report: Progress
) -> Lfm2ForCausalLM:
    """The draft model, in the target's dtype and quantization; its tokenizer must be the target's."""

    def draft_report(stage: str, fraction: float | None) -> None:
        report(f"draft model: {stage}", fraction)

    path = locate_checkpoint(name_or_path, draft_report)
    if not tokenizer.same_vocabulary(Tokenizer.from_pretrained(path)):
        raise CheckpointError(
            f"the draft model {name_or_path} has another tokenizer than the model: "
            "its drafts would be other tokens (use one of the same family)"
        )
    return load_model(
        path,
        config.dtype,
        config.device,
        progress=draft_report,
        quantize=config.quantize,
        weights_12bit=config.weights_12bit == "on",
    )


@dataclass(slots=True)
class EngineParts:
    config: EngineConfig  # resolved: dtype, num_kv_blocks, num_sliding_blocks and max_model_len decided
    block_manager: BlockManager
    scheduler: Scheduler
    pacer: PrefillPacer | None  # None: a fixed prefill cap (max_decode_slowdown=None)
    runner: ModelRunner
    outputs: OutputProcessor
    kernel_fallback: str | None  # why the model runs on PyTorch's slower kernels (None: it doesn't)
    packed_12bit: int  # linears whose bf16 weights are held in 12 bits (model/quant/bf12.py)
    model_config: Lfm2Config
    tokenizer: Tokenizer


def build_parts(
    model: Lfm2ForCausalLM, tokenizer: Tokenizer, config: EngineConfig, draft: Lfm2ForCausalLM | None
) -> EngineParts:
    """Size the cache for `model` (and `draft`'s, a draft model's) and wire the parts around it;
    `config` is resolved already."""
    manager = BlockManager(
        config.num_kv_blocks,
        config.block_size,
        config.max_num_seqs,
        config.enable_prefix_caching,
        num_sliding_blocks=config.num_sliding_blocks,
        sliding_window=model.config.attention_window,
        draft_rows=config.max_drafts,
    )
    cache = HybridCache(
        model.config,
        num_blocks=config.num_kv_blocks,
        block_size=config.block_size,
        num_conv_rows=manager.conv_rows.num_rows,
        dtype=config.torch_dtype,
        device=config.device,
        num_sliding_blocks=config.num_sliding_blocks,
    )
    wants_kernels = native_kernels.wanted_for(config.torch_dtype, config.device)
    proposer = None if draft is None else _drafter(draft, model.config.vocab_size, config)  # None: n-grams
    return EngineParts(
        config=config,
        block_manager=manager,
        scheduler=Scheduler(manager, config.max_num_seqs, config.max_num_batched_tokens, config.max_drafts),
        pacer=_pacer(config),
        runner=ModelRunner(model, cache, config.device, proposer),
        outputs=OutputProcessor(tokenizer),
        kernel_fallback=native_kernels.unavailable_reason() if wants_kernels else None,
        packed_12bit=packed_12bit(model)[0],
        model_config=model.config,
        tokenizer=tokenizer,
    )


def _drafter(draft: Lfm2ForCausalLM, vocab_size: int, config: EngineConfig) -> ModelDrafter:
    """The draft model's drafter, its pool holding every running request's whole context within
    kv_cache_memory_mb."""
    if draft.config.vocab_size != vocab_size:
        raise ValueError(
            f"the draft model's vocabulary has {draft.config.vocab_size} tokens, the model's {vocab_size}"
        )
    if config.speculative == "off":
        raise ValueError("a draft model drafts for speculative decoding: set speculative on")
    per_sequence = -(-(config.max_model_len + MAX_DRAFT_TOKENS) // config.block_size)
    block_bytes = HybridCache.bytes_per_block(draft.config, config.block_size, draft.dtype)
    block_bytes += HybridCache.bytes_per_sliding_block(draft.config, config.block_size, draft.dtype)
    budget = max(1, config.kv_cache_memory_mb * 2**20 // block_bytes)
    blocks = min(config.max_num_seqs * per_sequence, budget)
    return ModelDrafter(draft, blocks, config.block_size, config.max_num_seqs, config.device)


def _pacer(config: EngineConfig) -> PrefillPacer | None:
    if config.max_decode_slowdown is None:
        return None
    return PrefillPacer(
        max_slowdown=config.max_decode_slowdown,
        initial_cap=config.max_prefill_with_decodes,
        floor=min(8, config.max_prefill_with_decodes),
        ceiling=config.max_num_batched_tokens,
    )
