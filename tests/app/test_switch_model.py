"""Switching model in the app: locally the engine reloads and every conversation stays; a load that
fails keeps the old model; on a server each pane asks for the model it picked."""

from __future__ import annotations

import gc
import time
import weakref
from pathlib import Path

import pytest
from textual import events

from app.app import LfmChatApp
from app.backend.local import LocalBackend
from app.backend.model_choices import RECENT_MODELS_KEY, with_recent
from app.core.conversation import ChatSettings
from app.core.sanitize import strip_control
from app.store.database import Store
from app.ui.screens.chat import ChatScreen
from app.ui.screens.model_picker import ModelPicker
from engine import DEFAULT_MODEL, Engine, EngineConfig, RequestOutput
from tests.app.fake_openai import FakeServer
from tests.app.pilot_helpers import (
    ENGINE,
    MakeOptions,
    chat_screen,
    streamed,
    submit,
    user,
    wait_replied,
    wait_until,
)
from tests.conftest import TinyCheckpointFactory

SETTINGS = ChatSettings(temperature=0.0, max_tokens=400)
PROMPTS = ["Hi", "Tell me a story about the sea.", "def fibonacci(n: int) -> int:"]


def press(app: LfmChatApp, key: str) -> None:
    """A key as the terminal driver delivers it (pilot.press would wait for every stream to end)."""
    app.post_message(events.Key(key, None))


async def pick(app: LfmChatApp, pilot, label: str) -> None:  # type: ignore[no-untyped-def]
    """Open the picker with its key and choose `label` with Enter, once it is listed."""
    press(app, "f4")
    await wait_until(pilot, lambda: isinstance(app.screen, ModelPicker) and app.screen.choices, "the list")
    picker = app.screen
    assert isinstance(picker, ModelPicker)
    picker.options.highlighted = [c.label for c in picker.choices].index(label)
    press(app, "enter")


def remembered(options_data_dir: Path, *folders: Path) -> Store:
    """A store that remembers `folders` as --model paths used before (as the picker lists them)."""
    store = Store(options_data_dir / "conversations.sqlite3")
    for folder in folders:
        store.set_state(RECENT_MODELS_KEY, with_recent(store.get_state(RECENT_MODELS_KEY), str(folder)) or "")
    return store


def paced(engine: Engine, seconds: float = 0.05) -> None:
    """The engine as a slow machine runs it: each step takes `seconds` longer, so a reply is surely
    still streaming when the test switches (the tiny model otherwise ends one in a second)."""
    step = engine.step

    def slow_step() -> list[RequestOutput]:
        time.sleep(seconds)
        return step()

    engine.step = slow_step  # type: ignore[method-assign]


@pytest.fixture(scope="module")
def second_ckpt(tiny_ckpt_factory: TinyCheckpointFactory) -> Path:
    return tiny_ckpt_factory("default", seed=1)


def reply_of(engine: Engine, messages: list[dict[str, str]]) -> str:
    """What `engine` answers to `messages`, tokenized as a pane with no cached ids does."""
    ids = engine.tokenizer.encode(engine.tokenizer.render_chat(messages))
    return strip_control(engine.generate([ids], SETTINGS.sampling_params())[0].text)


