"""Conversations in SQLite, so a crash or quit loses at most the last seconds of a reply in flight.

Durability: WAL with `synchronous=NORMAL`. A committed save survives the process being killed
(even by SIGKILL); an OS crash or power loss can lose the last few committed saves, never the
file's consistency. The app saves the user message before submitting it and a growing reply
every couple of seconds, so that is all a crash can take.

Faults: `Store()` raises only StoreError, and every write raises only StoreWriteError, both with
a sentence the app shows as-is; a failed write is rolled back. A corrupt file is moved aside
(`recovered_from` says where) and a fresh one started, rather than failing every launch. A
flock next to the file keeps a second lfm-chat from writing the same conversations.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from app.core.conversation import ChatMessage, Conversation
from app.store.db_file import cause, check_writable, holds, identity, lock, move_aside, open_failed, unlock
from app.store.errors import StoreBusyError, StoreError, StoreWriteError
from app.store.rows import MESSAGE_LIMIT_CHARS, RowChecker
from app.store.schema import upgrade
from app.store.tool_fields import tool_json
from app.store.versions import replaced_json, versions_json

_MESSAGES = (
    "SELECT role, content, created_at, stopped, cut, version, versions, tool FROM messages"
    " WHERE conversation_id = ? ORDER BY position"
)
_LOADED_MESSAGES = (  # no more of a message than is loaded, so a huge row never reaches memory whole
    f"SELECT role, substr(content, 1, {MESSAGE_LIMIT_CHARS + 1}), created_at, stopped, cut, version,"
    " versions, tool FROM messages WHERE conversation_id = ? ORDER BY position"
)
# role, content, created_at, stopped, cut, version, versions (JSON), tool (JSON): a changed one is rewritten
_MessageRow = tuple[str, str, float, int, int, int, str, str]
# Seconds a write waits for another program's lock, on the UI thread: a keystroke's wait at worst,
# once per retry (app/store/persistence.py holds later writes back while the file is locked).
BUSY_TIMEOUT = 0.1


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """One history row: enough to list a conversation without loading its messages."""

    id: int
    title: str
    updated_at: float
    message_count: int


class Store:
    """All persistence; used from the UI thread only (each call is a short transaction).

    `busy_timeout` (seconds) is how long a write waits for another program's lock on the file. It
    is short because the UI thread waits with it; a write that times out is retried later anyway.
    """

    def __init__(self, path: Path, *, busy_timeout: float = BUSY_TIMEOUT) -> None:
        self.path = path
        self.recovered_from: Path | None = None  # where a corrupt file was moved, for the app to say
        self._busy_timeout = busy_timeout
        self._written: dict[int, list[_MessageRow]] = {}  # per conversation, the rows as last committed
        self._last_id = 0  # ids are handed out here, see save()
        self.repairs: list[str] = []  # what reads found damaged and repaired, for the app to say
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            check_writable(path)
            self._lock_fd = lock(self._lock_path)
        except OSError as exc:
            raise StoreError(open_failed(exc, path)) from None
        try:
            self._db = self._open()
        except BaseException:
            unlock(self._lock_fd)
            raise

    @property
    def _lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    def _open(self) -> sqlite3.Connection:
        """Connect, or move a corrupt file aside and start a fresh one; StoreError for anything else."""
        try:
            try:
                return self._connect()
            except sqlite3.OperationalError:
                raise  # locked, read-only, unopenable: the file may be fine, so never move it
            except sqlite3.DatabaseError:
                self.recovered_from = move_aside(self.path)
            return self._connect()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(open_failed(exc, self.path)) from None

    def _connect(self) -> sqlite3.Connection:
        """A checked, upgraded connection; remembers which file it is so a vanished one is noticed."""
        db = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None)
        db.text_factory = _decode  # text that is not UTF-8 must not make a whole read fail
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA foreign_keys = ON")
            if (check := db.execute("PRAGMA quick_check").fetchone()[0]) != "ok":
                raise sqlite3.DatabaseError(f"quick_check: {check}")
            upgrade(db)
            db.create_function("folded_contains", 2, _folded_contains, deterministic=True)
            self._identity = identity(os.stat(self.path))
            (last,) = db.execute("SELECT COALESCE(MAX(id), 0) FROM conversations").fetchone()
            self._last_id = max(self._last_id, last)
        except BaseException:
            db.close()
            raise
        return db

    @property
    def schema_version(self) -> int:
        return self._db.execute("PRAGMA user_version").fetchone()[0]

    # ------------------------------------------------------------------ writes
    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction: rolled back on any failure, which is raised as StoreWriteError with a sentence."""
        try:
            self._follow_file()
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        except (sqlite3.Error, OSError) as exc:
            busy = getattr(exc, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
            error = StoreBusyError if busy else StoreWriteError
            raise error(f"Cannot save to {self.path}: {cause(exc, self.path)}.") from exc
        except StoreError as exc:  # from reattaching: another instance, a newer schema
            raise StoreWriteError(str(exc)) from exc

    def _follow_file(self) -> None:
        """Reattach if the file was deleted or replaced: SQLite would go on writing to the unlinked one."""
        try:
            if identity(os.stat(self.path)) == self._identity:
                return
        except FileNotFoundError:
            if not self.path.parent.is_dir():
                raise
        self._reattach()

    def _reattach(self) -> None:
        """Lock the recreated dir, copy everything we had into it if the file is gone, and reopen.

        The old connection is closed before the new one opens: closing a WAL database deletes
        `<path>-wal` by name, which by then would be the new file's.
        """
        lock_fd = self._lock_fd if holds(self._lock_fd, self._lock_path) else lock(self._lock_path)
        try:
            if not self.path.exists():
                self._db.execute("VACUUM INTO ?", (str(self.path),))
            self._db.close()
            self._db = self._connect()
        except BaseException:
            if lock_fd != self._lock_fd:
                unlock(lock_fd)
            raise
        if lock_fd != self._lock_fd:
            unlock(self._lock_fd)
        self._lock_fd = lock_fd
        self._written.clear()

    def save(self, conversation: Conversation) -> int:
        """Upsert the conversation and write only the messages that changed; sets and returns its id.

        The id is assigned before the write, even if it then fails, so copies taken afterwards (the
        app's partial-reply snapshots) and a retry name the same row instead of adding new ones.
        """
        if conversation.id is None:
            self._last_id += 1
            conversation.id = self._last_id
        cid = conversation.id
        rows = [
            (
                m.role,
                m.content,
                m.created_at,
                int(m.stopped),
                int(m.cut),
                m.version,
                versions_json(m.versions),
                tool_json(m),
            )
            for m in conversation.messages
        ]
        written = self._written.pop(cid, None)  # back only once this commit succeeds
        with self._write() as db:
            if written is None:
                written = db.execute(_MESSAGES, (cid,)).fetchall()
            self._upsert_conversation(db, conversation)
            db.executemany(
                """INSERT INTO messages (conversation_id, position, role, content, created_at, stopped,
                   cut, version, versions, tool)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (conversation_id, position) DO UPDATE
                   SET role = excluded.role, content = excluded.content, created_at = excluded.created_at,
                   stopped = excluded.stopped, cut = excluded.cut, version = excluded.version,
                   versions = excluded.versions, tool = excluded.tool""",
                [(cid, i, *row) for i, row in enumerate(rows) if i >= len(written) or written[i] != row],
            )
            if len(written) > len(rows):
                db.execute(
                    "DELETE FROM messages WHERE conversation_id = ? AND position >= ?", (cid, len(rows))
                )
        self._written[cid] = rows
        return cid

    @staticmethod
    def _upsert_conversation(db: sqlite3.Connection, conversation: Conversation) -> None:
        db.execute(
            """INSERT INTO conversations
               (id, title, settings, created_at, updated_at, name, draft, prompt_cache, attachments, replaced)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE
               SET title = excluded.title, settings = excluded.settings, updated_at = excluded.updated_at,
                   name = excluded.name, draft = excluded.draft, prompt_cache = excluded.prompt_cache,
                   attachments = excluded.attachments, replaced = excluded.replaced""",
            (
                conversation.id,
                conversation.title,
                json.dumps(conversation.settings.to_dict()),
                conversation.created_at,
                conversation.updated_at,
                conversation.name,
                conversation.draft,
                json.dumps(conversation.prompt_cache.entries),
                json.dumps([{"name": a.name, "text": a.text} for a in conversation.attachments]),
                replaced_json(conversation.replaced),
            ),
        )

    def rename(self, conversation_id: int, name: str) -> None:
        """Set the user's name for a conversation ("" gives it back its first message as title)."""
        with self._write() as db:
            first = db.execute(
                "SELECT content FROM messages WHERE conversation_id = ? AND role = 'user' ORDER BY position",
                (conversation_id,),
            ).fetchone()
            title = Conversation([ChatMessage("user", first[0])] if first else [], name=name).title
            db.execute(
                "UPDATE conversations SET name = ?, title = ? WHERE id = ?", (name, title, conversation_id)
            )

    def delete(self, conversation_id: int) -> None:
        with self._write() as db:
            db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
        self._written.pop(conversation_id, None)

    def set_open(self, conversation_ids: Sequence[int]) -> None:
        """Remember which conversations are open in panes, in pane order, for the next launch."""
        with self._write() as db:
            db.execute("UPDATE conversations SET open_position = NULL WHERE open_position IS NOT NULL")
            db.executemany(
                "UPDATE conversations SET open_position = ? WHERE id = ?",
                [(position, cid) for position, cid in enumerate(conversation_ids)],
            )

    def set_state(self, key: str, value: str) -> None:
        """App-wide settings that are not per conversation (the theme)."""
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)", (key, value))

    # ------------------------------------------------------------------ reads
    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """Reads fail as StoreError too (a file damaged while open), so callers catch one type."""
        try:
            yield self._db
        except sqlite3.Error as exc:
            raise StoreError(f"Cannot read {self.path}: {cause(exc, self.path)}.") from exc

    def get_state(self, key: str) -> str | None:
        with self._read() as db:
            row = db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def load(self, conversation_id: int) -> Conversation | None:
        """The conversation as far as it is sound: each column is checked (see store_rows), and
        what had to be repaired is added to `repairs`."""
        with self._read() as db:
            row = db.execute(
                "SELECT settings, created_at, updated_at, name, draft, prompt_cache, attachments, replaced"
                " FROM conversations WHERE id = ?",
                (conversation_id,),
            ).fetchone()
            if row is None:
                return None
            messages = db.execute(_LOADED_MESSAGES, (conversation_id,)).fetchall()
        settings, created_at, updated_at, name, draft, prompt_cache, attachments, replaced = row
        check, what = RowChecker(), f"conversation {conversation_id}"
        conversation = Conversation(
            [m for i, row in enumerate(messages) if (m := check.message_row(row, f"{what} message {i + 1}"))],
            check.settings(settings, f"{what}'s settings"),
            conversation_id,
            created_at=check.number(created_at, f"{what}'s creation time"),
            updated_at=check.number(updated_at, f"{what}'s update time"),
            name=check.text(name, f"{what}'s name"),
            draft=check.text(draft, f"{what}'s draft", MESSAGE_LIMIT_CHARS, clean=False),
            prompt_cache=check.prompt_cache(prompt_cache, f"{what}'s prompt cache"),
            attachments=check.attachments(attachments, f"{what}'s attachments"),
            replaced=check.replaced(replaced, f"{what}'s set-aside messages"),
        )
        self.repairs += check.repairs
        return conversation

    def summaries(self, query: str = "") -> list[ConversationSummary]:
        """Conversations with at least one message, most recently updated first; a query keeps those
        whose title, name or any message contains it, ignoring case (the History search box)."""
        with self._read() as db:
            rows = db.execute(
                """SELECT c.id, c.title, c.updated_at, COUNT(*) FROM conversations c
                   JOIN messages m ON m.conversation_id = c.id
                   GROUP BY c.id
                   HAVING :q = '' OR folded_contains(c.title, :q) OR folded_contains(c.name, :q)
                       OR MAX(folded_contains(m.content, :q))
                   ORDER BY c.updated_at DESC, c.id DESC""",
                {"q": query.casefold()},
            ).fetchall()
        check = RowChecker()
        return [
            ConversationSummary(
                cid, check.text(title, "a title"), check.number(updated_at, "an update time"), count
            )
            for cid, title, updated_at, count in rows
        ]

    def open_conversations(self) -> list[Conversation]:
        with self._read() as db:
            ids = db.execute(
                "SELECT id FROM conversations WHERE typeof(open_position) = 'integer' ORDER BY open_position"
            ).fetchall()
        return [c for (cid,) in ids if (c := self.load(cid)) is not None]

    def close(self) -> None:
        """Close the file, then let another lfm-chat have the data dir."""
        self._db.close()
        unlock(self._lock_fd)
        self._lock_fd = None


def _folded_contains(text: object, folded_query: str) -> bool:
    """SQLite's LIKE folds ASCII only; this is the Unicode-aware case-insensitive search."""
    return isinstance(text, str) and folded_query in text.casefold()


def _decode(raw: bytes) -> str:
    """SQLite text as str; bytes that are not UTF-8 become U+FFFD instead of failing the read."""
    return raw.decode("utf-8", "replace")
