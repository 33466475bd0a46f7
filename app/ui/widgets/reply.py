"""One assistant reply on screen: folded thinking, the answer as Markdown, labelled tool calls.

The reply's text is the source of truth; `update` brings the widgets in line with it, appending
to the part being written when the new text extends the old (the common, streaming case) and
redrawing a part otherwise. The thinking streams in view while the model thinks and folds as
soon as the answer starts (click its header, or alt+t in the pane, to open it again).
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.containers import ScrollableContainer, Vertical
from textual.content import Content
from textual.events import Click
from textual.widget import Widget
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownStream

from app.core.reply_parts import TOOL_END, TOOL_START, Part, answer_text, split_reply
from app.core.sanitize import StreamStripper, without_disputed_widths
from app.session.tools import calls_in, pretty_arguments
from app.ui.keys import PANE_KEYS, key_named
from app.ui.patches.laid_out_once import LaidOutOnce
from app.ui.widgets.answer_segments import ALL_PLAIN, LIMITS, DrawingLimits, Segment, SegmentPlan
from app.ui.widgets.markdown_lines import MarkdownSegment
from app.ui.widgets.plain_text import PlainText


class ThinkingBlock(LaidOutOnce, Vertical):
    """A header line and the model's reasoning, dimmed; the body shows while thinking or when opened."""

    def __init__(self, part: Part, shown: bool) -> None:
        super().__init__(classes="thinking")
        self.part = part
        self.opened = shown  # the user's choice (alt+t or a click); a thought being written shows anyway
        self.header = Static(classes="thinking-header", markup=False)
        self.body = PlainText(part.text.strip(), classes="thinking-body")

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.body

    def on_mount(self) -> None:
        self._refresh()

    def show(self, part: Part) -> None:
        if part.text != self.part.text:
            shown, text = self.body.source, part.text.strip()
            if text.startswith(shown):  # streaming: only the new text is wrapped
                self.body.append(text[len(shown) :])
            else:
                self.body.set_text(text)
        self.body.set_streaming(not part.closed)  # rows to grow into while it is written
        self.part = part
        self._refresh()

    def set_opened(self, opened: bool) -> None:
        self.opened = opened
        self._refresh()

    def on_click(self, event: Click) -> None:
        event.stop()
        self.set_opened(not self.opened)

    def _refresh(self) -> None:
        writing = not self.part.closed
        visible = writing or self.opened
        words = len(self.part.text.split())
        if writing:
            title = f"▾ Thinking… {words} words"
        else:
            arrow, verb = ("▾", "folds") if visible else ("▸", "shows")
            toggle = key_named(self.app, PANE_KEYS, "toggle_thinking")
            title = f"{arrow} Thought · {words} words · {toggle} {verb}"
        self.header.update(Content(title))
        self.body.display = visible and bool(self.part.text.strip())
        self.display = writing or bool(self.part.text.strip())


class ToolCallBlock(LaidOutOnce, Static):
    """A tool call the model wrote, under a label instead of raw special tokens: once the block is
    complete, each call as its tool's name and its arguments as indented JSON (what the user
    approves), or the block's text as written when it does not read as calls."""

    def __init__(self, part: Part) -> None:
        super().__init__(classes="tool-call", markup=False)
        self.show(part)

    def show(self, part: Part) -> None:
        self.part = part
        calls = calls_in(f"{TOOL_START}{part.text}{TOOL_END}") if part.closed else []
        text = "\n".join(f"{call.name}\n{pretty_arguments(call)}" for call in calls)
        self.update(without_disputed_widths(text or part.text.strip()))
        self.border_title = ("tool calls" if len(calls) > 1 else "tool call") if part.closed else "tool call…"


