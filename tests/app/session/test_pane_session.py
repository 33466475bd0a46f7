"""The pane session without Textual: the real LocalBackend on the tiny checkpoint, a real Store in
tmp_path, and a view that records what the session told it (the test's eyes, in place of a pane).

Greedy replies are compared with the reference engine's output for the same conversation run
alone (the engine's batch invariance makes them equal).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from app.backend.local import LocalBackend
from app.core.conversation import ChatMessage, ChatSettings, Conversation
from app.core.sanitize import strip_control
from app.session import ConversationSaver, PaneSession, SessionContext
from app.store.database import Store
from app.store.persistence import Saver
from engine import Engine, RequestMetrics, RequestOutput
from tests.app.pilot_helpers import ENGINE, Reference, user

GREEDY = ChatSettings(temperature=0.0, max_tokens=24)
LONG = ChatSettings(temperature=0.0, max_tokens=400)
LIMIT = 120.0  # seconds; only a hang reaches it


class RecordingReply:
    """A reply as the session shows it: the text it was last given, and whether it ended."""

    def __init__(self) -> None:
        self.text = ""
        self.finished = False
        self.removed = False

    async def update(self, text: str) -> None:
        self.text = strip_control(text)

    async def finish(self) -> None:
        self.finished = True

    async def remove(self) -> None:
        self.removed = True


class RecordingView:
    """A PaneView that keeps everything it is told; `woken` is set when events wait in the inbox."""

    def __init__(self, draft: str = "") -> None:
        self.draft = draft
        self.woken = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self.given_back: list[str] = []
        self.toasts: list[str] = []
        self.notices: list[str] = []
        self.states: list[str] = []
        self.metrics: RequestMetrics | None = None  # the latest figures the status line was given
        self.prefills: list[tuple[int, int]] = []  # (prompt tokens computed, of how many), as shown
        self.users: list[str] = []
        self.replies: list[RecordingReply] = []
        self.shown: list[list[ChatMessage]] = []
        self.versions: list[tuple[int, int, int]] = []  # (message index, shown version, of how many)
        self.steps: list[tuple[int, int]] = []  # the turn's tool steps, as the status line shows them

    def wake(self) -> None:
        self._loop.call_soon_threadsafe(self.woken.set)

    def give_back(self, text: str) -> None:
        self.given_back.append(text)
        self.draft = text

    def notify(
        self,
        message: str,
        *,
        severity: str = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        self.toasts.append(message)

    def key_name(self, action: str) -> str:
        return action

    def changed(self) -> None:
        pass

    def show_state(
        self, state: str, metrics: RequestMetrics | None = None, prefill: tuple[int, int] | None = None
    ) -> None:
        self.states.append(state)
        self.metrics = metrics or self.metrics
        if prefill is not None:
            self.prefills.append(prefill)

    async def show_conversation(self, conversation: Conversation) -> None:
        self.shown.append(list(conversation.messages))

    async def show_messages(self, messages: Sequence[ChatMessage]) -> None:
        self.shown.append(list(messages))

    async def add_user(self, text: str) -> None:
        self.users.append(text)

    async def open_reply(self) -> RecordingReply:
        self.replies.append(RecordingReply())
        return self.replies[-1]

    async def reopen_reply(self) -> RecordingReply:
        return self.replies[-1] if self.replies else await self.open_reply()

    def show_version(self, index: int, message: ChatMessage) -> None:
        self.versions.append((index, message.version + 1, len(message.versions) + 1))

    async def add_notice(self, text: str, before: object = None) -> None:
        self.notices.append(text)

    def show_tool_step(self, step: int, limit: int) -> None:
        self.steps.append((step, limit))


def open_session(
    backend: LocalBackend, store: Store, conversation: Conversation | None = None
) -> tuple[PaneSession, RecordingView]:
    """A session as the chat screen makes one: open among the screen's sessions, saving to `store`."""
    saving = ConversationSaver(Saver(store))
    view = RecordingView()
    session = PaneSession(
        conversation or Conversation(settings=GREEDY), SessionContext(backend, saving), view, "pane-1"
    )
    saving.open = [session]
    return session, view


async def run(session: PaneSession, view: RecordingView, until: object = None) -> None:
    """Apply the backend's events as a pane's frames would, until `until()` (default: the turn ended)."""
    done = until if callable(until) else (lambda: not session.busy)
    while not done():
        await asyncio.wait_for(view.woken.wait(), LIMIT)
        view.woken.clear()
        await session.apply(session.inbox.take())


def slowed(engine: Engine, monkeypatch: pytest.MonkeyPatch, seconds: float = 0.02) -> None:
    """Each engine step takes `seconds` longer, so a reply is surely still streaming when cut."""
    step = engine.step

    def slow_step() -> list[RequestOutput]:
        time.sleep(seconds)  # on the worker's thread
        return step()

    monkeypatch.setattr(engine, "step", slow_step)


