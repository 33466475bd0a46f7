"""Regenerate the SVG screenshots in this directory: `python screenshots/make_screenshots.py`.

Runs the real app headless (Textual's `App.run_test`) on the --demo checkpoint, or on
`--model PATH`, with a throwaway data directory: three panes streaming at once beside the
dashboard, then the history screen. Random weights make the replies gibberish, but the
scheduler on screen is real.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from textual.pilot import Pilot

from app.app import LfmChatApp
from app.conversation import ChatSettings
from app.options import AppOptions
from app.screens.chat import ChatScreen
from app.screens.history import HistoryScreen
from engine import EngineConfig

HERE = Path(__file__).resolve().parent
SIZE = (150, 42)
PROMPTS = (
    "Explain continuous batching in two sentences.",
    "Write a Python function that reverses a linked list.",
    "Tell me a short story about a lighthouse keeper.",
)


async def until(pilot: Pilot, predicate: Callable[[], object], limit: float = 300.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the app did not get there in time")
        await pilot.pause(0.05)


async def shoot(options: AppOptions) -> None:
    app = LfmChatApp(options)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ChatScreen) and app.screen.is_mounted)
        screen = app.screen
        assert isinstance(screen, ChatScreen)
        for pane, prompt in zip(screen.panes, PROMPTS, strict=True):
            pane.prompt_input.text = prompt
            await pane.send(prompt)
        await until(pilot, lambda: all(p.turn is not None and len(p.turn.ids) >= 40 for p in screen.panes))
        for pane in screen.panes:
            pane.prompt_input.cursor_blink = False
        app.save_screenshot("streaming.svg", str(HERE))
        await until(pilot, lambda: not any(p.busy for p in screen.panes))
        await pilot.press("ctrl+g")
        await until(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.is_mounted)
        await pilot.pause(0.2)
        app.save_screenshot("history.svg", str(HERE))
        await pilot.press("escape", "ctrl+q")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a local LFM2 checkpoint (default: the --demo checkpoint)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        options = AppOptions(
            model=args.model or "",
            demo=args.model is None,
            panes=len(PROMPTS),
            engine=EngineConfig(dtype="float32", kv_cache_memory_mb=64),
            chat=ChatSettings(max_tokens=400),
            data_dir=Path(tmp) / "data",
            cache_dir=Path(tmp) / "cache",
        )
        asyncio.run(shoot(options))
    print(f"wrote {HERE / 'streaming.svg'} and {HERE / 'history.svg'}")


if __name__ == "__main__":
    main()
