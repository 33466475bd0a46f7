"""What every chat pane is given by the chat screen: what its session shares, a files dir, the pacer."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from app.session import SessionContext
from app.ui.frame_pacer import FramePacer


@dataclass(slots=True)
class PaneContext:
    """What all panes share: the sessions' context (the backend that generates and the saver), a
    files dir, and the pacer that says when a streaming pane may redraw. One object for all panes,
    so switching the local model is one assignment of `sessions.backend`."""

    sessions: SessionContext
    files_dir: Path
    pacer: FramePacer = field(default_factory=FramePacer)
