"""Nothing a user types, pastes or loads, and no disk fault, crashes the app or loses a message.

Each case drives the real app (headless, real engine on the tiny checkpoint, real SQLite) and
ends by reading the conversation back from the database.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from textual import events

from app.app import LfmChatApp
from app.core.conversation import ChatSettings
from app.store.database import Store
from app.ui.screens.settings import SettingsScreen
from tests.app.pilot_helpers import MakeOptions, chat_screen, notices, submit, wait_replied, wait_until

SHORT = ChatSettings(temperature=0.0, max_tokens=8)
MARKUP = "In BBCode, what does [/] do? And [@click=app.quit]this[/] or [/bold]?"
ESCAPES = "title \x1b]0;pwned\x07 clip \x1b]52;c;aGk=\x07 bell \x07 csi \x1b[2J end"


def saved_user_messages(options_data: Path) -> list[str]:
    store = Store(options_data / "conversations.sqlite3")
    try:
        return [
            m.content
            for s in store.summaries()
            for m in (store.load(s.id).messages if store.load(s.id) else [])  # type: ignore[union-attr]
            if m.role == "user"
        ]
    finally:
        store.close()


async def test_markup_and_escapes_in_first_messages_are_plain_text(make_options: MakeOptions) -> None:
    options = make_options(panes=2, chat=SHORT)
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 36)) as pilot:
        first, second = (await chat_screen(app, pilot)).panes
        await submit(pilot, first, MARKUP)
        await submit(pilot, second, ESCAPES)
        await wait_replied(pilot, first, second)
        assert MARKUP[:20] in str(first.border_title)  # shown as typed, not parsed as markup
        title = str(second.border_title)
        assert "\x1b" not in title and "\x07" not in title and "title" in title
        assert "pwned" not in title  # an OSC sequence goes with its payload
        assert app.return_code is None
        await pilot.press("ctrl+q")
    assert sorted(saved_user_messages(options.data_dir)) == sorted([MARKUP, ESCAPES])


async def test_markup_in_settings_fields_and_escapes_in_the_system_prompt(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=1, chat=SHORT))
    async with app.run_test(size=(120, 36)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen), "settings")
        modal = app.screen
        modal.query_one("#temperature").value = "[/]"  # type: ignore[attr-defined]
        await pilot.press("ctrl+s")
        assert "[/]" in str(modal.query_one("#settings-error").render())
        modal.query_one("#temperature").value = "0"  # type: ignore[attr-defined]
        modal.query_one("#system-prompt").text = f"Be brief. {ESCAPES}"  # type: ignore[attr-defined]
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.screen is not modal, "the modal to close")
        assert "\x1b" not in pane.conversation.settings.system_prompt
        assert pane.conversation.settings.system_prompt.startswith("Be brief. title")


async def test_a_paste_is_text_without_controls(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=1, chat=SHORT))
    async with app.run_test(size=(120, 36)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await wait_until(pilot, lambda: app.focused is pane.prompt_input, "focus")
        pane.prompt_input.post_message(events.Paste(f"{ESCAPES}\r\nsecond line"))
        await wait_until(pilot, lambda: "second line" in pane.prompt_input.text, "the paste")
        assert "\x1b" not in pane.prompt_input.text and "\x07" not in pane.prompt_input.text
        assert pane.prompt_input.text.endswith("end\nsecond line")


async def test_a_data_dir_that_vanishes_mid_session_is_reported_and_retried(
    make_options: MakeOptions,
) -> None:
    options = make_options(panes=1, chat=SHORT)
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        pane = screen.panes[0]
        shutil.rmtree(options.data_dir)
        await submit(pilot, pane, "saved later")
        await wait_replied(pilot, pane)
        assert screen.save_warning.display and "Not saved" in str(screen.save_warning.render())
        options.data_dir.mkdir(parents=True)
        screen._retry_saves()
        assert not screen.save_warning.display
        await pilot.press("ctrl+q")
    assert saved_user_messages(options.data_dir) == ["saved later"]


async def test_a_locked_database_delays_saving_but_loses_nothing(make_options: MakeOptions) -> None:
    options = make_options(panes=1, chat=SHORT)
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        pane = screen.panes[0]
        other = sqlite3.connect(options.store_path, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        await submit(pilot, pane, "written once the lock goes")
        await wait_replied(pilot, pane)
        assert screen.save_warning.display
        other.execute("ROLLBACK")
        other.close()
        screen._retry_saves()
        assert not screen.save_warning.display
        assert app.return_code is None
    assert saved_user_messages(options.data_dir) == ["written once the lock goes"]


async def test_a_corrupt_database_is_moved_aside_and_the_user_told(make_options: MakeOptions) -> None:
    options = make_options(panes=1, chat=SHORT)
    options.data_dir.mkdir(parents=True)
    good = Store(options.store_path)
    good.close()
    with options.store_path.open("r+b") as db:  # keep the header, wreck the pages
        db.seek(100)
        db.write(b"\xde\xad" * 4000)
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 36)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await wait_until(pilot, lambda: "corrupt" in notices(app), "the notice")
        notes = notices(app)
        assert "corrupt" in notes and ".corrupt-" in notes
        await submit(pilot, pane, "a fresh start")
        await wait_replied(pilot, pane)
    assert saved_user_messages(options.data_dir) == ["a fresh start"]
    assert list(options.data_dir.glob("conversations.sqlite3.corrupt-*"))


async def test_a_second_instance_on_the_same_data_dir_is_refused(make_options: MakeOptions) -> None:
    options = make_options(panes=1, chat=SHORT)
    first = LfmChatApp(options)
    async with first.run_test(size=(120, 36)) as pilot:
        await chat_screen(first, pilot)
        second = LfmChatApp(options)
        async with second.run_test(size=(120, 36)) as pilot2:
            await wait_until(
                pilot2, lambda: "Another lfm-chat" in getattr(second.screen, "reason", ""), "refusal"
            )


def checkpoint_with_template(tiny_ckpt: Path, tmp_path: Path, template: str) -> Path:
    out = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, out)
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = template
    config_path.write_text(json.dumps(config), encoding="utf-8")
    return out


RAISING = "{% if messages|length > 1 %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}x"
SLOW = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x"


@pytest.mark.parametrize(
    ("template", "says"), [(RAISING, "roles must alternate"), (SLOW, "longer than")], ids=["raising", "slow"]
)
async def test_a_raising_or_runaway_template_is_a_notice_in_the_pane(
    make_options: MakeOptions, tiny_ckpt: Path, tmp_path: Path, template: str, says: str
) -> None:
    model = checkpoint_with_template(tiny_ckpt, tmp_path, template)
    chat = ChatSettings(temperature=0.0, max_tokens=8, system_prompt="sys")
    app = LfmChatApp(make_options(model=str(model), panes=1, chat=chat))
    async with app.run_test(size=(120, 36)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await wait_until(pilot, lambda: app.focused is pane.prompt_input, "focus")
        pane.prompt_input.text = "hello"
        pane.prompt_input.post_message(events.Key("enter", "\r"))
        await wait_until(pilot, lambda: pane.status.state == "error", "the template's notice")
        notices = [str(w.render()) for w in pane.transcript.query(".notice")]
        assert any(says in n for n in notices), notices
        assert pane.prompt_input.text == "hello"  # the message is given back, not lost
        assert not pane.busy and not pane.conversation.messages and app.return_code is None
