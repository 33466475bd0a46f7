"""What the session tests share: the real engine on the tiny checkpoint (one per module), a
LocalBackend over it, and a Store in the test's tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.backend.local import LocalBackend
from app.store.database import Store
from engine import Engine, EngineConfig
from tests.app.pilot_helpers import ENGINE


@pytest.fixture(scope="module")
def engine(tiny_ckpt: Path) -> Engine:
    return Engine.from_pretrained(tiny_ckpt, EngineConfig(**ENGINE), progress=lambda stage, fraction: None)


@pytest.fixture
def backend(engine: Engine) -> Iterator[LocalBackend]:
    backend = LocalBackend(engine, "tiny")
    yield backend
    backend.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(tmp_path / "chats.db")
    yield store
    store.close()
