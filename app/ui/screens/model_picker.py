"""Pick a model: the local checkpoints, or the server's models, listed on a thread.

Listing may be slow (a large Hugging Face cache, a server across the world), so the dialog opens at
once with "listing…" and fills in when the list arrives; a listing that fails says why in the
dialog, and Esc still closes it.

A server may list hundreds of thousands of ids (270,000 took 18 s to fill an OptionList and over
two minutes a Down key): the list shows at most MAX_SHOWN of the ids that match what is typed in
the filter box above it, and says how many more there are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from app.backend.http_errors import ServerError
from app.backend.model_choices import ModelChoice
from app.ui.widgets.key_footer import KeyFooter

ListChoices = Callable[[], list[ModelChoice]]  # blocking, on a thread; ServerError/OSError: why not
MAX_SHOWN = 200  # rows in the list; the rest are reached by typing in the filter box


def matching(keys: list[str], typed: str) -> list[int]:
    """Indexes of the choices whose key (lower-cased label) holds every word typed, in list order."""
    words = typed.lower().split()
    return [n for n, key in enumerate(keys) if all(w in key for w in words)]


class ModelPicker(ModalScreen[ModelChoice | None]):
    """Dismisses with the chosen model, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Close", id="model_picker_close"),
        Binding("down", "move('cursor_down')", "Down", show=False, id="model_picker_down"),
        Binding("up", "move('cursor_up')", "Up", show=False, id="model_picker_up"),
        Binding("pagedown", "move('page_down')", "Page down", show=False, id="model_picker_page_down"),
        Binding("pageup", "move('page_up')", "Page up", show=False, id="model_picker_page_up"),
    ]

    def __init__(self, list_choices: ListChoices, current: str, what: str) -> None:
        """`current`: the label of the model in use, marked in the list; `what`: for whom it is picked."""
        super().__init__()
        self.list_choices = list_choices
        self.current = current
        self.what = what
        self.choices: list[ModelChoice] = []
        self._keys: list[str] = []  # per choice, what the filter matches against
        self.filter = Input(placeholder="type to filter", id="model-filter")
        self.options = OptionList(Option("listing models…", disabled=True), id="model-list")

    def compose(self) -> ComposeResult:
        with Vertical(id="model-dialog") as dialog:
            dialog.border_title = "Model"
            yield Label(f"{self.what} · now: {self.current}", id="model-title", markup=False)
            yield self.filter
            yield self.options
        yield KeyFooter()

    def on_mount(self) -> None:
        self.filter.focus()
        self._list()

    @work(thread=True, exclusive=True)
    def _list(self) -> None:
        try:
            choices = self.list_choices()
        except ServerError as exc:
            self.app.call_from_thread(self._show_problem, str(exc))
        except OSError as exc:  # a remembered folder or the cache that cannot be read
            self.app.call_from_thread(self._show_problem, f"The models could not be listed: {exc}")
        else:
            self.app.call_from_thread(self._show, choices)

    def _show(self, choices: list[ModelChoice]) -> None:
        self.choices = choices
        self._keys = [c.label.lower() for c in choices]
        current = next((n for n, c in enumerate(choices) if c.label == self.current), 0)
        self._fill(self.filter.value, current)

    def _fill(self, typed: str, highlight: int = 0) -> None:
        """Show the first MAX_SHOWN choices that match `typed`, and how many more match."""
        found = matching(self._keys, typed)
        shown = found[:MAX_SHOWN]
        if highlight not in shown:  # the model in use, when it is far down the list, comes first
            shown = [highlight, *shown[: MAX_SHOWN - 1]] if highlight in found else shown
        self.options.clear_options()
        self.options.add_options(self._option(n) for n in shown)
        if more := len(found) - len(shown):
            self.options.add_option(Option(f"{more:,} more: type to filter", disabled=True))
        if not self.choices:
            self.options.add_option(Option("No models found.", disabled=True))
        elif not found:
            self.options.add_option(Option("No model matches.", disabled=True))
        self.options.highlighted = shown.index(highlight) if highlight in shown else (0 if shown else None)

    def _option(self, n: int) -> Option:
        choice = self.choices[n]
        return Option(Text.assemble((choice.label, "bold"), (f"  {choice.detail}", "dim")), id=str(n))

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        if self.choices:
            self._fill(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if self.options.highlighted is not None:
            self.options.action_select()

    def action_move(self, action: str) -> None:
        getattr(self.options, f"action_{action}")()

    def _show_problem(self, reason: str) -> None:
        self.options.clear_options()
        self.options.add_option(Option(Text(reason), disabled=True))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
            self.dismiss(self.choices[int(event.option.id)])
