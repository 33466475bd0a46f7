"""Per-pane turn actions: regenerate, edit and resend, and prefix reuse on the next turn."""

from __future__ import annotations

from textual.widgets import Static

from app.app import LfmChatApp
from app.core.conversation import ChatSettings
from app.core.sanitize import strip_control
from engine import EngineConfig
from tests.app.pilot_helpers import ENGINE, MakeOptions, Reference, chat_screen, submit, user, wait_replied


async def test_regenerate_replaces_the_last_reply_with_a_new_request(
    make_options: MakeOptions, reference: Reference
) -> None:
    settings = ChatSettings(temperature=0.0, max_tokens=24)
    want = strip_control(reference(user("Hello!"), settings).text)
    app = LfmChatApp(make_options(panes=1, chat=settings))
    async with app.run_test() as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await submit(pilot, pane, "Hello!")
        await wait_replied(pilot, pane)
        first = pane.status.metrics
        assert first is not None

        await pilot.press("f5")
        await wait_replied(pilot, pane)

        assert pane.status.metrics is not first  # a second request ran
        assert [m.role for m in pane.conversation.messages] == ["user", "assistant"]
        assert [r.source for r in pane.transcript.replies] == [want]


async def test_edit_last_puts_the_message_back_and_resends_the_edit(
    make_options: MakeOptions, reference: Reference
) -> None:
    settings = ChatSettings(temperature=0.0, max_tokens=24)
    want = strip_control(reference(user("Hello there, friend"), settings).text)
    app = LfmChatApp(make_options(panes=1, chat=settings))
    async with app.run_test() as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await submit(pilot, pane, "Hello there")
        await wait_replied(pilot, pane)

        await pilot.press("alt+e")
        assert pane.prompt_input.text == "Hello there"
        assert pane.conversation.messages == []
        await pilot.press(*", friend", "enter")
        await wait_replied(pilot, pane)

        assert [(m.role, m.content) for m in pane.conversation.messages] == [
            ("user", "Hello there, friend"),
            ("assistant", want),
        ]
        assert [r.source for r in pane.transcript.replies] == [want]


async def test_second_turn_prefills_only_new_tokens(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=1, chat=ChatSettings(temperature=0.0, max_tokens=24)))
    async with app.run_test() as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await submit(pilot, pane, "Tell me a story about the sea.")
        await wait_replied(pilot, pane)
        [(_, first_prompt), _] = pane.conversation.prompt_cache.entries
        first_turn = pane.conversation.prompt_cache.ids

        await submit(pilot, pane, "And then?")
        await wait_replied(pilot, pane, turns=2)
        metrics = pane.status.metrics
        assert metrics is not None
        second_prompt = pane.conversation.prompt_cache.ids[: metrics.prompt_tokens]

        # The second prompt extends the ids the engine saw (prompt + generated), not a re-tokenization...
        assert second_prompt[: len(first_turn)] == first_turn
        assert len(first_turn) > len(first_prompt)
        # ...so the engine serves every full block of them from its prefix cache, and the pane says so.
        block = app.options.engine.block_size
        assert metrics.cached_prompt_tokens >= len(first_prompt) // block * block > 0
        assert f"({metrics.cached_prompt_tokens} cached)" in str(pane.status.render())


async def test_a_message_beyond_the_context_is_refused_with_a_notice(make_options: MakeOptions) -> None:
    engine = EngineConfig(**{**ENGINE, "max_model_len": 48})
    app = LfmChatApp(make_options(panes=1, engine=engine))
    async with app.run_test() as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        long_text = "Tell me a story about the sea. " * 10
        pane.focus_input()
        pane.prompt_input.text = long_text
        await pilot.press("enter")

        assert pane.conversation.messages == [] and not pane.busy
        assert pane.prompt_input.text == long_text  # given back to be shortened
        notice = pane.transcript.query_one(".notice", Static)
        assert "would not fit" in str(notice.render()) and "48" in str(notice.render())


async def test_copy_and_export_write_what_the_pane_shows(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=1))
    async with app.run_test() as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await submit(pilot, pane, "Hello!")
        await wait_replied(pilot, pane)
        reply = pane.conversation.messages[-1].content

        await pilot.press("alt+c")
        assert app.clipboard == reply
        assert (app.options.data_dir / "clipboard.txt").read_text(encoding="utf-8") == reply
        await pilot.press("ctrl+o")
        [export] = (app.options.data_dir / "exports").iterdir()
        assert export.read_text(encoding="utf-8").startswith("# Hello!")
