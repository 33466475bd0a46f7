"""The MCP servers (mcp.json and --mcp FILE): each one's state, why it failed, and its tools.

Servers start on first use, so the screen may show them stopped; Enter starts the highlighted one
(or tries a failed one again) and the list follows its state as it changes. Everything shown came
from the servers and was cleaned by app/tools before it got here.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from app.core.sanitize import for_display
from app.tools.toolbox import ServerState, ToolBox
from app.ui.widgets.key_footer import KeyFooter

REFRESH_SECONDS = 0.5
STATE_STYLES = {"stopped": "dim", "starting": "yellow", "ready": "green", "failed": "red"}
SHOWN_TOOLS = 12  # per server; the rest are counted


def server_text(server: ServerState) -> Text:
    """One server's entry: name, state and source; then why it failed, or its tools."""
    text = Text.assemble(
        (server.name, "bold"), "  ", (server.state, STATE_STYLES[server.state]), ("  " + server.source, "dim")
    )
    if server.reason:
        text.append("\n  " + for_display(server.reason), "red" if server.state == "failed" else "dim")
    for tool in server.tools[:SHOWN_TOOLS]:
        text.append(f"\n  · {tool.name}", "bold")
        if tool.description:
            text.append(f"  {for_display(tool.description)[:100]}", "dim")
    if len(server.tools) > SHOWN_TOOLS:
        text.append(f"\n  · and {len(server.tools) - SHOWN_TOOLS} more", "dim")
    return text


class McpServersScreen(ModalScreen[None]):
    """Lists the ToolBox's servers as they are now; Enter starts the highlighted one."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Close", id="mcp_servers_close"),
    ]

    def __init__(self, toolbox: ToolBox, config_note: str) -> None:
        """`config_note`: where the servers come from, or why a file could not be read."""
        super().__init__()
        self.toolbox = toolbox
        self.config_note = config_note
        self.shown: list[ServerState] = []
        self.options = OptionList(id="mcp-list")

    def compose(self) -> ComposeResult:
        with Vertical(id="mcp-dialog") as dialog:
            dialog.border_title = "MCP servers"
            yield Label(self.config_note, id="mcp-title", markup=False)
            yield self.options
        yield KeyFooter()

    def on_mount(self) -> None:
        self.options.focus()
        self.refresh_list()
        self.set_interval(REFRESH_SECONDS, self.refresh_list)

    def refresh_list(self) -> None:
        servers = self.toolbox.servers()
        if servers == self.shown:
            return
        highlighted = self.options.highlighted
        self.shown = servers
        self.options.clear_options()
        self.options.add_options(Option(server_text(s), id=s.name) for s in servers)
        if not servers:
            self.options.add_option(Option("No MCP servers are configured.", disabled=True))
        else:
            self.options.highlighted = min(highlighted or 0, len(servers) - 1)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
            self.toolbox.start(event.option.id)
            self.refresh_list()
