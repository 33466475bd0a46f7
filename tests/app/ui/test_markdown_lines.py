"""An answer drawn as lines: a stream mounts widgets only where code blocks start and end, and
draws exactly what the same answer drawn at once draws, however its tokens were grouped."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.segment import Segment
from textual.app import App, ComposeResult
from textual.widget import Widget

from app.ui.widgets.markdown_blocks import MarkdownBlocks, is_fence
from app.ui.widgets.markdown_lines import BlockLines, CodeBlock
from app.ui.widgets.reply import Reply
from app.ui.widgets.stream_slack import SLACK_ROWS
from app.ui.widgets.transcript import Transcript, copy_text
from bench.paced_server import REPLY

# Lines whose meaning a later character can change: a fence that is not one ("```x`"), a rule
# that is not one ("***x"), a setext underline, a table's delimiter row, lazy continuations.
TRICKY = (
    "para\n```x`\nstill para\n\n***x\n***\n\nhead\n===\n\n"
    "a | b\n|---|---|\n| 1 | 2 |\n\n> quote\nlazy\n\n- item\n\n  more\n\n1. one\n2. two\n\n"
    "~~~\ncode\n\n~~~\nafter\n```py\nopen"
)


Drawn = list[tuple[str, list[list[Segment]]]]


def drawn(reply: Widget) -> Drawn:
    """Every row the reply's Markdown views draw, with their styles, view by view."""
    return [
        (type(view).__name__, [list(view.render_line(y)) for y in range(view.size.height)])
        for view in reply.query(BlockLines)
    ]


class ReplyHost(App[None]):
    def __init__(self, text: str = "") -> None:
        super().__init__()
        self.reply = Reply(text)

    def compose(self) -> ComposeResult:
        yield self.reply


async def draw_at_once(text: str, size: tuple[int, int]) -> tuple[Drawn, str]:
    app = ReplyHost(text)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        return drawn(app.reply), app.export_screenshot()


async def draw_streamed(
    text: str, cuts: list[int], size: tuple[int, int]
) -> list[tuple[str, list[list[Segment]]]]:
    app = ReplyHost()
    async with app.run_test(size=size) as pilot:
        for end in [*cuts, len(text)]:
            await app.reply.update(text[:end])
            await pilot.pause()
        await app.reply.finish()
        await pilot.pause()
        return drawn(app.reply), app.export_screenshot()


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([REPLY * 2, TRICKY]), st.lists(st.integers(0, 2 * len(REPLY))))
def test_blocks_are_the_same_however_the_text_was_cut(text: str, cuts: list[int]) -> None:
    whole = MarkdownBlocks()
    whole.extend(text)
    streamed = MarkdownBlocks()
    for end in [*sorted(min(cut, len(text)) for cut in cuts), len(text)]:
        streamed.extend(text[:end])
        assert text[:end].endswith("".join(streamed.done) + streamed.live)  # all of it, once
    assert (streamed.done, streamed.live) == (whole.done, whole.live)
    assert whole.text.endswith(whole.live) and len(whole.done) > 5


@pytest.mark.pilot  # through Hypothesis's wrapper, which the marking rule does not read
@settings(max_examples=12, deadline=None)
@given(
    st.sampled_from([REPLY, TRICKY]),
    st.lists(st.integers(0, len(REPLY)), max_size=25),
    st.sampled_from([24, 70]),
)
def test_a_streamed_answer_draws_what_the_answer_drawn_at_once_draws(
    text: str, cuts: list[int], width: int
) -> None:
    cuts = sorted(min(cut, len(text)) for cut in cuts)
    size = (width, 200)
    assert asyncio.run(draw_streamed(text, cuts, size)) == asyncio.run(draw_at_once(text, size))


async def test_a_long_streamed_answer_mounts_widgets_only_at_code_blocks() -> None:
    """~2,400 words, three at a time: the widgets ever mounted are a few per segment and per
    code block (the block and the text after it), not one per paragraph, list item or cell."""
    text = REPLY * 20
    app = ReplyHost()
    async with app.run_test(size=(80, 40)) as pilot:
        seen: dict[int, str] = {}
        words = text.split(" ")
        for end in range(1, len(words) + 1, 3):
            await app.reply.update(" ".join(words[:end]))
            seen.update((id(w), type(w).__name__) for w in app.reply.walk_children())
        await app.reply.finish()
        await pilot.pause()
        kinds = Counter(seen.values())
        assert kinds["CodeBlock"] == text.count("```") // 2  # each code block mounted once
        assert kinds["BlockLines"] <= kinds["MarkdownSegment"] + 2 * kinds["CodeBlock"]
        assert sum(kinds.values()) < len(words) / 20, kinds  # before: ~0.25 widgets per token


