"""Regenerate the SVG screenshots in this directory: `python screenshots/make_screenshots.py`.

Runs the real app headless (Textual's `App.run_test`) on the --demo checkpoint, or on
`--model PATH`, with a throwaway data directory: three panes streaming at once beside the
dashboard, then the history screen; a fork (f6) growing beside its parent; two panes calling a
tool of an MCP server beside two plain ones (tools.svg); then the same
three panes with `--server` on a `lfm-chat serve` of the same model, the dashboard fed by the
server's /metrics. Random weights make the replies gibberish, but the scheduler on screen is real.
`--only tools server` regenerates some shots. In a git worktree, run it with `PYTHONPATH=.`: else
the app imported is the one the venv's editable install points to.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from textual.pilot import Pilot

from app.app import LfmChatApp
from app.core.conversation import ChatSettings
from app.core.options import AppOptions
from app.ui.screens.chat import ChatScreen
from app.ui.screens.history import HistoryScreen
from app.ui.widgets.chat_pane import ChatPane
from bench.served import served
from engine import DEFAULT_MODEL, EngineConfig

HERE = Path(__file__).resolve().parent
SIZE = (150, 42)
PROMPTS = (
    "Explain continuous batching in two sentences.",
    "Write a Python function that reverses a linked list.",
    "Tell me a short story about a lighthouse keeper.",
)
FOLLOW_UPS = ("Now tell it from the ship's side.", "Make it a poem instead.")
TOOL_PROMPTS = ("Weather in Paris?", "Weather in Oslo?", PROMPTS[0], PROMPTS[2])
LIMIT = 900.0  # seconds for a step of a shot: a first start may build the kernels, on a busy machine
SHOTS = ("streaming", "fork", "tools", "server")  # streaming.svg comes with history.svg
WEATHER_SERVER = HERE.parent / "tests" / "app" / "tools" / "servers.py"  # an MCP server of the SDK's API


async def until(pilot: Pilot, predicate: Callable[[], object], limit: float = LIMIT) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the app did not get there in time")
        await pilot.pause(0.05)


def written(pane: ChatPane, chars: int) -> bool:
    """The pane's reply has `chars` characters, or ended shorter: random weights (or a server's own
    sampling) may stop a reply early, and a pane waited on to stream for ever hung the shot."""
    turn = pane.session.turn
    if turn is not None:
        return len(turn.raw) >= chars
    return pane.conversation.last_reply is not None


async def shoot(options: AppOptions, name: str = "streaming.svg", history: bool = True) -> None:
    app = LfmChatApp(options)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ChatScreen) and app.screen.is_mounted)
        screen = app.screen
        assert isinstance(screen, ChatScreen)
        for pane, prompt in zip(screen.panes, PROMPTS, strict=True):
            pane.prompt_input.text = prompt
            await pane.session.send(prompt)
        await until(
            pilot,
            lambda: all(written(p, 120) for p in screen.panes),
        )
        await pilot.pause(1.0)  # a few metrics polls, so the dashboard has figures
        for pane in screen.panes:
            pane.prompt_input.cursor_blink = False
        app.save_screenshot(name, str(HERE))
        if not history:
            await pilot.press("ctrl+q")
            return
        await until(pilot, lambda: not any(p.busy for p in screen.panes))
        await pilot.press("ctrl+g")
        await until(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.is_mounted)
        await pilot.pause(0.2)
        app.save_screenshot("history.svg", str(HERE))
        await pilot.press("escape", "ctrl+q")


async def shoot_fork(options: AppOptions) -> None:
    """One reply, forked with f6; then parent and fork each asked something else, side by side."""
    app = LfmChatApp(replace(options, panes=1))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ChatScreen) and app.screen.is_mounted)
        screen = app.screen
        assert isinstance(screen, ChatScreen)
        parent = screen.panes[0]
        await parent.session.send(PROMPTS[2])
        await until(pilot, lambda: parent.conversation.last_reply and not parent.busy)
        parent.prompt_input.focus()
        await pilot.press("f6")
        await until(pilot, lambda: len(screen.panes) == 2)
        for pane, follow_up in zip(screen.panes, FOLLOW_UPS, strict=True):
            await pane.session.send(follow_up)
        await until(
            pilot,
            lambda: all(written(p, 80) for p in screen.panes),
        )
        await pilot.pause(1.0)
        for pane in screen.panes:
            pane.prompt_input.cursor_blink = False
        app.save_screenshot("fork.svg", str(HERE))
        await pilot.press("ctrl+q")


async def shoot_tools(options: AppOptions) -> None:
    """Two panes calling a tool (the tests' weather MCP server, over stdio) beside two plain panes
    streaming: one pane's call ran and the model goes on, the other's waits for the user."""
    mcp_file = options.data_dir.parent / "mcp.json"
    server = {"command": sys.executable, "args": [str(WEATHER_SERVER), "weather"]}
    mcp_file.write_text(json.dumps({"mcpServers": {"weather": server}}))
    app = LfmChatApp(replace(options, panes=4, mcp_file=mcp_file))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ChatScreen) and app.screen.is_mounted)
        screen = app.screen
        assert isinstance(screen, ChatScreen)
        await until(pilot, lambda: screen.context.sessions.toolbox is not None)
        tool_panes, plain_panes = screen.panes[:2], screen.panes[2:]
        for pane in tool_panes:
            pane.session.tools.choice = "required"  # random weights call only when made to
        for pane in plain_panes:
            pane.conversation.settings.tool_servers = []
        for pane, prompt in zip(screen.panes, TOOL_PROMPTS, strict=True):
            await pane.session.send(prompt)
        await until(pilot, lambda: all(p.session.asking is not None for p in tool_panes))
        await tool_panes[0].session.submit_text("y")
        await until(
            pilot,
            lambda: tool_panes[0].session.tool_step == 2 and all(written(p, 80) for p in plain_panes),
        )
        await pilot.pause(1.0)
        for pane in screen.panes:
            pane.prompt_input.cursor_blink = False
        app.save_screenshot("tools.svg", str(HERE))
        await pilot.press("ctrl+q")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a local LFM2 checkpoint (default: the --demo checkpoint)")
    parser.add_argument(
        "--only", nargs="+", choices=SHOTS, default=SHOTS, help="regenerate these shots only (default: all)"
    )
    args = parser.parse_args()
    wanted = set(args.only)
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
        if "streaming" in wanted:  # and history.svg
            asyncio.run(shoot(options))
        if "fork" in wanted:
            asyncio.run(shoot_fork(replace(options, data_dir=Path(tmp) / "fork-data")))
        if "tools" in wanted:
            asyncio.run(shoot_tools(replace(options, data_dir=Path(tmp) / "tools-data")))
        if "server" in wanted:
            with lfm_chat_serve(args.model) as url:
                remote = AppOptions(
                    model=DEFAULT_MODEL,
                    server=url,
                    panes=len(PROMPTS),
                    chat=options.chat,
                    data_dir=Path(tmp) / "server-data",
                    cache_dir=Path(tmp) / "cache",
                )
                asyncio.run(shoot(remote, "server.svg", history=False))
    print(f"wrote the {', '.join(args.only)} screenshots in {HERE}")


def lfm_chat_serve(model: str | None) -> contextlib.AbstractContextManager[str]:
    """`lfm-chat serve` of the same model on a free local port, as a user would start it; its URL."""
    which = ["--model", model] if model else ["--demo"]
    command = [sys.executable, "-m", "cli", "serve", "--max-num-seqs", "8", *which]
    return served(lambda port: [*command, "--port", str(port)], "lfm-chat serve", LIMIT)


if __name__ == "__main__":
    main()
