"""What every chat pane is given by the chat screen: the backend, a files dir and the saver."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.backend.base import Backend
from app.conversation import Conversation
from app.widgets.frame_pacer import FramePacer

Persist = Callable[[Conversation, str], None]


@dataclass(slots=True)
class PaneContext:
    """What all panes share: the backend that generates, a files dir,
    `persist(conversation, partial_reply)`, which saves and never raises, and the pacer that
    says when a streaming pane may redraw. One object for all panes, so switching the local model
    is one assignment of `backend`."""

    backend: Backend
    files_dir: Path
    persist: Persist
    pacer: FramePacer = field(default_factory=FramePacer)
