"""A growing Markdown text cut into its top-level blocks, so a stream re-reads only the last one.

Drawing a whole answer segment with Rich's Markdown costs ~27 ms at 1.7 KB; one block costs
~1-2 ms. A block followed by another one is complete: no later line can change it (only the
last block takes lazy continuation lines, a setext underline or a closing fence), so it is drawn
once and kept. Only complete lines decide where blocks start: a partial line such as "```x`" or
"***x" may still turn out to be something else. The same text cut at any points gives the same
blocks, which is what lets a streamed answer draw exactly as the answer drawn at once.
"""

from __future__ import annotations

import itertools
import re

from markdown_it import MarkdownIt

# Rich's Markdown parses with this configuration; the blocks are cut where it would cut them.
_PARSER = MarkdownIt("commonmark").enable("strikethrough").enable("table")
_FENCE = re.compile(r" {0,3}(`{3,}[^`]*|~{3,}.*)")


def is_fence(block: str) -> bool:
    """Whether the block is a fenced code block (its first line opens a fence)."""
    return _FENCE.fullmatch(block.partition("\n")[0]) is not None


def fence_code(block: str) -> str:
    """The code inside a fenced code block, as copying it gives it."""
    return next((t.content for t in _PARSER.parse(block) if t.type == "fence"), "")


class MarkdownBlocks:
    """The complete top-level blocks of a text that only grows, and the live rest after them."""

    def __init__(self) -> None:
        self.text = ""
        self.done: list[str] = []
        self._live_start = 0  # where the live block begins in `text`

    @property
    def live(self) -> str:
        """The last block, still growing (with the partial last line, if any)."""
        return self.text[self._live_start :]

    def extend(self, text: str) -> None:
        if not text.startswith(self.text):
            raise ValueError("Markdown blocks only grow; start again for other text")
        self.text = text
        complete = text.rfind("\n", self._live_start) + 1  # the end of the last complete line
        if complete <= self._live_start:
            return
        lines = text[self._live_start : complete].splitlines(keepends=True)
        tokens = _PARSER.parse("".join(lines))
        starts = [t.map[0] for t in tokens if t.level == 0 and t.nesting >= 0 and t.map is not None]
        if not starts:
            return
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
        for start, end in itertools.pairwise(starts):
            self.done.append("".join(lines[start:end]))
        self._live_start += offsets[starts[-1]]
