"""A reply that grows lays the screen out once, not a second time for its new size, and draws
what the same reply drawn at once draws."""

from __future__ import annotations

import pytest
from textual._compositor import Compositor

from app.ui.patches import laid_out_once
from bench.paced_server import REPLY
from tests.app.ui.test_markdown_lines import ReplyHost, draw_at_once, draw_streamed


@pytest.fixture
def settled_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Widgets count as settled from their first size (the app waits a second for that)."""
    monkeypatch.setattr(laid_out_once, "SETTLED_SECONDS", 0.0)


def _counted_reflows(compositor: Compositor) -> list[int]:
    count = [0]
    reflow = compositor.reflow

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        count[0] += 1
        return reflow(*args, **kwargs)

    compositor.reflow = counted  # type: ignore[method-assign]
    return count


async def _reflows_while_growing(growths: int) -> int:
    """Screen layouts while a reply grows by a paragraph `growths` times, a frame apart."""
    app = ReplyHost()
    paragraphs = REPLY.split("\n\n")
    async with app.run_test(size=(60, 40)) as pilot:
        await app.reply.update(paragraphs[0] + "\n\n")
        for _ in range(3):
            await pilot.pause()
        reflows = _counted_reflows(app.screen._compositor)
        text = paragraphs[0]
        for paragraph in paragraphs[1 : 1 + growths]:
            text += "\n\n" + paragraph
            await app.reply.update(text + "\n\n")
            for _ in range(3):
                await pilot.pause()
        return reflows[0]


async def test_a_growing_reply_lays_the_screen_out_once_a_growth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(laid_out_once, "SETTLED_SECONDS", float("inf"))  # as Textual does
    textuals = await _reflows_while_growing(2)  # two paragraphs (after them a code block mounts views)
    monkeypatch.setattr(laid_out_once, "SETTLED_SECONDS", 0.0)
    ours = await _reflows_while_growing(2)
    assert textuals == 2 * 2  # each growth, then again for the sizes it gave
    assert ours == 2


@pytest.mark.usefixtures("settled_at_once")
async def test_a_reply_grown_without_second_layouts_draws_what_it_draws_at_once() -> None:
    text = REPLY * 2
    cuts = list(range(40, len(text), 97))
    for size in ((70, 40), (30, 24)):
        assert await draw_streamed(text, cuts, size) == await draw_at_once(text, size)
