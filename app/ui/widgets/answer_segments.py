"""Where a reply's answer is drawn as Markdown and where as plain text, so drawing stays bounded.

Markdown costs in proportion to the block being written: the live block is rendered again at
every frame (app/ui/widgets/markdown_lines.py), so a 900 KB code block would be highlighted again
at every token, and a 50,000-row table (500 KB) drawn as Textual's Markdown widgets made ~a
million widgets and froze the app for minutes. So an answer is cut into segments at block
boundaries (a blank line outside a code fence, before an unindented line), and each is drawn as
Markdown only while it is small:

- a segment grows while it is under `segment_min_chars` and `segment_min_lines`, then ends at the
  next boundary, so the live segment (the one a stream appends to) stays small and only it is
  parsed again;
- a segment that outgrows `segment_chars`, `segment_lines` or `segment_cells` with no boundary
  (a huge table, code block or paragraph) is drawn as plain text from then on;
- a reply holds at most `reply_chars` and `reply_lines` of Markdown: past that the oldest
  Markdown segments, far above the live end, fold into plain text.

Plain text costs what is visible (app/ui/widgets/plain_text.py), so the widgets a reply mounts are
bounded by these limits, whatever the reply's size. Adjacent plain segments merge into one.
"""

from __future__ import annotations

from dataclasses import dataclass

_FENCE_CHARS = "`~"


@dataclass(frozen=True, slots=True)
class DrawingLimits:
    segment_min_chars: int = 2_000
    segment_min_lines: int = 40
    segment_chars: int = 8_000
    segment_lines: int = 120
    segment_cells: int = 1_000  # table cells, counted as "|" characters
    reply_chars: int = 48_000
    reply_lines: int = 480


LIMITS = DrawingLimits()
ALL_PLAIN = DrawingLimits(reply_chars=0, reply_lines=0)  # a reply not drawn yet: all folded


@dataclass(slots=True)
class Segment:
    start: int  # offsets into the answer text
    end: int
    plain: bool
    lines: int = 0  # complete lines, and "|" in them, while the segment is Markdown
    cells: int = 0


class SegmentPlan:
    """The segments of one answer as it grows; `extend` takes the whole answer so far.

    Scanning is incremental (only text after the last complete line is read again), so a token
    costs in proportion to itself, not to the answer.
    """

    def __init__(self, limits: DrawingLimits = LIMITS) -> None:
        self.limits = limits
        self.text = ""
        self.segments: list[Segment] = []
        self._scanned = 0  # the start of the line not yet complete
        self._fence: str | None = None  # the open fence's marker ("```", "~~~~"), if any
        self._after_blank = False
        self._cut_checked = -1  # the line start last considered for a cut

    def extend(self, text: str) -> None:
        if not text.startswith(self.text):
            raise ValueError("a segment plan only grows; start a new one for other text")
        self.text = text
        if not self.segments and text:
            self.segments.append(Segment(0, 0, plain=False))
        while (newline := text.find("\n", self._scanned)) != -1:
            self._line(self._scanned, newline + 1)
            self._scanned = newline + 1
        if self._scanned < len(text):
            self._maybe_cut(self._scanned)  # before any of the line is given to the live segment
        if self.segments:
            self.segments[-1].end = len(text)
            self._check_size(self.segments[-1])
        self._fold()

    def _line(self, start: int, end: int) -> None:
        line = self.text[start:end]
        self._maybe_cut(start)
        live = self.segments[-1]
        self._after_blank = not line.strip()
        self._track_fence(line)
        live.end = end
        if not live.plain:
            live.lines += 1
            live.cells += line.count("|")
            self._check_size(live)

    def _maybe_cut(self, start: int) -> None:
        """Start a new segment at the line beginning at `start`: decided once, on its first character
        (a blank line before it, outside a fence, and it is not indented)."""
        if start == self._cut_checked:
            return
        self._cut_checked = start
        live = self.segments[-1]
        if (
            self._after_blank
            and self._fence is None
            and not self.text[start].isspace()
            and (
                start - live.start >= self.limits.segment_min_chars
                or live.lines >= self.limits.segment_min_lines
            )
        ):
            live.end = start
            self.segments.append(Segment(start, start, plain=False))

    def _track_fence(self, line: str) -> None:
        stripped = line.lstrip(" ")
        if len(line) - len(stripped) > 3 or not stripped or stripped[0] not in _FENCE_CHARS:
            return
        char = stripped[0]
        run = len(stripped) - len(stripped.lstrip(char))
        if run < 3:
            return
        if self._fence is None:
            self._fence = char * run
        elif char == self._fence[0] and run >= len(self._fence) and not stripped[run:].strip():
            self._fence = None

    def _check_size(self, segment: Segment) -> None:
        limits = self.limits
        if not segment.plain and (
            segment.end - segment.start > limits.segment_chars
            or segment.lines > limits.segment_lines
            or segment.cells > limits.segment_cells
        ):
            segment.plain = True
            self._merge()

    def _fold(self) -> None:
        """Fold the oldest Markdown segments while the reply holds more Markdown than allowed."""
        limits = self.limits
        markdown = [s for s in self.segments if not s.plain]
        chars = sum(s.end - s.start for s in markdown)
        lines = sum(s.lines for s in markdown)
        for segment in markdown:
            if chars <= limits.reply_chars and lines <= limits.reply_lines:
                break
            segment.plain = True
            chars -= segment.end - segment.start
            lines -= segment.lines
        self._merge()

    def _merge(self) -> None:
        merged: list[Segment] = []
        for segment in self.segments:
            if merged and merged[-1].plain and segment.plain:
                merged[-1].end = segment.end
            else:
                merged.append(segment)
        self.segments = merged
