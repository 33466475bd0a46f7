"""The store's tables, as the list of upgrades that build them.

The schema is versioned with `PRAGMA user_version`: each entry of `_UPGRADES` moves a database
one version up, so an old file is upgraded in place and a newer one is refused instead of
being damaged. A new column is a new entry at the end; entries already shipped never change.
"""

from __future__ import annotations

import sqlite3

from app.store.errors import StoreError

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
    # 2 -> 3: a reply the user stopped stays marked as stopped (exports say so)
    """
    ALTER TABLE messages ADD COLUMN stopped INTEGER NOT NULL DEFAULT 0;
    """,
    # 3 -> 4: the attachments held for the next message, beside the draft
    """
    ALTER TABLE conversations ADD COLUMN attachments TEXT NOT NULL DEFAULT '[]';
    """,
    # 4 -> 5: versions (a regenerate or an edit keeps what it replaced), replies cut at their limit
    """
    ALTER TABLE messages ADD COLUMN cut INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE messages ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE messages ADD COLUMN versions TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE conversations ADD COLUMN replaced TEXT NOT NULL DEFAULT 'null';
    """,
    # 5 -> 6: a reply's tool calls, or the call a tool message answers (JSON; '' for other messages)
    """
    ALTER TABLE messages ADD COLUMN tool TEXT NOT NULL DEFAULT '';
    """,
)
SCHEMA_VERSION = len(_UPGRADES)


def upgrade(db: sqlite3.Connection) -> None:
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
