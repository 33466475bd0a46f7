"""The loading screen tells the truth at 80 columns: every stage whole, and no "--%" for a stage
whose length is unknown (the first launch's kernel build), which shows its elapsed time instead."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from textual.app import App
from textual.widgets import ProgressBar

from app.app import LfmChatApp
from app.core.options import AppOptions
from app.ui.screens import loading
from app.ui.screens.loading import LoadingScreen
from engine import EngineConfig
from model.native import kernels
from tests.app.pilot_helpers import ENGINE, MakeOptions, chat_screen, wait_until
from tests.waiting import HANG_GUARD

KERNEL_STAGE = "CPU kernels"


def screen_text(app: App) -> str:
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(segment.text for segment in strip) for strip in strips)


def held_at_kernel_stage(release: threading.Event, seen: list[str]) -> Callable:
    """The real load_backend, whose progress stops at the kernel stage until `release` is set."""
    real = loading.load_backend

    def load(options: AppOptions, progress: Callable[[str, float | None], None]):  # type: ignore[no-untyped-def]
        def report(stage: str, fraction: float | None) -> None:
            progress(stage, fraction)
            if KERNEL_STAGE in stage:
                seen.append(stage)
                release.wait(HANG_GUARD)

        return real(options, report)

    return load


@pytest.mark.skipif(not kernels.runnable_isas(), reason="no native kernels on this CPU: no kernel stage")
async def test_the_kernel_stage_fits_80_columns_and_counts_seconds_not_percent(
    make_options: MakeOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, seen = threading.Event(), []
    monkeypatch.setattr(loading, "load_backend", held_at_kernel_stage(release, seen))
    monkeypatch.setattr(kernels, "needs_build", lambda isa=None: True)  # as on a first launch
    app = LfmChatApp(make_options(engine=EngineConfig(**{**ENGINE, "dtype": "bfloat16"})))
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_until(pilot, lambda: bool(seen), "the kernel stage")
            await wait_until(pilot, lambda: " 1 s" in screen_text(app), "the elapsed seconds", limit=30)
            lines = [line.strip(" │") for line in screen_text(app).splitlines()]
            text = " ".join(" ".join(lines).split())  # the stage may wrap over lines
            assert f"{seen[0]}…" in text
            assert "--%" not in text
            assert isinstance(app.screen, LoadingScreen)
            assert app.screen.query_one(ProgressBar).total is None  # indeterminate, and says so
            release.set()
            await chat_screen(app, pilot)
    finally:
        release.set()
