"""Make model output safe to show: no terminal control sequence may reach the terminal.

A model can emit any byte sequence, and Textual writes widget text to the terminal as-is, so
an ESC in a reply could retitle the window, rewrite the clipboard (OSC 52) or move the cursor.
Everything except printable text, newline and tab is removed before text reaches a widget, and
so are the invisible characters that would make the text say something other than what is seen.
"""

from __future__ import annotations

import functools
import re
import unicodedata

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
# Invisible characters that change what text says without being seen (docs/ARCHITECTURE.md, "What
# lfm-chat trusts"): bidi embeddings, overrides and isolates reorder what is drawn ("Trojan Source":
# code that reads one way and runs another); tag characters carry text no one sees (ASCII
# smuggling: instructions hidden from the reader, read by a model); word joiner, invisible math
# operators and the BOM join or mark nothing a reader needs. Kept, because scripts and emoji need
# them: ZWJ and ZWNJ (emoji sequences, Persian, Indic), ZWSP (Thai and Khmer word breaks), and the
# direction marks LRM, RLM and ALM (they mark, never reorder).
INVISIBLE = "\u202a-\u202e\u2066-\u2069\u2060-\u2064\ufeff\U000e0000-\U000e007f"
_INVISIBLE = re.compile(f"[{INVISIBLE}]")


def strip_control(text: str) -> str:
    """`text` without C0/C1 controls (except newline and tab), escape sequences, and the invisible
    characters above: what reaches a widget, the store, stdout."""
    return _INVISIBLE.sub("", _CONTROLS.sub("", _SEQUENCES.sub("", text)))


# Characters whose width terminals disagree on, dropped from what is drawn. Widgets are laid out
# by Rich's widths; where the terminal draws a character wider or narrower, the rest of the line
# moves and a pane's border breaks. An emoji variation selector makes a narrow symbol wide in
# Rich and in some terminals but not in others (tmux, xterm: "⚠️", "❤️", "✔️" are one cell there),
# and a skin-tone modifier joins its emoji in Rich but is drawn as a second wide emoji by such
# terminals. Without them every terminal draws the same cells: the symbol as text, the emoji in
# its default tone.
_WIDTH_DISPUTED = frozenset(map(chr, [0xFE0F, *range(0x1F3FB, 0x1F400)]))

# Code points Unicode had not assigned when this Python was built: a terminal's wcwidth() calls
# them unprintable and draws nothing there, where Rich counts a cell, so the rest of the line moved
# (random tokens broke a pane's border in tmux). They are drawn as U+FFFD, one cell everywhere.
# Emoji are added every year, in U+1F000-U+1FAFF: one this Python does not know yet is left to the
# terminal, which may know it.
REPLACEMENT = "\ufffd"
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


@functools.lru_cache(maxsize=4096)
def _drawn_as(char: str) -> str:
    """What is drawn for one non-ASCII character: nothing where its width is disputed, U+FFFD where
    it is unassigned, else itself."""
    if char in _WIDTH_DISPUTED:
        return ""
    if unicodedata.category(char) != "Cn" or "\U0001f000" <= char < "\U0001fb00":
        return char
    return REPLACEMENT


def without_disputed_widths(text: str) -> str:
    """`text` as every terminal draws it in Rich's cells: without the characters whose width
    terminals disagree on, unassigned code points as U+FFFD (for text already through
    `strip_control`, kept whole for copying, as a reply's source)."""
    return text if text.isascii() else _NON_ASCII.sub(lambda found: _drawn_as(found[0]), text)


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
