"""Panes as tools: a fork continues a chat in a new pane from the prefix cache; a broadcast sends one
message to the marked panes (else all), batched together."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from app.app import LfmChatApp
from app.core.conversation import ChatSettings
from app.core.sanitize import strip_control
from app.ui.widgets.chat_pane import ChatPane
from app.ui.widgets.dashboard import progress
from engine import DEFAULT_MODEL, RequestMetrics, RequestSnapshot
from tests.app.fake_openai import FakeServer
from tests.app.pilot_helpers import (
    MakeOptions,
    Reference,
    chat_screen,
    submit,
    user,
    wait_replied,
    wait_until,
)

SETTINGS = ChatSettings(temperature=0.0, max_tokens=24)


def first_turn_figures(pane: ChatPane) -> tuple[list[int], int]:
    """(prompt ids, cached prompt tokens) of the pane's last request."""
    metrics = pane.status.metrics
    assert metrics is not None
    return pane.conversation.prompt_cache.ids[: metrics.prompt_tokens], metrics.cached_prompt_tokens


async def test_a_fork_continues_in_a_new_pane_and_its_first_turn_comes_from_the_prefix_cache(
    make_options: MakeOptions,
) -> None:
    app = LfmChatApp(make_options(panes=1, chat=SETTINGS))
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await chat_screen(app, pilot)
        parent = screen.panes[0]
        block = app.options.engine.block_size
        await submit(pilot, parent, "Tell me a story about the sea.")
        await wait_replied(pilot, parent)
        await submit(pilot, parent, "And then?")
        await wait_replied(pilot, parent, turns=2)
        seen = parent.conversation.prompt_cache.ids  # the last prompt and reply, as the engine saw them
        second_prompt = seen[: parent.status.metrics.prompt_tokens]  # type: ignore[union-attr]

        await pilot.press("f6")  # nothing selected: the whole chat
        await wait_until(pilot, lambda: len(screen.panes) == 2, "the fork")
        fork = screen.panes[1]
        assert fork.conversation.messages == parent.conversation.messages
        assert fork.conversation.title.startswith("fork of Tell me a story")
        assert fork.conversation.title in str(fork.border_title)
        saved = app.store.load(fork.conversation.id)  # type: ignore[union-attr, arg-type]
        assert saved is not None and saved.title == fork.conversation.title

        await submit(pilot, fork, "What happened next?")
        await wait_replied(pilot, fork, turns=3)
        prompt, cached = first_turn_figures(fork)
        # Everything the parent's engine computed is shared (its last id was sampled, never computed)...
        assert prompt[: len(seen)] == seen
        # ...so the fork prefills only its new tokens: every full block before them is cached.
        assert cached == (len(seen) - 1) // block * block > 0
        assert f"({cached} cached)" in fork.status.describe()
        assert len(parent.conversation.messages) == 4  # the parent is left as it was

        parent.focus_input()
        await pilot.press("ctrl+up", "ctrl+up")  # the parent's second question
        await pilot.press("f6")
        await wait_until(pilot, lambda: len(screen.panes) == 3, "a fork at a question")
        at_question = screen.panes[1]  # opened beside its parent
        assert at_question.conversation.messages == parent.conversation.messages[:2]
        assert at_question.prompt_input.text == "And then?"  # to send again, or to edit
        at_question.focus_input()
        await pilot.press("enter")
        await wait_replied(pilot, at_question, turns=2)
        prompt, cached = first_turn_figures(at_question)
        assert prompt == second_prompt
        assert cached == (len(prompt) - 1) // block * block > 0


async def test_broadcast_sends_to_the_marked_panes_else_to_all(
    make_options: MakeOptions, reference: Reference
) -> None:
    want = strip_control(reference(user("Hello!"), SETTINGS).text)
    app = LfmChatApp(make_options(panes=3, chat=SETTINGS))
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await chat_screen(app, pilot)
        one, two, three = screen.panes
        for pane in (one, three):
            pane.focus_input()
            await pilot.press("alt+m")
        assert [p.marked for p in screen.panes] == [True, False, True]
        assert one.has_class("-marked") and str(one.border_title).startswith("● ")

        two.focus_input()
        two.prompt_input.text = "Hello!"
        await pilot.press("alt+a")  # typed in an unmarked pane: still goes to the marked ones
        await wait_replied(pilot, one, three)
        assert two.prompt_input.text == "" and two.conversation.messages == []
        for pane in (one, three):
            assert [(m.role, m.content) for m in pane.conversation.messages] == [
                ("user", "Hello!"),
                ("assistant", want),
            ]
        # One batch: each was scheduled before the other's last token (the engine stepped them together).
        [a, b] = [p.status.metrics for p in (one, three)]
        assert isinstance(a, RequestMetrics) and isinstance(b, RequestMetrics)
        assert a.first_scheduled_time and b.first_scheduled_time and a.last_token_time and b.last_token_time
        assert max(a.first_scheduled_time, b.first_scheduled_time) < min(a.last_token_time, b.last_token_time)

        for pane in (one, three):
            pane.focus_input()
            await pilot.press("alt+m")
        two.focus_input()
        two.prompt_input.text = "Hello!"
        await pilot.press("alt+a")  # none marked: all panes
        await wait_replied(pilot, one, three, turns=2)
        await wait_replied(pilot, two)
        assert [r.source for r in two.transcript.replies] == [want]


def test_the_dashboard_names_the_prompt_tokens_each_request_got_from_the_prefix_cache() -> None:
    request = RequestSnapshot(
        "r1",
        "pane-2",
        "prefill",
        120,
        112,
        cached_prompt_tokens=96,
        generated_tokens=0,
        max_tokens=24,
        tokens_per_s=0.0,
        ttft=None,
    )
    assert progress(request) == "112/120 (96 cached)"
    assert progress(replace(request, phase="decode", generated_tokens=3)) == "3/24 (96 cached)"
    assert progress(replace(request, cached_prompt_tokens=0)) == "112/120"


async def test_a_broadcast_carries_the_senders_attachments_to_every_pane(
    make_options: MakeOptions, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("Buy milk.\n")
    with FakeServer() as server:
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=2))
        async with app.run_test(size=(160, 40)) as pilot:
            one, two = (await chat_screen(app, pilot)).panes
            await submit(pilot, one, f"/file {notes}")
            await wait_until(pilot, lambda: one.session.attachments.held, "the attachment held")
            one.prompt_input.text = "Summarise"
            await pilot.press("alt+a")
            await wait_replied(pilot, one, two)
            for pane in (one, two):
                assert pane.conversation.messages[0].content == "notes.md\n```\nBuy milk.\n```\n\nSummarise"
            assert not one.session.attachments.held and "+notes.md" not in str(one.border_subtitle)


async def test_the_whole_chat_is_not_forked_mid_reply(make_options: MakeOptions) -> None:
    """A fork then would keep half an answer as if whole; Esc first keeps it, marked stopped."""
    with FakeServer() as server:
        server.delay = 0.5
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=1))
        async with app.run_test(size=(160, 40)) as pilot:
            screen = await chat_screen(app, pilot)
            pane = screen.panes[0]
            await submit(pilot, pane, "Hi")
            await pane.run_action("fork")
            await wait_until(
                pilot, lambda: any("fork once" in str(n.message) for n in app._notifications), "the notice"
            )
            assert len(screen.panes) == 1  # refused (the notice says so), not forked
            await wait_replied(pilot, pane)
            await pane.run_action("fork")
            await wait_until(pilot, lambda: len(screen.panes) == 2, "the fork")
