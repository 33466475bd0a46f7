"""Conversations in SQLite, so a crash or quit loses at most the reply in flight.

The schema is versioned with `PRAGMA user_version`: each entry of `_UPGRADES` moves a database
one version up, so an old file is upgraded in place and a newer one is refused instead of
being damaged.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.conversation import ChatMessage, ChatSettings, Conversation

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
)
SCHEMA_VERSION = len(_UPGRADES)


class StoreError(RuntimeError):
    """The database cannot be used (newer schema, unreadable file); the message is shown as-is."""


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """One history row: enough to list a conversation without loading its messages."""

    id: int
    title: str
    updated_at: float
    message_count: int


class Store:
    """All persistence; used from the UI thread only (each call is a short transaction)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(path)
            self._db.execute("PRAGMA foreign_keys = ON")
            self._upgrade()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open the conversation store {path}: {exc}") from None
        self.path = path

    def _upgrade(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the conversation store was written by a newer lfm-chat "
                f"(schema {version}, this version reads up to {SCHEMA_VERSION})"
            )
        for number, script in enumerate(_UPGRADES[version:], start=version + 1):
            self._db.executescript(f"BEGIN; {script}; PRAGMA user_version = {number}; COMMIT;")

    @property
    def schema_version(self) -> int:
        return self._db.execute("PRAGMA user_version").fetchone()[0]

    def save(self, conversation: Conversation) -> int:
        """Insert or replace the conversation and its messages; sets and returns its id."""
        row = (conversation.title, json.dumps(conversation.settings.to_dict()), conversation.updated_at)
        with self._db:
            if conversation.id is None:
                cursor = self._db.execute(
                    "INSERT INTO conversations (title, settings, updated_at, created_at) VALUES (?, ?, ?, ?)",
                    (*row, conversation.created_at),
                )
                conversation.id = cursor.lastrowid
            else:
                self._db.execute(
                    "UPDATE conversations SET title = ?, settings = ?, updated_at = ? WHERE id = ?",
                    (*row, conversation.id),
                )
            self._db.execute("DELETE FROM messages WHERE conversation_id = ?", (conversation.id,))
            self._db.executemany(
                "INSERT INTO messages (conversation_id, position, role, content, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                [
                    (conversation.id, i, m.role, m.content, m.created_at)
                    for i, m in enumerate(conversation.messages)
                ],
            )
        assert conversation.id is not None
        return conversation.id

    def load(self, conversation_id: int) -> Conversation | None:
        row = self._db.execute(
            "SELECT settings, created_at, updated_at FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        if row is None:
            return None
        messages = [
            ChatMessage(role, content, created_at)
            for role, content, created_at in self._db.execute(
                "SELECT role, content, created_at FROM messages WHERE conversation_id = ? ORDER BY position",
                (conversation_id,),
            )
        ]
        settings = ChatSettings.from_dict(json.loads(row[0]))
        return Conversation(messages, settings, conversation_id, created_at=row[1], updated_at=row[2])

    def summaries(self) -> list[ConversationSummary]:
        """Every saved conversation, most recently updated first."""
        rows = self._db.execute(
            """SELECT c.id, c.title, c.updated_at, COUNT(m.position) FROM conversations c
               LEFT JOIN messages m ON m.conversation_id = c.id
               GROUP BY c.id ORDER BY c.updated_at DESC, c.id DESC"""
        )
        return [ConversationSummary(*row) for row in rows]

    def delete(self, conversation_id: int) -> None:
        with self._db:
            self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def set_open(self, conversation_ids: Sequence[int]) -> None:
        """Remember which conversations are open in panes, in pane order, for the next launch."""
        with self._db:
            self._db.execute("UPDATE conversations SET open_position = NULL WHERE open_position IS NOT NULL")
            self._db.executemany(
                "UPDATE conversations SET open_position = ? WHERE id = ?",
                [(position, cid) for position, cid in enumerate(conversation_ids)],
            )

    def open_conversations(self) -> list[Conversation]:
        ids = self._db.execute(
            "SELECT id FROM conversations WHERE open_position IS NOT NULL ORDER BY open_position"
        ).fetchall()
        return [c for (cid,) in ids if (c := self.load(cid)) is not None]

    def close(self) -> None:
        self._db.close()
