"""The store under real faults: no crash, one clear sentence, and no message lost.

Every fault is produced for real on real files (permissions, a deleted or replaced data dir, a
lock held by another connection, garbage pages, a second Store, a killed process). After each,
a fresh Store reads back what was saved. Root ignores file permissions, so as root the chmod
cases are skipped; the data dir replaced by a file covers an unwritable location there.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from app.core.conversation import ChatMessage, Conversation
from app.store.database import Store
from app.store.errors import StoreError, StoreLockedError, StoreWriteError
from app.store.persistence import Saver

ROOT = os.geteuid() == 0
needs_permissions = pytest.mark.skipif(ROOT, reason="root ignores file permissions")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "conversations.sqlite3"


def chat(*texts: str) -> Conversation:
    roles = ("user", "assistant")
    return Conversation([ChatMessage(roles[i % 2], text) for i, text in enumerate(texts)])


def read_back(path: Path) -> dict[int, list[str]]:
    """Every conversation's messages as a fresh Store sees them."""
    store = Store(path)
    try:
        return {s.id: [m.content for m in store.load(s.id).messages] for s in store.summaries()}  # type: ignore[union-attr]
    finally:
        store.close()


def saved(path: Path, *conversations: Conversation) -> None:
    store = Store(path)
    for conversation in conversations:
        store.save(conversation)
    store.close()


def test_a_second_store_on_the_same_dir_is_refused_and_the_first_keeps_working(path: Path) -> None:
    first = Store(path)
    one = chat("hi", "hello")
    first.save(one)
    with pytest.raises(StoreLockedError) as refused:
        Store(path)
    assert str(refused.value) == (
        f"Another lfm-chat (pid {os.getpid()}) is using {path.parent}. "
        "Quit it first, or start this one with --data-dir OTHER_DIR."
    )
    one.messages.append(ChatMessage("user", "still here?"))
    first.save(one)
    first.close()
    assert read_back(path) == {one.id: ["hi", "hello", "still here?"]}


@pytest.mark.parametrize("where", ["the data dir", "a folder above it"])
def test_a_data_dir_that_is_a_file_is_a_store_error(tmp_path: Path, where: str) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    data_dir = blocker if where == "the data dir" else blocker / "data"
    with pytest.raises(
        StoreError, match=r"is a file, not a folder\..*--data-dir DIR or set LFM_CHAT_DATA_DIR"
    ):
        Store(data_dir / "conversations.sqlite3")


@needs_permissions
@pytest.mark.parametrize("target", ["dir", "file"])
def test_a_read_only_data_dir_or_file_is_refused_at_launch(path: Path, target: str) -> None:
    one = chat("keep me", "kept")
    saved(path, one)
    locked = path.parent if target == "dir" else path
    mode = locked.stat().st_mode
    locked.chmod(0o555 if target == "dir" else 0o444)
    try:
        with pytest.raises(StoreError) as refused:
            Store(path)
    finally:
        locked.chmod(mode)
    assert f"{path}: {locked} is read-only; make it writable. To use another folder" in str(refused.value)
    assert read_back(path) == {one.id: ["keep me", "kept"]}


def test_a_data_dir_deleted_mid_session_keeps_saves_pending_until_it_is_back(path: Path) -> None:
    store = Store(path)
    saver = Saver(store)
    before = chat("saved before", "yes")
    assert saver.save(before)
    shutil.rmtree(path.parent)

    during = chat("typed after the dir vanished")
    assert not saver.save(during)
    assert saver.problem == (
        f"Cannot save to {path}: the folder {path.parent} no longer exists; "
        f"create it again (mkdir -p {path.parent})."
    )
    partial = replace(during, messages=[*during.messages, ChatMessage("assistant", "Once")])
    assert not saver.save(partial)  # the app's partial-reply copy: the same id, so the same slot
    during.messages.append(ChatMessage("assistant", "Once upon a time."))
    assert not saver.save(during)
    assert not saver.retry()

    path.parent.mkdir()
    assert saver.retry()
    assert saver.problem is None
    with pytest.raises(StoreLockedError):  # the recreated dir is locked again
        Store(path)
    store.close()
    assert read_back(path) == {  # what was saved before the dir vanished came along
        before.id: ["saved before", "yes"],
        during.id: ["typed after the dir vanished", "Once upon a time."],
    }


