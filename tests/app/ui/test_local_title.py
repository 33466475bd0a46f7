"""The title bar says what runs: with a draft model, its name too."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backend.local import LocalBackend
from engine import Engine, EngineConfig
from tests.app.pilot_helpers import ENGINE


@pytest.mark.parametrize("drafting", [False, True])
def test_the_title_names_the_draft_model_only_when_one_drafts(tiny_ckpt: Path, drafting: bool) -> None:
    config = EngineConfig(**ENGINE, draft_model=str(tiny_ckpt) if drafting else None)
    backend = LocalBackend(Engine.from_pretrained(tiny_ckpt, config), "tiny")
    try:
        assert ("· draft " in backend.title) == drafting
        assert (f"draft {tiny_ckpt.name}" in backend.title) == drafting
    finally:
        backend.close()
