"""What every pane session of a screen shares, in a module of its own: the session and the tool
loop it is built from both read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.backend.base import Backend
from app.session.saving import ConversationSaver

if TYPE_CHECKING:
    from app.tools.toolbox import ToolBox


@dataclass(slots=True)
class SessionContext:
    """What every session of a screen shares: the backend that generates (one assignment switches
    it for all panes), the saver, and the MCP servers' tools (None: none configured)."""

    backend: Backend
    saving: ConversationSaver
    toolbox: ToolBox | None = field(default=None)
