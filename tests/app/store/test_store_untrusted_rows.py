"""Rows read back from the store are untrusted: hostile values written straight into the SQLite
file are repaired where they are read, the app starts, no escape reaches the screen, and the good
conversations come back as they were saved."""

from __future__ import annotations

import json
import sqlite3

from app.app import LfmChatApp
from app.core.conversation import ChatMessage, Conversation
from app.store.database import Store
from app.store.rows import MESSAGE_LIMIT_CHARS, RowChecker
from tests.app.pilot_helpers import MakeOptions, chat_screen, notices

ESC = "\x1b]0;pwned\x07\x1b]52;c;aGk=\x07\x1b[2J"


def _conversations(n: int) -> list[Conversation]:
    return [
        Conversation([ChatMessage("user", f"question {i}"), ChatMessage("assistant", f"answer {i}")])
        for i in range(n)
    ]


def _hostile_store(options: object) -> list[Conversation]:
    """Five open conversations, four of them then damaged in the file; returns them as saved."""
    path = options.store_path  # type: ignore[attr-defined]
    path.parent.mkdir(parents=True)
    store = Store(path)
    saved = _conversations(5)
    for conversation in saved:
        store.save(conversation)
    store.set_open([c.id for c in saved])  # type: ignore[misc]
    store.close()
    _, escapes, settings, blob, huge = (c.id for c in saved)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(
        "UPDATE conversations SET title = ?, name = ? WHERE id = ?", (ESC + "title", ESC + "name", escapes)
    )
    db.execute(
        "UPDATE messages SET content = ? WHERE conversation_id = ? AND position = 1", (ESC + "reply", escapes)
    )
    held = [
        {"name": ESC + "notes\n.md", "text": ESC + "kept text"},
        {"name": 1},
        "x",
        {"name": "b", "text": "\0"},
    ]
    db.execute("UPDATE conversations SET attachments = ? WHERE id = ?", (json.dumps(held), escapes))
    db.execute("UPDATE conversations SET attachments = '{' WHERE id = ?", (blob,))
    db.execute(
        "UPDATE conversations SET settings = ?, open_position = -7 WHERE id = ?",
        (json.dumps([1, 2]), settings),
    )
    db.execute(
        "UPDATE conversations SET prompt_cache = 'x', created_at = 'abc', open_position = ? WHERE id = ?",
        (2**62, blob),
    )
    db.execute(
        "UPDATE messages SET content = X'ff1b5b324afe' WHERE conversation_id = ? AND position = 0", (blob,)
    )
    db.execute(
        "UPDATE messages SET content = CAST(X'61ff1b5d303b78' AS TEXT)"
        " WHERE conversation_id = ? AND position = 1",
        (blob,),
    )
    db.execute(
        "UPDATE messages SET content = ? WHERE conversation_id = ? AND position = 1",
        ("y" * (3 * MESSAGE_LIMIT_CHARS), huge),
    )
    db.close()
    return saved


async def test_hostile_rows_are_repaired_and_the_good_conversations_restore(
    make_options: MakeOptions,
) -> None:
    options = make_options(panes=1)
    saved = _hostile_store(options)
    app = LfmChatApp(options)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await chat_screen(app, pilot)
        panes = {p.conversation.id: p for p in screen.panes}
        assert sorted(panes) == sorted(c.id for c in saved)
        good = panes[saved[0].id].conversation
        assert good.messages == saved[0].messages and good.settings == saved[0].settings
        assert len(panes[saved[4].id].conversation.messages[1].content) < MESSAGE_LIMIT_CHARS + 200
        [attachment] = panes[saved[1].id].session.attachments.attachments  # the damaged entries dropped
        assert "\x1b" not in attachment.name + attachment.text and attachment.text.endswith("kept text")
        assert panes[saved[2].id].session.attachments.attachments == []
        await pilot.pause(0.5)
        assert "\x1b" not in app.export_screenshot()
        assert all("\x1b" not in str(p.border_title) for p in screen.panes)
        said = notices(app)
        assert "repaired" in said and "everything else loaded" in said
        assert app.return_code is None


def test_tool_fields_read_back_are_checked_and_a_damaged_call_is_dropped_alone() -> None:
    check = RowChecker()
    good = {"name": "weather", "arguments": '{"city": "Paris"}', "id": "call_1"}
    calls = json.dumps({"calls": [good, {"name": 3}, "x", {**good, "name": ESC + "w", "id": "call_2"}]})
    reply = check.message("assistant", "text", 1.0, 0, calls, "reply")
    assert reply is not None and [(c.name, c.id) for c in reply.tool_calls] == [
        ("weather", "call_1"),
        ("w", "call_2"),
    ]
    result = check.message(
        "tool", "sunny", 1.0, 0, json.dumps({"id": ESC + "call_1", "name": "n" * 999}), "result"
    )
    assert result is not None and (result.tool_call_id, result.name) == ("call_1", "")
    assert check.message("assistant", "text", 1.0, 0, "{", "broken") is not None  # the message stays
    assert check.message("tool", "x", 1.0, 0, "[1]", "list") is not None
    assert len(check.repairs) == 5 and not any("\x1b" in r for r in check.repairs)