async def test_a_streaming_paragraph_grows_into_rows_laid_out_before_and_fits_at_the_end() -> None:
    """A row a token adds mostly lands in rows already laid out (a taller view lays out the screen
    and scrolls the transcript, redrawing the whole pane): the live view grows SLACK_ROWS at a
    time while its text grows a row at a time, and fits its text once the reply is finished."""
    words = [f"word{i}" for i in range(160)]
    app = ReplyHost()
    async with app.run_test(size=(30, 120)) as pilot:
        heights, text_rows = set(), set()
        for end in range(1, len(words) + 1):
            await app.reply.update(" ".join(words[:end]))
            await pilot.pause()
            view = app.reply.query_one(BlockLines)
            if end > 1:  # the first token makes the view; the ones after stream into it
                heights.add(view.size.height)
            text_rows.add(_text_rows(view))
        assert all(height % SLACK_ROWS == 0 for height in heights), sorted(heights)
        assert len(text_rows) > 2 * len(heights) > 4  # many rows added, few heights laid out
        await app.reply.finish()
        await pilot.pause()
        assert view.size.height == _text_rows(view) == max(text_rows)


def _text_rows(view: BlockLines) -> int:
    return sum(1 for y in range(view.size.height) if "".join(s.text for s in view.render_line(y)).strip())


async def test_narrow_widths_wrap_text_instead_of_clipping_it() -> None:
    words = ["antidisestablishment", "word", "another", "`inline`", "**bold**"] * 12
    text = "# A heading that is long\n\n" + " ".join(words) + "\n\n- " + " ".join(words) + "\n"
    app = ReplyHost(text)
    async with app.run_test(size=(16, 120)) as pilot:
        await pilot.pause()
        rows = ["".join(segment.text for segment in row) for _, view in drawn(app.reply) for row in view]
        assert rows and all(len(row) <= 16 for row in rows)
        shown = "".join("".join(rows).split())  # a word wider than the pane folds onto the next row
        assert shown.startswith("Aheadingthatislong")
        for word in ("antidisestablishment", "word", "another", "inline", "bold"):
            assert shown.count(word) == 24, word  # every character on screen, none cut at the edge


class TranscriptHost(App[None]):
    def compose(self) -> ComposeResult:
        yield Transcript([])


async def test_code_blocks_are_selectable_and_copied_as_their_code() -> None:
    app = TranscriptHost()
    async with app.run_test(size=(60, 30)) as pilot:
        transcript = app.query_one(Transcript)
        reply = await transcript.add_reply()
        await reply.update("Two blocks:\n\n```python\nx = 1\n```\n\nand\n\n~~~\ny = `2`\n~~~\n")
        await reply.finish()
        await pilot.pause()
        items = transcript.selectables()
        assert items[0] is reply and [copy_text(item) for item in items[1:]] == ["x = 1\n", "y = `2`\n"]
        assert all(isinstance(item, CodeBlock) for item in items[1:])


async def test_a_theme_change_draws_code_for_the_new_theme() -> None:
    text = "```python\nx = 1\n```\n"
    app = ReplyHost(text)
    async with app.run_test(size=(40, 10)) as pilot:
        await pilot.pause()
        dark = drawn(app.reply)
        app.theme = "textual-light"
        await pilot.pause()
        light = drawn(app.reply)
    fresh = ReplyHost(text)
    fresh.theme = "textual-light"
    async with fresh.run_test(size=(40, 10)) as pilot:
        await pilot.pause()
        assert light == drawn(fresh.reply) != dark


def test_a_fence_is_told_by_its_first_line() -> None:
    assert is_fence("```python\nx\n```\n") and is_fence("~~~\n") and is_fence("   ````\n")
    assert not is_fence("```x`\n") and not is_fence("    ```\n") and not is_fence("``\n")
