"""Continuous batching for LFM2: the public API the app and the benchmarks use (docs/ENGINE_API.md)."""

from engine.config import EngineConfig
from engine.engine import Engine
from engine.errors import RequestError
from engine.metrics import EngineSnapshot, RequestMetrics, RequestSnapshot
from engine.request import RequestOutput
from engine.sampling_params import SamplingParams, SamplingParamsError
from engine.worker import EngineWorker, StreamHandle, TokenEvent

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
