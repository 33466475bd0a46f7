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
    from engine.choices import DEFAULT_SPECULATIVE, DTYPES, QUANTIZATIONS, SPECULATIVE
    from engine.config import EngineConfig
    from engine.engine import Engine
    from engine.errors import PromptTooLong, RequestError
    from engine.event_stream import EventStream
    from engine.launch import (
        ModelSource,
        default_cache_dir,
        demo_checkpoint,
        engine_kwargs,
        load_engine,
    )
    from engine.logprobs import TokenLogprob
    from engine.metrics import RequestMetrics
    from engine.output import RequestOutput
    from engine.sampling_params import (
        MAX_LOGIT_BIAS_ENTRIES,
        MAX_LOGPROBS,
        SamplingParams,
        SamplingParamsError,
    )
    from engine.snapshot import EngineSnapshot, RequestSnapshot
    from engine.structured.compiler import check_structure
    from engine.structured.spec import Structure, StructureError
    from engine.worker import EngineWorker, StreamHandle, TokenEvent
    from model.checkpoint.hub import DEFAULT_MODEL, download_checkpoint, is_repo_id, resolve_checkpoint
    from model.checkpoint.progress import Progress
    from model.errors import ChatTemplateError, CheckpointError, ModelNotAvailableError
    from model.text.model_cards import SAMPLING_OFF, FamilySampling, checkpoint_sampling
    from model.text.tool_calls import IndexedCall, ToolCall, ToolCallStream, new_call_id
    from model.tiny.lfm2 import write_tiny_checkpoint

_MODULES = {
    "DTYPES": "engine.choices",
    "QUANTIZATIONS": "engine.choices",
    "SPECULATIVE": "engine.choices",
    "DEFAULT_SPECULATIVE": "engine.choices",
    "Engine": "engine.engine",
    "EngineConfig": "engine.config",
    "EngineSnapshot": "engine.snapshot",
    "EngineWorker": "engine.worker",
    "EventStream": "engine.event_stream",
    "PromptTooLong": "engine.errors",
    "RequestError": "engine.errors",
    "ModelSource": "engine.launch",
    "default_cache_dir": "engine.launch",
    "demo_checkpoint": "engine.launch",
    "engine_kwargs": "engine.launch",
    "load_engine": "engine.launch",
    "RequestMetrics": "engine.metrics",
    "RequestOutput": "engine.output",
    "RequestSnapshot": "engine.snapshot",
    "MAX_LOGIT_BIAS_ENTRIES": "engine.sampling_params",
    "MAX_LOGPROBS": "engine.sampling_params",
    "SamplingParams": "engine.sampling_params",
    "SamplingParamsError": "engine.sampling_params",
    "StreamHandle": "engine.worker",
    "TokenLogprob": "engine.logprobs",
    "Structure": "engine.structured.spec",
    "StructureError": "engine.structured.spec",
    "check_structure": "engine.structured.compiler",
    "TokenEvent": "engine.worker",
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
