"""A pane's border: its number and title above, what its context holds and what is in force below."""

from __future__ import annotations

from textual.content import Content

from app.core.sanitize import for_display
from app.session import PaneSession


def pane_border(session: PaneSession, label: str, marked: bool) -> tuple[Content, Content]:
    """(title, subtitle) as plain text, never markup: the title is the user's own first message."""
    conversation = session.conversation
    title = for_display(conversation.title) or "new chat"
    used = session.context_used
    shown = "?" if used is None else f"{'~' * session.context_estimated}{used}"
    limit = session.backend.max_model_len or "?"
    preset = conversation.settings.in_force(session.backend.server_sampling)
    tools = session.tools.summary(session.context.toolbox, conversation.settings)
    held = session.attachments.summary()
    below = f"ctx {shown}/{limit}" + "".join(f" · {part}" for part in (preset, tools, held) if part)
    return Content(f"{'● ' if marked else ''}{label} · {title}"), Content(below)