class WidgetMarkdownSegment(Markdown):
    """A segment drawn by Textual's Markdown widget, a widget per block, list item and table cell:
    how answers were drawn before `MarkdownSegment` (bench.key_latency's `--before widgets`).
    Appends go through a MarkdownStream, which merges bursts faster than the widget can parse."""

    def __init__(self, segment: Segment, text: str) -> None:
        super().__init__(text, classes="answer-segment", open_links=False)
        self.start, self.end = segment.start, segment.end
        self._stream: MarkdownStream | None = None

    async def extend(self, text: str, end: int) -> None:
        if self._stream is None:
            self._stream = Markdown.get_stream(self)
        await self._stream.write(text)
        self.end = end

    async def stop(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.stop()


class PlainSegment(PlainText):
    """A segment too big to draw as Markdown (or folded far from the live end), as plain text; a
    reply restored but not seen yet is plain text too, without the notice (`Reply.unfold`)."""

    def __init__(self, segment: Segment, text: str, folded: bool) -> None:
        super().__init__(text, classes="answer-folded" if folded else "answer-plain")
        self.start, self.end = segment.start, segment.end
        if not folded:
            self.border_title = "plain text: too big to draw as Markdown"

    async def extend(self, text: str, end: int) -> None:
        self.set_streaming(True)
        self.append(text)
        self.end = end

    async def stop(self) -> None:
        self.set_streaming(False)


SegmentView = MarkdownSegment | WidgetMarkdownSegment | PlainSegment


class AnswerMarkdown(LaidOutOnce, Vertical):
    """The answer text: Markdown where it is small, plain text where it is too big (the policy is
    app/ui/widgets/answer_segments.py). An update that extends the text extends the live segment
    (or adds one); any other text starts over."""

    limits: ClassVar[DrawingLimits] = LIMITS  # bench.key_latency --unbounded draws as before them
    widget_tree: ClassVar[bool] = False  # True: Markdown as a tree of Textual widgets (--before widgets)

    def __init__(self, text: str, folded: bool = False) -> None:
        super().__init__(classes="answer")
        self.folded = folded
        self._plan = SegmentPlan(ALL_PLAIN if folded else self.limits)
        self._plan.extend(text)
        self._segments: list[SegmentView] = [self._segment_view(s) for s in self._plan.segments]

    def compose(self) -> ComposeResult:
        yield from self._segments

    @property
    def source(self) -> str:
        return self._plan.text

    @property
    def segments(self) -> list[SegmentView]:
        return list(self._segments)

    async def show(self, part: Part) -> None:
        text = part.text
        if text == self._plan.text:
            return
        if not text.startswith(self._plan.text):  # a control sequence completed across deltas
            await self._restart()
        self._plan.extend(text)
        await self._follow_plan()

    async def unfold(self) -> None:
        """Draw a folded answer as a shown one is drawn (Markdown within the limits)."""
        if self.folded:
            self.folded = False
            text = self._plan.text
            await self._restart()
            self._plan.extend(text)
            await self._follow_plan()

    async def _restart(self) -> None:
        await self.stop()
        await self.remove_children()
        self._segments = []
        self._plan = SegmentPlan(ALL_PLAIN if self.folded else self.limits)

    async def _follow_plan(self) -> None:
        """Bring the segment views in line with the plan: extend the ones it kept, replace the rest."""
        text = self._plan.text
        old = {view.start: view for view in self._segments}
        views: list[SegmentView] = []
        for segment in self._plan.segments:
            view = old.get(segment.start)
            if (
                view is not None
                and isinstance(view, PlainSegment) == segment.plain
                and view.end <= segment.end
            ):
                del old[segment.start]
                if view.end < segment.end:
                    await view.extend(text[view.end : segment.end], segment.end)
            else:
                view = self._segment_view(segment)
            views.append(view)
        for view in [*views[:-1], *old.values()]:
            await view.stop()  # a segment followed by another is complete
        if old:
            await self.remove_children(list(old.values()))
        previous: SegmentView | None = None
        for view in views:
            if not view.is_attached:
                await (self.mount(view, after=previous) if previous else self.mount(view, before=0))
            previous = view
        self._segments = views

    async def stop(self) -> None:
        for view in self._segments:
            await view.stop()

    def _segment_view(self, segment: Segment) -> SegmentView:
        text = self._plan.text[segment.start : segment.end]
        if segment.plain:
            return PlainSegment(segment, text, self.folded)
        return WidgetMarkdownSegment(segment, text) if self.widget_tree else MarkdownSegment(segment, text)


PartView = ThinkingBlock | ToolCallBlock | AnswerMarkdown
KINDS: dict[str, type[PartView]] = {
    "thinking": ThinkingBlock,
    "tool_call": ToolCallBlock,
    "text": AnswerMarkdown,
}


class Reply(LaidOutOnce, Vertical):
    """A reply's parts, kept in step with its text by `update`."""

    # True: drawn while another pane's zoom hides it, as before (bench.key_latency's "before").
    draws_hidden: ClassVar[bool] = False

    def __init__(self, text: str = "", show_thinking: bool = False, folded: bool = False) -> None:
        """`folded`: a restored reply the transcript draws as plain text until it scrolls into view."""
        super().__init__(classes="reply")
        self._stripper = StreamStripper()  # cleans what a streamed update adds, not the whole reply
        self._given = text  # the text as last given, before cleaning
        self.source = self._stripper.feed(text)  # strip_control(text)
        self.show_thinking = show_thinking
        self.folded = folded
        self._undrawn: str | None = None  # given while its pane was zoomed away: drawn when shown again
        self._finished = False
        drawn = split_reply(without_disputed_widths(self.source))
        self._views: list[PartView] = [self._view(p) for p in drawn]

    def compose(self) -> ComposeResult:
        yield from self._views

    @property
    def answer(self) -> str:
        """What copying this reply gives: the answer without the thinking."""
        return answer_text(self.source)

    @property
    def markdown_parts(self) -> list[AnswerMarkdown]:
        return [v for v in self._views if isinstance(v, AnswerMarkdown)]

    @property
    def has_thinking(self) -> bool:
        return any(isinstance(v, ThinkingBlock) and v.part.text.strip() for v in self._views)

    async def update(self, text: str) -> None:
        """Show `text` (the whole reply so far): append to open parts, add new ones, redraw on a mismatch.
        A reply not (or no longer) on screen only keeps its parts: its compose draws them if it comes.
        A reply whose pane another pane's zoom hides, or whose end the user scrolled up from, keeps
        the text and draws it when shown again, so a hidden pane draws nothing per token."""
        self.source = self._cleaned(text)
        if self.is_attached and not self.draws_hidden and (self._zoomed_away() or self._scrolled_away()):
            if self._undrawn is None:  # drawn when the zoom changes (the screen's `maximized`)
                self.watch(self.screen, "maximized", self.shown_again, init=False)
            self._undrawn = text  # or when the transcript scrolls (`Transcript.watch_scroll_y`)
            return
        self._undrawn = None
        parts = split_reply(without_disputed_widths(self.source))
        if not self.is_attached:
            self._views = [self._view(p) for p in parts]
            return
        if len(parts) < len(self._views) or any(
            not isinstance(view, KINDS[part.kind]) for view, part in zip(self._views, parts, strict=False)
        ):
            await self._rebuild(parts)
            return
        for view, part in zip(self._views, parts, strict=False):
            await _show(view, part)
        for part in parts[len(self._views) :]:
            for view in self.markdown_parts:
                await view.stop()  # earlier answer text is complete once another part starts
            self._views.append(self._view(part))
            await self.mount(self._views[-1])

    def _cleaned(self, text: str) -> str:
        """strip_control(text), cleaning only what extends the text last given (a long reply's
        whole-text pass cost ~1 ms per frame at 23 KB)."""
        if text.startswith(self._given):
            source = self.source + self._stripper.feed(text[len(self._given) :])
        else:  # another text in its place: cleaned whole
            self._stripper = StreamStripper()
            source = self._stripper.feed(text)
        self._given = text
        return source

    async def finish(self) -> None:
        """The stream ended: flush the answer's Markdown stream."""
        self._finished = True
        for view in self.markdown_parts:
            await view.stop()
        for view in self._views:
            if isinstance(view, ThinkingBlock):
                view.body.set_streaming(False)  # a thought cut short fits its text too

    async def shown_again(self) -> None:
        """Back on screen after a zoom or a scroll: draw what came meanwhile, all at once."""
        if self._undrawn is not None and not self._zoomed_away() and not self._scrolled_away():
            await self.update(self._undrawn)
            if self._finished:
                await self.finish()

    @property
    def holds_text(self) -> bool:
        """Text came while it was out of view (zoomed or scrolled away) and is not drawn yet."""
        return self._undrawn is not None

    def _zoomed_away(self) -> bool:
        zoomed = self.screen.maximized
        return zoomed is not None and zoomed is not self and zoomed not in self.ancestors

    def _scrolled_away(self) -> bool:
        """The user scrolled its transcript up (off the anchor) to above this reply's end: what
        the reply adds would be drawn below the view, and a layout per frame for nothing."""
        view = self.parent
        if not isinstance(view, ScrollableContainer) or not (view.is_anchored and view._anchor_released):
            return False
        return self.virtual_region.bottom > view.scroll_y + view.scrollable_content_region.height

    async def unfold(self) -> None:
        for view in self.markdown_parts:
            await view.unfold()
        self.folded = False

    def set_thinking_shown(self, shown: bool) -> None:
        self.show_thinking = shown
        for view in self._views:
            if isinstance(view, ThinkingBlock):
                view.set_opened(shown)

    async def _rebuild(self, parts: list[Part]) -> None:
        await self.finish()
        await self.remove_children()
        self._views = [self._view(p) for p in parts]
        await self.mount_all(self._views)

    def _view(self, part: Part) -> PartView:
        if part.kind == "thinking":
            return ThinkingBlock(part, self.show_thinking)
        if part.kind == "tool_call":
            return ToolCallBlock(part)
        return AnswerMarkdown(part.text, self.folded)


async def _show(view: Widget, part: Part) -> None:
    if isinstance(view, AnswerMarkdown):
        await view.show(part)
    elif isinstance(view, ThinkingBlock | ToolCallBlock):
        view.show(part)
