"""The SQLite store: round trips, open panes, versioned schema."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.conversation import ChatMessage, ChatSettings, Conversation
from app.store import SCHEMA_VERSION, Store, StoreError


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
