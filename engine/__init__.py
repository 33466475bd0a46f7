"""Continuous batching for Liquid's models: the public API the app, server and benchmarks use
(docs/ENGINE_API.md).

The names are imported on first use (PEP 562): `from engine import SamplingParams` must not
import torch, which takes seconds, so the app can draw its loading screen before paying for it.

A few names come from model/ (checkpoints, the model card's sampling, the demo checkpoint): the app
needs them and imports only `engine`, so the layers stay app -> engine -> model (tests/test_layers.py).
"""

# ruff: noqa: F401  -- the TYPE_CHECKING imports name the exports for type checkers; __all__ is _MODULES' keys
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.core.choices import DEFAULT_SPECULATIVE, DTYPES, QUANTIZATIONS, SPECULATIVE, WEIGHTS_12BIT
    from engine.core.config import EngineConfig
    from engine.core.errors import PromptTooLong, RequestError
    from engine.core.events import TokenEvent, TokenLogprob
    from engine.core.metrics import RequestMetrics
    from engine.core.sampling_params import (
        MAX_LOGIT_BIAS_ENTRIES,
        MAX_LOGPROBS,
        SamplingParams,
        SamplingParamsError,
    )
    from engine.core.structure import Structure, StructureError
    from engine.loop.engine import Engine
    from engine.loop.launch import (
        ModelSource,
        default_cache_dir,
        demo_checkpoint,
        engine_kwargs,
        load_engine,
    )
    from engine.loop.output import RequestOutput
    from engine.loop.snapshot import EngineSnapshot, RequestSnapshot
    from engine.structured.compiler import check_structure
    from engine.worker.event_stream import EventStream
    from engine.worker.worker import EngineWorker, StreamHandle
    from model.checkpoint.hub import DEFAULT_MODEL, download_checkpoint, is_repo_id, resolve_checkpoint
    from model.checkpoint.progress import Progress
    from model.errors import ChatTemplateError, CheckpointError, ModelNotAvailableError
    from model.text.model_cards import SAMPLING_OFF, FamilySampling, checkpoint_sampling
    from model.text.tool_calls import (
        IndexedCall,
        ToolCall,
        ToolCallStream,
        calls_schema,
        new_call_id,
        render_tool_calls,
    )
    from model.tiny.lfm2 import write_tiny_checkpoint

_MODULES = {
    "DTYPES": "engine.core.choices",
    "QUANTIZATIONS": "engine.core.choices",
    "WEIGHTS_12BIT": "engine.core.choices",
    "SPECULATIVE": "engine.core.choices",
    "DEFAULT_SPECULATIVE": "engine.core.choices",
    "Engine": "engine.loop.engine",
    "EngineConfig": "engine.core.config",
    "EngineSnapshot": "engine.loop.snapshot",
    "EngineWorker": "engine.worker.worker",
    "EventStream": "engine.worker.event_stream",
    "PromptTooLong": "engine.core.errors",
    "RequestError": "engine.core.errors",
    "ModelSource": "engine.loop.launch",
    "default_cache_dir": "engine.loop.launch",
    "demo_checkpoint": "engine.loop.launch",
    "engine_kwargs": "engine.loop.launch",
    "load_engine": "engine.loop.launch",
    "RequestMetrics": "engine.core.metrics",
    "RequestOutput": "engine.loop.output",
    "RequestSnapshot": "engine.loop.snapshot",
    "MAX_LOGIT_BIAS_ENTRIES": "engine.core.sampling_params",
    "MAX_LOGPROBS": "engine.core.sampling_params",
    "SamplingParams": "engine.core.sampling_params",
    "SamplingParamsError": "engine.core.sampling_params",
    "StreamHandle": "engine.worker.worker",
    "TokenLogprob": "engine.core.events",
    "Structure": "engine.core.structure",
    "StructureError": "engine.core.structure",
    "check_structure": "engine.structured.compiler",
    "TokenEvent": "engine.core.events",
    # model/'s, for the app, the launcher and the server (all torch-free but write_tiny_checkpoint)
    "ChatTemplateError": "model.errors",
    "CheckpointError": "model.errors",
    "DEFAULT_MODEL": "model.checkpoint.hub",
    "FamilySampling": "model.text.model_cards",
    "ModelNotAvailableError": "model.errors",
    "Progress": "model.checkpoint.progress",
    "SAMPLING_OFF": "model.text.model_cards",
    "checkpoint_sampling": "model.text.model_cards",
    "IndexedCall": "model.text.tool_calls",
    "ToolCall": "model.text.tool_calls",
    "ToolCallStream": "model.text.tool_calls",
    "new_call_id": "model.text.tool_calls",
    "calls_schema": "model.text.tool_calls",
    "render_tool_calls": "model.text.tool_calls",
    "download_checkpoint": "model.checkpoint.hub",
    "is_repo_id": "model.checkpoint.hub",
    "resolve_checkpoint": "model.checkpoint.hub",
    "write_tiny_checkpoint": "model.tiny.lfm2",
}

__all__ = sorted(_MODULES)  # the table above is the one list to edit


def __getattr__(name: str) -> object:
    """Import the submodule that defines `name` the first time someone asks for it."""
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value
