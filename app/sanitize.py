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
