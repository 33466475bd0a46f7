"""`lfm-chat -p`: a real `lfm-chat` process, on the tiny checkpoint, --demo and a fake server.

What matters to a shell user: the reply and nothing else on stdout, one sentence on stderr for a
failure, the exit code a script can test, piped text reaching the model, and nothing saved unless
--save says so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.store.database import Store
from tests.app.fake_openai import FakeServer

ROOT = Path(__file__).resolve().parents[2]
HANG_SECONDS = 600  # a loaded 2-core machine imports torch slowly; this only stops a hang


def lfm_chat(
    argv: list[str], data_dir: Path, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "LFM_CHAT_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "cli", *argv],
        input=stdin if stdin is not None else b"",
        capture_output=True,
        env=env,
        cwd=ROOT,
        timeout=HANG_SECONDS,
    )


def saved(data_dir: Path) -> list:
    path = data_dir / "conversations.sqlite3"
    if not path.exists():
        return []
    store = Store(path)
    try:
        return [store.load(s.id) for s in store.summaries()]
    finally:
        store.close()


def test_a_question_streams_its_reply_to_stdout_and_nothing_is_saved(tiny_ckpt: Path, tmp_path: Path) -> None:
    done = lfm_chat(["--model", str(tiny_ckpt), "-p", "Hello?", "--max-tokens", "8"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""  # no loading progress: stderr is not a terminal
    assert done.stdout.strip() and done.stdout.endswith(b"\n")
    assert saved(tmp_path) == []


def test_piped_text_is_attached_and_save_keeps_one_conversation(tiny_ckpt: Path, tmp_path: Path) -> None:
    notes = "Line one of the notes.\n\x1b]0;PWNED\x07Line two.\n"
    argv = [
        "--model",
        str(tiny_ckpt),
        "-p",
        "Summarise",
        "--save",
        "--system",
        "Be brief.",
        "--temperature",
        "0",
    ]
    done = lfm_chat(argv, tmp_path, notes.encode())
    assert done.returncode == 0, done.stderr
    [conversation] = saved(tmp_path)
    user, reply = conversation.messages
    assert user.content == "stdin\n```\nLine one of the notes.\nLine two.\n```\n\nSummarise"
    assert (conversation.settings.system_prompt, conversation.settings.temperature) == ("Be brief.", 0.0)
    assert done.stdout.decode() == reply.content + ("" if reply.content.endswith("\n") else "\n")


def test_demo_answers_piped_text_alone(tmp_path: Path) -> None:
    done = lfm_chat(["--demo", "-p", "", "--max-tokens", "4"], tmp_path, b"what is this?")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_server_flags_and_sampling_reach_the_server(tmp_path: Path) -> None:
    with FakeServer() as server:
        argv = ["--server", server.url, "-p", "Hi", "--system", "Terse.", "--temperature", "0.5"]
        done = lfm_chat([*argv, "--max-tokens", "7"], tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"Hello from the server.\n", b"")
    [body] = server.bodies
    assert body["messages"] == [{"role": "system", "content": "Terse."}, {"role": "user", "content": "Hi"}]
    assert (body["temperature"], body["max_tokens"]) == (0.5, 7)


@pytest.mark.parametrize(
    ("argv", "stdin", "code", "says"),
    [
        (["--demo", "-p", ""], b"", 2, "-p needs a question, or text piped into stdin"),
        (["--demo", "--save"], b"", 2, "--save keeps a one-shot reply"),
        (["--demo", "-p", "x"], b"\x00\xff\xfe binary", 1, "stdin is not UTF-8 text"),
        (["--model", "/no/such/dir", "-p", "x"], b"", 1, "--model /no/such/dir: no such directory"),
    ],
)
def test_a_mistake_is_one_line_on_stderr_and_an_exit_code(
    argv: list[str], stdin: bytes, code: int, says: str, tmp_path: Path
) -> None:
    done = lfm_chat(argv, tmp_path, stdin)
    assert done.returncode == code
    assert done.stdout == b""
    [line] = done.stderr.decode().splitlines()
    assert line.startswith("lfm-chat: error: ") and says in line, line


def test_a_server_error_is_one_sentence_and_exit_1(tmp_path: Path) -> None:
    with FakeServer(mode="escape_error_body") as server:
        done = lfm_chat(["--server", server.url, "-p", "Hi"], tmp_path)
    assert done.returncode == 1
    [line] = done.stderr.decode().splitlines()
    assert line.startswith("lfm-chat: error: ") and "\x1b" not in line, line


def test_ctrl_c_stops_the_reply_with_exit_130(tmp_path: Path) -> None:
    with FakeServer(words=["word "] * 200) as server:
        server.delay = 0.2
        env = {**os.environ, "LFM_CHAT_DATA_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
        child = subprocess.Popen(
            [sys.executable, "-m", "cli", "--server", server.url, "-p", "Hi", "--save"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=ROOT,
            # as a terminal's shell starts it: a test run (an xdist worker) may hold SIGINT ignored, which a
            # child inherits, and Python then keeps ignoring it as a background job should
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        assert child.stdout is not None
        assert child.stdout.read(5) == b"word "  # streaming has begun
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=HANG_SECONDS) == 130
        assert server.generated < 200  # the request was cancelled, not run out
    assert saved(tmp_path) == []
