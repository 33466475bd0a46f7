"""Launch paths: a bad --model or an offline Hub id is a clear screen, never a traceback; --demo works."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from huggingface_hub import constants
from textual import events
from textual.pilot import Pilot

from app.app import LfmChatApp
from app.backend.local import LocalBackend
from app.backend.startup import load_backend
from app.ui.screens import loading
from app.ui.screens.loading import LoadingScreen
from app.ui.widgets.chat_pane import ChatPane
from cli.chat import build_parser, open_store, options_from_args
from engine import EngineConfig
from model.checkpoint import quantized_cache
from model.native import kernels
from tests.app.pilot_helpers import (
    ENGINE,
    MakeOptions,
    chat_screen,
    error_screen,
    notices,
    submit,
    wait_replied,
    wait_until,
)
from tests.waiting import HANG_GUARD

WARNING = "Native CPU kernels unavailable"  # how the app's notice of the slower fallback begins


async def error_text(app: LfmChatApp, pilot: Pilot) -> str:
    screen = await error_screen(app, pilot)
    return " ".join(str(screen.query_one(f"#error-{part}").render()) for part in ("reason", "hint"))


async def test_a_missing_model_directory_shows_the_error_and_what_to_try(
    make_options: MakeOptions, tmp_path: Path
) -> None:
    app = LfmChatApp(make_options(model=str(tmp_path / "no-such-model")))
    async with app.run_test() as pilot:
        text = await error_text(app, pilot)
        assert "no checkpoint directory" in text and "no-such-model" in text
        assert "--demo" in text and "--model PATH" in text
        await pilot.press("q")
    assert app.return_code == 1


async def test_a_failed_demo_does_not_suggest_the_demo(make_options: MakeOptions, tmp_path: Path) -> None:
    """--demo was given: the hint says where the demo writes instead of "try --demo"."""
    (tmp_path / "not-a-dir").touch()
    options = make_options(demo=True, model="unused", cache_dir=tmp_path / "not-a-dir")
    app = LfmChatApp(options)
    async with app.run_test() as pilot:
        text = await error_text(app, pilot)
    assert "lfm-chat --demo" not in text and "not-a-dir" in text and "--data-dir" in text


async def test_a_data_dir_the_app_cannot_use_shows_the_store_error(
    make_options: MakeOptions, tmp_path: Path
) -> None:
    """Built without a store (as tests do), the app opens it itself and says what went wrong."""
    (tmp_path / "a-file").touch()
    app = LfmChatApp(make_options(data_dir=tmp_path / "a-file"))
    async with app.run_test() as pilot:
        text = await error_text(app, pilot)
    assert "a-file" in text and "--data-dir" in text and "Traceback" not in text


async def test_an_moe_checkpoint_shows_its_experts_per_token(
    make_options: MakeOptions, tiny_ckpt_factory: Callable[..., Path]
) -> None:
    """The title bar and the dashboard name the architecture, with the experts a token runs through."""
    app = LfmChatApp(make_options(model=str(tiny_ckpt_factory("moe"))))
    async with app.run_test() as pilot:
        screen = await chat_screen(app, pilot)
        expected = "LFM2-MoE · 2/8 experts per token"
        assert expected in str(screen.query_one("#title-bar").render())
        assert screen.dashboard.border_title == f"engine · {expected}"


async def test_the_options_and_store_the_cli_makes_run_the_app(tmp_path: Path) -> None:
    """The CLI hands over flags, not an EngineConfig (that imports torch), and the store it opened."""
    options = options_from_args(build_parser().parse_args(["--demo", "--data-dir", str(tmp_path / "data")]))
    options.cache_dir = tmp_path / "cache"
    store = open_store(options)
    app = LfmChatApp(options, store)
    async with app.run_test() as pilot:
        await chat_screen(app, pilot)
        assert app.store is store
        assert isinstance(app.backend, LocalBackend) and app.backend.engine.config.max_num_seqs == 8


def test_the_loading_screen_needs_no_torch() -> None:
    """Importing torch takes seconds: everything up to the first drawn loading screen must do
    without it (and without the model code), so the user sees lfm-chat at once."""
    code = """
