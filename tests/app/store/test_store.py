"""The SQLite store: round trips, open panes, versioned schema."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from app.core.attachment import Attachment
from app.core.conversation import ChatMessage, ChatSettings, Conversation, PromptCache
from app.store.database import Store
from app.store.errors import StoreError
from app.store.schema import SCHEMA_VERSION


def conversation(*texts: str, system: str = "") -> Conversation:
    roles = ("user", "assistant")
    messages = [ChatMessage(roles[i % 2], text, created_at=1000.0 + i) for i, text in enumerate(texts)]
    return Conversation(
        messages, ChatSettings(system_prompt=system, temperature=0.5), created_at=1.0, updated_at=2.0
    )


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite3")
    original = conversation("hi", "hello!", "how are you?", system="Be brief.")
    cid = store.save(original)
    assert original.id == cid
    assert store.load(cid) == original

    original.messages.append(ChatMessage("assistant", "fine", created_at=2000.0))
    store.save(original)  # an update replaces the messages, it does not duplicate the row
    assert store.load(cid) == original
    assert [(s.title, s.message_count) for s in store.summaries()] == [("hi", 4)]
    assert store.load(cid + 1) is None


def test_open_conversations_come_back_in_pane_order(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite3")
    a, b, c = (conversation(name) for name in "abc")
    for item in (a, b, c):
        store.save(item)
    store.set_open([c.id, a.id])  # type: ignore[list-item]
    assert [x.title for x in store.open_conversations()] == ["c", "a"]
    store.set_open([b.id])  # type: ignore[list-item]
    assert [x.title for x in store.open_conversations()] == ["b"]
    store.delete(b.id)  # type: ignore[arg-type]
    assert store.open_conversations() == []
    assert sorted(s.title for s in store.summaries()) == ["a", "c"]


def test_schema_is_versioned_and_a_newer_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    store = Store(path)
    assert store.schema_version == SCHEMA_VERSION
    store.close()
    Store(path).close()  # reopening an up-to-date file changes nothing

    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer lfm-chat"):
        Store(path)


def test_settings_written_by_a_newer_version_load_without_unknown_keys() -> None:
    settings = ChatSettings.from_dict({"temperature": 0.9, "a_future_knob": 3})
    assert settings == ChatSettings(temperature=0.9)


V1_SCHEMA = """
CREATE TABLE conversations (
    id INTEGER PRIMARY KEY, title TEXT NOT NULL, settings TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, open_position INTEGER
);
CREATE TABLE messages (
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    position INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, created_at REAL NOT NULL,
    PRIMARY KEY (conversation_id, position)
);
INSERT INTO conversations VALUES (7, 'old chat', '{"temperature": 0.9}', 1.0, 2.0, 0);
INSERT INTO messages VALUES (7, 0, 'user', 'old chat', 10.0), (7, 1, 'assistant', 'still here', 11.0);
PRAGMA user_version = 1;
"""


def test_name_draft_attachments_and_prompt_ids_round_trip(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite3")
    original = conversation("hi", "hello!")
    original.name, original.draft = "Greetings", "and another thing"
    original.attachments = [Attachment("notes.md", "# Notes\n```py\nx = 1\n```\n"), Attachment("b", "")]
    original.prompt_cache = PromptCache([("<s>hi", [1, 2]), ("<s>hi hello!<e>", [1, 2, 3, 4])])
    store.save(original)
    store.close()
    store = Store(tmp_path / "db.sqlite3")
    assert store.load(original.id) == original  # type: ignore[arg-type]
    assert [s.title for s in store.summaries()] == ["Greetings"]


def test_a_version_1_database_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(V1_SCHEMA)
    store = Store(path)
    assert store.schema_version == SCHEMA_VERSION == 6
    [old] = store.open_conversations()
    assert (old.id, old.settings.temperature) == (7, 0.9)
    assert (old.name, old.draft, old.prompt_cache, old.attachments) == ("", "", PromptCache(), [])
    assert [m.content for m in old.messages] == ["old chat", "still here"]
    old.messages.append(ChatMessage("user", "new turn"))
    store.save(old)
    assert len(store.load(7).messages) == 3  # type: ignore[union-attr]
    store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_a_stopped_reply_stays_marked_after_a_reload(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite3")
    chat = conversation("hi", "cut sh")
    chat.messages[1].stopped = True
    cid = store.save(chat)
    store.close()
    again = Store(tmp_path / "db.sqlite3").load(cid)
    assert again is not None and [m.stopped for m in again.messages] == [False, True]


def message_writes(path: Path) -> sqlite3.Connection:
    """A second connection that logs every insert, update and delete on messages (triggers live in the file,
    so they see the store's writes)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE log (op TEXT, position INTEGER)")
    for op, row in (("insert", "NEW"), ("update", "NEW"), ("delete", "OLD")):
        db.execute(
            f"CREATE TRIGGER log_{op} AFTER {op.upper()} ON messages"
            f" BEGIN INSERT INTO log VALUES ('{op}', {row}.position); END"
        )
    return db


def take_log(db: sqlite3.Connection) -> list[tuple[str, int]]:
    rows = db.execute("SELECT op, position FROM log ORDER BY rowid").fetchall()
    db.execute("DELETE FROM log")
    return rows


def test_saves_write_only_the_messages_that_changed(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    store = Store(path)
    chat = conversation("hi", "hello!")
    store.save(chat)
    log = message_writes(path)
    rowids = dict(log.execute("SELECT position, rowid FROM messages").fetchall())

    chat.messages.append(ChatMessage("user", "tell me more", created_at=3000.0))
    store.save(chat)  # the user message, saved before the request is submitted
    assert take_log(log) == [("insert", 2)]
    for partial in ("Once", "Once upon", "Once upon a time"):  # the app saves copies with the reply so far
        store.save(
            replace(chat, messages=[*chat.messages, ChatMessage("assistant", partial, created_at=4000.0)])
        )
    assert take_log(log) == [("insert", 3), ("update", 3), ("update", 3)]
    chat.messages.append(ChatMessage("assistant", "Once upon a time.", created_at=4000.0))
    store.save(chat)
    store.save(chat)  # nothing changed: nothing written
    assert take_log(log) == [("update", 3)]
    assert dict(log.execute("SELECT position, rowid FROM messages WHERE position < 2").fetchall()) == rowids

    del chat.messages[2:]  # e.g. a turn taken back
    store.save(chat)
    assert take_log(log) == [("delete", 2), ("delete", 3)]
    store.close()
    store = Store(path)
    assert store.load(chat.id) == chat  # type: ignore[arg-type]
    store.close()


def test_a_draft_alone_is_saved_but_not_listed(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite3")
    drafted = Conversation(draft="half a thought")
    store.save(drafted)
    store.set_open([drafted.id])  # type: ignore[list-item]
    assert store.summaries() == []
    store.close()
    store = Store(tmp_path / "db.sqlite3")
    assert [c.draft for c in store.open_conversations()] == ["half a thought"]
    store.close()


def test_search_matches_title_name_and_any_message_ignoring_case(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite3")
    school, sea, other = (
        conversation("L'ÉCOLE", "oui"),
        conversation("hi", "The SEA is calm"),
        conversation("x"),
    )
    for item in (school, sea, other):
        store.save(item)
    store.rename(other.id, "Shopping list")  # type: ignore[arg-type]

    def titles(query: str) -> list[str]:
        return sorted(s.title for s in store.summaries(query))

    assert titles("école") == ["L'ÉCOLE"]
    assert titles("sea") == ["hi"]
    assert titles("shop") == ["Shopping list"]
    assert titles("") == sorted(["L'ÉCOLE", "hi", "Shopping list"])
    assert titles("nowhere") == []


def test_rename_sets_the_title_and_an_empty_name_gives_the_first_message_back(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite3")
    chat = conversation("What is BBCode?", "A markup.")
    store.save(chat)
    store.rename(chat.id, "BBCode")  # type: ignore[arg-type]
    assert [s.title for s in store.summaries()] == ["BBCode"]
    assert store.load(chat.id).name == "BBCode"  # type: ignore[arg-type, union-attr]
    store.rename(chat.id, "")  # type: ignore[arg-type]
    assert [s.title for s in store.summaries()] == ["What is BBCode?"]


def test_app_state_is_kept_by_key(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite3")
    assert store.get_state("theme") is None
    store.set_state("theme", "nord")
    store.set_state("theme", "gruvbox")
    store.close()
    store = Store(tmp_path / "db.sqlite3")
    assert store.get_state("theme") == "gruvbox"
    store.close()
