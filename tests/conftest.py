"""Shared fixtures: tiny random LFM2 checkpoints (real weights cannot be downloaded in CI).

``tiny_ckpt``          Path of the "default" preset (conv-first, GQA, tied head), made once per session.
``tiny_ckpt_factory``  ``make(preset="default", **overrides) -> Path``: a checkpoint for a named preset
                       of ``model.tiny.TINY_CONFIGS``, with any ``write_tiny_checkpoint`` keyword
                       overridden (``seed=1``, ``dtype=torch.bfloat16``, ``layer_types=[...]``...).
                       Each distinct request is written once per session and reused; treat the
                       directories as read-only (copy one with shutil.copytree before editing).

Torch runs single-threaded in tests: the tiny models are far too small to gain from threads, and
on a shared 2-core machine several processes with 2 threads each slow everything down ~50x.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from model.tiny import TINY_CONFIGS, write_tiny_checkpoint

TinyCheckpointFactory = Callable[..., Path]


@pytest.fixture(scope="session", autouse=True)
def _single_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_ckpt_factory(tmp_path_factory: pytest.TempPathFactory) -> TinyCheckpointFactory:
    made: dict[str, Path] = {}

    def make(preset: str = "default", **overrides: Any) -> Path:
        if preset not in TINY_CONFIGS:
            raise KeyError(f"unknown tiny preset {preset!r}; choose from {sorted(TINY_CONFIGS)}")
        key = json.dumps([preset, overrides], sort_keys=True, default=str)
        if key not in made:
            out = tmp_path_factory.mktemp(f"tiny-{preset}")
            made[key] = write_tiny_checkpoint(out, **{**TINY_CONFIGS[preset], **overrides})
        return made[key]

    return make


@pytest.fixture(scope="session")
def tiny_ckpt(tiny_ckpt_factory: TinyCheckpointFactory) -> Path:
    return tiny_ckpt_factory("default")
