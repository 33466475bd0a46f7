"""On --server the model samples with the server's own defaults for it, except what the user set;
a local model keeps its card's values (tests/app/test_switch_model.py, test_cli.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from textual.widgets import Input

from app.app import LfmChatApp
from app.backend.remote import sampling_fields
from app.core.conversation import SAMPLING_FIELDS, ChatSettings, Conversation
from app.core.options import AppOptions
from app.store.database import Store
from app.store.rows import RowChecker
from app.ui.screens.settings import parse_settings
from cli.chat import build_parser, options_from_args
from tests.app.fake_openai import FakeServer
from tests.app.pilot_helpers import chat_screen, submit, wait_replied, wait_until

REQUEST_FIELDS = {"model", "messages", "stream", "stream_options"}  # what every request carries


def launched(url: str, data_dir: Path, *flags: str) -> AppOptions:
    args = ["--server", url, "--data-dir", str(data_dir), *flags]
    return options_from_args(build_parser().parse_args(args))


async def test_a_server_is_sent_only_the_sampling_the_user_set(tmp_path: Path) -> None:
    with FakeServer() as server:
        await asks(server, launched(server.url, tmp_path / "none"), {}, "server defaults")
        await asks(
            server,
            launched(server.url, tmp_path / "some", "--temperature", "0.7", "--max-tokens", "100"),
            {"temperature": 0.7, "max_tokens": 100},
            "server defaults + temperature 0.7, max_tokens 100",
        )


async def asks(server: FakeServer, options: AppOptions, sent: dict[str, float], border: str) -> None:
    """One message from a pane launched with `options`: the request carries `sent` and no other
    sampling, the border says `border`, and ctrl+s shows `sent` with the other fields blank."""
    server.bodies.clear()
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 30)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await submit(pilot, pane, "Hi")
        await wait_replied(pilot, pane)
        assert str(pane.border_subtitle).endswith(f" · {border}")
        await pane.run_action("settings")
        await wait_until(pilot, lambda: bool(app.screen.query("#max_tokens")), "the form")
        shown = {name: app.screen.query_one(f"#{name}", Input).value for name in SAMPLING_FIELDS}
        assert {name: value for name, value in shown.items() if value} == {k: str(v) for k, v in sent.items()}
    (body,) = server.bodies
    assert {k: v for k, v in body.items() if k not in REQUEST_FIELDS} == sent


def test_a_local_launch_runs_every_card_value() -> None:
    options = options_from_args(build_parser().parse_args(["--temperature", "0.7"]))
    assert options.chat.chosen == SAMPLING_FIELDS
    assert options.chat.preset == "LFM2 card defaults + --temperature"


def test_the_settings_form_on_a_server_leaves_blank_fields_to_the_server() -> None:
    base = replace(ChatSettings(), chosen=("temperature",), temperature=0.7)
    values = {name: "" for name in SAMPLING_FIELDS} | {"top_p": "0.9"}
    settings = parse_settings("", values, base, server=True)
    assert settings.chosen == ("top_p",) and settings.top_p == 0.9
    assert settings.in_force(server=True) == "server defaults + top_p 0.9"
    assert parse_settings("", {n: "" for n in SAMPLING_FIELDS}, base, server=True).chosen == ()


def test_the_chosen_fields_are_saved_and_rows_from_before_choose_all(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.sqlite3")
    for chosen in [("top_k",), ()]:
        loaded = store.load(store.save(Conversation(settings=replace(ChatSettings(), chosen=chosen))))
        assert loaded is not None and loaded.settings.chosen == chosen
    checker = RowChecker()
    assert checker.settings(json.dumps({"temperature": 0.5}), "old").chosen == SAMPLING_FIELDS
    odd = checker.settings(json.dumps({"chosen": ["__class__", "top_k"], "top_k": 5}), "odd")
    assert sampling_fields(odd, 64) == {"top_k": 5}  # a name that is no sampling field is never sent
    assert checker.settings(json.dumps({"chosen": 5}), "bad").chosen == SAMPLING_FIELDS
    assert checker.repairs == ["bad: chosen has the wrong type"]
