"""Attaching a file to a message: read bounded, refused with one sentence when it is not text or
does not fit (with the figures), counted before sending, and a paste too big for the box offered
as an attachment. Files are untrusted: no control sequence gets through."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from textual import events
from textual.pilot import Pilot
from textual.widgets import Input

from app.app import LfmChatApp
from app.core.attachment import (
    ATTACHMENT_LIMIT_BYTES,
    Attachment,
    AttachmentError,
    file_command,
    from_bytes,
    read_file,
    read_stream,
    with_attachments,
)
from app.ui.paste import PASTE_LIMIT_BYTES, PasteSafeParser
from app.ui.screens.attach import AttachScreen
from app.ui.widgets.chat_pane import ChatPane
from engine import DEFAULT_MODEL
from tests.app.fake_openai import FakeServer
from tests.app.pilot_helpers import MakeOptions, chat_screen, notices, submit, wait_replied, wait_until

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


# ---------------------------------------------------------------- reading, without the app
def test_a_file_is_read_cleaned_and_fenced_under_its_name(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_bytes(b"# Notes\r\n\x1b]52;c;aGk=\x07Use ```code```.\n")
    attachment = read_file(str(tmp_path / "notes.md"))
    assert attachment == Attachment("notes.md", "# Notes\nUse ```code```.\n")
    assert attachment.block() == "notes.md\n````\n# Notes\nUse ```code```.\n````"  # a longer fence
    assert with_attachments("Summarise", [attachment]) == attachment.block() + "\n\nSummarise"


def test_tilde_is_the_home_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "a.txt").write_text("hello")
    assert read_file("~/a.txt").text == "hello"


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda d: d / "nope.md", "No such file: {path}."),
        (lambda d: d, "{path} is a directory, not a file: not attached."),
        (
            lambda d: _write(d / "x.bin", b"\x7fELF\x00\x01"),
            "x.bin is not UTF-8 text (a binary file?): not attached.",
        ),
        (
            lambda d: _write(d / "l1.txt", b"caf\xe9"),
            "l1.txt is not UTF-8 text (a binary file?): not attached.",
        ),
        (
            lambda d: _write(d / "big.txt", b"x" * (ATTACHMENT_LIMIT_BYTES + 1)),
            "big.txt is larger than 1 MiB",
        ),
        (lambda d: Path("/dev/zero"), "/dev/zero is not a regular file: not attached."),
    ],
)
def test_what_cannot_be_attached_is_one_sentence(
    make: Callable[[Path], Path], says: str, tmp_path: Path
) -> None:
    path = make(tmp_path)
    with pytest.raises(AttachmentError) as refused:
        read_file(str(path))
    assert str(refused.value).startswith(says.format(path=path))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_says_permission_denied(tmp_path: Path) -> None:
    secret = _write(tmp_path / "secret.txt", b"x")
    secret.chmod(0)
    with pytest.raises(AttachmentError, match="cannot be read: permission denied"):
        read_file(str(secret))


def test_an_endless_stream_is_read_only_up_to_the_cap() -> None:
    with pytest.raises(AttachmentError, match="larger than"):
        read_stream(io.BytesIO(b"y" * (3 * ATTACHMENT_LIMIT_BYTES)), "stdin")


def test_only_a_whole_file_command_is_one() -> None:
    assert file_command("/file ~/notes.md ") == "~/notes.md"
    assert file_command("/file") == ""
    assert file_command("/files are great") is None and file_command("see /file x") is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.text(max_size=40))
def test_any_bytes_and_name_give_clean_text_or_one_sentence(data: bytes, name: str) -> None:
    try:
        attachment = from_bytes(name, data)
    except AttachmentError as exc:
        assert "\n" not in str(exc)
        return
    assert not CONTROL.search(attachment.text) and not CONTROL.search(attachment.block().replace("\n", ""))


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# ---------------------------------------------------------------- in the running app


async def test_a_file_that_fits_is_counted_then_sent_with_the_message(
    make_options: MakeOptions, tmp_path: Path
) -> None:
    notes = _write(tmp_path / "notes.md", b"Buy milk.\nCall Ann.\n")
    app = LfmChatApp(make_options(panes=1))
    async with app.run_test(size=(120, 36)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await submit(pilot, pane, f"/file {notes}")
        await wait_until(pilot, lambda: "Attached notes.md" in notices(app), "the attach notice")
        found = re.search(r"Attached notes.md \(([\d,]+) tokens; ([\d,]+) left in this pane\)", notices(app))
        assert found, notices(app)
        tokens, left = (int(figure.replace(",", "")) for figure in found.groups())
        assert tokens > 0 and tokens + left == pane.session.backend.max_model_len
        assert f"+notes.md {tokens} tok" in str(pane.border_subtitle)
        await submit(pilot, pane, "Summarise")
        await wait_replied(pilot, pane)
        assert (
            pane.conversation.messages[0].content == "notes.md\n```\nBuy milk.\nCall Ann.\n```\n\nSummarise"
        )
        assert "+notes.md" not in str(pane.border_subtitle)


async def test_an_attachment_held_at_quit_is_held_again_after_relaunch(
    make_options: MakeOptions, tmp_path: Path
) -> None:
    notes = _write(tmp_path / "notes.md", b"Buy milk.\n")
    options = make_options(panes=1)
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 36)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await submit(pilot, pane, f"/file {notes}")
        await wait_until(pilot, lambda: "Attached notes.md" in notices(app), "the attach notice")
        counted = re.search(r"\+notes.md \d+ tok", str(pane.border_subtitle))
        assert counted is not None
        await pilot.press("ctrl+q")
    notes.unlink()  # what is held is the text read then, not the path
    again = LfmChatApp(options)
    async with again.run_test(size=(120, 36)) as pilot:
        pane = (await chat_screen(again, pilot)).panes[0]
        label = counted.group()
        await wait_until(pilot, lambda: label in str(pane.border_subtitle), "the restored attachment counted")
        await submit(pilot, pane, "Summarise")
        await wait_replied(pilot, pane)
        assert pane.conversation.messages[0].content == "notes.md\n```\nBuy milk.\n```\n\nSummarise"
        await pilot.press("ctrl+q")
    third = LfmChatApp(options)
    async with third.run_test(size=(120, 36)) as pilot:
        pane = (await chat_screen(third, pilot)).panes[0]
        assert pane.session.attachments.attachments == [] and "+notes.md" not in str(pane.border_subtitle)


async def test_a_file_too_big_for_the_context_is_refused_with_the_figures(
    make_options: MakeOptions, tmp_path: Path
) -> None:
    app = LfmChatApp(make_options(panes=1))
    async with app.run_test(size=(120, 36)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        limit = pane.session.backend.max_model_len
        notes = _write(tmp_path / "notes.md", b"many words " * limit)
        pane.focus_input()
        pane.prompt_input.text = f"/file {notes}"
        pane.prompt_input.post_message(events.Key("enter", "\r"))  # not submit(): the box refills
        await wait_until(pilot, lambda: "not attached" in notices(app), "the refusal")
        found = re.search(
            r"notes.md is ([\d,]+) tokens; this pane has ([\d,]+) left: not attached.", notices(app)
        )
        assert found, notices(app)
        assert int(found[1].replace(",", "")) > limit and int(found[2].replace(",", "")) == limit
        assert pane.prompt_input.text == f"/file {notes}"  # given back, to fix
        assert not pane.session.attachments.held


async def test_binary_and_missing_files_are_refused_by_the_attach_key(
    make_options: MakeOptions, tmp_path: Path
) -> None:
    binary = _write(tmp_path / "photo.jpg", b"\xff\xd8\xff\xe0\x00\x10JFIF")
    app = LfmChatApp(make_options(panes=1))
    async with app.run_test(size=(120, 36)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        for path, says in ((binary, "photo.jpg is not UTF-8 text"), (tmp_path / "gone.md", "No such file")):
            await _attach_by_key(pilot, pane, str(path))
            await wait_until(pilot, lambda says=says: says in notices(app), says)
        assert not pane.session.attachments.held and pane.conversation.messages == []


async def _attach_by_key(pilot: Pilot, pane: ChatPane, path: str) -> None:
    pane.focus_input()
    await pilot.press("f3")
    await wait_until(pilot, lambda: isinstance(pane.app.screen, AttachScreen), "the attach dialog")
    field = pane.app.screen.query_one(Input)
    field.value = path
    await pilot.press("enter")
    await wait_until(pilot, lambda: not isinstance(pane.app.screen, AttachScreen), "the dialog to close")


async def test_a_paste_too_big_for_the_box_is_attached_instead(make_options: MakeOptions) -> None:
    """On a server (which counts its own tokens) a 300 KB paste is held for the next message."""
    pasted = "log line \x1b[31mred\x1b[0m\n" * (PASTE_LIMIT_BYTES // 20)
    with FakeServer() as server:
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=1))
        async with app.run_test(size=(120, 36)) as pilot:
            pane = (await chat_screen(app, pilot)).panes[0]
            await wait_until(pilot, lambda: app.focused is pane.prompt_input, "focus")
            data = f"\x1b[200~{pasted}\x1b[201~"
            parser = PasteSafeParser()
            for start in range(0, len(data), 4096):
                for event in parser.feed(data[start : start + 4096]):
                    app.post_message(event)
            await wait_until(pilot, lambda: pane.session.attachments.held, "the paste attached")
            assert "Attached pasted text" in notices(app) and "the server counts its tokens" in notices(app)
            assert pane.prompt_input.text == ""
            await submit(pilot, pane, "What failed?")
            await wait_replied(pilot, pane)
        sent = server.bodies[-1]["messages"][-1]["content"]
    assert sent.startswith("pasted text\n```\nlog line red\n") and sent.endswith("```\n\nWhat failed?")


async def test_a_refused_messages_attachment_is_held_again_not_pasted_into_the_box(
    make_options: MakeOptions, tmp_path: Path
) -> None:
    notes = _write(tmp_path / "notes.md", b"Buy milk.\n")
    with FakeServer(mode="escape_error_body") as server:
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=1))
        async with app.run_test(size=(120, 36)) as pilot:
            pane = (await chat_screen(app, pilot)).panes[0]
            await submit(pilot, pane, f"/file {notes}")
            await wait_until(pilot, lambda: "Attached notes.md" in notices(app), "the attach notice")
            await submit(pilot, pane, "Summarise")
            await wait_until(pilot, lambda: pane.prompt_input.text == "Summarise", "the message back")
            assert [a.name for a in pane.session.attachments.attachments] == ["notes.md"]
            assert "+notes.md" in str(pane.border_subtitle) and pane.conversation.messages == []
            assert "notes.md" in server.bodies[-1]["messages"][-1]["content"]  # it did go with it


async def test_file_attaches_while_the_pane_replies_as_the_attach_key_does(
    make_options: MakeOptions, tmp_path: Path
) -> None:
    notes = _write(tmp_path / "notes.md", b"Buy milk.\n")
    with FakeServer() as server:
        server.delay = 0.2
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=1))
        async with app.run_test(size=(120, 36)) as pilot:
            pane = (await chat_screen(app, pilot)).panes[0]
            await submit(pilot, pane, "Hi")
            assert pane.busy
            await submit(pilot, pane, f"/file {notes}")
            await wait_until(pilot, lambda: "Attached notes.md" in notices(app), "the attach notice")
            assert pane.busy and "still replying" not in notices(app)
            await wait_replied(pilot, pane)
            await submit(pilot, pane, "Summarise")
            await wait_replied(pilot, pane, turns=2)
            assert pane.conversation.messages[2].content == "notes.md\n```\nBuy milk.\n```\n\nSummarise"
