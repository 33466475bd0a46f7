"""The title bar says what runs: with a draft model, its name too."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from app.backend.local import LocalBackend
from engine import Engine, EngineConfig
from model.native import kernels
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


@pytest.mark.parametrize("weights_12bit", ["on", "off"])
def test_the_title_says_when_the_weights_are_12_bit(tiny_ckpt_factory, weights_12bit: str) -> None:
    if not kernels.runnable_isas():
        pytest.skip(f"native CPU kernels cannot run on this machine: {kernels.unavailable_reason()}")
    checkpoint = tiny_ckpt_factory("default", dtype=torch.bfloat16)
    config = EngineConfig(**{**ENGINE, "dtype": "bfloat16"}, weights_12bit=weights_12bit)
    backend = LocalBackend(Engine.from_pretrained(checkpoint, config), "tiny")
    try:
        assert ("bfloat16 12-bit ·" in backend.title) == (weights_12bit == "on")
    finally:
        backend.close()
