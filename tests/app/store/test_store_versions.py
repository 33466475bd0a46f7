"""Versions in the store: kept with their messages across a relaunch, upgraded into from the
previous schema without losing a conversation, and read back bounded and checked when the file
was written by someone else."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from app.core.conversation import ChatMessage, Conversation, PromptCache, Version
from app.core.versions import flip, set_aside, take_place
from app.store.database import Store
from app.store.schema import _UPGRADES
from app.store.versions import MAX_DEPTH


def versioned() -> Conversation:
    """Q, then A2 in place of A1 (with A1's follow-up turn), and an edit not sent yet."""
    conversation = Conversation([ChatMessage("user", "Q"), ChatMessage("assistant", "A1", cut=True)])
    conversation.messages += [ChatMessage("user", "more?"), ChatMessage("assistant", "yes")]
    conversation.prompt_cache = PromptCache([("Q A1", [1, 2])])
    set_aside(conversation, 1)
    conversation.prompt_cache = PromptCache([("Q A2", [1, 3])])
    take_place(conversation, ChatMessage("assistant", "A2", stopped=True))
    conversation.messages += [ChatMessage("user", "again"), ChatMessage("assistant", "sure")]
    set_aside(conversation, 2)
    return conversation


def test_versions_cut_marks_and_an_unsent_edit_survive_a_relaunch(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite3")
    original = versioned()
    store.save(original)
    store.close()
    store = Store(tmp_path / "db.sqlite3")
    loaded = store.load(original.id or -1)
    assert loaded == original
    assert loaded is not None and flip(loaded, 1, -1)
    assert [m.content for m in loaded.messages] == ["Q", "A1", "more?", "yes"] and loaded.messages[1].cut
    assert loaded.prompt_cache.ids == [1, 2]
    store.save(loaded)  # the version shown is what the next launch shows
    store.close()
    again = Store(tmp_path / "db.sqlite3").load(original.id or -1)
    assert again is not None and [m.content for m in again.messages] == ["Q", "A1", "more?", "yes"]


def test_a_database_of_the_previous_schema_is_upgraded_and_keeps_its_conversations(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript("".join(_UPGRADES[:4]) + "PRAGMA user_version = 4;")
        db.execute(
            "INSERT INTO conversations (id, title, settings, created_at, updated_at, open_position,"
            " prompt_cache) VALUES (3, 'old', '{}', 1.0, 2.0, 0, '[[\"<s>old\", [5, 6]]]')"
        )
        db.executemany(
            "INSERT INTO messages (conversation_id, position, role, content, created_at, stopped)"
            " VALUES (3, ?, ?, ?, ?, ?)",
            [(0, "user", "old", 10.0, 0), (1, "assistant", "kept", 11.0, 1)],
        )
    store = Store(path)
    [old] = store.open_conversations()
    assert [(m.role, m.content, m.stopped, m.cut, m.versions) for m in old.messages] == [
        ("user", "old", False, False, []),
        ("assistant", "kept", True, False, []),
    ]
    assert old.prompt_cache.ids == [5, 6] and old.replaced is None
    set_aside(old, 1)
    take_place(old, ChatMessage("assistant", "new"))
    store.save(old)
    store.close()
    again = Store(path).load(3)
    assert again is not None and [v.messages[0].content for v in again.messages[1].versions] == ["kept"]


def test_hostile_versions_are_left_out_and_the_rest_loads(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    store = Store(path)
    cid = store.save(versioned())
    store.close()
    deep: object = []
    for _ in range(MAX_DEPTH + 5):
        deep = [{"messages": [{"role": "user", "content": "x", "created_at": 1.0, "versions": deep}]}]
    hostile = [
        {"messages": [{"role": "system", "content": "no such role", "created_at": 1.0}]},
        {"messages": [{"role": "assistant", "content": 5, "created_at": "soon", "version": 99}]},
        "not a version",
        {"messages": []},
        *deep,
    ]
    with sqlite3.connect(path) as db:
        db.execute("UPDATE messages SET versions = ?, version = 7 WHERE position = 1", (json.dumps(hostile),))
        db.execute("UPDATE conversations SET replaced = '{\"messages\": 3}'")
    store = Store(path)
    loaded = store.load(cid)
    assert loaded is not None and [m.content for m in loaded.messages] == ["Q", "A2"]
    reply = loaded.messages[1]
    assert reply.version == len(reply.versions) and loaded.replaced is None
    assert all(isinstance(m.content, str) for v in reply.versions for m in v.messages)
    assert any("versions are damaged" in repair for repair in store.repairs)
    assert all(isinstance(v, Version) for v in reply.versions)
