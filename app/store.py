"""Conversations in SQLite, so a crash or quit loses at most the last seconds of a reply in flight.

Durability: WAL with `synchronous=NORMAL`. A committed save survives the process being killed
(even by SIGKILL); an OS crash or power loss can lose the last few committed saves, never the
file's consistency. The app saves the user message before submitting it and a growing reply
every couple of seconds, so that is all a crash can take.

Faults: `Store()` raises only StoreError, and every write raises only StoreWriteError, both with
a sentence the app shows as-is; a failed write is rolled back. A corrupt file is moved aside
(`recovered_from` says where) and a fresh one started, rather than failing every launch. A
flock next to the file keeps a second lfm-chat from writing the same conversations.

The schema is versioned with `PRAGMA user_version`: each entry of `_UPGRADES` moves a database
one version up, so an old file is upgraded in place and a newer one is refused instead of
being damaged.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from app.conversation import ChatMessage, ChatSettings, Conversation, PromptCache
from app.options import DATA_DIR_ENV

try:
    import fcntl
except ImportError:  # Windows: no flock, so nothing stops two instances sharing a data dir there
    fcntl = None  # type: ignore[assignment]

_UPGRADES: tuple[str, ...] = (
    # 0 -> 1
    """
    CREATE TABLE conversations (
        id INTEGER PRIMARY KEY,
        title TEXT NOT NULL,
        settings TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        open_position INTEGER
    );
    CREATE TABLE messages (
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (conversation_id, position)
    );
    """,
    # 1 -> 2: the user's name for a conversation, its unsent draft, the prompt ids; app state (theme)
    """
    ALTER TABLE conversations ADD COLUMN name TEXT NOT NULL DEFAULT '';
    ALTER TABLE conversations ADD COLUMN draft TEXT NOT NULL DEFAULT '';
    ALTER TABLE conversations ADD COLUMN prompt_cache TEXT NOT NULL DEFAULT '[]';
    CREATE TABLE state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
)
SCHEMA_VERSION = len(_UPGRADES)

_MESSAGES = "SELECT role, content, created_at FROM messages WHERE conversation_id = ? ORDER BY position"
_MessageRow = tuple[str, str, float]  # role, content, created_at: what decides whether a row is rewritten


class StoreError(RuntimeError):
    """The store cannot be used; the message is one sentence for the user, shown as-is."""


class StoreLockedError(StoreError):
    """Another lfm-chat holds the data dir: two writers would overwrite each other's turns."""


class StoreWriteError(StoreError):
    """A write failed and was rolled back; what was saved before is intact, the write can be retried."""


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

    def __init__(self, path: Path, *, busy_timeout: float = 1.0) -> None:
        self.path = path
        self.recovered_from: Path | None = None  # where a corrupt file was moved, for the app to say
        self._busy_timeout = busy_timeout
        self._written: dict[int, list[_MessageRow]] = {}  # per conversation, the rows as last committed
        self._last_id = 0  # ids are handed out here, see save()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _check_writable(path)
            self._lock_fd = _lock(self._lock_path)
        except OSError as exc:
            raise StoreError(_open_failed(exc, path)) from None
        try:
            self._db = self._open()
        except BaseException:
            _unlock(self._lock_fd)
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
                self.recovered_from = _move_aside(self.path)
            return self._connect()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(_open_failed(exc, self.path)) from None

    def _connect(self) -> sqlite3.Connection:
        """A checked, upgraded connection; remembers which file it is so a vanished one is noticed."""
        db = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA foreign_keys = ON")
            if (check := db.execute("PRAGMA quick_check").fetchone()[0]) != "ok":
                raise sqlite3.DatabaseError(f"quick_check: {check}")
            _upgrade(db)
            db.create_function("folded_contains", 2, _folded_contains, deterministic=True)
            self._identity = _identity(os.stat(self.path))
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
            raise StoreWriteError(f"Cannot save to {self.path}: {_cause(exc, self.path)}.") from exc
        except StoreError as exc:  # from reattaching: another instance, a newer schema
            raise StoreWriteError(str(exc)) from exc

    def _follow_file(self) -> None:
        """Reattach if the file was deleted or replaced: SQLite would go on writing to the unlinked one."""
        try:
            if _identity(os.stat(self.path)) == self._identity:
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
        lock_fd = self._lock_fd if _holds(self._lock_fd, self._lock_path) else _lock(self._lock_path)
        try:
            if not self.path.exists():
                self._db.execute("VACUUM INTO ?", (str(self.path),))
            self._db.close()
            self._db = self._connect()
        except BaseException:
            if lock_fd != self._lock_fd:
                _unlock(lock_fd)
            raise
        if lock_fd != self._lock_fd:
            _unlock(self._lock_fd)
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
        rows = [(m.role, m.content, m.created_at) for m in conversation.messages]
        written = self._written.pop(cid, None)  # back only once this commit succeeds
        with self._write() as db:
            if written is None:
                written = db.execute(_MESSAGES, (cid,)).fetchall()
            self._upsert_conversation(db, conversation)
            db.executemany(
                """INSERT INTO messages (conversation_id, position, role, content, created_at)
                   VALUES (?, ?, ?, ?, ?) ON CONFLICT (conversation_id, position) DO UPDATE
                   SET role = excluded.role, content = excluded.content, created_at = excluded.created_at""",
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
               (id, title, settings, created_at, updated_at, name, draft, prompt_cache)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE
               SET title = excluded.title, settings = excluded.settings, updated_at = excluded.updated_at,
                   name = excluded.name, draft = excluded.draft, prompt_cache = excluded.prompt_cache""",
            (
                conversation.id,
                conversation.title,
                json.dumps(conversation.settings.to_dict()),
                conversation.created_at,
                conversation.updated_at,
                conversation.name,
                conversation.draft,
                json.dumps(conversation.prompt_cache.entries),
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
            raise StoreError(f"Cannot read {self.path}: {_cause(exc, self.path)}.") from exc

    def get_state(self, key: str) -> str | None:
        with self._read() as db:
            row = db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def load(self, conversation_id: int) -> Conversation | None:
        with self._read() as db:
            row = db.execute(
                "SELECT settings, created_at, updated_at, name, draft, prompt_cache FROM conversations"
                " WHERE id = ?",
                (conversation_id,),
            ).fetchone()
            if row is None:
                return None
            messages = db.execute(_MESSAGES, (conversation_id,)).fetchall()
        settings, created_at, updated_at, name, draft, prompt_cache = row
        return Conversation(
            [ChatMessage(*message) for message in messages],
            ChatSettings.from_dict(json.loads(settings)),
            conversation_id,
            created_at=created_at,
            updated_at=updated_at,
            name=name,
            draft=draft,
            prompt_cache=PromptCache([(text, ids) for text, ids in json.loads(prompt_cache)]),
        )

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
        return [ConversationSummary(*row) for row in rows]

    def open_conversations(self) -> list[Conversation]:
        with self._read() as db:
            ids = db.execute(
                "SELECT id FROM conversations WHERE open_position IS NOT NULL ORDER BY open_position"
            ).fetchall()
        return [c for (cid,) in ids if (c := self.load(cid)) is not None]

    def close(self) -> None:
        """Close the file, then let another lfm-chat have the data dir."""
        self._db.close()
        _unlock(self._lock_fd)
        self._lock_fd = None


def _upgrade(db: sqlite3.Connection) -> None:
    """Bring the file to SCHEMA_VERSION in one transaction. It always writes `user_version`, so a
    read-only file or dir fails here, at launch, instead of at the end of the user's first turn."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"The conversation store was written by a newer lfm-chat (schema {version}, this one reads "
            f"up to {SCHEMA_VERSION}): upgrade lfm-chat, or start it with --data-dir OTHER_DIR."
        )
    scripts = "".join(_UPGRADES[version:])
    db.executescript(f"BEGIN IMMEDIATE; {scripts}; PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")


