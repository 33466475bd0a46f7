"""The model picker on a server listing 270,000 ids (3.98 MB, under the listing cap): it draws a
bounded list, filters as you type, and the keys move through what is shown (issue 42: before, it
took 18 s to fill and over two minutes a Down key)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from textual import events

from app.app import LfmChatApp
from app.core.options import AppOptions
from app.ui.screens.chat import ChatScreen
from app.ui.screens.model_picker import MAX_SHOWN, ModelPicker, matching
from engine import DEFAULT_MODEL
from tests.app import fake_openai
from tests.app.fake_openai import FakeServer
from tests.app.pilot_helpers import chat_screen, wait_until

MakeOptions = Callable[..., AppOptions]
IDS = 270_000


def test_matching_keeps_list_order_and_wants_every_word() -> None:
    keys = ["org/lfm2-1.2b", "org/lfm2-350m", "other/llama-8b", "org/lfm2-1.2b-gguf"]
    assert matching(keys, "") == [0, 1, 2, 3]
    assert matching(keys, "LFM2 1.2b") == [0, 3]
    assert matching(keys, "gguf org") == [3]
    assert matching(keys, "mistral") == []


def base36(n: int) -> str:
    """Four characters: 270,000 entries of them fit under the listing cap, as in the report."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    return "".join(digits[n // 36**k % 36] for k in range(3, -1, -1))


def shown(picker: ModelPicker) -> list[str]:
    return [str(option.prompt) for option in picker.options.options]


async def test_the_picker_on_270000_ids_draws_a_bounded_list_and_filters_as_you_type(
    make_options: MakeOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [base36(n) for n in range(IDS)]
    listing = json.dumps({"data": [{"id": i} for i in ids]}, separators=(",", ":")).encode()
    assert len(listing) < 4 << 20  # under the listing cap (app/backend/remote.py)
    monkeypatch.setitem(fake_openai.LISTINGS, "many_ids", listing)
    with FakeServer() as server:
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=1))
        async with app.run_test(size=(120, 40)) as pilot:
            await chat_screen(app, pilot)
            server.mode = "many_ids"  # after startup: the app's first listing named the model in use
            app.post_message(events.Key("f4", None))
            await wait_until(
                pilot, lambda: isinstance(app.screen, ModelPicker) and app.screen.choices, "the list"
            )
            picker = app.screen
            assert isinstance(picker, ModelPicker)
            assert len(picker.choices) == IDS
            assert len(picker.options.options) <= MAX_SHOWN + 1
            assert f"{IDS - MAX_SHOWN:,} more: type to filter" in shown(picker)

            for key in "5z":
                app.post_message(events.Key(key, key))
            await wait_until(pilot, lambda: picker.filter.value == "5z", "the filter typed")
            found = [i for i in ids if "5z" in i]
            await wait_until(pilot, lambda: shown(picker)[0].startswith(found[0]), "the filtered list")
            assert [line.split()[0] for line in shown(picker)[:-1]] == found[:MAX_SHOWN]
            assert f"{len(found) - MAX_SHOWN:,} more: type to filter" == shown(picker)[-1]

            app.post_message(events.Key("down", None))
            await wait_until(pilot, lambda: picker.options.highlighted == 1, "the highlight moved")
            expected = shown(picker)[1].split()[0]
            app.post_message(events.Key("enter", None))
            await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen), "the picker closed")
            await wait_until(pilot, lambda: app.screen.panes[0].model == expected, "the model chosen")
