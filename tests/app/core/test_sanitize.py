"""Model output never carries a terminal control sequence to the screen."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len

from app.backend.server_text import server_text
from app.core.sanitize import INVISIBLE, StreamStripper, for_display, strip_control

UNSEEN = re.compile(f"[{INVISIBLE}]")


def visible(char: str) -> bool:
    """Not one of the invisible characters strip_control removes (tested below)."""
    return not UNSEEN.match(char)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("a\x1b[31mred\x1b[0m", "ared"),  # SGR colours
        ("x\x1b]0;new title\x07y", "xy"),  # window title (OSC, BEL-terminated)
        ("x\x1b]52;c;cm0gLXJm\x1b\\y", "xy"),  # clipboard write (OSC 52, ST-terminated)
        ("\x1bP+q544e\x1b\\ok", "ok"),  # DCS query
        ("k\x1b(0z", "kz"),  # charset switch
        ("8bit \x9b2J csi", "8bit  csi"),  # C1 CSI
        ("bell\x07 back\x08space\r cr\x00", "bell backspace cr"),  # C0 controls
        ("cut at the end \x1b[3", "cut at the end "),  # a sequence split across stream deltas
        ("unterminated \x1b]0;title", "unterminated "),
    ],
)
def test_control_sequences_are_removed(raw: str, shown: str) -> None:
    assert strip_control(raw) == shown


def test_text_newlines_tabs_and_unicode_are_kept() -> None:
    text = "def f():\n\treturn '日本語 🙂 café'\n"
    assert strip_control(text) == text


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet="\x1b\x9b\x9c\x9d\x90[]P^_\\;0:m\x07\x00\r\n\ta")
    | st.text(st.characters(max_codepoint=0x2FF))
)
def test_any_text_comes_out_without_controls_and_cleaning_twice_changes_nothing(raw: str) -> None:
    shown = strip_control(raw)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", shown)
    assert strip_control(shown) == shown


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="\x1b\x9b\x9c\x9d\x90[]P^_\\;0:m\x07\x00\r\n\ta"), st.lists(st.integers(0, 60)))
def test_text_cleaned_in_pieces_is_the_text_cleaned_whole(raw: str, cuts: list[int]) -> None:
    """`lfm-chat -p` prints a reply as it streams and saves it whole: both must be the same text."""
    stripper, pieces, start = StreamStripper(), [], 0
    for end in sorted(min(cut, len(raw)) for cut in cuts):
        pieces.append(stripper.feed(raw[start:end]))
        start = end
    pieces += [stripper.feed(raw[start:]), stripper.finish()]
    assert "".join(pieces) == strip_control(raw)


def test_text_after_a_finished_sequence_is_not_held_back() -> None:
    stripper = StreamStripper()
    assert stripper.feed("a\x1b[31") == "a"
    assert stripper.feed("mred") == "red"


DISPUTED = "\ufe0f\U0001f3fb\U0001f3fc\U0001f3fd\U0001f3fe\U0001f3ff"


@pytest.mark.parametrize(
    ("raw", "drawn", "cells"),
    [
        ("\u26a0\ufe0f careful", "\u26a0 careful", 9),  # tmux and xterm draw "⚠️" in one cell
        ("\u2764\ufe0f", "\u2764", 1),
        ("\U0001f44d\U0001f3fd ok", "\U0001f44d ok", 5),  # such terminals draw the tone as a second emoji
        ("caf\u00e9 \u65e5\u672c \U0001f642", "caf\u00e9 \u65e5\u672c \U0001f642", 12),  # nothing disputed
    ],
)
def test_characters_terminals_disagree_on_are_not_drawn(raw: str, drawn: str, cells: int) -> None:
    assert for_display(raw) == drawn
    assert cell_len(for_display(raw)) == cells


def as_drawn(char: str) -> str:
    """What for_display should make of one character that strip_control keeps."""
    if char in DISPUTED:
        return ""
    unassigned = unicodedata.category(char) == "Cn" and not "\U0001f000" <= char < "\U0001fb00"
    return "\ufffd" if unassigned else char


@pytest.mark.parametrize(
    ("raw", "drawn"),
    [
        ("x\u074by\u07b8", "x\ufffdy\ufffd"),  # unassigned (Syriac, Thaana gaps): wcwidth() says -1, Rich 1
        ("\U0001faf9 new", "\U0001faf9 new"),  # an emoji newer than some Pythons: the terminal decides
        ("^\u06eb \u0301e \ue000", "^\u06eb \u0301e \ue000"),  # combining marks and private use are assigned
    ],
)
def test_unassigned_code_points_are_drawn_as_the_replacement_character(raw: str, drawn: str) -> None:
    assert for_display(raw) == drawn
    assert strip_control(raw) == raw  # what is saved and copied keeps them


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(DISPUTED) | st.characters(exclude_categories=("Cc", "Cs")).filter(visible)))
def test_only_the_disputed_characters_are_dropped_from_what_is_drawn(raw: str) -> None:
    drawn = for_display(raw)
    assert not set(drawn) & set(DISPUTED)
    assert drawn == "".join(as_drawn(c) for c in raw)
    assert for_display(drawn) == drawn
    assert for_display(raw + raw) == drawn + drawn  # a streamed reply may be drawn piece by piece


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        ("if admin\u202e {\u2066 // ok\u2069\u202c", "if admin { // ok"),  # Trojan Source reordering
        ("x\u202ay\u202bz\u202dw\u2067v\u2068u", "xyzwvu"),  # every embedding, override, isolate
        ("hi\U000e0049\U000e0067\U000e006e\U000e006f\U000e0072\U000e0065\U000e007f", "hi"),  # tag smuggling
        ("\ufeffstart\u2060joined\u2062x", "startjoinedx"),  # BOM, word joiner, invisible times
        (
            "\U0001f468\u200d\U0001f469\u200d\U0001f467",
            "\U0001f468\u200d\U0001f469\u200d\U0001f467",
        ),  # ZWJ family
        (
            "\u0645\u06cc\u200c\u062e\u0648\u0627\u0645",
            "\u0645\u06cc\u200c\u062e\u0648\u0627\u0645",
        ),  # Persian ZWNJ
        (
            "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u200b\u0e04\u0e23\u0e31\u0e1a",
            "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u200b\u0e04\u0e23\u0e31\u0e1a",
        ),  # Thai ZWSP
        (
            "\u05e9\u05dc\u05d5\u05dd\u200e 42 \u200f\u061c",
            "\u05e9\u05dc\u05d5\u05dd\u200e 42 \u200f\u061c",
        ),  # marks
    ],
)
def test_invisible_characters_that_change_meaning_go_and_those_scripts_need_stay(raw: str, kept: str) -> None:
    assert strip_control(raw) == kept
    assert server_text(f"model{raw}") == " ".join(f"model{kept}".split())  # a server's strings too


INVISIBLES = (
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2060\ufeff\U000e0001\U000e0041\U000e007f"
)


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(INVISIBLES) | st.characters(exclude_categories=("Cc", "Cs"))))
def test_no_invisible_character_survives_and_every_other_character_does(raw: str) -> None:
    shown = strip_control(raw)
    assert not UNSEEN.search(shown)
    assert shown == "".join(c for c in raw if visible(c))
    assert strip_control(shown) == shown


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="\x1b\x9b[]0;m\x07a\u202e\u2066\U000e0041\u200d"), st.lists(st.integers(0, 40)))
def test_invisibles_cleaned_in_pieces_are_the_text_cleaned_whole(raw: str, cuts: list[int]) -> None:
    stripper, pieces, start = StreamStripper(), [], 0
    for end in sorted(min(cut, len(raw)) for cut in cuts):
        pieces.append(stripper.feed(raw[start:end]))
        start = end
    pieces += [stripper.feed(raw[start:]), stripper.finish()]
    assert "".join(pieces) == strip_control(raw)
