"""A pane's conversation outside the widget: the session (turn lifecycle, retries, fork, saving),
the view it reports to, the turn in flight, and the saver all sessions of a screen share."""

from app.session.context import SessionContext
from app.session.pane_session import PaneSession
from app.session.saving import ConversationSaver
from app.session.turn import PreparedTurn, Turn
from app.session.view import PaneView, ReplyView

__all__ = [
    "ConversationSaver",
    "PaneSession",
    "PaneView",
    "PreparedTurn",
    "ReplyView",
    "SessionContext",
    "Turn",
]
