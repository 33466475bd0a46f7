"""The store's errors, in a module of their own: the file lock and the schema upgrade raise them too."""

from __future__ import annotations


class StoreError(RuntimeError):
    """The store cannot be used; the message is one sentence for the user, shown as-is."""


class StoreLockedError(StoreError):
    """Another lfm-chat holds the data dir: two writers would overwrite each other's turns."""


class StoreWriteError(StoreError):
    """A write failed and was rolled back; what was saved before is intact, the write can be retried."""


class StoreBusyError(StoreWriteError):
    """Another program holds the database's write lock: the write waited the busy timeout, on the
    caller's thread, and gave up. Trying again before the retry timer would only wait again."""
