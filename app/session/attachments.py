"""The attachments a pane holds for its next message, and what each costs in the pane's context.

An attachment is counted when it is added, not when the message is sent: the user sees the figure
first, and a file that cannot fit is refused with the numbers before anything is submitted.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

from app.backend.base import Backend
from app.core.attachment import Attachment, fit_refusal, with_attachments
from app.core.conversation import ChatMessage, Conversation


@dataclass(frozen=True, slots=True)
class Measured:
    tokens: int  # the attachment's own tokens, as the template renders it in a message
    used: int  # the pane's context in use before it (conversation and attachments held)


def measure(
    backend: Backend, conversation: Conversation, held: list[Attachment], new: Attachment
) -> Measured | None:
    """Blocking (the template renders the chat twice): None where only the server can count, or
    the template refuses (sending will say why)."""
    try:
        before = _tokens(backend, conversation, held)
        after = _tokens(backend, conversation, [*held, new])
    except ValueError:
        return None
    return None if before is None or after is None else Measured(after - before, before)


def _tokens(backend: Backend, conversation: Conversation, attachments: list[Attachment]) -> int | None:
    if not attachments and not conversation.messages and not conversation.settings.system_prompt:
        return 0
    message = [ChatMessage("user", with_attachments("", attachments))] if attachments else []
    return backend.prepare(replace(conversation, messages=[*conversation.messages, *message])).tokens


@dataclass(slots=True)
class PaneAttachments:
    """Attachments waiting for the next message, each with its token count (None: not known here)."""

    held: list[tuple[Attachment, int | None]] = field(default_factory=list)

    @classmethod
    def holding(cls, attachments: list[Attachment]) -> PaneAttachments:
        """Attachments restored with a saved conversation (their token counts are not known here)."""
        return cls([(attachment, None) for attachment in attachments])

    def add(self, attachment: Attachment, measured: Measured | None, limit: int | None) -> str | None:
        """Hold `attachment`, or the sentence refusing it: it does not fit in what is left of `limit`."""
        if measured is not None and limit is not None:
            refusal = fit_refusal(attachment.name, measured.tokens, limit - measured.used, "this pane")
            if refusal is not None:
                return refusal
        self.held.append((attachment, None if measured is None else measured.tokens))
        return None

    async def offer(
        self, backend: Backend, conversation: Conversation, attachment: Attachment
    ) -> tuple[bool, str]:
        """Count `attachment` against what is left of the context (off the calling thread: the
        template renders the chat twice) and hold it if it fits: (held, the sentence saying so or why not)."""
        measured = await asyncio.to_thread(measure, backend, conversation, self.attachments, attachment)
        limit = backend.max_model_len
        if (refusal := self.add(attachment, measured, limit)) is not None:
            return False, refusal
        return True, self.notice(limit, measured)

    async def count_restored(self, backend: Backend, conversation: Conversation) -> bool:
        """Count attachments restored with a conversation as they were counted when attached, so the
        border shows their tokens again; True if a count changed. Dropped if the held list changes
        meanwhile."""
        held = list(self.held)
        counted: list[tuple[Attachment, int | None]] = []
        for attachment, tokens in held:
            if tokens is None:
                before = [a for a, _ in counted]
                measured = await asyncio.to_thread(measure, backend, conversation, before, attachment)
                tokens = None if measured is None else measured.tokens
            counted.append((attachment, tokens))
        if self.held != held or counted == held:
            return False
        self.held = counted
        return True

    def notice(self, limit: int | None, used: Measured | None) -> str:
        """What was just attached, with its cost when known."""
        attachment, tokens = self.held[-1]
        if tokens is None or used is None or limit is None:
            cost = f"{attachment.size}; the server counts its tokens"
        else:
            cost = f"{tokens:,} tokens; {limit - used.used - tokens:,} left in this pane"
        return f"Attached {attachment.name} ({cost}). It goes with your next message; /file alone drops it."

    def take(self) -> list[Attachment]:
        """The attachments for the message being sent; none are held after."""
        taken, self.held = [attachment for attachment, _ in self.held], []
        return taken

    @property
    def attachments(self) -> list[Attachment]:
        return [attachment for attachment, _ in self.held]

    def summary(self) -> str:
        """For the pane's border: +notes.md 940 tok."""
        return " ".join(f"+{a.name}" + ("" if t is None else f" {t:,} tok") for a, t in self.held)
