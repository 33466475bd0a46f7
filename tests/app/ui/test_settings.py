"""The settings modal validates with clear messages and applies to its pane only."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from textual.app import App
from textual.widgets import Input, Label, SelectionList

from app.core.conversation import ChatSettings
from app.ui.screens.settings import SettingsScreen, parse_settings
from tests.app.pilot_helpers import wait_until

VALID = {
    "temperature": "0.7",
    "top_k": "40",
    "top_p": "0.9",
    "min_p": "0",
    "repetition_penalty": "1",
    "max_tokens": "64",
}
CARD = ChatSettings(temperature=0.1, top_k=50, top_p=0.1, min_p=0.0, preset="LFM2.5 card defaults")


def test_parse_settings_accepts_valid_values() -> None:
    settings = parse_settings("Be brief.", VALID)
    assert settings == ChatSettings(
        "Be brief.", temperature=0.7, top_k=40, top_p=0.9, min_p=0.0, repetition_penalty=1.0, max_tokens=64
    )


def test_the_preset_name_stays_until_the_sampling_changes() -> None:
    form = {name: str(getattr(CARD, name)) for name in VALID}
    assert parse_settings("New prompt.", {**form, "max_tokens": "99"}, CARD).preset == "LFM2.5 card defaults"
    assert parse_settings("", {**form, "top_k": "0"}, CARD).preset == "custom"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("temperature", "warm", "Temperature must be a number, not 'warm'."),
        ("max_tokens", "1.5", "Max new tokens must be a whole number"),
        ("top_k", "2.5", "Top-k must be a whole number"),
        ("top_k", "-3", "Top-k must be an int >= -1"),
        ("top_p", "0", "Top-p must be a number in (0, 1]"),
        ("temperature", "-1", "Temperature must be a number in [0, 100]"),
        ("max_tokens", "0", "Max new tokens must be an int >= 1"),
    ],
)
def test_parse_settings_names_the_bad_field(field: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        parse_settings("", {**VALID, field: value})


class HostApp(App[None]):
    """A bare host for the modal: no engine needed to test a form."""

    def __init__(self, settings: ChatSettings = CARD, tool_servers: list[str] | None = None) -> None:
        super().__init__()
        self.results: list[ChatSettings | None] = []
        self.settings = settings
        self.tool_servers = tool_servers

    def on_mount(self) -> None:
        self.push_screen(SettingsScreen(self.settings, "1", self.tool_servers), self.results.append)


async def test_the_modal_shows_the_error_and_saves_once_fixed() -> None:
    app = HostApp()
    async with app.run_test() as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen) and app.screen.is_mounted)
        app.screen.query_one("#temperature", Input).value = "-2"
        await pilot.press("ctrl+s")
        error = app.screen.query_one("#settings-error", Label)
        assert "Temperature must be" in str(error.render())
        assert app.results == []

        app.screen.query_one("#temperature", Input).value = "0"
        await pilot.press(*"Answer in French.", "ctrl+s")
        await wait_until(pilot, lambda: app.results)
    assert app.results == [replace(CARD, system_prompt="Answer in French.", temperature=0.0, preset="custom")]


async def test_escape_cancels() -> None:
    app = HostApp()
    async with app.run_test() as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen) and app.screen.is_mounted)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.results)
    assert app.results == [None]


@pytest.mark.parametrize(
    ("before", "unticked", "after"),
    [
        (None, [], None),  # every server ticked: servers added to mcp.json later are offered too
        (None, ["calc"], ["weather"]),
        (["calc"], ["calc"], []),  # none: the pane offers no tools
        ([], [], []),
    ],
)
async def test_the_modal_chooses_the_mcp_servers_whose_tools_the_pane_offers(
    before: list[str] | None, unticked: list[str], after: list[str] | None
) -> None:
    app = HostApp(replace(CARD, tool_servers=before), ["weather", "calc"])
    async with app.run_test() as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen) and app.screen.is_mounted)
        servers = app.screen.query_one("#tool-servers", SelectionList)
        assert set(servers.selected) == ({"weather", "calc"} if before is None else set(before))
        for name in unticked:
            servers.deselect(name)
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.results)
    assert app.results[0] is not None and app.results[0].tool_servers == after
