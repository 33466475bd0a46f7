"""Saving from the UI: a failed write must neither crash the app nor lose what the user wrote.

The Store raises StoreWriteError when a write fails (a read-only or vanished data dir, a full disk,
a lock held by another program). In the middle of a turn the UI can do nothing useful with an
exception, so the Saver keeps each failed write, says what is wrong in `problem` (the app shows
it until it clears) and writes it again when `retry()` is called from a timer.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from functools import partial

from app.core.conversation import Conversation
from app.store.database import Store
from app.store.errors import StoreBusyError, StoreWriteError

_Key = tuple[Hashable, ...]  # what a pending write is kept under: ("save", id), ("open",), ...
_OPEN: _Key = ("open",)


class Saver:
    """Never-raising writes over a Store; reads go to `store` directly."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.problem: str | None = None  # the last failure's sentence while anything is unsaved
        self._pending: dict[_Key, Callable[[], object]] = {}  # oldest first; one per thing written
        self._busy = False  # the last write found the file locked by another program

    def save(self, conversation: Conversation) -> bool:
        """Save now, or keep it for `retry()`.

        Pending saves are keyed by conversation id (the Store assigns it even when the write
        fails), so a pane's conversation and the partial-reply copies taken of it share one slot:
        whichever was saved last is what a retry writes.
        """
        return self._attempt(lambda: self.store.save(conversation), lambda: ("save", conversation.id))

    def set_open(self, conversation_ids: Sequence[int]) -> bool:
        """Which conversations are open. It names their rows, so while a save is pending (the row
        may not exist yet) it waits for `retry()`: on a full disk it would "succeed" changing nothing."""
        ids = list(conversation_ids)
        write = partial(self.store.set_open, ids)
        if any(key[0] == "save" for key in self._pending):
            self._keep(_OPEN, write)
            return False
        return self._attempt(write, lambda: _OPEN)

    def set_state(self, key: str, value: str) -> bool:
        return self._attempt(lambda: self.store.set_state(key, value), lambda: ("state", key))

    def rename(self, conversation_id: int, name: str) -> bool:
        return self._attempt(
            lambda: self.store.rename(conversation_id, name), lambda: ("rename", conversation_id)
        )

    def delete(self, conversation_id: int) -> bool:
        return self._attempt(lambda: self.store.delete(conversation_id), lambda: ("delete", conversation_id))

    def retry(self) -> bool:
        """Write what is pending, oldest first but the open panes last (they name rows the saves
        create); True once nothing is. Stops at the first failure: each attempt on a locked file
        can wait the Store's busy timeout, on the UI thread."""
        writes = sorted(self._pending.items(), key=lambda item: item[0] == _OPEN)
        return all(self._attempt(write, lambda key=key: key, now=True) for key, write in writes)

    def _attempt(self, write: Callable[[], object], key: Callable[[], _Key], *, now: bool = False) -> bool:
        """Run `write`; on failure keep it as the newest pending write of its key. `key` is asked
        after the write, when a new conversation has its id. While another program holds the file
        locked, a new write is kept without trying (each try waits the busy timeout on the UI
        thread: a stall per keystroke); `retry()` tries (`now`)."""
        if self._busy and not now and None not in (held := key()):  # a first save must get its id
            self._keep(held, write)
            return False
        try:
            write()
        except StoreWriteError as exc:
            self._keep(key(), write)
            self.problem = str(exc)
            self._busy = isinstance(exc, StoreBusyError)
            return False
        self._busy = False
        self._pending.pop(key(), None)
        if not self._pending:
            self.problem = None
        return True

    def _keep(self, key: _Key, write: Callable[[], object]) -> None:
        """Make `write` the newest pending write of `key`."""
        self._pending.pop(key, None)
        self._pending[key] = write
