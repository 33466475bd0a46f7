"""Shown at once on launch while the backend starts on a thread: torch is imported and the model
downloads and loads, or the server is asked which models it serves."""

from __future__ import annotations

import importlib
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual import events
from textual.app import ComposeResult
from textual.containers import Center, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Label, ProgressBar

from app.backend.startup import STARTUP_ERRORS, load_backend
from app.core.options import AppOptions
from app.ui.type_ahead import TypeAhead

if TYPE_CHECKING:
    from app.backend.base import Backend


class LoadingScreen(Screen[None]):
    """Runs `load_backend` on a thread and reports back with messages (never blocks the UI)."""

    @dataclass
    class Progress(Message):
        """A loading stage; only the newest matters, so a newer one replaces it in the queue."""

        stage: str
        fraction: float | None

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, LoadingScreen.Progress)

    @dataclass
    class Loaded(Message):
        backend: Backend

    @dataclass
    class Failed(Message):
        """Loading failed; `reason` is one user-facing paragraph, never a traceback."""

        reason: str

    def __init__(self, options: AppOptions) -> None:
        super().__init__()
        self.options = options
        self._stage = "starting"
        self._stage_began = time.monotonic()
        self._fraction: float | None = None
        self.typed_ahead = TypeAhead()  # what the user types meanwhile, for the chat screen

    def compose(self) -> ComposeResult:
        with Vertical(id="loading"):
            yield Label("lfm-chat", id="loading-title")
            what = "server" if self.options.server else "model"
            yield Label(f"{what}: {self.options.model_label}", id="loading-model", markup=False)
            yield Label("starting…", id="loading-stage", markup=False)
            with Center():
                yield ProgressBar(total=None, show_eta=False, id="loading-bar")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        # A daemon thread, not a Textual thread worker: the app waits for its workers on exit, so
        # ctrl+q during a long download would hang until the download finished.
        threading.Thread(target=self._load, name="lfm-loader", daemon=True).start()
        self.set_interval(1.0, self._show_stage)

    def on_key(self, event: events.Key) -> None:
        if self.typed_ahead.key(event):
            event.stop()

    def on_paste(self, event: events.Paste) -> None:
        if (refusal := self.typed_ahead.paste(event)) is not None:
            self.notify(refusal, severity="warning", timeout=10, markup=False)
        event.stop()

    def _load(self) -> None:
        def progress(stage: str, fraction: float | None) -> None:
            self.post_message(self.Progress(stage, fraction))

        try:
            backend = load_backend(self.options, progress)
            # The next screen: its import (~0.5 s, torch-based widgets) here, so the UI does not freeze
            importlib.import_module("app.ui.screens.chat")
        except STARTUP_ERRORS as exc:
            self.post_message(self.Failed(str(exc)))
        except Exception as exc:  # anything else is still shown as one line, not a traceback
            self.post_message(self.Failed(f"The engine could not start: {type(exc).__name__}: {exc}"))
        else:
            self.post_message(self.Loaded(backend))

    def on_loading_screen_progress(self, message: Progress) -> None:
        message.stop()
        if message.stage != self._stage:
            self._stage, self._stage_began = message.stage, time.monotonic()
        self._fraction = message.fraction
        bar = self.query_one(ProgressBar)
        bar.set_class(message.fraction is None, "-unknown")  # no "--%": the stage shows its seconds instead
        if message.fraction is None:
            bar.update(total=None)
        else:
            bar.update(total=1.0, progress=message.fraction)
        self._show_stage()

    def _show_stage(self) -> None:
        """The stage, wrapped to the box; a stage of unknown length says how long it has run."""
        elapsed = int(time.monotonic() - self._stage_began)
        clock = f" {elapsed} s" if self._fraction is None and elapsed >= 1 else ""
        self.query_one("#loading-stage", Label).update(f"{self._stage}…{clock}")
