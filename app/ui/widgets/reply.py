"""One assistant reply on screen: folded thinking, the answer as Markdown, labelled tool calls.

The reply's text is the source of truth; `update` brings the widgets in line with it, appending
to the part being written when the new text extends the old (the common, streaming case) and
redrawing a part otherwise. The thinking streams in view while the model thinks and folds as
soon as the answer starts (click its header, or alt+t in the pane, to open it again).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.events import Click
from textual.widget import Widget
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownStream

from app.core.reply_parts import Part, answer_text, split_reply
from app.core.sanitize import strip_control, without_disputed_widths
from app.ui.keys import PANE_KEYS, key_named


class ThinkingBlock(Vertical):
    """A header line and the model's reasoning, dimmed; the body shows while thinking or when opened."""

    def __init__(self, part: Part, shown: bool) -> None:
        super().__init__(classes="thinking")
        self.part = part
        self.opened = shown  # the user's choice (alt+t or a click); a thought being written shows anyway
        self.header = Static(classes="thinking-header", markup=False)
        self.body = Static(part.text.strip(), classes="thinking-body", markup=False)

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.body

    def on_mount(self) -> None:
        self._refresh()

    def show(self, part: Part) -> None:
        if part.text != self.part.text:
            self.body.update(part.text.strip())
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


class ToolCallBlock(Static):
    """A tool call the model wrote, as code under a label instead of raw special tokens."""

    def __init__(self, part: Part) -> None:
        super().__init__(part.text.strip(), classes="tool-call", markup=False)
        self.part = part
        self.border_title = "tool call" if part.closed else "tool call…"

    def show(self, part: Part) -> None:
        self.part = part
        self.update(part.text.strip())
        self.border_title = "tool call" if part.closed else "tool call…"


class AnswerMarkdown(Markdown):
    """Answer text as Markdown; links are not opened on click (the text is untrusted).

    Appends go through a MarkdownStream, which merges bursts faster than the widget can parse.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text, classes="answer", open_links=False)
        self.shown = text
        self._stream: MarkdownStream | None = None

    async def show(self, part: Part) -> None:
        if part.text == self.shown:
            return
        if part.text.startswith(self.shown):
            if self._stream is None:
                self._stream = Markdown.get_stream(self)
            await self._stream.write(part.text[len(self.shown) :])
        else:  # not an extension (a control sequence completed across deltas): redraw
            await self.stop()
            await self.update(part.text)
        self.shown = part.text

    async def stop(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.stop()


PartView = ThinkingBlock | ToolCallBlock | AnswerMarkdown
KINDS: dict[str, type[PartView]] = {
    "thinking": ThinkingBlock,
    "tool_call": ToolCallBlock,
    "text": AnswerMarkdown,
}


class Reply(Vertical):
    """A reply's parts, kept in step with its text by `update`."""

    def __init__(self, text: str = "", show_thinking: bool = False) -> None:
        super().__init__(classes="reply")
        self.source = strip_control(text)
        self.show_thinking = show_thinking
        drawn = split_reply(without_disputed_widths(self.source))
        self._views: list[PartView] = [self._view(p) for p in drawn]

    def compose(self) -> ComposeResult:
        yield from self._views

    @property
    def answer(self) -> str:
        """What copying this reply gives: the answer without the thinking."""
        return answer_text(self.source)

    @property
    def markdown_parts(self) -> list[Markdown]:
        return [v for v in self._views if isinstance(v, AnswerMarkdown)]

    @property
    def has_thinking(self) -> bool:
        return any(isinstance(v, ThinkingBlock) and v.part.text.strip() for v in self._views)

    async def update(self, text: str) -> None:
        """Show `text` (the whole reply so far): append to open parts, add new ones, redraw on a mismatch."""
        self.source = strip_control(text)
        parts = split_reply(without_disputed_widths(self.source))
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

    async def finish(self) -> None:
        """The stream ended: flush the answer's Markdown stream."""
        for view in self.markdown_parts:
            await view.stop()

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
        return AnswerMarkdown(part.text)


async def _show(view: Widget, part: Part) -> None:
    if isinstance(view, AnswerMarkdown):
        await view.show(part)
    elif isinstance(view, ThinkingBlock | ToolCallBlock):
        view.show(part)