async def test_a_turn_streams_finishes_and_is_saved(
    backend: LocalBackend, store: Store, reference: Reference
) -> None:
    out = reference(user("Hello!"), GREEDY)
    want = strip_control(out.text)
    session, view = open_session(backend, store)
    await session.send("Hello!")
    assert session.busy and session.state == "queued"
    await run(session, view)

    assert [(m.role, m.content) for m in session.conversation.messages] == [
        ("user", "Hello!"),
        ("assistant", want),
    ]
    assert view.users == ["Hello!"] and view.replies[0].text == want and view.replies[0].finished
    assert session.state == ("cut" if out.finish_reason == "length" else "idle")  # cut: at its token limit
    assert session.context_used == len(session.conversation.prompt_cache.ids)
    saved = store.load(session.conversation.id)
    assert saved is not None and [m.content for m in saved.messages] == ["Hello!", want]
    assert [c.id for c in store.open_conversations()] == [session.conversation.id]


async def test_a_long_prompt_shows_its_prefill_progress_from_its_own_events_then_decodes(
    backend: LocalBackend, store: Store
) -> None:
    """No snapshot is read: the request's events say it prefills (chunks of at most
    max_num_batched_tokens) before its first token, and the status line follows them."""
    session, view = open_session(backend, store)
    await session.send("tell me more about the weather " * 60)
    assert session.turn is not None and (prompt := session.turn.prompt.tokens) is not None
    assert prompt > 2 * ENGINE["max_num_batched_tokens"]  # several chunks
    await run(session, view)

    first_decoding = view.states.index("decoding")
    assert view.states[0] == "queued" and set(view.states[1:first_decoding]) == {"prefill"}
    done = [computed for computed, total in view.prefills]
    assert {total for _, total in view.prefills} == {prompt}
    assert done == sorted(done) and done[0] > 0 and done[-1] < prompt
    assert "prefill" not in view.states[first_decoding:]