def test_a_data_dir_replaced_by_a_file_mid_session(path: Path) -> None:
    """Also the unwritable location a root test run can produce."""
    store = Store(path)
    saver = Saver(store)
    one = chat("first")
    saver.save(one)
    shutil.rmtree(path.parent)
    path.parent.write_text("in the way")

    one.messages.append(ChatMessage("assistant", "reply"))
    assert not saver.save(one)
    assert (
        saver.problem == f"Cannot save to {path}: {path.parent} or a folder above it is a file, not a folder."
    )
    path.parent.unlink()
    path.parent.mkdir()
    assert saver.retry()
    store.close()
    assert read_back(path) == {one.id: ["first", "reply"]}


def test_a_database_locked_by_another_program_fails_the_write_and_rolls_it_back(path: Path) -> None:
    store = Store(path, busy_timeout=0.05)
    saver = Saver(store)
    one = chat("hi", "hello")
    saver.save(one)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")

    one.messages.append(ChatMessage("user", "are you there?"))
    assert not saver.save(one)
    assert not saver.set_state("theme", "nord")
    assert saver.problem == f"Cannot save to {path}: another program holds the database locked; close it."
    other.execute("ROLLBACK")
    assert [m.content for m in store.load(one.id).messages] == ["hi", "hello"]  # type: ignore[arg-type, union-attr]

    assert saver.retry()
    assert store.get_state("theme") == "nord"
    store.close()
    assert read_back(path) == {one.id: ["hi", "hello", "are you there?"]}


def test_opening_a_database_locked_by_another_program_is_a_store_error(path: Path) -> None:
    one = chat("hi")
    saved(path, one)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    with pytest.raises(StoreError, match="another program holds the database locked; close it"):
        Store(path, busy_timeout=0.05)
    other.execute("ROLLBACK")
    other.close()
    assert read_back(path) == {one.id: ["hi"]}


def test_a_full_database_fails_the_write_and_keeps_what_was_saved(path: Path) -> None:
    store = Store(path)
    one = chat("short")
    store.save(one)
    # SQLite's own "database or disk is full", from a page limit on the store's connection.
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")
    one.messages.append(ChatMessage("assistant", "x" * 100_000))
    with pytest.raises(StoreWriteError, match="the disk is full; free some space"):
        store.save(one)
    store._db.execute("PRAGMA max_page_count = 1073741823")
    assert [m.content for m in store.load(one.id).messages] == ["short"]  # type: ignore[arg-type, union-attr]
    store.save(one)
    store.close()
    assert read_back(path) == {one.id: ["short", "x" * 100_000]}


