"""Which checkpoint a launch runs, and getting an engine on it: shared by the app and `serve`.

Torch-free to import: torch and the model code load inside `load_engine`, which the app runs on
its loader thread (the loading screen is drawn first) and `serve` before it listens. The load
path's first stage, `locate_checkpoint` (model/checkpoint/hub.py), runs here first (huggingface_hub
needs no torch), so a model that cannot be had is reported without waiting for torch, and a first
download reports its bytes; the rest of the path is engine/loop/build.py's, through
`Engine.from_pretrained`.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import platformdirs

from model.checkpoint.hub import DEFAULT_MODEL, checkpoint_label, locate_checkpoint
from model.text.model_cards import FamilySampling, checkpoint_sampling

if TYPE_CHECKING:
    from engine.core.config import EngineConfig
    from engine.loop.engine import Engine
    from model.checkpoint.progress import Progress


T = TypeVar("T")


def default_cache_dir() -> Path:
    """Where the demo checkpoint goes (model/checkpoint/quantized_cache.py keeps its own folder beside it)."""
    return platformdirs.user_cache_path("lfm-chat")


DEMO_CHECKPOINT = "demo-checkpoint-v1"  # bump when the demo model's shape changes
DEMO_KV_CACHE_MB = 64  # the toy model's KV cache: the default 1 GB would be ~200k blocks


@dataclass(frozen=True, slots=True)
class ModelSource:
    """A Hub repo id or local checkpoint directory (at a revision of the repo), or --demo's toy model."""

    model: str = DEFAULT_MODEL
    revision: str | None = None  # a branch, tag or commit of a Hub repo; None = main
    demo: bool = False

    @property
    def label(self) -> str:
        """The model as a title names it: a repo id (@revision), or a local directory's name."""
        return "demo (random weights)" if self.demo else checkpoint_label(self.model, self.revision)

    def sampling_defaults(self, flags: dict[str, float | int]) -> FamilySampling:
        """The model card's sampling for this checkpoint (LFM2 and LFM2.5 differ) with `flags` on top.

        Reads a local checkpoint's config.json (no torch); the demo's toy model takes LFM2's.
        """
        return checkpoint_sampling(DEFAULT_MODEL if self.demo else self.model).overridden(flags)


def engine_kwargs(source: ModelSource, flags: dict[str, Any]) -> dict[str, Any]:
    """The engine flags as `source` runs them: the demo's toy model gets a small KV cache and float32
    when the dtype is auto (bf16 only adds casts). Applied at load, not by the CLI, so an app that
    switches from --demo to a real checkpoint (or back) runs each with its own."""
    if not source.demo:
        return flags
    dtype = "float32" if flags.get("dtype", "auto") == "auto" else flags["dtype"]
    return {"kv_cache_memory_mb": DEMO_KV_CACHE_MB, **flags, "dtype": dtype}


def demo_checkpoint(cache_dir: Path) -> Path:
    """The tiny random checkpoint for --demo, written once; a half-written one is never used."""
    from model.tiny.lfm2 import write_tiny_checkpoint

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


def load_engine(
    source: ModelSource, config: EngineConfig | dict[str, Any], cache_dir: Path, progress: Progress
) -> Engine:
    """Blocking: run it off any UI thread. Raises CheckpointError / ModelNotAvailableError for the user.

    `config` may be the keyword arguments of an EngineConfig: building one imports torch.
    """
    checkpoint = None if source.demo else locate_checkpoint(source.model, progress, source.revision)
    return on_a_passing_thread(lambda: _engine_on(checkpoint, source, config, cache_dir, progress))


def _engine_on(
    checkpoint: Path | None,
    source: ModelSource,
    config: EngineConfig | dict[str, Any],
    cache_dir: Path,
    progress: Progress,
) -> Engine:
    progress("importing PyTorch", None)
    from engine.core.config import EngineConfig
    from engine.loop.engine import Engine

    if isinstance(config, dict):
        config = EngineConfig(**engine_kwargs(source, config))
    if checkpoint is None:
        progress("writing the demo checkpoint", None)
        checkpoint = demo_checkpoint(cache_dir)
    return Engine.from_pretrained(checkpoint, config, progress=progress)


def on_a_passing_thread(build: Callable[[], T]) -> T:
    """``build()`` on a thread that ends when it returns; its result or its exception.

    Loading packs the weights in parallel loops, and OpenMP (libgomp) keeps a pool of worker
    threads for every thread that ran one, for as long as that thread lives. Left on the caller's
    thread (`serve`'s main thread), that idle pool makes the engine thread's team count more
    threads than cores, and libgomp then stops spinning between parallel loops: each of a step's
    ~100 kernels waits for its worker to wake, and a decode step took ~10% longer
    (docs/PERFORMANCE.md, 2026-11-30)."""
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, build()))
        except BaseException as exc:  # handed to the caller, who raises it as its own
            outcome.append((False, exc))

    thread = threading.Thread(target=run, name="lfm-load", daemon=True)  # daemon: ctrl+c still quits
    thread.start()
    thread.join()
    succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return value
