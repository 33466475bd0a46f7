"""Key-to-screen latency of the real app while other panes stream: what a typist feels under load.

    python -m bench.key_latency                        8 panes stream on --demo, 60 keys at 30 ms into a 9th
    python -m bench.key_latency --streams 4 --keys 100 --interval 0.05
    python -m bench.key_latency --server               8 panes stream Markdown from a server, 50 tok/s each
    python -m bench.key_latency --server --compare     before/after the drawing bounds, alternated, in one run
    python -m bench.key_latency --server --fixed-beat  streams draw at 15 fps whatever a frame costs
    python -m bench.key_latency --server --compare 3 --before apart  held panes in frames of their own or not
    python -m bench.key_latency --server --compare 3 --before widgets  Markdown as widgets or as lines
    python -m bench.key_latency --server --compare 3 --before gc  full GCs on Python's schedule or in pauses
    python -m bench.key_latency --server --compare 3 --before whole  while typing, 8 panes a frame or 2
    python -m bench.key_latency --server --compare 3 --before footer  the footer composed at each change
    python -m bench.key_latency --server --keys 20 --interval 0.5 --compare 3 --before budget  after pauses

The app runs headless (Textual's test driver) on the --demo engine, or against bench/paced_server.py
(`--server`, in a process of its own). Keys come from a separate thread, as a terminal driver's
reader thread posts them, so a busy UI thread delays their handling but not their sending. A key
counts as on screen at the first frame the app composes (App._display, which the headless driver
then discards) after the input holds it. The TUI's own CPU is the UI thread's (time.thread_time):
the --demo engine's threads are left out. `--unbounded` draws every answer as one Markdown widget,
as the app did before its drawing bounds (app/ui/widgets/answer_segments.py); `--compare` alternates
both. `--fixed-beat` draws the streams on a fixed 15 fps beat, as before the frames were paced by
their cost (app/ui/frame_pacer.py). `--apart` lets each pane held by the typing draw in a frame of
its own, as before a frame pulled in every waiting pane; `--compare N --before apart` alternates it.
`--zoom` types into a pane zoomed full screen (the streaming panes hidden); `--before hidden` draws
the hidden panes' replies as before they waited to be shown. `--before widgets` draws answers as
trees of Textual's Markdown widgets, as before they were drawn as lines (app/ui/widgets/markdown_lines.py).
`--before gc` lets Python collect its oldest generation when its thresholds say, as before the chat
screen ran those collections while no key came (app/ui/quiet_collections.py). `--before whole` draws
every waiting pane in one frame while keys arrive, as before a frame took at most two then.
`--before footer` composes the key footer again at every change of the bindings (a focus move makes
several), as before it skipped those that leave its keys as they were (app/ui/widgets/key_footer.py).
`--before budget` draws every waiting pane in one frame when no key was pressed just before, as
before frames had a budget (app/ui/frame_pacer.py): what a key pressed after a pause meets.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from textual import events

from app.app import LfmChatApp
from app.core.conversation import ChatSettings
from app.core.options import MAX_PANES, AppOptions
from app.ui.frame_pacer import DRAWING_SHARE, FRAME_BUDGET_SECONDS, FramePacer
from app.ui.quiet_collections import QuietCollections
from app.ui.screens.chat import ChatScreen
from app.ui.widgets.answer_segments import LIMITS, DrawingLimits
from app.ui.widgets.chat_pane import ChatPane
from app.ui.widgets.key_footer import KeyFooter
from app.ui.widgets.reply import AnswerMarkdown, Reply
from bench import stats
from bench.paced_server import MODEL, Apart, apart

TYPED = "the quick brown fox jumps over the lazy dog "
DEMO_ENGINE = {"dtype": "float32", "kv_cache_memory_mb": 64}  # what `lfm-chat --demo` runs (cli/flags.py)
WAIT_LIMIT_S = 300.0  # only a hung app gets there
UNBOUNDED = DrawingLimits(*(10**12,) * 7)  # one Markdown widget per answer, never plain text


@dataclass(frozen=True, slots=True)
class KeyLatency:
    streams: int
    keys: int
    interval_s: float
    latencies_s: list[float]  # per key, press to first frame showing it
    streamed_tokens: int | None  # tokens the streaming panes received meanwhile; None: not known
    ui_cpu_s: float  # the UI thread's CPU time meanwhile
    process_cpu_s: float  # the whole process's (with --demo, the engine's threads too)
    wall_s: float

    def report(self) -> str:
        def ms(q: float) -> str:
            return f"{stats.percentile(self.latencies_s, q) * 1000:.0f} ms"

        if self.streamed_tokens:
            tokens = f"{self.streamed_tokens} tokens received meanwhile"
            per_token = f", {self.ui_cpu_s / self.streamed_tokens * 1000:.2f} ms CPU per streamed token"
        else:
            tokens, per_token = "tokens received not counted", ""
        return (
            f"key-to-screen latency, {self.keys} keys at {self.interval_s * 1000:.0f} ms while "
            f"{self.streams} panes stream ({tokens}): "
            f"p50 {ms(50)}, p95 {ms(95)}, p99 {ms(99)}, max {max(self.latencies_s) * 1000:.0f} ms; "
            f"TUI {self.ui_cpu_s / self.wall_s:.0%} of a core{per_token} "
            f"(the whole process: {self.process_cpu_s / self.wall_s:.0%})"
        )


class FrameClock:
    """Records when each frame was composed and how many characters the input held then."""

    def __init__(self, app: LfmChatApp, shown: Callable[[], int]) -> None:
        self.frames: list[tuple[float, int]] = []
        display = app._display

        def timed(screen: object, renderable: object) -> None:
            display(screen, renderable)  # type: ignore[arg-type]
            if renderable is not None:
                self.frames.append((time.perf_counter(), shown()))

        app._display = timed  # type: ignore[method-assign]

    def first_showing(self, count: int, after: float) -> float | None:
        return next((t for t, held in self.frames if t >= after and held >= count), None)


def type_from_thread(app: LfmChatApp, text: str, interval: float) -> list[float]:
    """Post one key per `interval` from this thread; returns when each was sent."""
    loop = asyncio.get_running_loop()
    sent: list[float] = []

    def typist() -> None:
        for char in text:
            sent.append(time.perf_counter())
            loop.call_soon_threadsafe(app.post_message, events.Key(char, char))
            time.sleep(interval)

    thread = threading.Thread(target=typist, name="typist", daemon=True)
    thread.start()
    return sent


async def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench.key_latency: gave up waiting for {what}")
        await asyncio.sleep(0.05)


def _has_answered(pane: ChatPane) -> bool:
    """Text shown, or the reply already over (a --demo reply can end at a random end of text)."""
    turn = pane.session.turn
    if turn is not None:
        return bool(turn.text)
    return any(message.role == "assistant" for message in pane.conversation.messages)


def _received(panes: list[ChatPane]) -> int:
    return sum(len(p.session.turn.ids) for p in panes if p.session.turn is not None)


async def measure(
    streams: int,
    keys: int,
    interval: float,
    max_tokens: int,
    data: Path,
    server: Apart | None,
    zoom: bool = False,
) -> KeyLatency:
    chat = ChatSettings(temperature=1.0, max_tokens=max_tokens)
    if server is None:
        options = AppOptions(demo=True, panes=streams + 1, engine=DEMO_ENGINE, chat=chat, data_dir=data)
    else:
        options = AppOptions(server=server.url, model=MODEL, panes=streams + 1, chat=chat, data_dir=data)
    app = LfmChatApp(options)

    def received(panes: list[ChatPane]) -> int:
        return _received(panes) if server is None else server.sent

    async with app.run_test(size=(200, 60)):
        await _until(lambda: isinstance(app.screen, ChatScreen) and app.screen.is_mounted, "the chat screen")
        screen = app.screen
        assert isinstance(screen, ChatScreen)
        *streaming, typing = screen.panes
        for pane in streaming:
            await pane.session.send("Tell me a long story.")
        await _until(lambda: all(_has_answered(p) for p in streaming), "every stream")
        typing.focus_input()
        await _until(lambda: app.focused is typing.prompt_input, "focus on the typing pane")
        if zoom:
            screen.maximize(typing, container=False)
        clock = FrameClock(app, lambda: len(typing.prompt_input.text))
        before, cpu, wall = received(streaming), time.thread_time(), time.perf_counter()
        process = time.process_time()
        text = (TYPED * (keys // len(TYPED) + 1))[:keys]
        sent = type_from_thread(app, text, interval)
        await _until(
            lambda: len(sent) == keys and clock.first_showing(keys, sent[-1]) is not None, "the keys"
        )
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
        process = time.process_time() - process
        streamed: int | None = received(streaming) - before
        if server is None and any(p.session.turn is None for p in streaming):
            # a finished turn's tokens leave the count: what the panes received is not known
            print("bench.key_latency: a stream ended (end of text or --max-tokens) before the typing did")
            streamed = None
        latencies = [clock.first_showing(i + 1, at) - at for i, at in enumerate(sent)]  # type: ignore[operator]
        for pane in streaming:
            await pane.session.settle()
    return KeyLatency(streams, keys, interval, latencies, streamed, cpu, process, wall)


def run(args: argparse.Namespace, before: bool) -> KeyLatency:
    """One measure; `before`: as the app drew before the change `--before` names."""
    unbounded = args.unbounded or (before and args.before == "unbounded")
    AnswerMarkdown.limits = UNBOUNDED if unbounded else LIMITS
    AnswerMarkdown.widget_tree = unbounded or (before and args.before == "widgets")
    FramePacer.drawing_share = None if args.fixed_beat else DRAWING_SHARE
    FramePacer.together = not (args.apart or (before and args.before == "apart"))
    Reply.draws_hidden = before and args.before == "hidden"
    QuietCollections.enabled = not (before and args.before == "gc")
    FramePacer.spread = not (before and args.before == "whole")
    FramePacer.frame_budget = None if before and args.before == "budget" else FRAME_BUDGET_SECONDS
    KeyFooter.skips_unchanged = not (before and args.before == "footer")
    with tempfile.TemporaryDirectory(prefix="lfm-key-latency-") as data:
        typing = (args.streams, args.keys, args.interval, args.max_tokens, Path(data))
        if not args.server:
            return asyncio.run(measure(*typing, None, args.zoom))
        with apart(args.rate) as server:
            return asyncio.run(measure(*typing, server, args.zoom))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.key_latency", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--streams", type=int, default=8, help=f"panes streaming (0-{MAX_PANES - 1}; 0: the idle baseline)"
    )
    parser.add_argument("--keys", type=int, default=60)
    parser.add_argument("--interval", type=float, default=0.03, help="seconds between keys")
    parser.add_argument("--max-tokens", type=int, default=4000, help="each stream's reply length")
    parser.add_argument("--server", action="store_true", help="stream from a local paced server, not --demo")
    parser.add_argument("--rate", type=float, default=50.0, help="--server: tokens a second per stream")
    parser.add_argument("--unbounded", action="store_true", help="draw as before the drawing bounds")
    parser.add_argument(
        "--fixed-beat", action="store_true", help="streams draw at 15 fps whatever a frame costs"
    )
    parser.add_argument(
        "--apart", action="store_true", help="panes held by typing draw in frames of their own"
    )
    parser.add_argument("--zoom", action="store_true", help="type into a pane zoomed full screen")
    parser.add_argument(
        "--compare", type=int, default=0, metavar="N", help="N before/after pairs, alternated"
    )
    parser.add_argument(
        "--before",
        choices=("unbounded", "apart", "hidden", "widgets", "gc", "whole", "footer", "budget"),
        default="unbounded",
        help="--compare: what 'before' is",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.streams < MAX_PANES or args.keys < 1 or args.interval < 0 or args.rate <= 0:
        parser.error(f"--streams must be 0-{MAX_PANES - 1}, --keys >= 1, --interval >= 0, --rate > 0")
    for _ in range(args.compare):
        for before in (True, False):
            print(("before: " if before else "after:  ") + run(args, before).report(), flush=True)
    if not args.compare:
        print(run(args, False).report())


if __name__ == "__main__":
    main()
