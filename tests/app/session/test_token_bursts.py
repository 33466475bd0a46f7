"""Tokens that arrive together cost the UI one wake-up and one drawing, and the reply a pane ends
with does not depend on how its tokens were grouped into frames.

The events are a real turn's, recorded from the LocalBackend on the tiny checkpoint; they are
then fed again, grouped as Hypothesis picks, to sessions whose backend hands back that recording
(a backend delivers a stream in whatever bursts its thread and the network make).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.backend.local import LocalBackend
from app.core.conversation import ChatSettings, Conversation
from app.core.sanitize import strip_control
from app.session import ConversationSaver, PaneSession, SessionContext
from app.session.inbox import TokenInbox
from app.store.database import Store
from app.store.persistence import Saver
from engine import RequestMetrics, TokenEvent
from tests.app.session.test_pane_session import RecordingReply, RecordingView, run

LONG = ChatSettings(temperature=0.0, max_tokens=60)
QUESTION = "Tell me a story."


class CountingReply(RecordingReply):
    """A reply that counts its drawings."""

    def __init__(self) -> None:
        super().__init__()
        self.updates = 0

    async def update(self, text: str) -> None:
        self.updates += 1
        await super().update(text)


class CountingView(RecordingView):
    """A view that counts its wake-ups, with replies that count their drawings."""

    def __init__(self) -> None:
        super().__init__()
        self.wakes = 0

    def wake(self) -> None:
        self.wakes += 1
        super().wake()

    async def open_reply(self) -> CountingReply:
        self.replies.append(CountingReply())
        return self.replies[-1]  # type: ignore[return-value]


class Relayed:
    """The real backend, each stream's events also kept in `events`; or, once `replaying`, every
    request is that recording again, delivered by the test in the groups it picks."""

    def __init__(self, backend: LocalBackend) -> None:
        self._backend = backend
        self.events: list[TokenEvent] = []
        self.replaying = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)  # the real backend's prompts, context and names

    def submit(
        self, prompt: Any, settings: Any, max_tokens: int, tag: str, on_event: Any, structure: Any = None
    ) -> Any:
        if self.replaying:
            return Recording(self.events[0].request_id)

        def relay(event: TokenEvent) -> None:
            self.events.append(event)
            on_event(event)

        return self._backend.submit(prompt, settings, max_tokens, tag, relay, structure)


class Recording:
    """A recorded request: nothing runs, so there is nothing to cancel."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id

    def cancel(self) -> None:
        pass


def counting_session(backend: Relayed, store: Store) -> tuple[PaneSession, CountingView]:
    """A session as the chat screen makes one, with a view that counts."""
    saving = ConversationSaver(Saver(store))
    view = CountingView()
    session = PaneSession(Conversation(settings=LONG), SessionContext(backend, saving), view, "pane-1")  # type: ignore[arg-type]
    saving.open = [session]
    return session, view


@pytest.fixture
def relayed(backend: LocalBackend, store: Store) -> Relayed:
    """A real turn of the tiny model, recorded, then replayed on every submit."""
    relayed = Relayed(backend)

    async def turn() -> None:
        session, view = counting_session(relayed, store)
        await session.send(QUESTION)
        await run(session, view)  # type: ignore[arg-type]

    asyncio.run(turn())
    assert len([e for e in relayed.events if e.text]) > 10
    relayed.replaying = True
    return relayed


def test_a_burst_wakes_the_view_once_and_is_taken_whole_in_order() -> None:
    """The backend's thread puts 500 tokens while the UI is busy: one wake-up, one take of all."""
    wakes: list[int] = []
    inbox = TokenInbox(lambda: wakes.append(1))
    metrics = RequestMetrics(arrival_time=0.0, prompt_tokens=1)
    events = [TokenEvent("r", None, f"{i} ", (i,), False, None, None, metrics) for i in range(500)]
    thread = threading.Thread(target=lambda: [inbox.put(e) for e in events])
    thread.start()
    thread.join()
    assert len(wakes) == 1
    assert inbox.take() == events
    inbox.put(events[0])  # taken: the next token wakes the view again
    assert len(wakes) == 2


def test_a_burst_of_tokens_is_drawn_once(relayed: Relayed, store: Store) -> None:
    events = relayed.events

    async def replay() -> CountingView:
        session, view = counting_session(relayed, store)
        await session.send(QUESTION)
        for event in events[:-1]:  # everything but the end arrives while the UI is busy
            session.inbox.put(event)
        await session.apply(session.inbox.take())
        session.inbox.put(events[-1])
        await session.apply(session.inbox.take())
        assert not session.busy
        return view

    view = asyncio.run(replay())
    assert view.wakes == 2  # one per burst, not one per token
    assert view.replies[0].updates == 2  # likewise the drawing


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_reply_is_the_same_however_its_tokens_were_grouped(
    relayed: Relayed, store: Store, data: st.DataObject
) -> None:
    events = relayed.events
    cuts = sorted(data.draw(st.sets(st.integers(1, len(events) - 1))))
    groups = [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True)]

    async def replay() -> tuple[str, list[tuple[str, str]]]:
        session, view = counting_session(relayed, store)
        await session.send(QUESTION)
        for group in groups:
            for event in group:
                session.inbox.put(event)
            await session.apply(session.inbox.take())
        assert not session.busy and view.replies[0].finished
        assert view.replies[0].updates <= len(groups)
        return view.replies[0].text, [(m.role, m.content) for m in session.conversation.messages]

    shown, messages = asyncio.run(replay())
    whole = strip_control("".join(e.text for e in events))
    assert shown == whole
    assert messages == [("user", QUESTION), ("assistant", whole)]