import sys, tempfile
from app.app import LfmChatApp
from app.backend.local import LocalBackend
from cli.chat import build_parser, open_store, options_from_args
from app.ui.screens.error import ErrorScreen, what_to_try
from app.ui.screens.loading import LoadingScreen

for argv in (["--demo"], ["--model", "LiquidAI/LFM2-350M", "--max-num-seqs", "2"]):
    options = options_from_args(build_parser().parse_args([*argv, "--data-dir", tempfile.mkdtemp()]))
    LfmChatApp(options, open_store(options))
    LoadingScreen(options), ErrorScreen("reason", what_to_try(options))
heavy = {"torch", "transformers", "safetensors", "numpy", "tokenizers"}
loaded = [m for m in sys.modules if m.partition(".")[0] in heavy or m.startswith("model.")]
torch_free = {"model.checkpoint", "model.checkpoint.hub", "model.checkpoint.hub_progress",
              "model.checkpoint.progress", "model.text", "model.text.model_cards", "model.quant",
              "model.errors", "model.small_file"}
assert set(loaded) <= torch_free, sorted(loaded)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


async def test_an_offline_hub_id_shows_the_hub_error(
    make_options: MakeOptions, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    app = LfmChatApp(make_options(model="LiquidAI/LFM2-350M"))
    async with app.run_test() as pilot:
        text = await error_text(app, pilot)
        assert "Model not available" in text and "HF_HUB_OFFLINE" in text
        assert "Traceback" not in text


async def test_demo_writes_its_checkpoint_once_and_shows_the_random_weights_banner(
    make_options: MakeOptions,
) -> None:
    options = make_options(demo=True, model="unused")
    app = LfmChatApp(options)
    async with app.run_test() as pilot:
        assert isinstance(app.screen, LoadingScreen)  # the UI is up while the checkpoint is written
        screen = await chat_screen(app, pilot)
        banner = str(screen.query_one("#demo-banner").render())
        assert "random weights" in banner
        assert app.focused is screen.panes[0].prompt_input  # a new user can type at once
    written = sorted(p.name for p in options.cache_dir.iterdir())
    assert written == ["demo-checkpoint-v1"]


async def test_80x24_renders_usable_panes_and_tiny_terminals_get_a_notice(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=2))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await chat_screen(app, pilot)
        await pilot.pause()
        for pane in screen.query(ChatPane):
            assert pane.region.width >= 30 and pane.transcript.region.height >= 3
            assert pane.prompt_input.region.height >= 1 and pane.status.region.height >= 1
        assert not screen.has_class("-too-small")
        await submit(pilot, screen.panes[0], "Hello!")
        await wait_replied(pilot, screen.panes[0])

        await pilot.resize_terminal(30, 10)
        await wait_until(pilot, lambda: screen.has_class("-too-small"), "the notice")
        assert screen.query_one("#too-small").region.height > 0
        await pilot.resize_terminal(80, 24)
        await wait_until(pilot, lambda: not screen.has_class("-too-small"), "the panes to come back")
        # typing goes to the pane it went to before the terminal shrank
        await wait_until(pilot, lambda: app.focused is screen.panes[0].prompt_input, "the input's focus")
        await pilot.press("h", "i")
        assert screen.panes[0].prompt_input.text == "hi"


async def test_a_quantized_model_from_the_command_line_answers_and_says_so(tmp_path: Path) -> None:
    """`--quantize int4` reaches the engine; a quantized model answers slightly differently, so the
    title bar says which weights run."""
    argv = ["--demo", "--quantize", "int4", "--data-dir", str(tmp_path / "data")]
    options = options_from_args(build_parser().parse_args(argv))
    options.cache_dir = tmp_path / "cache"
    app = LfmChatApp(options, open_store(options))
    async with app.run_test() as pilot:
        screen = await chat_screen(app, pilot)
        config = app.backend.engine.config
        assert config.quantize == "int4"
        assert f"cpu {config.dtype} int4 ·" in str(screen.query_one("#title-bar").render())
        await submit(pilot, screen.panes[0], "Hello!")
        await wait_replied(pilot, screen.panes[0])


