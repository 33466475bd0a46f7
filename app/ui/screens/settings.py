"""A pane's system prompt and sampling settings, validated before they can be saved."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, SelectionList, TextArea

from app.core.conversation import ChatSettings
from app.core.sanitize import strip_control
from app.ui.patches.instant_keys import InstantInput
from app.ui.patches.sturdy_text_area import SturdyTextArea
from app.ui.widgets.key_footer import KeyFooter
from engine import SamplingParamsError

# (field, label, type): the numeric fields, in form order.
FIELDS: tuple[tuple[str, str, type], ...] = (
    ("temperature", "Temperature", float),
    ("top_k", "Top-k", int),
    ("top_p", "Top-p", float),
    ("min_p", "Min-p", float),
    ("repetition_penalty", "Repetition penalty", float),
    ("max_tokens", "Max new tokens", int),
)

SERVER_DEFAULT = "the server's default"


def parse_settings(
    system_prompt: str, values: dict[str, str], base: ChatSettings | None = None, server: bool = False
) -> ChatSettings:
    """Settings from the form's text; ValueError with a message naming the field on bad input.

    The preset's name (`base.preset`) stays while the sampling is `base`'s, and becomes "custom" once
    any value differs. On a `server` a blank field is left to the server's default (not chosen)."""
    parsed: dict[str, float | int] = {}
    chosen = []
    for name, label, kind in FIELDS:
        text = values[name].strip()
        if server and not text:
            parsed[name] = getattr(base or ChatSettings(), name)
            continue
        chosen.append(name)
        try:
            parsed[name] = kind(text)
        except ValueError:
            noun = "a whole number" if kind is int else "a number"
            raise ValueError(f"{label} must be {noun}, not {text!r}.") from None
    settings = ChatSettings(system_prompt=system_prompt, chosen=tuple(chosen), **parsed)  # type: ignore[arg-type]
    if base is not None:
        sampling = [name for name, _, _ in FIELDS if name != "max_tokens"]
        same = all(getattr(settings, name) == getattr(base, name) for name in sampling)
        settings.preset = base.preset if same else "custom"
    try:
        settings.sampling_params()
    except SamplingParamsError as exc:  # the engine's rule, with the form's label instead of the field
        message = str(exc)
        for name, label, _ in FIELDS:
            message = message.replace(f"SamplingParams.{name}", label)
        raise ValueError(message) from None
    return settings


class SettingsScreen(ModalScreen[ChatSettings | None]):
    """Dismisses with the new settings, or None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel", id="settings_cancel"),
        Binding("ctrl+s", "save", "Save", id="settings_save", priority=True),
    ]

    def __init__(
        self,
        settings: ChatSettings,
        pane_label: str,
        tool_servers: list[str] | None = None,
        server: bool = False,
    ) -> None:
        """`tool_servers`: the MCP servers configured (mcp.json, --mcp); `server`: a field the user
        did not set shows blank, the server's default."""
        super().__init__()
        self.settings = settings
        self.pane_label = pane_label
        self.tool_servers = tool_servers or []
        self.server = server

    def compose(self) -> ComposeResult:
        with Vertical(id="settings-dialog") as dialog:
            dialog.border_title = f"Settings · pane {self.pane_label}"
            yield Label("System prompt")
            system_prompt = strip_control(self.settings.system_prompt)
            yield SturdyTextArea(system_prompt, id="system-prompt", soft_wrap=True)
            with Grid(id="settings-fields"):
                for name, label, _ in FIELDS:
                    yield Label(label)
                    shown = not self.server or name in self.settings.chosen
                    value = str(getattr(self.settings, name)) if shown else ""
                    blank = SERVER_DEFAULT if self.server else ""
                    yield InstantInput(value, placeholder=blank, id=name, compact=True)
            if self.tool_servers:
                yield Label("Tools from these MCP servers (space toggles)")
                yield SelectionList[str](
                    *[(strip_control(s), s, self.settings.offers(s)) for s in self.tool_servers],
                    id="tool-servers",
                )
            yield Label("", id="settings-error", markup=False)
            with Horizontal(id="settings-buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#system-prompt", TextArea).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self._save()
        else:
            self.dismiss(None)

    def on_input_submitted(self) -> None:
        self._save()

    def action_save(self) -> None:
        """ctrl+s is a priority key: it runs before keys typed just ahead of it reach their box, so
        the fields are read from the focused box's queue, after those keys."""
        (self.focused or self).call_later(self._save)

    def _save(self) -> None:
        values = {name: self.query_one(f"#{name}", Input).value for name, _, _ in FIELDS}
        try:
            system_prompt = strip_control(self.query_one("#system-prompt", TextArea).text)
            settings = parse_settings(system_prompt, values, self.settings, self.server)
        except ValueError as exc:
            self.query_one("#settings-error", Label).update(str(exc))
            return
        settings.tool_servers = self._chosen_servers()
        self.dismiss(settings)

    def _chosen_servers(self) -> list[str] | None:
        """None when every server is chosen: servers added to mcp.json later are offered too."""
        if not self.tool_servers:
            return self.settings.tool_servers
        chosen = self.query_one("#tool-servers", SelectionList).selected
        return (
            None if set(chosen) == set(self.tool_servers) else [s for s in self.tool_servers if s in chosen]
        )