async def test_switching_keeps_every_conversation_and_the_next_reply_comes_from_the_new_model(
    make_options: MakeOptions, reference_engine: Engine, second_ckpt: Path
) -> None:
    second_engine = Engine.from_pretrained(second_ckpt, EngineConfig(**ENGINE), progress=lambda s, f: None)
    lengths = {
        p: len(
            reference_engine.generate(
                [reference_engine.tokenizer.encode_chat(user(p))], SETTINGS.sampling_params()
            )[0].token_ids
        )
        for p in PROMPTS
    }
    long_prompt = max(PROMPTS, key=lengths.__getitem__)
    assert lengths[long_prompt] >= 150, "precondition: a reply long enough to be streaming at the switch"
    options = make_options(panes=2, chat=SETTINGS)
    app = LfmChatApp(options, remembered(options.data_dir, second_ckpt))
    async with app.run_test(size=(140, 40)) as pilot:
        screen = await chat_screen(app, pilot)
        first, second = screen.panes
        await submit(pilot, first, "Hi")
        await wait_replied(pilot, first)
        before = [(m.role, m.content) for m in first.conversation.messages]
        old = app.backend
        assert isinstance(old, LocalBackend)
        old_engine = weakref.ref(old.engine)
        paced(old.engine)

        press(app, "f4")
        await wait_until(
            pilot, lambda: isinstance(app.screen, ModelPicker) and app.screen.choices, "the list"
        )
        await second.session.send(long_prompt)  # streaming while the user picks
        await wait_until(pilot, lambda: streamed(second), "first text")
        picker = app.screen
        assert isinstance(picker, ModelPicker)
        picker.options.highlighted = [c.label for c in picker.choices].index(second_ckpt.name)
        press(app, "enter")
        await wait_until(pilot, lambda: any("Now running" in str(n.message) for n in app._notifications))
        assert app.backend is not old and isinstance(app.screen, ChatScreen)

        assert [(m.role, m.content) for m in first.conversation.messages] == before
        stopped = second.conversation.messages[-1]
        assert second.status.state == "stopped" and stopped.role == "assistant"
        full = reply_of(reference_engine, user(long_prompt))
        assert stopped.content and full.startswith(stopped.content) and len(stopped.content) < len(full)
        assert second_ckpt.name in screen.title_text
        assert not old.worker._thread.is_alive()
        del old
        gc.collect()
        assert old_engine() is None, "the old engine's memory was not released"

        await submit(pilot, first, "And then?")
        await wait_replied(pilot, first, turns=2)
        asked = first.conversation.chat_messages()[:-1]
        assert first.conversation.messages[-1].content == reply_of(second_engine, asked)
        assert reply_of(second_engine, asked) != reply_of(reference_engine, asked)


async def test_new_panes_after_a_switch_sample_as_the_new_models_card(
    make_options: MakeOptions, tiny_ckpt: Path, tmp_path: Path
) -> None:
    """The card is read from the checkpoint's name: a copy named as an LFM2.5 repo asks for LFM2.5's."""
    lfm25 = tmp_path / "LFM2.5-tiny"
    lfm25.mkdir()
    for file in tiny_ckpt.iterdir():
        (lfm25 / file.name).symlink_to(file)
    options = make_options(panes=1, chat=ChatSettings(system_prompt="Be brief.", max_tokens=99))
    options.chat = options.card_chat(options.chat)
    app = LfmChatApp(options, remembered(options.data_dir, lfm25))
    async with app.run_test(size=(140, 40)) as pilot:
        screen = await chat_screen(app, pilot)
        assert screen.panes[0].conversation.settings.preset == "LFM2 card defaults"
        await pick(app, pilot, lfm25.name)
        await wait_until(pilot, lambda: any("Now running" in str(n.message) for n in app._notifications))
        await screen.action_new_pane()
        settings = screen.panes[-1].conversation.settings
        assert settings.preset == "LFM2.5 card defaults"
        assert (settings.temperature, settings.top_k, settings.top_p) == (0.1, 50, 0.1)
        assert (settings.system_prompt, settings.max_tokens) == ("Be brief.", 99)
        assert screen.panes[0].conversation.settings.preset == "LFM2 card defaults"  # its own, kept


async def test_a_checkpoint_that_fails_to_load_keeps_the_old_model_running(
    make_options: MakeOptions, tmp_path: Path
) -> None:
    broken = tmp_path / "broken-checkpoint"
    broken.mkdir()
    (broken / "config.json").write_text("{not json", encoding="utf-8")
    options = make_options(panes=1, chat=ChatSettings(temperature=0.0, max_tokens=24))
    app = LfmChatApp(options, remembered(options.data_dir, broken))
    async with app.run_test(size=(140, 40)) as pilot:
        screen = await chat_screen(app, pilot)
        pane = screen.panes[0]
        old = app.backend
        await pick(app, pilot, broken.name)
        await wait_until(pilot, lambda: any("Could not switch" in str(n.message) for n in app._notifications))
        await wait_until(pilot, lambda: app.screen is screen, "back to the chat")

        assert app.backend is old
        notice = next(str(n.message) for n in app._notifications if "Could not switch" in str(n.message))
        assert "Traceback" not in notice and old is not None and old.model_name in notice
        await submit(pilot, pane, "Hi")
        await wait_replied(pilot, pane)
        assert pane.conversation.messages[-1].content


