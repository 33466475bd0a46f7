"""Bracketed pastes reach the app as one Paste event with the text as sent, never as key presses."""

from __future__ import annotations

from textual import events

from app.paste import PasteSafeParser

START, END = "\x1b[200~", "\x1b[201~"
# What broke Textual's own parser: an ESC sequence over 32 characters (re-issued as keys, one
# of them ctrl+q) and a BEL (ctrl+g, History).
HOSTILE = "log: \x1b[38;2;255;255;255;48;2;0;0;0;1;3;4;9;53m" + "x" * 40 + "\x11 quit? \x07 bell\nline 2"


def parse(*chunks: str) -> list[object]:
    parser = PasteSafeParser()
    return [event for chunk in chunks for event in parser.feed(chunk)]


def test_a_hostile_paste_is_one_paste_event_with_every_character() -> None:
    parsed = parse(f"{START}{HOSTILE}{END}")
    assert [type(e) for e in parsed] == [events.Paste]
    assert parsed[0].text == HOSTILE  # type: ignore[attr-defined]


def test_a_paste_split_across_reads_anywhere_after_its_start_marker_is_the_same_paste() -> None:
    """Terminals write the start marker with the text; a 4 KiB read boundary inside the 6-byte
    marker itself would need typed keys in the same read, and falls back to Textual's parsing."""
    stream = f"{START}{HOSTILE}{END}"
    for cut in range(len(START), len(stream)):
        for second in (cut + 1, cut + 7):
            parsed = parse(stream[:cut], stream[cut:second], stream[second:])
            pastes = [e for e in parsed if isinstance(e, events.Paste)]
            assert not any(isinstance(e, events.Key) for e in parsed), (cut, second)
            assert "".join(p.text for p in pastes) == HOSTILE, (cut, second)


def test_keys_around_a_paste_are_still_keys() -> None:
    parsed = parse(f"ab{START}pasted{END}c")
    keys = [e.key for e in parsed if isinstance(e, events.Key)]
    assert keys == ["a", "b", "c"]
    assert [e.text for e in parsed if isinstance(e, events.Paste)] == ["pasted"]


def test_a_paste_cut_off_by_the_end_of_input_is_still_delivered() -> None:
    parsed = parse(f"{START}half a pas", "te", "")
    assert [e.text for e in parsed if isinstance(e, events.Paste)] == ["half a paste"]
