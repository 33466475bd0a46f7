"""The request a pane has in flight: what it collects as events arrive, and what it leaves in the
conversation when it ends."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.backend.base import Backend, Prompt, Stream
from app.core.conversation import ChatMessage, Conversation
from app.core.sanitize import strip_control
from app.core.versions import take_place
from app.session.view import ReplyView

if TYPE_CHECKING:
    from engine import TokenEvent

TOOL_CALL_START, TOOL_CALL_END = "<|tool_call_start|>", "<|tool_call_end|>"


@dataclass(frozen=True, slots=True)
class PreparedTurn:
    """A turn ready to submit: its prompt, its token allowance, and the reply view it streams into."""

    prompt: Prompt
    max_tokens: int
    reply: ReplyView
    base: str = ""  # the reply's text so far when the turn continues it (the prompt ends with it)


@dataclass(slots=True)
class Turn:
    """The request in flight: its prompt, what came back, and the reply view that shows it."""

    handle: Stream
    prompt: Prompt
    reply: ReplyView
    base: str = ""  # a continued reply's text before this request; the stream extends it
    raw: str = ""
    ids: list[int] = field(default_factory=list)
    saved_at: float = field(default_factory=time.monotonic)  # when the partial reply was last saved
    # A reply that must call (tool_choice "required") is the bare list of calls: the markers the
    # model writes itself otherwise are added around it, so it is shown, kept and parsed as a call.
    forced_call: bool = False
    ended: bool = False

    @property
    def shown(self) -> str:
        """The reply as it is shown and kept, with a forced call's markers."""
        if not self.forced_call or not self.raw or self.raw.lstrip().startswith(TOOL_CALL_START):
            return self.raw  # a server sends the calls it forced as a block of their own
        return TOOL_CALL_START + self.raw + (TOOL_CALL_END if self.ended else "")

    @property
    def text(self) -> str:
        """The reply as it is shown and kept: the text streamed so far, without terminal controls."""
        return strip_control(self.base + self.shown)

    @property
    def added(self) -> str:
        """What this request added to the reply (all of it, unless the turn continues one)."""
        text = self.text
        return text[len(self.base) :] if text.startswith(self.base) else text

    def take(self, events: list[TokenEvent]) -> list[TokenEvent]:
        """Collect the text and ids of this request's events; those of older requests are dropped."""
        mine = [e for e in events if e.request_id == self.handle.request_id]
        self.raw += "".join(e.text for e in mine)
        for event in mine:
            self.ids.extend(event.token_ids)
        self.ended = any(e.finish_reason == "stop" for e in mine)
        return mine

    def context_used(self, last: TokenEvent) -> tuple[int | None, bool]:
        """(tokens the conversation fills with this reply so far, estimated): counted here when the
        prompt's ids are known, else the server's usage figures, else (before they come, or for a
        stopped reply, which gets none) the prompt's estimate plus the chunks received."""
        tokens, estimated = self.prompt.count
        m = last.metrics
        if not estimated:
            return (None if tokens is None else tokens + len(self.ids)), estimated
        if m.prompt_tokens:
            return m.prompt_tokens + m.generated_tokens, False
        return (None if tokens is None else tokens + m.generated_tokens), True

    def keep(self, conversation: Conversation, backend: Backend, finish_reason: str | None) -> None:
        """Add what came to the conversation: a new reply (the newest version of any set aside for
        its place), or the rest of the reply the turn continues. "abort" marks it stopped, "length"
        cut (it can be continued). The backend keeps the ids the engine made, so the next turn
        reuses them instead of re-tokenizing the reply."""
        if not (added := self.added):
            return
        stopped, cut = finish_reason == "abort", finish_reason == "length"
        if self.prompt.continues:
            last = conversation.messages[-1]
            last.content, last.stopped, last.cut = self.text, stopped, cut
        else:
            take_place(conversation, ChatMessage("assistant", added, stopped=stopped, cut=cut))
        backend.remember(conversation, self.prompt, added, self.ids)