async def test_on_a_server_each_pane_asks_for_its_own_model(make_options: MakeOptions) -> None:
    with FakeServer(mode="two_models") as server:
        options = make_options(server=server.url, model=DEFAULT_MODEL, panes=2)
        app = LfmChatApp(options)
        async with app.run_test(size=(140, 40)) as pilot:
            screen = await chat_screen(app, pilot)
            first, second = screen.panes
            second.focus_input()
            await wait_until(pilot, lambda: app.focused is second.prompt_input, "focus")
            await pick(app, pilot, "fake-large")
            await wait_until(pilot, lambda: "fake-large" in second.status.describe(), "the pane's model")

            await submit(pilot, first, "Hi")
            await submit(pilot, second, "Hello")
            await wait_replied(pilot, first, second)

            asked = {body["messages"][-1]["content"]: body["model"] for body in server.bodies}
            assert asked == {"Hi": "fake", "Hello": "fake-large"}
            assert "fake-large" not in first.status.describe()
            saved = app.store.load(second.conversation.id) if app.store and second.conversation.id else None
            assert saved is not None and saved.settings.model == "fake-large"

            await second.run_action("export")
            await wait_until(pilot, lambda: list(options.data_dir.glob("exports/*.md")), "the export")
            (exported,) = options.data_dir.glob("exports/*.md")
            assert "- Model: fake-large" in exported.read_text(encoding="utf-8")


async def test_a_server_that_cannot_list_its_models_is_said_in_the_picker(make_options: MakeOptions) -> None:
    with FakeServer() as server:
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=1))
        async with app.run_test(size=(140, 40)) as pilot:
            screen = await chat_screen(app, pilot)
            titles = [c.title for c in app.get_system_commands(screen)]
            assert any(t.startswith("Switch model") for t in titles)  # in the palette too
            server.httpd.shutdown()
            server.httpd.server_close()
            press(app, "f4")
            await wait_until(pilot, lambda: isinstance(app.screen, ModelPicker), "the picker")
            picker = app.screen
            assert isinstance(picker, ModelPicker)

            def shown() -> str:
                return " ".join(str(o.prompt) for o in picker.options.options)

            await wait_until(pilot, lambda: "Cannot reach the server" in shown(), "the reason")
            press(app, "escape")
            await wait_until(pilot, lambda: app.screen is screen, "back to the chat")


async def test_switching_to_the_demo_shows_its_banner_and_title(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=1))
    async with app.run_test(size=(140, 40)) as pilot:
        screen = await chat_screen(app, pilot)
        banner = screen.query_one("#demo-banner")
        assert not banner.display or screen.has_class("-no-banner")
        await pick(app, pilot, "demo (random weights)")
        await wait_until(pilot, lambda: any("Now running" in str(n.message) for n in app._notifications))
        assert "demo" in screen.title_text and not screen.has_class("-no-banner")


async def test_a_reply_stopped_while_its_frame_draws_stays_stopped(make_options: MakeOptions) -> None:
    """A switch (or a close) can settle a pane while a frame of its reply is still being drawn:
    that frame must not set the status back to decoding once it resumes."""
    options = make_options(panes=1, chat=SETTINGS)
    app = LfmChatApp(options)
    async with app.run_test(size=(100, 30)) as pilot:
        [pane] = (await chat_screen(app, pilot)).panes
        paced(app.backend.engine)
        await submit(pilot, pane, PROMPTS[1])
        await wait_until(pilot, lambda: streamed(pane), "first text")
        reply = pane.session.turn.reply
        draw = reply.update

        async def draw_then_switch(text: str) -> None:
            await draw(text)
            if pane.session.turn is not None:
                await pane.session.stop_for_switch()

        reply.update = draw_then_switch  # type: ignore[method-assign]
        await wait_until(pilot, lambda: pane.session.turn is None, "the stop")
        await pilot.pause(0.3)
        assert pane.status.state == "stopped"
