"""Engines by name, imported lazily: measuring our engine's RSS must not pay for importing transformers."""

from __future__ import annotations

from typing import Protocol

from bench.scenario import RequestTrace, Scenario
from bench.settings import RunSettings

ENGINES = ("ours", "transformers")
OURS_METHOD = "continuous batching; each request admitted when it arrives"


class Backend(Protocol):
    name: str

    def run(self, scenario: Scenario) -> list[RequestTrace]: ...


def run_checked(backend: Backend, scenario: Scenario) -> list[RequestTrace]:
    """Run, then insist every request produced exactly its token count: otherwise figures do not compare."""
    traces = backend.run(scenario)
    for i, (spec, trace) in enumerate(zip(scenario.requests, traces, strict=True)):
        if len(trace.token_times) != spec.max_new_tokens:
            raise RuntimeError(
                f"{backend.name} produced {len(trace.token_times)} tokens for request {i}, "
                f"not the {spec.max_new_tokens} asked for"
            )
    return traces


def load_backend(name: str, settings: RunSettings) -> Backend:
    """The engine ``name`` under ``settings``: `quantize` applies to our engine only (the baseline runs
    the checkpoint as-is in its dtype), `sampling` (bench/sampling.py) to both."""
    checkpoint, dtype = settings.checkpoint, settings.dtype_of(name)
    if name == "ours":
        from bench.ours import OursBackend

        return OursBackend(checkpoint, dtype, settings.quantize, settings.sampling, settings.weights_12bit)
    if name == "transformers":
        from bench.hf import TransformersBackend

        return TransformersBackend(checkpoint, dtype, settings.sampling)
    raise ValueError(f"unknown engine {name!r}; choose from {', '.join(ENGINES)}")
