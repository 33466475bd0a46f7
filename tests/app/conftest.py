"""App test fixtures: options that isolate each test's data dir, and a reference engine.

Every app test runs the real engine on the session's tiny random checkpoint. The reference
engine (same checkpoint, same config) computes what a pane should show, relying on the
engine's batch invariance: greedy output does not depend on what else was in the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.core.conversation import ChatSettings
from app.core.options import AppOptions
from engine import Engine, EngineConfig, RequestOutput
from tests.app.pilot_helpers import ENGINE, GREEDY


@pytest.fixture
def make_options(tiny_ckpt: Path, tmp_path: Path) -> Callable[..., AppOptions]:
    """`make_options(**AppOptions fields)`: the tiny checkpoint, greedy replies, a private data dir."""

    def make(**overrides: Any) -> AppOptions:
        fields: dict[str, Any] = {
            "model": str(tiny_ckpt),
            "engine": EngineConfig(**ENGINE),
            "chat": GREEDY,
            "data_dir": tmp_path / "data",
            "cache_dir": tmp_path / "cache",
            "snapshot_interval": 0.05,
            **overrides,
        }
        return AppOptions(**fields)

    return make


@pytest.fixture(scope="session")
def reference_engine(tiny_ckpt: Path) -> Engine:
    return Engine.from_pretrained(tiny_ckpt, EngineConfig(**ENGINE), progress=lambda stage, fraction: None)


@pytest.fixture(scope="session")
def reference(reference_engine: Engine) -> Callable[[list[dict[str, str]], ChatSettings], RequestOutput]:
    """`reference(chat messages, settings)`: the engine's output for a first turn, run alone."""

    def run(messages: list[dict[str, str]], settings: ChatSettings) -> RequestOutput:
        ids = reference_engine.tokenizer.encode_chat(messages)
        return reference_engine.generate([ids], settings.sampling_params())[0]

    return run