# None: this machine as it is; an AVX-only x86 CPU (no avx2): no native instruction set runs
@pytest.mark.parametrize("flags", [None, frozenset({"sse4_2", "avx", "f16c"})])
async def test_the_slower_fallback_kernels_are_announced(
    make_options: MakeOptions, monkeypatch: pytest.MonkeyPatch, flags: frozenset[str] | None
) -> None:
    """Where the native kernels cannot run (here: a CPU without their instructions), the user is
    told why it runs slower; where they run, nothing is said."""
    if flags is not None:
        monkeypatch.setattr(kernels, "cpu_flags", lambda: flags)
    kernels.clear_cache()
    try:
        native, reason = kernels.load(), kernels.unavailable_reason()
        # pinned for the app's lifetime: a thread left from an earlier test (an engine still loading)
        # could otherwise fill the shared cache with this machine's own answer meanwhile
        monkeypatch.setattr(kernels, "availability", lambda isa=None: (native, reason))
        app = LfmChatApp(make_options(engine=EngineConfig(**{**ENGINE, "dtype": "bfloat16"})))
        async with app.run_test() as pilot:
            await chat_screen(app, pilot)
            if reason is not None:  # a notification is a posted message: it may land after the screen
                await wait_until(pilot, lambda: WARNING in notices(app), "the notice")
            await pilot.pause()
            notes = [str(n.message) for n in app._notifications]
    finally:
        monkeypatch.undo()  # the real, cached `availability` back before its cache is cleared
        kernels.clear_cache()
    assert native is None or reason is None
    if flags is not None:
        assert native is None and reason is not None and reason.startswith("this CPU lacks")
    warned = [note for note in notes if WARNING in note]
    assert warned == ([] if reason is None else [warned[0]])
    assert reason is None or reason in warned[0]


def test_the_loading_screen_is_told_of_quantizing_then_of_the_cached_weights(
    make_options: MakeOptions, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stages load_backend reports are what the loading screen shows: a first launch with
    --quantize quantizes (with its fraction), the next one loads what the first cached."""
    monkeypatch.setenv(quantized_cache.CACHE_ENV, str(tmp_path / "quantized"))
    options = make_options(engine=EngineConfig(**{**ENGINE, "dtype": "bfloat16", "quantize": "int8"}))
    launches = []
    for _ in range(2):
        reported: list[tuple[str, float | None]] = []
        load_backend(options, lambda stage, fraction, into=reported: into.append((stage, fraction))).close()
        launches.append(reported)
    first, second = ([stage for stage, _ in reported] for reported in launches)
    quantizing = [fraction for stage, fraction in launches[0] if stage == "quantizing weights (int8)"]
    assert quantizing[0] == 0.0 and quantizing[-1] == 1.0 and quantizing == sorted(quantizing)
    assert "loading cached int8 weights" not in first
    assert "loading cached int8 weights" in second and "quantizing weights (int8)" not in second


async def test_what_is_typed_while_the_model_loads_lands_in_the_first_pane(
    make_options: MakeOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user types as soon as the app appears: keys, Enter, Backspace and a paste (its escape
    sequence stripped) wait for the panes, unsent, after the pane's restored draft."""
    release = threading.Event()

    def held_load(*args: object, **kwargs: object) -> object:
        release.wait(timeout=HANG_GUARD)  # only if the test failed before releasing it
        return load_backend(*args, **kwargs)

    monkeypatch.setattr(loading, "load_backend", held_load)
    app = LfmChatApp(make_options())
    async with app.run_test() as pilot:
        assert isinstance(app.screen, LoadingScreen)
        await pilot.press("h", "i", "x", "backspace", "enter", "space")
        app.screen.post_message(events.Paste("there \x1b[31mred\x1b[0m"))
        await pilot.pause()
        await pilot.press("ctrl+j")  # a binding elsewhere: not text, and nothing breaks
        release.set()
        screen = await chat_screen(app, pilot)
        box = screen.panes[0].prompt_input
        await wait_until(pilot, lambda: box.text == "hi\n there red", "the typed-ahead text")
        assert app.focused is box
        assert not screen.panes[0].busy
