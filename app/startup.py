"""Getting a backend: the --demo checkpoint, the Hub download and the engine load, off the UI thread.

torch and the model code are imported here, on the loader thread, not where the app starts:
importing them takes seconds, and the loading screen should be on screen meanwhile. The Hub
download comes first (huggingface_hub needs no torch): a model that cannot be had is reported
without waiting for torch, and a first download shows its bytes on the loading screen.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from app.backend.http_errors import ServerError
from app.backend.local import LocalBackend
from app.options import AppOptions
from engine import DEFAULT_MODEL, CheckpointError, ModelNotAvailableError, resolve_checkpoint

if TYPE_CHECKING:
    from app.backend.base import Backend
    from engine import Engine

DEMO_CHECKPOINT = "demo-checkpoint-v1"  # bump when the demo model's shape changes
Progress = Callable[[str, "float | None"], None]
STARTUP_ERRORS = (
    CheckpointError,
    ModelNotAvailableError,
    ServerError,
)  # their message is the user's paragraph


def demo_checkpoint(cache_dir: Path) -> Path:
    """The tiny random checkpoint for --demo, written once; a half-written one is never used."""
    from engine import write_tiny_checkpoint

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


def locate_checkpoint(options: AppOptions, progress: Progress) -> Path:
    """The checkpoint directory for --model and --revision, downloading it with its bytes reported."""
    progress("locating checkpoint", None)
    return resolve_checkpoint(
        options.model,
        revision=options.revision,
        on_transfer=lambda transfer: progress(
            f"downloading {options.model_label}: {transfer}", transfer.fraction
        ),
    )


def load_backend(options: AppOptions, progress: Progress) -> Backend:
    """Blocking: run in a thread. Raises one of STARTUP_ERRORS for the user."""
    if options.server is None:
        return LocalBackend(load_engine(options, progress), options.model_label)
    from app.backend.remote import RemoteBackend

    progress(f"asking {options.server} for its models", None)
    named = options.model if options.model != DEFAULT_MODEL else None  # else: whichever it serves
    return RemoteBackend.connect(options.server, options.api_key, named, options.snapshot_interval)


def load_engine(options: AppOptions, progress: Progress) -> Engine:
    """Blocking: run in a thread. Raises CheckpointError / ModelNotAvailableError for the user."""
    checkpoint = None if options.demo else locate_checkpoint(options, progress)
    progress("importing PyTorch", None)
    from engine import Engine

    config = options.engine_config()
    if checkpoint is None:
        progress("writing the demo checkpoint", None)
        checkpoint = demo_checkpoint(options.cache_dir)
    return Engine.from_pretrained(checkpoint, config, progress=progress)
