"""The scrolling record of one pane's conversation: user turns, streamed replies, notices."""

from __future__ import annotations

from collections.abc import Iterable

from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Markdown, Static

from app.conversation import ChatMessage
from app.sanitize import strip_control


def user_widget(text: str) -> Static:
    return Static(strip_control(text), classes="user", markup=False)


def reply_widget(text: str) -> Markdown:
    """Model output rendered as Markdown; links are not opened on click (the text is untrusted)."""
    return Markdown(strip_control(text), classes="reply", open_links=False)


class Transcript(VerticalScroll, can_focus=False):
    """Messages top to bottom, anchored to the end so a stream stays in view.

    Not focusable: tab moves between panes' inputs, and the mouse wheel scrolls it.
    Every text is passed through `strip_control` here, the one door into the widgets.
    """

    def on_mount(self) -> None:
        self.anchor()

    @staticmethod
    def widgets_for(messages: Iterable[ChatMessage]) -> list[Widget]:
        """One widget per message; used at compose time so a restored pane is complete when mounted."""
        return [user_widget(m.content) if m.role == "user" else reply_widget(m.content) for m in messages]

    async def show(self, messages: Iterable[ChatMessage]) -> None:
        """Replace everything with these messages (after an edit, a regenerate, a clear)."""
        await self.remove_children()
        await self.mount_all(self.widgets_for(messages))
        self.anchor()

    async def add_user(self, text: str) -> None:
        await self.mount(user_widget(text))
        self.anchor()

    async def add_reply(self, text: str = "") -> Markdown:
        """A reply block; an empty one is the target of a stream."""
        reply = reply_widget(text)
        await self.mount(reply)
        self.anchor()
        return reply

    async def add_notice(self, text: str) -> None:
        """A one-off remark from the app (context full, request error), styled apart from the chat."""
        await self.mount(Static(strip_control(text), classes="notice", markup=False))
        self.anchor()

    @property
    def replies(self) -> list[Markdown]:
        return list(self.query_children(Markdown))
