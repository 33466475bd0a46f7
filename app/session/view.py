"""What a pane session tells its view, and what it asks of it: the observer the chat pane implements.

The session changes the conversation first and then says what changed, so a view that draws
slowly (every drawing call may await) never holds up a save. Drawing is the view's: the session
hands it text and messages, never widgets. A test drives a session with a view that records.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from app.core.conversation import ChatMessage, Conversation
    from engine import RequestMetrics, ToolCall


class ReplyView(Protocol):
    """One reply on screen, kept in step with the text of the turn that streams into it."""

    async def update(self, text: str) -> None:
        """Show `text`, the whole reply so far."""
        ...

    async def finish(self) -> None:
        """The stream ended: nothing more will be appended."""
        ...

    def remove(self) -> Awaitable[object]:
        """Take an empty reply off the screen."""
        ...


class ToolCallView(Protocol):
    """One call on screen: the tool, its arguments, whether it waits on the user or runs, its result."""

    def show_status(self, text: str) -> None:
        """One line under the call: the question for the user, "running…", a refusal."""
        ...

    def show_result(self, text: str, is_error: bool) -> None:
        """The result as sent back to the model (the view folds it)."""
        ...


class PaneView(Protocol):
    """The pane as its session sees it."""

    @property
    def draft(self) -> str:
        """What is typed in the input box now (saved with the conversation)."""
        ...

    def wake(self) -> None:
        """Backend thread: events wait in the session's inbox for `PaneSession.apply` (view's thread)."""
        ...

    def give_back(self, text: str) -> None:
        """Put a message that could not be sent back into the input box, ahead of what is typed."""
        ...

    def notify(
        self,
        message: str,
        *,
        severity: str = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """A passing notice (a Textual widget's own `notify`); the session always passes markup=False."""
        ...

    def key_name(self, action: str) -> str:
        """The key bound to a pane action, for sentences that name it."""
        ...

    def changed(self) -> None:
        """The title, context figures or held attachments changed."""
        ...

    def show_state(
        self, state: str, metrics: RequestMetrics | None = None, prefill: tuple[int, int] | None = None
    ) -> None:
        """The request's state for the status line; metrics are kept from before unless given."""
        ...

    async def show_conversation(self, conversation: Conversation) -> None:
        """Another conversation is shown here: its messages, its draft if it has one, no old figures."""
        ...

    async def show_messages(self, messages: Sequence[ChatMessage]) -> None:
        """Redraw the transcript from these messages (after a regenerate, an edit, a refusal)."""
        ...

    async def add_user(self, text: str) -> None: ...

    async def open_reply(self) -> ReplyView:
        """An empty reply at the end of the transcript, for a turn to stream into."""
        ...

    async def reopen_reply(self) -> ReplyView:
        """The last reply on screen, for a turn that continues it to stream into."""
        ...

    def show_version(self, index: int, message: ChatMessage) -> None:
        """Message `index` now has other versions: show which one it is ("2/3")."""
        ...

    async def add_notice(self, text: str, before: ReplyView | None = None) -> None:
        """A remark that is not part of the chat; `before` a reply still streaming."""
        ...

    async def add_tool_call(self, call: ToolCall) -> ToolCallView:
        """A call the model made, at the end of the transcript, to be answered and run."""
        ...

    def show_tool_step(self, step: int, limit: int) -> None:
        """The turn's tool steps so far (0: none, the status line says nothing)."""
        ...
