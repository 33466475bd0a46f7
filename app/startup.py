"""Getting an engine: the --demo checkpoint, the Hub download and the load, off the UI thread.

torch and the model code are imported here, on the loader thread, not where the app starts:
importing them takes seconds, and the loading screen should be on screen meanwhile.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from app.options import AppOptions

if TYPE_CHECKING:
    from engine import Engine

DEMO_CHECKPOINT = "demo-checkpoint-v1"  # bump when the demo model's shape changes
Progress = Callable[[str, "float | None"], None]


def demo_checkpoint(cache_dir: Path) -> Path:
    """The tiny random checkpoint for --demo, written once; a half-written one is never used."""
    from model.tiny import write_tiny_checkpoint

    final = cache_dir / DEMO_CHECKPOINT
    if (final / "model.safetensors").is_file():
        return final
    partial = cache_dir / f"{DEMO_CHECKPOINT}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    write_tiny_checkpoint(partial)
    try:
        partial.rename(final)
    except OSError:  # another launch finished first: use theirs
        shutil.rmtree(partial, ignore_errors=True)
    return final


def load_engine(options: AppOptions, progress: Progress) -> Engine:
    """Blocking: run in a thread. Raises CheckpointError / ModelNotAvailableError for the user."""
    progress("importing PyTorch", None)
    from engine import Engine

    config = options.engine_config()
    model: str | Path = options.model
    if options.demo:
        progress("writing the demo checkpoint", None)
        model = demo_checkpoint(options.cache_dir)
    return Engine.from_pretrained(model, config, progress=progress)
