"""What every chat pane is given by the chat screen, which owns the engine, its worker and the saver."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.conversation import Conversation
from engine import Engine, EngineWorker

Persist = Callable[[Conversation, str], None]


@dataclass(frozen=True, slots=True)
class PaneContext:
    """What all panes share: the engine (tokenizer and context length only), its worker, a files dir,
    and `persist(conversation, partial_reply)`, which saves and never raises."""

    engine: Engine
    worker: EngineWorker
    files_dir: Path
    persist: Persist
