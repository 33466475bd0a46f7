"""The folding policy: where an answer is drawn as Markdown and where as plain text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.ui.widgets.answer_segments import ALL_PLAIN, LIMITS, DrawingLimits, SegmentPlan

SMALL = DrawingLimits(
    segment_min_chars=20,
    segment_min_lines=4,
    segment_chars=200,
    segment_lines=10,
    segment_cells=30,
    reply_chars=400,
    reply_lines=40,
)


def plan_of(text: str, limits: DrawingLimits = SMALL, step: int | None = None) -> SegmentPlan:
    plan = SegmentPlan(limits)
    if step is None:
        plan.extend(text)
    else:
        for end in range(step, len(text) + step, step):
            plan.extend(text[:end])
    return plan


def shape(plan: SegmentPlan) -> list[tuple[str, bool]]:
    return [(plan.text[s.start : s.end], s.plain) for s in plan.segments]


def covers(plan: SegmentPlan) -> bool:
    """The segments tile the text, in order, with no two plain ones side by side."""
    ends = [0] + [s.end for s in plan.segments]
    starts = [s.start for s in plan.segments] + [len(plan.text)]
    adjacent_plain = any(a.plain and b.plain for a, b in zip(plan.segments, plan.segments[1:], strict=False))
    return ends == starts and not adjacent_plain


def test_small_answer_is_one_markdown_segment() -> None:
    plan = plan_of("# Title\n\nSome *text*.\n\n- a\n- b\n", LIMITS)
    assert shape(plan) == [("# Title\n\nSome *text*.\n\n- a\n- b\n", False)]


def test_paragraphs_are_cut_at_blank_lines_once_a_segment_holds_enough() -> None:
    text = "first paragraph, long enough\n\nsecond paragraph, long too\n\nthird\n"
    assert shape(plan_of(text)) == [
        ("first paragraph, long enough\n\n", False),
        ("second paragraph, long too\n\n", False),
        ("third\n", False),
    ]


def test_never_cut_inside_a_code_fence_or_before_an_indented_line() -> None:
    fence = "```python\n" + "x = 1\n\ny = 2\n" * 3 + "```\n"
    indented = "1. an item long enough to cut\n\n    its second paragraph\n"
    assert len(plan_of(fence).segments) == 1
    assert len(plan_of(indented).segments) == 1


@pytest.mark.parametrize(
    "huge",
    [
        "| a | b |\n|---|---|\n" + "| 1 | 2 |\n" * 500,  # a table: too many lines and cells
        "```\n" + "code line\n" * 500 + "```\n",  # a code block: too many lines
        "*em* **strong** " * 500,  # one paragraph: too many characters
    ],
    ids=["table", "code", "paragraph"],
)
def test_a_huge_block_is_drawn_as_plain_text_and_what_follows_as_markdown_again(huge: str) -> None:
    text = "intro paragraph, long enough to end\n\n" + huge + "\n\nafter the block\n"
    for step in (None, 7):
        plan = plan_of(text, step=step)
        assert covers(plan)
        assert [s.plain for s in plan.segments] == [False, True, False]
        assert plan.text[plan.segments[-1].start :] == "after the block\n"


def test_old_markdown_folds_into_one_plain_segment_past_the_reply_budget() -> None:
    text = "".join(f"paragraph number {n} is here\n\n" for n in range(200))
    plan = plan_of(text, step=11)
    assert covers(plan)
    assert plan.segments[0].plain and not any(s.plain for s in plan.segments[1:])
    markdown = plan.segments[1:]
    assert sum(s.end - s.start for s in markdown) <= SMALL.reply_chars
    assert plan.segments[-1].end == len(text)


def test_a_stream_only_extends_segments_it_already_drew() -> None:
    """What a view shows for a segment never has to shrink: a cut is decided at a line's first
    character, before any of it was given to the previous segment."""
    text = "".join(f"line {n} of a paragraph\n\n" for n in range(40)) + "| a |\n" * 50
    plan = SegmentPlan(SMALL)
    seen: dict[tuple[int, bool], int] = {}
    for end in range(1, len(text) + 1):
        plan.extend(text[:end])
        for segment in plan.segments:
            key = (segment.start, segment.plain)
            assert segment.end >= seen.get(key, 0)
            seen[key] = segment.end


def test_all_plain_folds_everything_and_text_must_only_grow() -> None:
    plan = plan_of("# a\n\nb\n", ALL_PLAIN)
    assert [(s.start, s.end, s.plain) for s in plan.segments] == [(0, 7, True)]
    with pytest.raises(ValueError, match="only grows"):
        plan.extend("other")


def test_the_default_limits_bound_markdown_for_the_reported_replies() -> None:
    table = "| n | square |\n|---|---|\n" + "".join(f"| {n} | {n * n} |\n" for n in range(50_000))
    code = "```python\n" + "print('a line of code in a long block')\n" * 22_000 + "```\n"
    emphasis = "*a* **b** _c_ " * 70_000
    for text in (table, code, emphasis):
        plan = plan_of(text, LIMITS)
        markdown = [s for s in plan.segments if not s.plain]
        assert sum(s.end - s.start for s in markdown) <= LIMITS.reply_chars
        assert len(plan.segments) <= 3


@given(st.lists(st.sampled_from(["a", " ", "\n", "\n\n", "```", "|", "x" * 30, "    y"]), max_size=120))
def test_any_text_is_tiled_whatever_the_chunks(chunks: list[str]) -> None:
    text = "".join(chunks)
    whole, streamed = plan_of(text), plan_of(text, step=3)
    assert covers(whole) and covers(streamed)
    assert whole.text == streamed.text == text