def _check_writable(path: Path) -> None:
    """Refuse a read-only dir or file before SQLite opens it: a read-only open leaves a read-only
    -shm file behind, which would keep the store unwritable after the user fixed the permissions."""
    for item in (path.parent, path, *_companions(path)):
        if item.exists() and not os.access(item, os.W_OK):
            raise PermissionError(errno.EACCES, "read-only", str(item))


def _companions(path: Path) -> tuple[Path, Path]:
    """The WAL and shared-memory files that belong with the database file."""
    return path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")


def _folded_contains(text: str, folded_query: str) -> bool:
    """SQLite's LIKE folds ASCII only; this is the Unicode-aware case-insensitive search."""
    return folded_query in text.casefold()


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_dev, stat.st_ino


def _lock(path: Path) -> int | None:
    """Hold an exclusive flock on `path` and write our pid in it. The OS drops the lock when the
    process ends, however it ends (SIGKILL too), so a stale lock file never blocks a launch."""
    if fcntl is None:
        return None
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except BlockingIOError:
        os.close(fd)
        raise StoreLockedError(_locked(path)) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _holds(fd: int | None, path: Path) -> bool:
    """Whether our lock fd is still the file at `path` (it is not once the dir was deleted)."""
    try:
        return fd is None or os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _locked(path: Path) -> str:
    try:
        pid = path.read_text(encoding="utf-8").strip()
    except OSError:
        pid = ""
    who = f"Another lfm-chat (pid {pid})" if pid.isdigit() else "Another lfm-chat"
    return f"{who} is using {path.parent}. Quit it first, or start this one with --data-dir OTHER_DIR."


def _move_aside(path: Path) -> Path:
    """Rename a corrupt file (and its -wal/-shm, which belong to it) to a free `.corrupt-TIME` name."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    number = 1
    while target.exists():
        number += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{number}")
    for side, moved in zip(_companions(path), _companions(target), strict=True):
        if side.exists():
            side.rename(moved)
    path.rename(target)
    return target


def _open_failed(exc: BaseException, path: Path) -> str:
    return (
        f"Cannot open the conversation store {path}: {_cause(exc, path)}. "
        f"To use another folder, start with --data-dir DIR or set {DATA_DIR_ENV}."
    )


def _cause(exc: BaseException, path: Path) -> str:
    """What went wrong in the user's terms, with what to do about it."""
    folder = path.parent
    text = str(exc)
    if isinstance(exc, (NotADirectoryError, FileExistsError)) or (folder.exists() and not folder.is_dir()):
        return f"{folder} or a folder above it is a file, not a folder"
    if not folder.exists():
        return f"the folder {folder} no longer exists; create it again (mkdir -p {folder})"
    if isinstance(exc, PermissionError) and exc.filename:
        return f"{exc.filename} is read-only; make it writable"
    if isinstance(exc, PermissionError) or "readonly" in text or "read-only" in text:
        return f"{folder} or the files in it are read-only; make them writable"
    if "disk is full" in text or "No space left" in text:
        return "the disk is full; free some space"
    if "locked" in text:
        return "another program holds the database locked; close it"
    return text