@pytest.mark.parametrize("garbage_from", [100, 4096], ids=["after-the-header", "after-the-first-page"])
def test_a_corrupt_database_is_moved_aside_and_a_fresh_one_started(path: Path, garbage_from: int) -> None:
    saved(path, *(chat(f"conversation {i}", "x" * 5000) for i in range(20)))
    with path.open("r+b") as file:
        file.seek(garbage_from)
        file.write(os.urandom(path.stat().st_size - garbage_from))
    damaged = path.read_bytes()

    store = Store(path)
    assert store.recovered_from is not None
    assert re.fullmatch(r"conversations\.sqlite3\.corrupt-\d{8}-\d{6}", store.recovered_from.name)
    assert store.recovered_from.read_bytes() == damaged  # kept as it was, for the user to rescue
    assert store.summaries() == []
    one = chat("a fresh start")
    store.save(one)
    store.close()
    assert read_back(path) == {one.id: ["a fresh start"]}
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_killed_process_leaves_a_sound_database_and_no_lock(path: Path) -> None:
    """SIGKILL while saving a growing reply: the file passes integrity_check, the OS dropped the flock,
    and the user message and the reply up to the last committed save are there."""
    child = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from app.core.conversation import ChatMessage, Conversation
        from app.store.database import Store

        store = Store(Path(sys.argv[1]))
        conversation = Conversation([ChatMessage("user", "tell me a story")])
        store.save(conversation)
        reply = ChatMessage("assistant", "")
        conversation.messages.append(reply)
        for saves in range(10**9):
            reply.content += "word "
            store.save(conversation)
            if saves == 20:
                print("saving", flush=True)
        """
    )
    root = Path(__file__).resolve().parents[3]
    process = subprocess.Popen(
        [sys.executable, "-c", child, str(path)], cwd=root, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "saving\n"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL

    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    [(user, reply)] = read_back(path).values()
    assert user == "tell me a story"
    assert len(reply) >= 20 * len("word ") and reply == "word " * (len(reply) // 5)


def test_the_open_panes_are_written_after_the_saves_that_create_their_rows(path: Path) -> None:
    """On a full disk the open-panes update of a conversation not saved yet changes no row, so it
    "succeeds"; it must still be written again once the conversation is."""
    store = Store(path)
    saver = Saver(store)
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")
    one = chat("x" * 100_000)
    assert not saver.save(one)
    saver.set_open([one.id])  # type: ignore[list-item]
    store._db.execute("PRAGMA max_page_count = 1073741823")
    assert saver.retry()
    store.close()
    again = Store(path)
    assert [c.id for c in again.open_conversations()] == [one.id]
    again.close()


@pytest.mark.parametrize("planted", ["symlink", "fifo"])
def test_a_planted_lock_file_is_refused_and_its_target_untouched(path: Path, planted: str) -> None:
    """The pid is written over the lock file: through a symlink it would overwrite the target
    (someone's ~/.bashrc), and opening a FIFO could hang the launch."""
    path.parent.mkdir(parents=True)
    lock_path = path.with_name(path.name + ".lock")
    target = path.parent / "precious.txt"
    target.write_text("keep me\n")
    if planted == "symlink":
        lock_path.symlink_to(target)
        what = "a symbolic link"
    else:
        os.mkfifo(lock_path)
        what = "not a regular file"
    with pytest.raises(StoreError, match=f"The lock file {re.escape(str(lock_path))} is {what}") as refused:
        Store(path)
    assert "\n" not in str(refused.value) and not isinstance(refused.value, StoreLockedError)
    assert target.read_text() == "keep me\n"


def test_while_another_program_holds_the_lock_typing_does_not_wait_on_it(path: Path) -> None:
    """Each write on a locked file waits the busy timeout on the UI thread: a draft saved per
    keystroke stalled typing up to 2 s a key. After one write found the file locked, later writes
    wait for the retry timer, which writes them all once the lock is gone."""
    store = Store(path)
    saver = Saver(store)
    one = chat("hi", "hello")
    saver.save(one)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    assert not saver.save(one)  # this one waits the (short) busy timeout and finds the lock
    tried: list[str] = []
    store._db.set_trace_callback(tried.append)
    for typed in range(1, 21):
        one.draft = "a draft"[:typed]
        assert not saver.save(one)
    assert not saver.set_state("theme", "nord")
    assert not [s for s in tried if s.startswith("BEGIN")]  # no write tried: no wait
    assert saver.problem == f"Cannot save to {path}: another program holds the database locked; close it."
    other.execute("ROLLBACK")
    assert saver.retry() and saver.problem is None
    store._db.set_trace_callback(None)
    one.messages.append(ChatMessage("user", "back"))
    assert saver.save(one)  # written at once again
    assert store.get_state("theme") == "nord"
    store.close()
    assert read_back(path) == {one.id: ["hi", "hello", "back"]}
