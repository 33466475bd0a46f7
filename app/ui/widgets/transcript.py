"""The scrolling record of one pane's conversation: user turns, streamed replies, notices.

It scrolls from the keyboard (the pane binds PageUp/PageDown, ctrl+Home/End) and has a
selection: ctrl+↑/↓ walk over the messages and, inside replies, each code block, so any of
them can be copied, not only the last reply. Replies fold their thinking (`Reply`).
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Static

from app.core.conversation import ChatMessage
from app.core.sanitize import for_display, strip_control, without_disputed_widths
from app.core.versions import place
from app.ui.keys import PANE_KEYS, key_named
from app.ui.patches.laid_out_once import LaidOutOnce
from app.ui.widgets.markdown_lines import CodeBlock
from app.ui.widgets.reply import Reply
from app.ui.widgets.tool_message import ToolMessage

SELECTED = "-selected"
SHOWN_REPLIES = 4  # a restored transcript draws these last replies as Markdown at once...
UNFOLD_MARGIN = 1.0  # ...and the others when they come within this many screens of the view


class VersionLabel(Static):
    """Above a message that has other versions: which one is shown, and the keys that flip them."""

    def __init__(self, place: tuple[int, int]) -> None:
        super().__init__(classes="versions", markup=False)
        self.place = place

    def on_mount(self) -> None:
        self.show(self.place)

    def show(self, place: tuple[int, int]) -> None:
        """Version `shown` of `total`, counted from 1 ("‹ 2/3 ›")."""
        self.place = shown, total = place
        older, newer = (key_named(self.app, PANE_KEYS, k) for k in ("version_previous", "version_next"))
        self.update(f"‹ {shown}/{total} › {older} / {newer}")


class UserMessage(LaidOutOnce, Static):
    """A user turn; keeps its text for copying (Static's render is not the source)."""

    def __init__(self, text: str) -> None:
        self.text = strip_control(text)
        super().__init__(without_disputed_widths(self.text), classes="user", markup=False)


def copy_text(widget: Widget) -> str:
    """What copying a selectable widget gives: a message's text, a reply's answer, or a block's code."""
    if isinstance(widget, UserMessage | ToolMessage):
        return widget.text
    if isinstance(widget, CodeBlock):
        return widget.code
    assert isinstance(widget, Reply)
    return widget.answer


class Transcript(LaidOutOnce, VerticalScroll, can_focus=False):
    """Messages top to bottom, anchored to the end so a stream stays in view.

    Not focusable: Tab moves between panes' inputs, and the keys above scroll it.
    Every text is drawn through `for_display` (here or in `Reply`); copies keep `strip_control`'s text.
    """

    def __init__(self, messages: Iterable[ChatMessage]) -> None:
        self.show_thinking = False
        super().__init__(*self.widgets_for(messages))
        self.selected: Widget | None = None

    def on_mount(self) -> None:
        self.anchor()

    def widgets_for(self, messages: Iterable[ChatMessage]) -> list[Widget]:
        """One widget per message (a message with versions has its label above it); used at compose
        time so a restored pane is complete when mounted.

        Restoring draws lazily: all but the last SHOWN_REPLIES replies start folded as plain text
        (cheap whatever their size) and are drawn as Markdown when scrolled near (`_unfold_near`)."""
        messages = list(messages)
        replies = [n for n, m in enumerate(messages) if m.role == "assistant"]
        folded = set(replies[:-SHOWN_REPLIES])
        widgets: list[Widget] = []
        for n, m in enumerate(messages):
            widgets += [VersionLabel(shown)] if (shown := place(m)) else []
            widgets.append(self._widget_for(m, n in folded))
        return widgets

    def _widget_for(self, message: ChatMessage, folded: bool) -> Widget:
        if message.role == "user":
            return UserMessage(message.content)
        if message.role == "tool":
            return ToolMessage.restored(message)
        return Reply(message.content, self.show_thinking, folded)

    @property
    def messages(self) -> list[Widget]:
        """The message widgets, in the conversation's order."""
        return [c for c in self.children if isinstance(c, UserMessage | Reply | ToolMessage)]

    def show_version(self, index: int, message: ChatMessage) -> None:
        """Label message `index` with its place among its versions (a new label, or the old one's)."""
        widget, shown = self.messages[index], place(message) or (1, 1)
        siblings = list(self.children)
        at = siblings.index(widget)
        if at and isinstance(label := siblings[at - 1], VersionLabel):
            label.show(shown)
        else:
            self.mount(VersionLabel(shown), before=widget)

    def select_message(self, index: int) -> None:
        self.select(self.messages[index])

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self.call_after_refresh(self._unfold_near)
        for reply in self.query_children(Reply):
            if reply.holds_text:
                self.call_after_refresh(reply.shown_again)  # scrolled away, it may be in view again

    def watch_virtual_size(self) -> None:
        self.call_after_refresh(self._unfold_near)  # laid out, or grown: what is near may have changed

    async def _unfold_near(self) -> None:
        """Draw the folded replies within UNFOLD_MARGIN screens of what is shown (once laid out)."""
        folded = [reply for reply in self.query_children(Reply) if reply.folded]
        height = self.scrollable_content_region.height
        if not folded or not height or not self.virtual_size.height:
            return
        # anchored, the view is about to be the end whatever scroll_y says yet (the first layouts)
        shown = self.max_scroll_y if self.is_anchored and not self._anchor_released else self.scroll_y
        top, bottom = shown - UNFOLD_MARGIN * height, shown + (1 + UNFOLD_MARGIN) * height
        for reply in folded:
            region = reply.virtual_region
            if region.height and region.y < bottom and region.bottom > top:
                await reply.unfold()

    async def show(self, messages: Iterable[ChatMessage]) -> None:
        """Replace everything with these messages (after an edit, a regenerate, a clear)."""
        self.select(None)
        await self.remove_children()
        await self.mount_all(self.widgets_for(messages))
        self.anchor()

    async def add_user(self, text: str) -> None:
        await self.mount(UserMessage(text))
        self.anchor()

    async def add_reply(self, text: str = "") -> Reply:
        """A reply block; an empty one is the target of a stream."""
        reply = Reply(text, self.show_thinking)
        await self.mount(reply)
        self.anchor()
        return reply

    async def add_tool_call(self, name: str) -> ToolMessage:
        """The run of a call the model just made, waiting on the user or the tool."""
        message = ToolMessage(name)
        await self.mount(message)
        self.anchor()
        return message

    async def add_notice(self, text: str, before: Widget | None = None) -> None:
        """A one-off remark from the app (context full, request error), styled apart from the chat;
        `before` a reply still streaming, so the remark is not pushed down by it."""
        await self.mount(Static(for_display(text), classes="notice", markup=False), before=before)
        self.anchor()

    @property
    def replies(self) -> list[Reply]:
        return list(self.query_children(Reply))

    def set_thinking_shown(self, shown: bool) -> None:
        """Open (or fold) the thinking of every reply, and of the replies to come."""
        self.show_thinking = shown
        for reply in self.replies:
            reply.set_thinking_shown(shown)

    # ------------------------------------------------------------------ keyboard
    def page(self, pages: int) -> None:
        self.scroll_relative(y=pages * max(1, self.scrollable_content_region.height - 1), animate=False)

    def jump(self, to_end: bool) -> None:
        if to_end:
            self.select(None)
            self.scroll_end(animate=False)
            self.anchor()
        else:
            self.scroll_home(animate=False)

    def selectables(self) -> list[Widget]:
        """Messages in order, each reply followed by its code blocks."""
        items: list[Widget] = []
        for child in self.children:
            if isinstance(child, UserMessage | Reply | ToolMessage):
                items.append(child)
                items.extend(child.query(CodeBlock) if isinstance(child, Reply) else ())
        return items

    def selected_message(self) -> int | None:
        """Index of the message the selection is in (a code block belongs to its reply), if any."""
        selected = self.selected
        if selected is None:
            return None
        messages = self.messages
        owner = next((a for a in selected.ancestors_with_self if a in messages), None)
        return None if owner is None else messages.index(owner)

    def move_selection(self, step: int) -> Widget | None:
        """Select the previous (-1) or next (+1) item; from no selection, -1 starts at the last."""
        items = self.selectables()
        if not items:
            return None
        if self.selected in items:
            index = items.index(self.selected) + step  # type: ignore[arg-type]
        else:
            index = len(items) - 1 if step < 0 else 0
        self.select(items[max(0, min(index, len(items) - 1))])
        return self.selected

    def select(self, widget: Widget | None) -> None:
        if self.selected is not None:
            self.selected.remove_class(SELECTED)
        self.selected = widget
        if widget is not None:
            widget.add_class(SELECTED)
            self.release_anchor()
            self.scroll_to_widget(widget, animate=False, top=widget.outer_size.height > self.size.height)
