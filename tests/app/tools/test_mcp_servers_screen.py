"""The MCP servers screen: what each server is doing, why one failed, and its tools, as they change."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import OptionList

import app
from app.app import LfmChatApp
from app.tools.toolbox import ToolBox
from app.ui.screens.mcp_servers import McpServersScreen
from tests.app.pilot_helpers import wait_until
from tests.app.tools.conftest import stdio_server

pytestmark = [pytest.mark.pilot, pytest.mark.subprocess]


class Host(App[None]):
    CSS_PATH = str(Path(app.__file__).parent / LfmChatApp.CSS_PATH)

    def __init__(self, toolbox: ToolBox) -> None:
        super().__init__()
        self.toolbox = toolbox

    def on_mount(self) -> None:
        self.push_screen(McpServersScreen(self.toolbox, "From mcp.json."))


def entries(host: Host) -> list[str]:
    options = host.screen.query_one(OptionList)
    return [str(options.get_option_at_index(n).prompt) for n in range(options.option_count)]


async def test_enter_starts_a_server_and_the_list_follows() -> None:
    toolbox = ToolBox([stdio_server("calc", "calc"), stdio_server("broken", "no-such-kind")])
    host = Host(toolbox)
    try:
        async with host.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: len(entries(host)) == 2, "the servers listed")
            assert all(" stopped " in entry for entry in entries(host))
            await pilot.press("enter")  # calc
            await wait_until(pilot, lambda: "· add" in entries(host)[0], "calc's tools")
            assert entries(host)[0].startswith("calc  ready")
            await pilot.press("down", "enter")  # broken
            await wait_until(pilot, lambda: " failed " in entries(host)[1], "broken to fail")
            assert "KeyError: 'no-such-kind'" in entries(host)[1]
    finally:
        await toolbox.aclose()
