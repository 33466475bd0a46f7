"""Bracketed pastes reach the app as one Paste event with the text as sent, never as key presses;
the prompt inserts them cleaned, and refuses one too big to edit with a notice naming the cap."""

from __future__ import annotations

from textual import events

from app.app import LfmChatApp
from app.core.attachment import ATTACHMENT_LIMIT_BYTES
from app.ui.paste import PASTE_LIMIT_BYTES, OversizedPaste, PasteSafeParser
from tests.app.pilot_helpers import MakeOptions, chat_screen, notices, wait_until

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


def test_a_paste_past_what_may_be_attached_arrives_as_its_size_only() -> None:
    """A 400 MB paste must not be held whole in memory before the prompt refuses it."""
    parser = PasteSafeParser()
    chunk = "é" * 4096  # 8 KiB of UTF-8 per read, as a terminal sends a big paste
    reads = 2 * ATTACHMENT_LIMIT_BYTES // len(chunk.encode()) + 1
    parsed = list(parser.feed(START))
    for _ in range(reads):
        parsed += parser.feed(chunk)
        assert sum(len(part.encode()) for part in parser._paste or []) <= ATTACHMENT_LIMIT_BYTES
    parsed += parser.feed(f"{END}ok")
    pastes = [e for e in parsed if isinstance(e, events.Paste)]
    assert len(pastes) == 1 and isinstance(pastes[0], OversizedPaste)
    assert pastes[0].size == reads * len(chunk.encode()) and pastes[0].text == ""
    assert [e.key for e in parsed if isinstance(e, events.Key)] == ["o", "k"]
    assert parse(f"{START}{'x' * PASTE_LIMIT_BYTES}{END}")[0].text == "x" * PASTE_LIMIT_BYTES  # type: ignore[attr-defined]


def test_a_paste_too_big_for_the_box_keeps_its_text_to_be_attached() -> None:
    [paste] = parse(f"{START}{'x' * (PASTE_LIMIT_BYTES + 1)}{END}")
    assert isinstance(paste, OversizedPaste) and paste.text == "x" * (PASTE_LIMIT_BYTES + 1)


# ---------------------------------------------------------------- the prompt input, in the real app
ANSWER_LIMIT = 15.0  # seconds: a generous hang bound (a 5 MB paste used to freeze the UI ~50 s)


async def _pasted_then_typed(make_options: MakeOptions, *pastes: str) -> tuple[str, str]:
    """Paste into the focused input of a running app, then press a key: what the box holds once
    the key shows, and every notice the app gave. Each paste goes the way a terminal's does: its
    bytes through the paste parser in 4 KiB reads, what that yields posted to the app."""
    app = LfmChatApp(make_options(panes=1))
    async with app.run_test(size=(120, 36)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await wait_until(pilot, lambda: app.focused is pane.prompt_input, "focus")
        parser = PasteSafeParser()
        for text in pastes:
            data = f"{START}{text}{END}"
            for start in range(0, len(data), 4096):
                for event in parser.feed(data[start : start + 4096]):
                    app.post_message(event)
        app.post_message(events.Key("z", "z"))  # after the pastes, through the app as they went
        await wait_until(pilot, lambda: pane.prompt_input.text.endswith("z"), "the key", limit=ANSWER_LIMIT)
        return pane.prompt_input.text, notices(app)


async def test_a_huge_paste_is_refused_with_its_size_and_the_cap(make_options: MakeOptions) -> None:
    text, notices = await _pasted_then_typed(make_options, "pasted log line\n" * 312_500)  # 5.0 MB
    assert text == "z"
    assert "Paste of 5.0 MB is larger than 1 MiB, the most a message may attach: not inserted" in notices


async def test_pastes_adding_up_past_the_cap_are_refused(make_options: MakeOptions) -> None:
    chunk = "y" * (PASTE_LIMIT_BYTES // 2 + 1)
    text, notices = await _pasted_then_typed(make_options, chunk, chunk)
    assert text == chunk + "z"
    assert "would make the message larger than 256 KiB: not inserted" in notices


async def test_a_paste_under_the_cap_is_inserted_cleaned(make_options: MakeOptions) -> None:
    pasted = "a \x1b]52;c;aGk=\x07 b\r\n" * 1000
    text, notices = await _pasted_then_typed(make_options, pasted)
    assert text == "a  b\n" * 1000 + "z"
    assert "not inserted" not in notices
