"""The chat pane is its session's view: it has every PaneView member, with the parameters the
session calls it with (a rename on one side fails here, not mid-turn in a Pilot test)."""

from __future__ import annotations

import inspect

from app.session import PaneView, ReplyView
from app.ui.widgets.chat_pane import ChatPane
from app.ui.widgets.reply import Reply


def members(protocol: type) -> list[str]:
    return [name for name in vars(protocol) if not name.startswith("_")]


def parameters(cls: type, name: str) -> set[str]:
    member = inspect.getattr_static(cls, name)
    if isinstance(member, property):
        return {"<property>"}
    return set(inspect.signature(member).parameters) - {"self"}


def test_the_pane_implements_the_session_view() -> None:
    for name in members(PaneView):
        assert hasattr(ChatPane, name), f"ChatPane has no {name}"
        assert parameters(PaneView, name) <= parameters(ChatPane, name), name


def test_a_reply_widget_is_a_reply_view() -> None:
    for name in members(ReplyView):
        assert hasattr(Reply, name), f"Reply has no {name}"
