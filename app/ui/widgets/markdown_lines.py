"""Markdown drawn as lines: a segment of the answer as a few line-based widgets, not a widget tree.

Textual's Markdown widget gives each paragraph, list item and table cell widgets of its own; with
8 panes streaming, mounting them (~7 ms of UI CPU each, all included) and laying out the screen
they grow took most of a core. Here a segment is a column of `BlockLines`: runs of blocks drawn
as one widget, and each fenced code block a `CodeBlock` of its own (selectable, copied as its
code). Each block is rendered by Rich's Markdown into strips once per width
(app/ui/widgets/markdown_blocks.py says which blocks are complete), so a streamed token re-renders
only the live block and mounts nothing unless a code block starts or ends; `render_line` hands
out the cached strips, so drawing costs what is visible.
"""

from __future__ import annotations

from rich.markdown import Markdown as RichMarkdown
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.theme import Theme
from textual.widget import Widget

from app.ui.patches.laid_out_once import LaidOutOnce
from app.ui.widgets.answer_segments import Segment
from app.ui.widgets.markdown_blocks import MarkdownBlocks, fence_code, is_fence
from app.ui.widgets.stream_slack import laid_out_rows

CODE_THEMES = {True: "monokai", False: "default"}  # Pygments styles for dark and light app themes


class BlockLines(LaidOutOnce, Widget):
    """Markdown blocks drawn one under another (a blank row between them), each rendered once per
    width; the last may be live, rendered again at each change."""

    DEFAULT_CSS = """
    BlockLines {
        height: auto;
        margin: 0 0 1 0;
    }
    """

    def __init__(self) -> None:
        super().__init__()
        self.blocks: list[str] = []
        self.live = False  # the last block still grows
        self._width = 0  # the width the cache is rendered at (0: not yet)
        self._rendered: list[list[Strip]] = []  # per block, its rows at `_width`
        self._rows: list[Strip] = []
        self.streaming = False  # the last view of a streaming segment: rows to grow into
        self._laid_out = 0  # the height last given to the layout

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def on_unmount(self) -> None:
        self.app.theme_changed_signal.unsubscribe(self)

    def _theme_changed(self, _theme: Theme) -> None:
        """Code is highlighted for a dark or a light theme: every block is rendered again."""
        self._rendered = []
        self.refresh(layout=True)

    def add(self, block: str, live: bool) -> None:
        """Another block (drawn at the next `redraw`)."""
        self.blocks.append(block)
        self.live = live

    def drop_live(self) -> None:
        """Take the live block away (it is given again, grown, complete, or as another kind)."""
        if self.live:
            self.blocks.pop()
            del self._rendered[len(self.blocks) :]  # rendered again when it is given again
            self.live = False

    def redraw(self) -> None:
        """Render what changed now: the same height redraws only the rows from the first changed
        block down, without a layout of the screen."""
        if not (self._width and self.is_attached):
            self.refresh(layout=True)
            return
        top = self._render_rows()
        height = self._height()
        if height != self._laid_out:
            self.refresh(layout=True)
        elif top < height:
            self.refresh(Region(0, top, self._width, height - top))

    def _height(self) -> int:
        return laid_out_rows(len(self._rows), self.streaming)

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return container.width

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if width != self._width:
            self._width = width
            self._rendered = []
        self._render_rows()
        self._laid_out = self._height()
        return self._laid_out

    def render_line(self, y: int) -> Strip:
        width, style = self.size.width, self.rich_style
        if y >= len(self._rows):
            return Strip.blank(width, style)
        return self._rows[y].apply_style(style).adjust_cell_length(width, style)

    def _render_rows(self) -> int:
        """Render the blocks without rows (new, or live and changed); the row the first one starts at."""
        first = len(self._rendered)
        if first == len(self.blocks):
            return len(self._rows)
        self._rendered += [self._render_block(block) for block in self.blocks[first:]]
        rows: list[Strip] = []
        top = 0
        for index, block_rows in enumerate(self._rendered):
            rows += [Strip.blank(0), *block_rows] if rows else block_rows
            top = len(rows) - len(block_rows) if index == first else top
        self._rows = rows
        return top

    def _render_block(self, block: str) -> list[Strip]:
        console = self.app.console
        markdown = RichMarkdown(block, code_theme=CODE_THEMES[self.app.current_theme.dark], hyperlinks=False)
        lines = console.render_lines(
            markdown, console.options.update(width=self._width, height=None), pad=False
        )
        rows = [Strip(line) for line in lines]
        # Rich opens lists, quotes and tables with blank rows: the one between blocks is enough
        while rows and _blank(rows[-1]):
            rows.pop()
        first = next((n for n, row in enumerate(rows) if not _blank(row)), len(rows))
        return rows[first:]


