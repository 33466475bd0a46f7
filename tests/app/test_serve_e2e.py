"""End to end over real HTTP: the TUI with --server -> `lfm-chat serve` -> the engine on the tiny
checkpoint. Nothing of ours is mocked; the server runs in this process on an ephemeral port."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.app import LfmChatApp
from app.backend import prometheus
from app.core.conversation import ChatSettings
from app.core.options import AppOptions
from app.core.sanitize import strip_control
from engine import DEFAULT_MODEL, Engine, EngineConfig, RequestOutput
from tests.app.pilot_helpers import ENGINE, chat_screen, streamed, submit, user, wait_replied, wait_until

serving = pytest.importorskip("tests.asgi_server").serving  # needs the serve extra
server_app = pytest.importorskip("server.app")
server_config = pytest.importorskip("server.config")

MakeOptions = Callable[..., AppOptions]
Reference = Callable[[list[dict[str, str]], ChatSettings], RequestOutput]
PROMPTS = ["Tell me a story about the sea.", "def fibonacci(n: int) -> int:"]


@pytest.fixture
def served(tiny_ckpt: Path) -> Iterator[str]:
    """`lfm-chat serve`'s app on the tiny checkpoint (the app tests' engine config) -> its base URL."""
    engine = Engine.from_pretrained(tiny_ckpt, EngineConfig(**ENGINE), progress=lambda stage, fraction: None)
    app = server_app.create_app(engine, server_config.ServerConfig(model_name="tiny"))
    with serving(app) as url:
        yield url


def server_figures(url: str) -> dict[str, float | None]:
    return prometheus.parse(httpx.get(f"{url}/metrics", timeout=5).text).totals()


async def test_two_panes_stream_from_lfm_chat_serve_with_the_local_backends_greedy_text(
    served: str, make_options: MakeOptions, reference: Reference
) -> None:
    settings = ChatSettings(temperature=0.0, max_tokens=160)
    outs = [reference(user(p), settings) for p in PROMPTS]
    wants = [strip_control(out.text) for out in outs]
    app = LfmChatApp(make_options(server=served, model=DEFAULT_MODEL, panes=2, chat=settings))
    async with app.run_test(size=(150, 40)) as pilot:
        screen = await chat_screen(app, pilot)
        panes = screen.panes
        for pane, prompt in zip(panes, PROMPTS, strict=True):
            await submit(pilot, pane, prompt)
        await wait_until(pilot, lambda: screen.dashboard.peak_running >= 2, "both panes streaming at once")
        await wait_replied(pilot, *panes)
        for pane, want, out in zip(panes, wants, outs, strict=True):
            assert pane.conversation.messages[-1].content == want
            assert pane.status.state == ("cut" if out.finish_reason == "length" else "idle")
            assert "tok/s" in pane.status.describe()
        assert "vLLM metrics" in str(screen.dashboard.meters.render())


async def test_escape_cancels_and_the_server_frees_the_blocks(
    served: str, make_options: MakeOptions, reference: Reference
) -> None:
    settings = ChatSettings(temperature=0.0, max_tokens=160)
    want = strip_control(reference(user(PROMPTS[0]), settings).text)
    assert len(want) > 40, "precondition: a reply long enough to stop midway"
    app = LfmChatApp(make_options(server=served, model=DEFAULT_MODEL, panes=1, chat=settings))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await chat_screen(app, pilot)
        pane = screen.panes[0]
        await submit(pilot, pane, PROMPTS[0])
        await wait_until(pilot, lambda: streamed(pane), "first tokens")
        pane.focus_input()
        await pilot.press("escape")
        await wait_replied(pilot, pane)
        reply = pane.conversation.messages[-1].content
        assert pane.status.state == "stopped" and want.startswith(reply) and len(reply) < len(want)
        await wait_until(
            pilot, lambda: not server_figures(served)["vllm:kv_cache_usage_perc"], "the blocks freed"
        )
        figures = server_figures(served)
        assert figures["vllm:num_requests_running"] == 0 and figures["vllm:kv_cache_usage_perc"] == 0
