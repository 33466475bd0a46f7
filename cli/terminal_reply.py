"""A `-p` reply on a terminal: Markdown rendered as it completes, thinking folded to one line.

In a pipe or a file the reply stays plain text (what scripts read); on a terminal a person reads
it, so headings, emphasis and code blocks are drawn as the chat's panes draw them, and a thinking
model's `<think>` text is one dim "▸ Thought · N words" line, as a folded block in a pane. A block
is drawn once it is whole (a blank line outside a code fence ends it), so what is printed never
changes afterwards and the terminal's scrollback stays clean.
"""

from __future__ import annotations

import re
from typing import TextIO

from rich.console import Console
from rich.markdown import Markdown
from rich.text import Text

from app.core.reply_parts import split_reply
from app.core.sanitize import strip_control

_FENCE = re.compile(r"^ {0,3}(```|~~~)", re.MULTILINE)


def whole_blocks_end(markdown: str) -> int:
    """Where the whole blocks of `markdown` end: its last blank line outside a code fence (-1: none)."""
    end = markdown.rfind("\n\n")
    while end != -1 and len(_FENCE.findall(markdown, 0, end)) % 2:
        end = markdown.rfind("\n\n", 0, end)
    return end


class TerminalReply:
    """Fed the reply's text as it streams; prints each part once it is whole (`finish`: the rest)."""

    def __init__(self, out: TextIO) -> None:
        self.console = Console(file=out, highlight=False, soft_wrap=False)
        self.raw = ""
        self.part = 0  # the reply part (app.reply_parts) being printed
        self.taken = 0  # characters of that part already taken into `pending`
        self.pending = ""  # Markdown not drawn yet: the block still being written
        self.drawn = False

    def feed(self, text: str) -> None:
        self.raw += text
        self._take(final=False)

    def finish(self) -> None:
        self._take(final=True)

    def _take(self, final: bool) -> None:
        parts = split_reply(self.raw)
        while self.part < len(parts):
            part = parts[self.part]
            last = self.part == len(parts) - 1  # the text a reply ends with is still being written
            whole = final or (part.closed and not (part.kind == "text" and last))
            if part.kind == "text" and not whole:  # only up to a blank line: a marker may be coming
                blank = part.text.rfind("\n\n")
                end = self.taken if blank == -1 else max(blank + 2, self.taken)
                self.pending += part.text[self.taken : end]
                self.taken = end
                break
            if not whole:
                break
            if part.kind == "thinking":
                self._draw(final=True)
                self._print(Text(f"▸ Thought · {len(part.text.split())} words", style="dim"))
            elif part.kind == "tool_call":
                self.pending += f"\n\n```tool-call\n{part.text.strip()}\n```\n\n"
            else:
                self.pending += part.text[self.taken :]
            self.part, self.taken = self.part + 1, 0
        self._draw(final)

    def _draw(self, final: bool) -> None:
        end = len(self.pending) if final else whole_blocks_end(self.pending)
        if end <= 0:
            return
        block, self.pending = self.pending[:end], self.pending[end:].lstrip("\n")
        if block.strip():
            self._print(Markdown(strip_control(block)))

    def _print(self, renderable: Markdown | Text) -> None:
        if self.drawn:
            self.console.print()
        self.console.print(renderable)
        self.drawn = True
