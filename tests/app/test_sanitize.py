"""Model output never carries a terminal control sequence to the screen."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.sanitize import StreamStripper, strip_control


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
