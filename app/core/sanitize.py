"""Make model output safe to show: no terminal control sequence may reach the terminal.

A model can emit any byte sequence, and Textual writes widget text to the terminal as-is, so
an ESC in a reply could retitle the window, rewrite the clipboard (OSC 52) or move the cursor.
Everything except printable text, newline and tab is removed before text reaches a widget.
"""

from __future__ import annotations

import re

# ESC sequences first (so their parameters vanish with the introducer), then lone controls.
_SEQUENCES = re.compile(
    r"""
      \x1b\[[0-?]*[ -/]*[@-~]?                    # CSI (possibly cut off at the end of the text)
    | \x1b[\]PX^_].*?(?:\x07|\x1b\\|\x9c|\Z)      # OSC, DCS, SOS, PM, APC: up to BEL / ST / the end
    | \x1b[ -/]*[0-~]?                            # any other escape (nF, Fp, Fe, Fs)
    | \x9b[0-?]*[ -/]*[@-~]?                      # 8-bit CSI
    | [\x90\x98\x9d\x9e\x9f].*?(?:\x07|\x9c|\x1b\\|\Z)  # 8-bit string introducers up to ST
    """,
    re.VERBOSE | re.DOTALL,
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def strip_control(text: str) -> str:
    """`text` without C0/C1 controls (except newline and tab) and without escape sequences."""
    return _CONTROLS.sub("", _SEQUENCES.sub("", text))


# Characters whose width terminals disagree on, dropped from what is drawn. Widgets are laid out
# by Rich's widths; where the terminal draws a character wider or narrower, the rest of the line
# moves and a pane's border breaks. An emoji variation selector makes a narrow symbol wide in
# Rich and in some terminals but not in others (tmux, xterm: "⚠️", "❤️", "✔️" are one cell there),
# and a skin-tone modifier joins its emoji in Rich but is drawn as a second wide emoji by such
# terminals. Without them every terminal draws the same cells: the symbol as text, the emoji in
# its default tone.
_WIDTH_DISPUTED = dict.fromkeys([0xFE0F, *range(0x1F3FB, 0x1F400)])


def without_disputed_widths(text: str) -> str:
    """`text` without the characters whose width terminals disagree on (for text already through
    `strip_control`, kept whole for copying, as a reply's source)."""
    return text.translate(_WIDTH_DISPUTED)


def for_display(text: str) -> str:
    """`strip_control(text)` as drawn in a widget: without the characters whose width terminals
    disagree on. What is saved, copied and sent keeps them."""
    return without_disputed_widths(strip_control(text))


class StreamStripper:
    """`strip_control` for text that arrives in pieces (a reply streamed to stdout): what `feed` and
    `finish` return, joined, is exactly `strip_control` of the whole, so what is printed is what is
    saved. A sequence reaching the end of the text so far may still grow, so it is held back."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: str) -> str:
        held = self._held + text
        last = None
        for last in _SEQUENCES.finditer(held):  # noqa: B007 - the scan strip_control makes; its last match
            pass
        cut = last.start() if last is not None and last.end() == len(held) else len(held)
        self._held = held[cut:]
        return strip_control(held[:cut])

    def finish(self) -> str:
        held, self._held = self._held, ""
        return strip_control(held)
