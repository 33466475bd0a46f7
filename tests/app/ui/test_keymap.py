"""keymap.json: an untrusted file that remaps keys by binding id. Bad entries are skipped with one
notice naming the file and each entry; the keys that are in force show in the footer and palette."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from textual.binding import Binding

from app.app import LfmChatApp
from app.ui.keys import MAX_KEYMAP_BYTES, PANE_KEYS, key, parse_keymap, refusal
from tests.app.pilot_helpers import MakeOptions, chat_screen, wait_until
from tests.app.ui.test_panes import footer_labels

CHAT = [
    *[b for b in PANE_KEYS if isinstance(b, Binding)],
    key("alt+n", "new_pane", "New", "Open a new pane"),
    key("alt+w", "close_pane", "Close", "Close the active pane"),
    key("ctrl+q", "quit", "Quit", "Save everything and quit"),
]


def test_a_valid_keymap_is_kept_whole() -> None:
    parsed = parse_keymap(b'{"new_pane": "f2", "export": "Ctrl+Shift+E", "copy": "f7"}', [CHAT])
    assert parsed.keys == {"new_pane": "f2", "export": "ctrl+shift+e", "copy": "f7"}
    assert parsed.skipped == []


def test_unknown_ids_bad_keys_and_terminal_aliases_are_skipped_by_name() -> None:
    parsed = parse_keymap(
        b'{"bogus_id": "f5", "copy": "not a key!!", "clear": "ctrl+h", "stop": "ctrl+[", "regenerate": 5,'
        b' "settings": "x", "edit_last": "ctrl+j", "export": "f8"}',
        [CHAT],
    )
    assert parsed.keys == {"export": "f8"}
    skipped = " ".join(parsed.skipped)
    for entry in ("bogus_id", "copy", "clear", "stop", "regenerate", "settings", "edit_last"):
        assert f'"{entry}"' in skipped
    assert "backspace" in skipped  # why ctrl+h never arrives
    assert "escape" in skipped
    assert "not a string" in skipped


def test_two_actions_on_one_key_is_refused_but_a_swap_is_fine() -> None:
    clash = parse_keymap(b'{"export": "alt+c"}', [CHAT])  # copy keeps alt+c
    assert clash.keys == {}
    assert "copy" in clash.skipped[0]
    both = parse_keymap(b'{"export": "f7", "copy": "f7"}', [CHAT])
    assert both.keys == {"export": "f7"}
    swap = parse_keymap(b'{"export": "alt+c", "copy": "ctrl+o"}', [CHAT])
    assert swap.keys == {"export": "alt+c", "copy": "ctrl+o"}
    elsewhere = [key("ctrl+n", "history_new", "New", "In another screen")]
    assert parse_keymap(b'{"history_new": "ctrl+r"}', [CHAT, elsewhere]).keys == {"history_new": "ctrl+r"}


def test_a_file_that_is_not_a_keymap_is_one_sentence() -> None:
    for text in (
        b"[1, 2]",
        b"{",
        b"null",
        b'"f2"',
        b"\xff{}",
        b"[" * 10_000,
        b"{}" + b" " * MAX_KEYMAP_BYTES,
    ):
        parsed = parse_keymap(text, [CHAT])
        assert parsed.keys == {} and len(parsed.problem or "") < 200


def test_typing_keys_are_refused() -> None:
    for typing in ("a", "shift+a", "space", "enter", "backspace", "up", "question_mark", "?"):
        assert refusal(typing) is not None, typing
    for fine in ("f2", "ctrl+r", "alt+x", "ctrl+shift+up", "ctrl+pageup", "escape"):
        assert refusal(fine) is None, fine


def test_a_key_that_edits_the_input_box_is_refused() -> None:
    """A priority binding on ctrl+w would close panes where the user meant to delete a word."""
    parsed = parse_keymap(
        b'{"close_pane": "ctrl+w", "copy": "alt+b", "export": "ctrl+k", "fork": "f8"}', [CHAT]
    )
    assert parsed.keys == {"fork": "f8"}
    for entry in ("close_pane", "copy", "export"):
        assert any(f'"{entry}"' in why and "edits text in the input box" in why for why in parsed.skipped)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=300), st.dictionaries(st.text(max_size=20), st.text(max_size=20)).map(json.dumps)
    )
)
def test_any_text_gives_valid_keys_and_clean_notices(text: str) -> None:
    parsed = parse_keymap(text.encode(), [CHAT])
    ids = {b.id for b in CHAT}
    assert set(parsed.keys) <= ids
    assert all(refusal(k) is None for keys in parsed.keys.values() for k in keys.split(","))
    for line in [*parsed.skipped, parsed.problem or ""]:
        assert line.isprintable() and len(line) < 200


async def test_the_footer_and_palette_show_the_keys_in_force(make_options: MakeOptions) -> None:
    options = make_options(panes=1)
    options.data_dir.mkdir(parents=True)
    options.keymap_path.write_text(json.dumps({"new_pane": "f2", "export": "f7"}), encoding="utf-8")
    app = LfmChatApp(options)
    async with app.run_test(size=(200, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        await wait_until(pilot, lambda: "f2 New" in footer_labels(app), "the remapped key in the footer")
        assert "f7 Export" in footer_labels(app)
        helps = {c.title: c.help for c in app.get_system_commands(screen)}
        assert helps["Open a new pane"].startswith("f2 ")
        assert helps["Export this conversation to a Markdown file"].startswith("f7 ")
        assert not app._notifications


async def test_bad_entries_are_named_in_one_notice(make_options: MakeOptions) -> None:
    options = make_options(panes=1)
    options.data_dir.mkdir(parents=True)
    options.keymap_path.write_text(
        json.dumps({"bogus_id": "f5", "copy": "not a key!!", "clear": "ctrl+h", "new_pane": "f2"}),
        encoding="utf-8",
    )
    app = LfmChatApp(options)
    async with app.run_test(size=(200, 36)) as pilot:
        await chat_screen(app, pilot)
        await wait_until(pilot, lambda: "f2 New" in footer_labels(app), "the valid entry in force")
        assert "alt+c Copy" in footer_labels(app) and "alt+l Clear" in footer_labels(app)
        notes = [str(n.message) for n in app._notifications]
        assert len(notes) == 1
        assert str(options.keymap_path) in notes[0]
        assert all(f'"{entry}"' in notes[0] for entry in ("bogus_id", "copy", "clear"))


async def test_a_huge_or_broken_keymap_is_a_warning(make_options: MakeOptions, tmp_path: Path) -> None:
    options = make_options(panes=1)
    options.data_dir.mkdir(parents=True)
    options.keymap_path.write_bytes(b'{"new_pane": "f2"' + b" " * (MAX_KEYMAP_BYTES * 4) + b"}")
    app = LfmChatApp(options)
    async with app.run_test(size=(200, 36)) as pilot:
        await chat_screen(app, pilot)
        await wait_until(pilot, lambda: app._notifications, "a notice")
        await wait_until(pilot, lambda: "alt+n New" in footer_labels(app), "the default key in the footer")
        assert "too big" in str(next(iter(app._notifications)).message)
