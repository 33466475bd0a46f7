"""Regenerate and edit keep the prompt cache: turn N+1 reuses every block before the first changed token.

The tiny random checkpoint replies in arbitrary bytes, so a reply's text (as shown, split UTF-8
replaced) does not re-encode to the ids the model generated: only ids kept with the conversation
give the engine the same prompt twice.
"""

from __future__ import annotations

from textual.pilot import Pilot

from app.app import LfmChatApp
from app.core.conversation import ChatSettings
from app.ui.widgets.chat_pane import ChatPane
from tests.app.pilot_helpers import MakeOptions, chat_screen, submit, wait_replied, wait_until

SETTINGS = ChatSettings(temperature=0.0, max_tokens=24)


def figures(pane: ChatPane) -> tuple[int, int]:
    """(prompt tokens, cached prompt tokens) of the pane's last request."""
    metrics = pane.status.metrics
    assert metrics is not None
    return metrics.prompt_tokens, metrics.cached_prompt_tokens


def whole_prompt_cached(prompt_tokens: int, block: int) -> int:
    """What the engine serves for a prompt it saw whole before: every full block but the last token's."""
    return (prompt_tokens - 1) // block * block


async def regenerate(pilot: Pilot, pane: ChatPane) -> None:
    """ctrl+r, then wait for the new request to end."""
    before = pane.status.metrics
    await pilot.press("f5")
    await wait_until(pilot, lambda: pane.status.metrics is not before and not pane.busy, "a regenerate")


async def test_regenerate_twice_sends_the_same_ids_served_from_the_prefix_cache(
    make_options: MakeOptions,
) -> None:
    app = LfmChatApp(make_options(panes=1, chat=SETTINGS))
    async with app.run_test() as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        block = app.options.engine.block_size
        await submit(pilot, pane, "Tell me a story about the sea.")
        await wait_replied(pilot, pane)
        await submit(pilot, pane, "And then?")
        await wait_replied(pilot, pane, turns=2)
        prompt_tokens, _ = figures(pane)

        for _ in range(2):
            await regenerate(pilot, pane)
            assert figures(pane) == (prompt_tokens, whole_prompt_cached(prompt_tokens, block))
            assert f"({whole_prompt_cached(prompt_tokens, block)} cached)" in pane.status.describe()


async def test_edit_then_the_same_text_sends_the_same_ids_served_from_the_prefix_cache(
    make_options: MakeOptions,
) -> None:
    app = LfmChatApp(make_options(panes=1, chat=SETTINGS))
    async with app.run_test() as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        block = app.options.engine.block_size
        await submit(pilot, pane, "Tell me a story about the sea.")
        await wait_replied(pilot, pane)
        await submit(pilot, pane, "And then?")
        await wait_replied(pilot, pane, turns=2)
        prompt_tokens, _ = figures(pane)

        await pilot.press("alt+e")
        assert pane.prompt_input.text == "And then?"
        await submit(pilot, pane, "And then?")
        await wait_replied(pilot, pane, turns=2)

        assert figures(pane) == (prompt_tokens, whole_prompt_cached(prompt_tokens, block))
