"""Pane numbers stay put through forks and closes, the zoom key shows one pane full screen and back,
and the chats a broadcast starts are named after their pane and sampling (issue 39 item 9)."""

from __future__ import annotations

from dataclasses import replace

from app.app import LfmChatApp
from app.core.conversation import ChatSettings
from app.ui.widgets.chat_pane import ChatPane
from tests.app.pilot_helpers import MakeOptions, chat_screen, submit, wait_replied, wait_until

SETTINGS = ChatSettings(temperature=0.0, max_tokens=4)


def numbers(panes: list[ChatPane]) -> list[str]:
    return [pane.label for pane in panes]


async def test_a_pane_keeps_its_number_and_a_new_one_takes_the_lowest_free(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=3, chat=SETTINGS))
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await chat_screen(app, pilot)
        assert numbers(screen.panes) == ["1", "2", "3"]
        await submit(pilot, screen.panes[0], "Hi")
        await wait_replied(pilot, screen.panes[0])
        await pilot.press("f6")  # a fork of pane 1 opens beside it
        await wait_until(pilot, lambda: len(screen.panes) == 4, "the fork")
        assert numbers(screen.panes) == ["1", "4", "2", "3"]
        assert str(screen.panes[1].border_title).startswith("4 · ")

        screen.panes[2].focus_input()  # pane 2
        await pilot.press("alt+w")
        await wait_until(pilot, lambda: len(screen.panes) == 3, "pane 2 closed")
        assert numbers(screen.panes) == ["1", "4", "3"]  # nobody was renumbered
        await pilot.press("alt+n")
        await wait_until(pilot, lambda: len(screen.panes) == 4, "a new pane")
        assert sorted(numbers(screen.panes)) == ["1", "2", "3", "4"]  # it took 2, the lowest free


async def test_the_zoom_key_shows_one_pane_full_screen_and_follows_tab(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=2, chat=SETTINGS))
    async with app.run_test(size=(160, 40)) as pilot:
        screen = await chat_screen(app, pilot)
        first, second = screen.panes
        first.focus_input()
        await pilot.press("alt+z")
        assert screen.maximized is first
        await pilot.pause()
        assert first.outer_size.width == 160 and not second.region.area  # alone on the screen
        await pilot.press("tab")
        assert screen.maximized is second and app.focused is second.prompt_input
        await pilot.press("x")
        assert second.prompt_input.text == "x"  # typing goes to the zoomed pane
        await pilot.press("alt+z")
        assert screen.maximized is None
        await pilot.pause()
        assert first.region.area and second.region.area


async def test_the_chats_a_broadcast_starts_are_named_after_their_pane_and_sampling(
    make_options: MakeOptions,
) -> None:
    app = LfmChatApp(make_options(panes=2, chat=SETTINGS))
    async with app.run_test(size=(160, 40)) as pilot:
        screen = await chat_screen(app, pilot)
        first, second = screen.panes
        second.conversation.settings = replace(second.conversation.settings, temperature=0.7, top_p=0.9)
        first.focus_input()
        first.prompt_input.text = "Why is the sky blue?"
        await pilot.press("alt+a")
        await wait_replied(pilot, first, second)
        assert first.conversation.name == "pane 1 · T 0 min-p 0.15 · Why is the sky blue?"
        assert second.conversation.name == "pane 2 · T 0.7 top-p 0.9 min-p 0.15 · Why is the sky blue?"
        assert second.conversation.title in str(second.border_title)
        titles = {summary.title for summary in app.store.summaries()}
        assert first.conversation.title in titles and second.conversation.title in titles

        first.prompt_input.text = "And at sunset?"  # a second broadcast keeps the names
        await pilot.press("alt+a")
        await wait_replied(pilot, first, second, turns=2)
        assert first.conversation.name.startswith("pane 1 · ")


async def test_a_pane_zoomed_away_draws_its_stream_only_when_shown_again(make_options: MakeOptions) -> None:
    """While another pane is zoomed, a streaming pane mounts nothing per token; shown again, it
    draws everything that came, as if it had been in view all along."""
    app = LfmChatApp(make_options(panes=2, chat=ChatSettings(temperature=0.0, max_tokens=48)))
    async with app.run_test(size=(160, 40)) as pilot:
        screen = await chat_screen(app, pilot)
        first, second = screen.panes
        first.focus_input()
        await pilot.press("alt+z")
        assert screen.maximized is first
        await second.session.send("Tell me a story.")
        await wait_replied(pilot, second)
        reply = second.transcript.replies[-1]
        answer = second.conversation.messages[-1].content
        assert answer and reply.source == answer
        assert not reply.markdown_parts  # nothing drawn while hidden
        await pilot.press("alt+z")
        assert screen.maximized is None
        await wait_until(pilot, lambda: bool(reply.markdown_parts), "the reply drawn")
        assert "".join(part.source for part in reply.markdown_parts) == answer.strip()


async def test_a_pane_scrolled_up_draws_its_stream_only_when_scrolled_back(make_options: MakeOptions) -> None:
    """Scrolled up from its live end, a streaming pane draws nothing per token (its reply would
    grow below the view); back at the end, it shows everything that came and follows the stream."""
    app = LfmChatApp(make_options(panes=1, chat=ChatSettings(temperature=0.0, max_tokens=200)))
    async with app.run_test(size=(100, 24)) as pilot:
        screen = await chat_screen(app, pilot)
        (pane,) = screen.panes
        transcript = pane.transcript
        await transcript.add_user("\n".join(f"line {n}" for n in range(60)))  # taller than the view
        await pane.session.send("Tell me a story.")
        await wait_until(pilot, lambda: bool(transcript.replies), "the reply begun")
        transcript.jump(to_end=False)  # the user scrolls up, as ctrl+Home does
        await wait_replied(pilot, pane)
        reply = transcript.replies[-1]
        answer = pane.conversation.messages[-1].content
        assert answer and reply.source == answer and reply.holds_text
        drawn = "".join(part.source for part in reply.markdown_parts)
        assert len(drawn) < len(answer.strip())  # what came while scrolled away is not drawn
        assert transcript.scroll_y == 0  # and the view did not move
        transcript.jump(to_end=True)
        await wait_until(pilot, lambda: not reply.holds_text, "the reply drawn")
        assert "".join(part.source for part in reply.markdown_parts) == answer.strip()
        await wait_until(pilot, lambda: transcript.scroll_y == transcript.max_scroll_y, "the end in view")
