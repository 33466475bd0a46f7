"""Pick a model: the local checkpoints, or the server's models, listed on a thread.

Listing may be slow (a large Hugging Face cache, a server across the world), so the dialog opens at
once with "listing…" and fills in when the list arrives; a listing that fails says why in the
dialog, and Esc still closes it.
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
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from app.backend.http_errors import ServerError
from app.backend.model_choices import ModelChoice
from app.ui.widgets.key_footer import KeyFooter

ListChoices = Callable[[], list[ModelChoice]]  # blocking, on a thread; ServerError/OSError: why not


class ModelPicker(ModalScreen[ModelChoice | None]):
    """Dismisses with the chosen model, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Close", id="model_picker_close"),
    ]

    def __init__(self, list_choices: ListChoices, current: str, what: str) -> None:
        """`current`: the label of the model in use, marked in the list; `what`: for whom it is picked."""
        super().__init__()
        self.list_choices = list_choices
        self.current = current
        self.what = what
        self.choices: list[ModelChoice] = []
        self.options = OptionList(Option("listing models…", disabled=True), id="model-list")

    def compose(self) -> ComposeResult:
        with Vertical(id="model-dialog") as dialog:
            dialog.border_title = "Model"
            yield Label(f"{self.what} · now: {self.current}", id="model-title", markup=False)
            yield self.options
        yield KeyFooter()

    def on_mount(self) -> None:
        self.options.focus()
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
        self.options.clear_options()
        self.options.add_options(
            Option(Text.assemble((c.label, "bold"), (f"  {c.detail}", "dim")), id=str(n))
            for n, c in enumerate(choices)
        )
        if not choices:
            self.options.add_option(Option("No models found.", disabled=True))
        current = next((n for n, c in enumerate(choices) if c.label == self.current), 0)
        self.options.highlighted = current if choices else None

    def _show_problem(self, reason: str) -> None:
        self.options.clear_options()
        self.options.add_option(Option(Text(reason), disabled=True))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
            self.dismiss(self.choices[int(event.option.id)])
