"""Versions and continued replies through the pane session: the real LocalBackend on the tiny
checkpoint, a real Store reopened as a relaunch would, and the recording view of
test_pane_session (regenerate and edit keep what they replace; a reply cut at its token limit is
flagged and continues from the prefix cache)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from app.backend.local import LocalBackend
from app.backend.remote import RemoteBackend
from app.core.conversation import ChatMessage, Conversation
from app.core.export import conversation_markdown
from app.store.database import Store
from engine import Engine
from tests.app.fake_openai import FakeServer
from tests.app.pilot_helpers import ENGINE, Reference, user
from tests.app.session.test_pane_session import GREEDY, LONG, open_session, run, slowed

SHORT = replace(GREEDY, max_tokens=8)  # a regenerate with it gives a reply unlike the first


def relaunched(path: Path, conversation_id: int | None) -> tuple[Store, Conversation]:
    """The store opened again, as at the next launch, and the conversation read back from it."""
    store = Store(path)
    conversation = store.load(conversation_id or -1)
    assert conversation is not None
    return store, conversation


async def test_a_regenerate_keeps_both_versions_reachable_after_a_relaunch(
    backend: LocalBackend, tmp_path: Path
) -> None:
    store = Store(tmp_path / "chats.db")
    session, view = open_session(backend, store)
    await session.send("Tell me about the sea.")
    await run(session, view)
    first = session.conversation.messages[-1].content
    session.conversation.settings = SHORT
    await session.regenerate()
    await run(session, view)
    second = session.conversation.messages[-1].content
    assert first != second and len(session.conversation.messages) == 2
    assert view.versions == [(1, 2, 2)]  # the pane shows "2/2" on the new reply
    store.close()

    store, restored = relaunched(tmp_path / "chats.db", session.conversation.id)
    try:
        again, view = open_session(backend, store, restored)
        assert [m.content for m in restored.messages[-1].versions[0].messages] == [first]
        assert await again.flip_version(None, -1) == 1
        assert restored.messages[-1].content == first and view.shown[-1] == restored.messages
        assert await again.flip_version(None, -1) is None  # no older one
        store.close()
        store, restored = relaunched(tmp_path / "chats.db", restored.id)  # the version shown is saved
        assert restored.messages[-1].content == first
        again, view = open_session(backend, store, restored)
        assert await again.flip_version(1, 1) == 1 and restored.messages[-1].content == second
    finally:
        store.close()


async def test_an_edit_keeps_the_old_message_and_its_reply_as_a_version(
    backend: LocalBackend, store: Store
) -> None:
    session, view = open_session(backend, store)
    await session.send("Hello!")
    await run(session, view)
    old = [(m.role, m.content) for m in session.conversation.messages]
    assert await session.edit_last() == "Hello!"
    assert session.conversation.messages == []
    await session.send("Hi there!")
    await run(session, view)

    saved = store.load(session.conversation.id or -1)
    assert saved is not None and saved.messages[0].content == "Hi there!"
    assert [(m.role, m.content) for m in saved.messages[0].versions[0].messages] == old
    assert view.versions == [(0, 2, 2)]  # "2/2" on the edited message
    again, _ = open_session(backend, store, saved)
    assert await again.flip_version(0, -1) == 0
    assert [(m.role, m.content) for m in saved.messages] == old


async def test_the_next_turn_follows_the_shown_version_from_the_prefix_cache(
    backend: LocalBackend, store: Store
) -> None:
    session, view = open_session(backend, store)
    await session.send("Tell me about the sea.")
    await run(session, view)
    first = session.conversation.messages[-1].content
    seen = session.conversation.prompt_cache.ids  # the prompt and the first reply, as generated
    session.conversation.settings = SHORT
    await session.regenerate()
    await run(session, view)
    await session.flip_version(None, -1)

    await session.send("And then?")
    assert session.turn is not None and session.turn.prompt.ids is not None
    assert session.turn.prompt.ids[: len(seen)] == seen  # version 1 as generated, not re-encoded
    await run(session, view)
    assert [m.content for m in session.conversation.messages[:3]] == [
        "Tell me about the sea.",
        first,
        "And then?",
    ]
    block = ENGINE["block_size"]
    assert view.metrics is not None and view.metrics.cached_prompt_tokens >= len(seen) // block * block > 0


async def test_an_export_shows_the_path_shown(backend: LocalBackend, store: Store) -> None:
    session, view = open_session(backend, store)
    await session.send("Tell me about the sea.")
    await run(session, view)
    first = session.conversation.messages[-1].content
    session.conversation.settings = SHORT
    await session.regenerate()
    await run(session, view)

    exported = conversation_markdown(session.conversation, "tiny")
    assert "(cut at its token limit) · version 2 of 2" in exported and first not in exported
    await session.flip_version(None, -1)
    exported = conversation_markdown(session.conversation, "tiny")
    assert "· version 1 of 2" in exported and first in exported


async def test_a_cut_reply_is_flagged_and_continues_from_its_cached_prefix(
    backend: LocalBackend, store: Store, reference: Reference
) -> None:
    whole = reference(user("Tell me a story."), replace(GREEDY, max_tokens=16))
    session, view = open_session(backend, store, Conversation(settings=SHORT))
    await session.send("Tell me a story.")
    await run(session, view)
    reply = session.conversation.messages[-1]
    assert reply.cut and session.state == "cut" and len(session.conversation.prompt_cache.ids) > 8
    prompt_and_cut = len(session.conversation.prompt_cache.ids)

    await session.continue_reply()
    await run(session, view)
    assert len(session.conversation.messages) == 2 and session.conversation.messages[-1] is reply
    ids = session.conversation.prompt_cache.ids
    assert ids == whole.prompt_token_ids + whole.token_ids  # as if generated in one go
    block = ENGINE["block_size"]
    assert view.metrics is not None and view.metrics.prompt_tokens == prompt_and_cut
    assert view.metrics.cached_prompt_tokens == (prompt_and_cut - 1) // block * block  # no re-read
    assert view.replies[-1] is view.replies[0]  # the same reply grew
    saved = store.load(session.conversation.id or -1)
    assert saved is not None and [m.role for m in saved.messages] == ["user", "assistant"]
    assert saved.messages[-1].content == reply.content and saved.messages[-1].cut == reply.cut


async def test_continue_refuses_a_reply_that_was_not_cut(backend: LocalBackend, store: Store) -> None:
    session, view = open_session(backend, store)
    await session.continue_reply()
    assert view.toasts == ["Nothing to continue: only a reply cut at its token limit can go on."]


def cut_chat() -> Conversation:
    """A conversation whose last reply its token limit cut (as restored from the store)."""
    return Conversation(
        [ChatMessage("user", "Tell me a story."), ChatMessage("assistant", "Once upon", cut=True)], SHORT
    )


async def test_a_server_continues_the_partial_reply_sent_last(store: Store) -> None:
    with FakeServer() as server:
        backend = RemoteBackend.connect(server.url, None, None)
        try:
            session, view = open_session(backend, store, cut_chat())
            await session.continue_reply()
            await run(session, view)
        finally:
            backend.close()
    body = server.bodies[-1]
    assert body["messages"][-1] == {"role": "assistant", "content": "Once upon"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    reply = session.conversation.messages[-1]
    assert reply.content == "Once upon" + "".join(server.words) and not reply.cut
    assert len(session.conversation.messages) == 2 and view.replies[-1].text == reply.content


async def test_a_server_that_refuses_to_continue_leaves_the_reply_cut_and_says_so(store: Store) -> None:
    with FakeServer() as server:
        server.refuse = ("continue_final_message",)
        backend = RemoteBackend.connect(server.url, None, None)
        try:
            session, view = open_session(backend, store, cut_chat())
            await session.continue_reply()
            await run(session, view)
        finally:
            backend.close()
    reply = session.conversation.messages[-1]
    assert reply.content == "Once upon" and reply.cut and session.state == "cut"
    assert len(server.bodies) == 1  # not retried as a new reply without the field
    assert view.notices == [
        "The reply above cannot be continued: the server said 400: unknown fields: continue_final_message"
    ]


async def test_a_refused_regenerate_shows_the_old_reply_again(backend: LocalBackend, store: Store) -> None:
    session, view = open_session(backend, store)
    await session.send("Hello!")
    await run(session, view)
    before = [(m.role, m.content) for m in session.conversation.messages]
    backend.close()  # the worker now rejects every request, with one sentence
    await session.regenerate()
    await run(session, view)
    assert [(m.role, m.content) for m in session.conversation.messages] == before
    assert view.given_back == [] and session.conversation.replaced is None
    assert view.shown[-1] == session.conversation.messages
    assert view.notices == ["This request was refused: the engine worker has shut down"]


async def test_a_reply_saved_while_it_streams_is_already_the_newest_version(
    backend: LocalBackend, store: Store, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a crash mid-regenerate or mid-continue leaves in the store: the old reply a version of
    the partial one, and a continued reply one message."""
    session, view = open_session(backend, store, Conversation(settings=SHORT))
    await session.send("Tell me a story.")
    await run(session, view)
    first = session.conversation.messages[-1].content
    slowed(engine, monkeypatch)
    session.conversation.settings = LONG
    await session.regenerate()
    await run(session, view, until=lambda: session.turn is not None and len(session.turn.ids) >= 2)
    session.save(session.turn.text)  # type: ignore[union-attr]
    saved = store.load(session.conversation.id or -1)
    assert saved is not None and [m.role for m in saved.messages] == ["user", "assistant"]
    assert [v.messages[0].content for v in saved.messages[1].versions] == [first]
    await session.settle()

    cut = Conversation(
        [ChatMessage("user", "Tell me a story."), ChatMessage("assistant", first, cut=True)], LONG
    )
    session, view = open_session(backend, store, cut)
    await session.continue_reply()
    await run(session, view, until=lambda: session.turn is not None and len(session.turn.ids) >= 2)
    session.save(session.turn.text)  # type: ignore[union-attr]
    saved = store.load(session.conversation.id or -1)
    assert saved is not None and [m.role for m in saved.messages] == ["user", "assistant"]
    assert saved.messages[1].content.startswith(first) and len(saved.messages[1].content) > len(first)
    await session.settle()
