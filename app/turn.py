"""The request a pane has in flight: what it collects as events arrive, and what it leaves in the
conversation when it ends."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from app.conversation import ChatMessage, ChatTokenizer, Conversation
from app.widgets.reply import Reply
from engine import StreamHandle, TokenEvent


@dataclass(slots=True)
class Turn:
    """The request in flight: its prompt, what came back, and what of it is on screen."""

    handle: StreamHandle
    prompt: tuple[str, list[int]]
    reply: Reply
    raw: str = ""
    ids: list[int] = field(default_factory=list)
    saved_at: float = field(default_factory=time.monotonic)  # when the partial reply was last saved

    def take(self, events: list[TokenEvent]) -> list[TokenEvent]:
        """Collect the text and ids of this request's events; those of older requests are dropped."""
        mine = [e for e in events if e.request_id == self.handle.request_id]
        self.raw += "".join(e.text for e in mine)
        for event in mine:
            self.ids.extend(event.token_ids)
        return mine

    def keep(self, conversation: Conversation, tokenizer: ChatTokenizer) -> None:
        """Add what was shown to the conversation, with the ids the engine made, so the next turn
        reuses them instead of re-tokenizing the reply."""
        if reply := self.reply.source:
            conversation.messages.append(ChatMessage("assistant", reply))
            conversation.prompt_cache.remember(tokenizer, self.prompt, reply, self.ids)
