"""The UI thread gets the CPU before the engine's: however busy the engine, keys show at once."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from app.backend.local import ENGINE_NICE, LocalBackend
from engine import Engine, EngineConfig
from tests.app.pilot_helpers import ENGINE
from tests.waiting import wait_for


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice values are Linux's")
def test_the_engine_thread_runs_nicer_than_the_ui_thread(tiny_ckpt: Path) -> None:
    ui = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    backend = LocalBackend(Engine.from_pretrained(tiny_ckpt, EngineConfig(**ENGINE)), "tiny")
    try:
        engine_thread = backend.worker._thread.native_id
        assert engine_thread is not None
        nicer = min(19, ui + ENGINE_NICE)
        wait_for(
            lambda: os.getpriority(os.PRIO_PROCESS, engine_thread) == nicer,
            "the engine thread's lower priority",
        )
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == ui  # the UI's is untouched
    finally:
        backend.close()
