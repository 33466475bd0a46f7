"""Continuous batching for LFM2: the public API the app and the benchmarks use (docs/ENGINE_API.md).

The names are imported on first use (PEP 562): `from engine import SamplingParams` must not
import torch, which takes seconds, so the app can draw its loading screen before paying for it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.config import EngineConfig
    from engine.engine import Engine
    from engine.errors import RequestError
    from engine.metrics import RequestMetrics
    from engine.output import RequestOutput
    from engine.sampling_params import SamplingParams, SamplingParamsError
    from engine.snapshot import EngineSnapshot, RequestSnapshot
    from engine.worker import EngineWorker, StreamHandle, TokenEvent

_MODULES = {
    "Engine": "engine.engine",
    "EngineConfig": "engine.config",
    "EngineSnapshot": "engine.snapshot",
    "EngineWorker": "engine.worker",
    "RequestError": "engine.errors",
    "RequestMetrics": "engine.metrics",
    "RequestOutput": "engine.output",
    "RequestSnapshot": "engine.snapshot",
    "SamplingParams": "engine.sampling_params",
    "SamplingParamsError": "engine.sampling_params",
    "StreamHandle": "engine.worker",
    "TokenEvent": "engine.worker",
}

__all__ = [
    "Engine",
    "EngineConfig",
    "EngineSnapshot",
    "EngineWorker",
    "RequestError",
    "RequestMetrics",
    "RequestOutput",
    "RequestSnapshot",
    "SamplingParams",
    "SamplingParamsError",
    "StreamHandle",
    "TokenEvent",
]


def __getattr__(name: str) -> object:
    """Import the submodule that defines `name` the first time someone asks for it."""
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value