def _blank(row: Strip) -> bool:
    """Nothing drawn on the row: only spaces, without a background (a code block's padding has one)."""
    return all(not segment.text.strip() and not (segment.style and segment.style.bgcolor) for segment in row)


class CodeBlock(BlockLines):
    """A fenced code block: selectable on its own (ctrl+↑/↓) and copied as its code."""

    @property
    def code(self) -> str:
        return fence_code(self.blocks[0]) if self.blocks else ""


class MarkdownSegment(LaidOutOnce, Vertical):
    """A segment of the answer as Markdown (app/ui/widgets/answer_segments.py bounds its size);
    links are shown as their text and address, never opened (the text is untrusted)."""

    DEFAULT_CSS = """
    MarkdownSegment {
        height: auto;
    }
    """

    def __init__(self, segment: Segment, text: str) -> None:
        super().__init__(classes="answer-segment")
        self.start, self.end = segment.start, segment.end
        self._blocks = MarkdownBlocks()
        self._placed = 0  # the complete blocks given to the views
        self._views: list[BlockLines] = []
        self._new: list[BlockLines] = []  # views not mounted yet
        self._gone: list[BlockLines] = []  # views mounted but no longer used
        self._place(text)

    def compose(self) -> ComposeResult:
        self._new, self._gone = [], []
        yield from self._views

    async def extend(self, text: str, end: int) -> None:
        self._place(self._blocks.text + text)
        self.end = end
        self._redraw(streaming=True)
        new, self._new, gone, self._gone = self._new, [], self._gone, []
        if self.is_attached:
            if gone:
                await self.remove_children(gone)
            if new:
                await self.mount_all(new)

    async def stop(self) -> None:
        self._redraw(streaming=False)

    def _redraw(self, streaming: bool) -> None:
        """Draw what was placed; while streaming, the last view has rows to grow into."""
        for view in self._views:
            view.streaming = streaming and view is self._views[-1]
            view.redraw()

    def _place(self, text: str) -> None:
        """Hand the blocks that came (and the live one, again) to the views: a run of blocks shares
        a view, a code block has one of its own."""
        self._blocks.extend(text)
        if self._views:
            self._views[-1].drop_live()
        for block in self._blocks.done[self._placed :]:
            self._view_for(block).add(block, live=False)
        self._placed = len(self._blocks.done)
        if live := self._blocks.live:
            self._view_for(live).add(live, live=True)

    def _view_for(self, block: str) -> BlockLines:
        """The last view if the block joins it (an emptied view of the right kind too), else a new one."""
        kind = CodeBlock if is_fence(block) else BlockLines
        last = self._views[-1] if self._views else None
        if last is not None and type(last) is kind and (not last.blocks or kind is BlockLines):
            return last
        if last is not None and not last.blocks:  # the live block changed kind ("``" became "```")
            self._views.pop()
            if last in self._new:
                self._new.remove(last)
            else:
                self._gone.append(last)
        view = kind()
        self._views.append(view)
        self._new.append(view)
        return view
