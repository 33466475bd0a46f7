"""The real TUI against a server whose /metrics is hostile: the app lives, the dashboard shows only
figures that can be true, nothing the server sent reaches the terminal as a control sequence, and
the polling goes on (the next good answer is shown)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from textual.app import App

from app.app import LfmChatApp
from app.core.options import AppOptions
from app.ui.widgets.dashboard import Dashboard
from engine import DEFAULT_MODEL
from tests.app.fake_openai import VLLM_METRICS, FakeServer
from tests.app.pilot_helpers import chat_screen, wait_until

MakeOptions = Callable[..., AppOptions]
CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
ESCAPES = "\x1b]52;c;cHduZWQ=\x07\x1b]0;PWNED\x07\x1b[2J\x9b31m"


def good(running: int) -> str:
    return VLLM_METRICS % {"running": running, "generated": 40}


def changed(old: str, new: str) -> str:
    return good(0).replace(old, new, 1)


# name, /metrics body, what the dashboard says about it, what must not be on screen
MODES: list[tuple[str, str | bytes, str, str]] = [
    ("+Inf running", changed('fake"} 0\n', 'fake"} +Inf\n'), "batch  ? running", "inf"),
    ("NaN KV", changed("} 0.25", "} NaN"), "? used", "nan%"),
    ("750% KV", changed("} 0.25", "} 7.5"), "? used", "750%"),
    ("300-digit count", changed('fake"} 0\n', 'fake"} 1' + "0" * 300 + "\n"), "? running", "0" * 20),
    ("50 MB body", good(3) + "# padding\n" * 5_000_000, "larger than 1 MiB: ignored", "3 running"),
    ("garbage bytes", bytes(range(256)) * 64, "the server exports no metrics", "\ufffd"),
    (
        "escapes in names and labels",
        good(0).replace('model_name="fake"', f'model_name="{ESCAPES}"') + f"x{ESCAPES} 1\nbad{ESCAPES}\n",
        "2 bad lines skipped",  # the escape-laden name, and a line with no value
        "PWNED",
    ),
]


def screen_text(app: App) -> str:
    """What the terminal shows now, as characters."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(segment.text for segment in strip) for strip in strips)


@pytest.mark.parametrize("mode", [m[0] for m in MODES])
async def test_bad_metrics_show_as_unknown_and_polling_goes_on(make_options: MakeOptions, mode: str) -> None:
    _, body, said, unseen = next(m for m in MODES if m[0] == mode)
    with FakeServer() as server:
        server.metrics_body = body
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=1))
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await chat_screen(app, pilot)
            dashboard = screen.query_one(Dashboard)

            def meters() -> str:
                return str(dashboard.meters.render())

            await wait_until(pilot, lambda: said in meters(), f"{said!r} on the dashboard")
            shown = screen_text(app)
            assert "server ·" in shown  # the dashboard is on screen, not hidden
            assert unseen not in shown.lower() and unseen not in meters().lower()
            assert not CONTROLS.search(shown) and not CONTROLS.search(meters())
            server.metrics_body = good(5)
            await wait_until(pilot, lambda: "5 running" in meters(), "the next good answer")
            assert app.return_code is None
