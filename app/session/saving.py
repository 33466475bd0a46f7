"""Saving pane sessions: each session saves its own conversation here, and the store's list of
open conversations follows the panes without the panes being asked.

The screen says which sessions are open (in pane order) whenever the panes change; a save then
writes that list too when it changed (none is written before the screen first says), which is
also when a new conversation gets its id from its first save. Writes never raise
(app/store/persistence.py's Saver keeps a failed one for a retry); `after_save` lets the screen show
or clear the Saver's problem at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from app.core.conversation import ChatMessage, Conversation
from app.core.versions import take_place
from app.store.persistence import Saver


class OpenPane(Protocol):
    """What the saver reads of an open pane's session (`PaneSession`): its conversation, whose id the
    first save assigns."""

    conversation: Conversation


class ConversationSaver:
    """One for all the sessions of a screen."""

    def __init__(self, saver: Saver, after_save: Callable[[], None] = lambda: None) -> None:
        self.saver = saver
        self.open: Sequence[OpenPane] | None = None  # the screen's panes in order, once it says
        self._after_save = after_save
        self._open_ids: list[int] | None = None  # what was last written as the open panes

    def save(self, conversation: Conversation, partial_reply: str = "", extends: bool = False) -> None:
        """Save one conversation (with the reply streaming so far, if any: a new last message, or
        the whole of the last one when the turn `extends` it) and which ones are open. A
        conversation with nothing in it is not saved."""
        if (
            conversation.messages
            or conversation.draft
            or conversation.attachments
            or conversation.id is not None
        ):
            conversation.updated_at = time.time()
            if partial_reply:
                saved = replace(conversation, messages=list(conversation.messages))
                if extends:
                    saved.messages[-1] = replace(saved.messages[-1], content=partial_reply)
                else:  # as the finished reply will be: the newest version of any set aside for it
                    take_place(saved, ChatMessage("assistant", partial_reply))
                self.saver.save(saved)
                conversation.id = saved.id  # the first successful save may be of the copy
            else:
                self.saver.save(conversation)
        if self.open is not None:
            self._save_open(self.open)
        self._after_save()

    def _save_open(self, sessions: Sequence[OpenPane]) -> None:
        open_ids = [s.conversation.id for s in sessions if s.conversation.id is not None]
        if open_ids != self._open_ids:  # a streaming pane saves every second; the open set rarely changes
            self._open_ids = open_ids
            self.saver.set_open(open_ids)  # a failure stays pending in the Saver, retried with the rest
