"""A crash (SIGKILL mid-reply) loses at most the last second of the reply; a quit loses nothing.

The app runs headless in a child process with the real engine; the test reads SQLite from
outside while the reply streams, kills the child, and reads again.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from app.app import LfmChatApp
from app.core.conversation import ChatSettings
from app.store.database import Store
from tests.app.pilot_helpers import MakeOptions, chat_screen, submit, wait_until

PROMPT = "Tell me a story about the sea."
CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from app.app import LfmChatApp
    from app.core.conversation import ChatSettings
    from app.core.options import AppOptions
    from engine import EngineConfig
    from dataclasses import replace
    from tests.app.pilot_helpers import ENGINE, chat_screen, submit

    # the reply must still be streaming when the test kills the app: a tiny model's EOS can end
    # it within the first second, before any partial save
    _params = ChatSettings.sampling_params
    ChatSettings.sampling_params = lambda self, n=None: replace(_params(self, n), ignore_eos=True)

    async def main() -> None:
        options = AppOptions(
            model=sys.argv[1], engine=EngineConfig(**ENGINE), panes=1, data_dir=Path(sys.argv[2]),
            cache_dir=Path(sys.argv[2]) / "cache", chat=ChatSettings(temperature=0.0, max_tokens=100000),
        )
        app = LfmChatApp(options)
        async with app.run_test(size=(100, 30)) as pilot:
            pane = (await chat_screen(app, pilot)).panes[0]
            await submit(pilot, pane, sys.argv[3])
            while True:
                print("busy" if pane.busy else "idle", flush=True)
                await pilot.pause(0.1)

    asyncio.run(main())
    """
)


def read_messages(db_path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as db:
        return db.execute("SELECT role, content FROM messages ORDER BY conversation_id, position").fetchall()


def test_sigkill_mid_reply_keeps_the_message_and_the_reply_so_far(tiny_ckpt: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tiny_ckpt), str(data), PROMPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=Path(__file__).parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    try:
        assert child.stdout is not None
        seen: list[tuple[str, str]] = []
        deadline = time.monotonic() + 180
        for line in child.stdout:  # the child reports each 0.1 s whether its reply still streams
            assert time.monotonic() < deadline, "the child never saved a partial reply"
            if (data / "conversations.sqlite3").exists():
                seen = read_messages(data / "conversations.sqlite3")
            if line.strip() == "busy" and len(seen) == 2 and seen[1][1]:
                break
        assert line.strip() == "busy", "the reply ended before a partial save was seen"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()

    db_path = data / "conversations.sqlite3"
    with sqlite3.connect(db_path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    after = read_messages(db_path)
    assert after[0] == ("user", PROMPT)
    assert after[1][0] == "assistant" and after[1][1].startswith(seen[1][1])  # nothing saved was lost
    store = Store(db_path)  # the dead process's lock is gone
    assert store.open_conversations()[0].messages[0].content == PROMPT
    store.close()


async def test_drafts_survive_a_quit(make_options: MakeOptions) -> None:
    options = make_options(panes=2, chat=ChatSettings(temperature=0.0, max_tokens=8))
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 36)) as pilot:
        first, empty = (await chat_screen(app, pilot)).panes
        await submit(pilot, first, "Hello!")
        await wait_until(pilot, lambda: not first.busy, "the reply")
        first.prompt_input.text = "a follow-up I have not sent"
        empty.prompt_input.text = "a draft in a pane with no chat yet"
        await pilot.press("ctrl+q")
    assert app.return_code == 0

    again = LfmChatApp(options)
    async with again.run_test(size=(120, 36)) as pilot:
        panes = (await chat_screen(again, pilot)).panes
        assert [p.prompt_input.text for p in panes] == [
            "a follow-up I have not sent",
            "a draft in a pane with no chat yet",
        ]
