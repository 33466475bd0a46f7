"""One conversation on screen: transcript, status line and input, drawn from the pane's session.

The conversation and its turn lifecycle live in `PaneSession` (app/session/), which this widget
drives with the user's keys and which tells it what changed (`PaneView`). The widget owns what
is about the screen: drawing at the frame the pacer gives, the selection, toasts, the draft timer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.timer import Timer
from textual.widgets import TextArea

from app.core.attachment import file_command, from_text
from app.core.conversation import ChatMessage, Conversation
from app.core.sanitize import strip_control
from app.session import PaneSession, ReplyView
from app.session.pane_session import STILL_REPLYING, Fork
from app.session.tool_loop import TOOL_WAITS
from app.session.tools import PaneTools
from app.ui.keys import PANE_KEYS, key_named
from app.ui.pane_context import PaneContext
from app.ui.widgets.paced_frames import PacedFrames
from app.ui.widgets.pane_actions import PaneActions
from app.ui.widgets.pane_border import pane_border
from app.ui.widgets.pane_status import PaneStatus
from app.ui.widgets.prompt_input import PromptInput
from app.ui.widgets.reply import Reply
from app.ui.widgets.tool_message import ToolMessage
from app.ui.widgets.transcript import Transcript

if TYPE_CHECKING:
    from engine import RequestMetrics, ToolCall

DRAFT_SAVE_SECONDS = 1.0


class ChatPane(PaneActions, PacedFrames, Vertical):
    """A chat with the shared backend. Actions act on this pane only (Esc stops only this one)."""

    BINDINGS: ClassVar[list[BindingType]] = PANE_KEYS
    ALLOW_MAXIMIZE = True  # the zoom key (ChatScreen.action_zoom)

    class Woken(Message):
        """Token events are waiting in the session's inbox (posted from the backend's thread)."""

    class ToolWaitChanged(Message):
        """The pane began or ended waiting on a tool or on its user (the dashboard lists it)."""

    @dataclass
    class Forked(Message):
        """A fork of this pane's conversation (and its "always" approvals), for the screen to open
        beside it."""

        pane: ChatPane
        fork: Fork

    @dataclass
    class Broadcast(Message):
        """A message typed in this pane, for the screen to send to the marked panes (else all)."""

        pane: ChatPane
        text: str

    @dataclass
    class ModelWanted(Message):
        """The user asked to switch model from this pane (the app decides: one engine, or a server)."""

        pane: ChatPane

    def __init__(
        self, conversation: Conversation, context: PaneContext, *, id: str, tools: PaneTools | None = None
    ) -> None:
        super().__init__(id=id)
        self.context = context
        self.label = id.removeprefix("pane-")
        self.marked = False  # a target of broadcasts
        self._draft_timer: Timer | None = None
        # Kept as attributes, not queried: backend events may still arrive while the pane is torn down.
        self.transcript = Transcript(conversation.messages)
        self.status = PaneStatus()
        self.session = PaneSession(conversation, context.sessions, self, tag=id, tools=tools)
        self.prompt_input = PromptInput(self.session.sent_texts, self._refusal, context.pacer.key_pressed)

    def compose(self) -> ComposeResult:
        yield self.transcript
        yield self.status
        yield self.prompt_input

    async def on_mount(self) -> None:
        self.prompt_input.restore(strip_control(self.conversation.draft))
        self.show_model()
        await self.session.start()

    @property
    def conversation(self) -> Conversation:
        return self.session.conversation

    @property
    def busy(self) -> bool:
        return self.session.busy

    def focus_input(self) -> None:
        self.prompt_input.focus()

    def relabel(self, label: str, force: bool = False) -> None:
        """A new number (the screen numbers panes) or, with `force`, a new title to draw."""
        if force or label != self.label:
            self.label = label
            self.changed()

    def _refusal(self, text: str) -> str | None:
        """A message waits for the reply; `/file` attaches for the next one at any time (as f3 does),
        and the answer to a tool call that waits for one is taken."""
        if not self.busy or self.session.asking is not None or file_command(text) is not None:
            return None
        return STILL_REPLYING

    # ------------------------------------------------------------------ keys to the session
    async def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        message.stop()
        await self.session.submit_text(message.text)

    async def on_prompt_input_paste_offered(self, message: PromptInput.PasteOffered) -> None:
        message.stop()
        await self.session.attach(from_text("pasted text", message.text))

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        """Save the draft once typing pauses, so a crash does not take it either."""
        if event.text_area is not self.prompt_input:
            return
        if self._draft_timer is not None:
            self._draft_timer.stop()
        self._draft_timer = self.set_timer(DRAFT_SAVE_SECONDS, self.session.save_draft)

    def action_fork(self) -> None:
        """Fork through the selected message, else the whole chat (the session says what is kept)."""
        if (fork := self.session.fork(self.transcript.selected_message())) is not None:
            self.transcript.select(None)
            self.post_message(self.Forked(self, fork))

    def action_mark(self) -> None:
        self.marked = not self.marked
        self.set_class(self.marked, "-marked")
        self.changed()

    def action_broadcast(self) -> None:
        if text := self.prompt_input.take():
            self.post_message(self.Broadcast(self, text))
        else:
            self.notify("Type the message to broadcast in this pane's input first.", severity="warning")

    def action_pick_model(self) -> None:
        self.post_message(self.ModelWanted(self))

    @property
    def model(self) -> str:
        return self.session.model

    def show_model(self) -> None:
        """The status line names the pane's model where panes may differ (a server)."""
        self.status.model = self.model if self.session.backend.per_pane_model else ""
        self.status.show(self.status.state)

    def use_model(self, model_id: str) -> None:
        self.session.use_model(model_id)
        self.show_model()

    # ------------------------------------------------------------------ PaneView (the session's view)
    @property
    def draft(self) -> str:
        return self.prompt_input.text

    def wake(self) -> None:
        self.post_message(self.Woken())

    def give_back(self, text: str) -> None:
        self.prompt_input.give_back(text)

    def key_name(self, action: str) -> str:
        return key_named(self.app, PANE_KEYS, action)

    def show_state(
        self, state: str, metrics: RequestMetrics | None = None, prefill: tuple[int, int] | None = None
    ) -> None:
        waiting = state in TOOL_WAITS or self.status.state in TOOL_WAITS
        self.status.show(state, metrics, prefill)
        if waiting:
            self.post_message(self.ToolWaitChanged())

    async def show_conversation(self, conversation: Conversation) -> None:
        await self.transcript.show(conversation.messages)
        if conversation.draft:
            self.prompt_input.restore(strip_control(conversation.draft))
        self.status.reset()

    async def show_messages(self, messages: list[ChatMessage]) -> None:
        await self.transcript.show(messages)

    async def add_user(self, text: str) -> None:
        await self.transcript.add_user(text)

    async def open_reply(self) -> Reply:
        return await self.transcript.add_reply()

    async def reopen_reply(self) -> Reply:
        return self.transcript.replies[-1]

    def show_version(self, index: int, message: ChatMessage) -> None:
        self.transcript.show_version(index, message)

    async def add_notice(self, text: str, before: ReplyView | None = None) -> None:
        await self.transcript.add_notice(text, before=before if isinstance(before, Reply) else None)

    async def add_tool_call(self, call: ToolCall) -> ToolMessage:
        return await self.transcript.add_tool_call(call.name)

    def show_tool_step(self, step: int, limit: int) -> None:
        self.status.tool_step = f"tool step {step}/{limit}" if step else ""
        self.status.show(self.status.state)

    def changed(self) -> None:
        self.border_title, self.border_subtitle = pane_border(self.session, self.label, self.marked)