async def test_cancel_mid_turn_keeps_the_partial_reply_marked_stopped(
    backend: LocalBackend, store: Store, engine: Engine, reference: Reference, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = strip_control(reference(user("Tell me a story."), LONG).text)
    slowed(engine, monkeypatch)
    session, view = open_session(backend, store, Conversation(settings=LONG))
    await session.send("Tell me a story.")
    await run(session, view, until=lambda: session.turn is not None and len(session.turn.ids) >= 2)
    assert session.stop() and session.state == "stopping"
    await run(session, view)

    reply = session.conversation.messages[-1]
    assert reply.role == "assistant" and reply.stopped and session.state == "stopped"
    assert reply.content and full.startswith(reply.content) and len(reply.content) < len(full)
    saved = store.load(session.conversation.id)
    assert saved is not None and saved.messages[-1].content == reply.content and saved.messages[-1].stopped


async def mid_story(
    backend: LocalBackend, store: Store, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> tuple[PaneSession, RecordingView]:
    """A session whose (slowed) reply to a long question has begun to stream."""
    slowed(engine, monkeypatch)
    session, view = open_session(backend, store, Conversation(settings=LONG))
    await session.send("Tell me a story.")
    await run(session, view, until=lambda: session.turn is not None and session.turn.text)
    return session, view


async def test_settle_stops_the_reply_now_and_keeps_it_with_the_draft(
    backend: LocalBackend, store: Store, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    session, view = await mid_story(backend, store, engine, monkeypatch)
    view.draft = "and then?"
    await session.settle()  # a quit or a close: no waiting for the final event

    assert not session.busy and view.replies[0].finished
    saved = store.load(session.conversation.id)
    assert saved is not None and saved.draft == "and then?"
    assert saved.messages[-1].role == "assistant" and saved.messages[-1].stopped


async def test_regenerate_asks_again_and_edit_takes_the_message_back(
    backend: LocalBackend, store: Store, reference: Reference
) -> None:
    want = strip_control(reference(user("Hello!"), GREEDY).text)
    session, view = open_session(backend, store)
    await session.send("Hello!")
    await run(session, view)
    first = session.conversation.messages[-1]

    await session.regenerate()
    assert view.shown[-1] == [session.conversation.messages[0]]  # the old reply left the screen
    await run(session, view)
    assert [(m.role, m.content) for m in session.conversation.messages] == [
        ("user", "Hello!"),
        ("assistant", want),
    ]
    assert session.conversation.messages[-1] is not first and len(view.replies) == 2

    assert await session.edit_last() == "Hello!"
    assert session.conversation.messages == [] and view.shown[-1] == [] and session.context_used == 0


async def test_changing_the_chat_while_a_reply_comes_says_how_and_changes_nothing(
    backend: LocalBackend, store: Store, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """f5, alt+e, alt+arrows and alt+g mid-reply did nothing at all: a key that looks broken."""
    session, view = await mid_story(backend, store, engine, monkeypatch)
    await session.regenerate()
    assert await session.edit_last() is None
    assert await session.flip_version(None, -1) is None
    await session.continue_reply()
    said = "The reply is still coming: stop it (stop) first, then"
    assert view.toasts == [f"{said} {what}." for what in ("regenerate", "edit", "flip versions", "continue")]
    assert len(view.replies) == 1 and [m.role for m in session.conversation.messages] == ["user"]
    session.stop()
    await run(session, view)


async def test_fork_copies_the_conversation_and_ends_before_a_user_message(
    backend: LocalBackend, store: Store
) -> None:
    session, view = open_session(backend, store)
    assert session.fork(None) is None and view.toasts == ["Nothing to fork yet: send a message first."]
    await session.send("Hello!")
    await run(session, view)

    forked = session.fork(None)
    assert forked is not None
    fork = forked.conversation
    assert fork.id is None and fork.name == "fork of Hello!"
    assert [(m.role, m.content) for m in fork.messages] == [
        (m.role, m.content) for m in session.conversation.messages
    ]
    assert fork.messages[0] is not session.conversation.messages[0]
    assert fork.prompt_cache.entries == session.conversation.prompt_cache.entries  # served from the cache
    at_question = session.fork(0)
    assert at_question is not None
    assert at_question.conversation.messages == [] and at_question.conversation.draft == "Hello!"


async def test_a_backend_error_before_any_text_gives_the_message_back_with_its_sentence(
    backend: LocalBackend, store: Store
) -> None:
    session, view = open_session(backend, store)
    backend.close()  # the worker now rejects every request, with one sentence
    await session.send("Hello!")
    await run(session, view)

    assert session.conversation.messages == [] and view.given_back == ["Hello!"]
    assert session.state == "error" and view.replies[0].finished
    assert view.notices == ["This request was refused: the engine worker has shut down"]


async def test_a_backend_error_mid_reply_keeps_what_came_and_says_it_is_incomplete(
    backend: LocalBackend, store: Store, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = engine.step
    steps = iter(range(1_000))

    def failing_step() -> list[RequestOutput]:
        if next(steps) == 4:
            raise RuntimeError("the disk caught fire")
        return step()

    monkeypatch.setattr(engine, "step", failing_step)
    session, view = open_session(backend, store, Conversation(settings=LONG))
    await session.send("Tell me a story.")
    await run(session, view)

    reply = session.conversation.messages[-1]
    assert reply.role == "assistant" and reply.content and session.state == "error"
    assert view.notices == [
        "The reply above is incomplete: internal engine error (RuntimeError: the disk caught fire)"
    ]


async def test_a_restored_conversation_goes_on_from_the_prefix_cache(
    backend: LocalBackend, tmp_path: Path
) -> None:
    store = Store(tmp_path / "chats.db")
    session, view = open_session(backend, store)
    await session.send("Tell me about the sea.")
    await run(session, view)
    view.draft = "And the"
    session.save_draft()
    kept = session.conversation.prompt_cache.ids
    store.close()

    store = Store(tmp_path / "chats.db")
    try:
        [restored] = store.open_conversations()
        again, view = open_session(backend, store, restored)
        await again.start()
        assert [m.content for m in restored.messages] == [m.content for m in session.conversation.messages]
        assert restored.draft == "And the" and restored.prompt_cache.ids == kept
        assert backend.prepare(restored).ids[: len(kept)] == kept  # sent as generated, not re-encoded

        await again.send("And then?")
        await run(again, view)
    finally:
        store.close()
    block = ENGINE["block_size"]
    assert view.metrics is not None and view.metrics.cached_prompt_tokens >= len(kept) // block * block > 0


async def test_each_session_saves_itself_and_the_open_list_follows_the_screens_sessions(
    backend: LocalBackend, store: Store
) -> None:
    saving = ConversationSaver(Saver(store))
    context = SessionContext(backend, saving)
    views = [RecordingView(), RecordingView()]
    first, second = (PaneSession(Conversation(), context, view, f"pane-{n}") for n, view in enumerate(views))
    saving.open = [first, second]
    first.save()
    assert first.conversation.id is None  # nothing in it: not saved
    for session, view, draft in zip((first, second), views, ("one", "two"), strict=True):
        view.draft = draft
        session.save_draft()
    assert [c.draft for c in store.open_conversations()] == ["one", "two"]

    saving.open = [second]  # the screen closed the first pane
    second.save()
    assert [c.draft for c in store.open_conversations()] == ["two"]
    assert store.load(first.conversation.id or -1) is not None  # closed, still in history
