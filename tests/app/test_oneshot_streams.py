"""`lfm-chat -p` when its stdout or stdin misbehave: a closed or full stdout, a reader that hangs
up, a piped stdin nobody closes. A real process against a fake server each time: one sentence on
stderr, never a traceback, and never a silent wait."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.app.fake_openai import FakeServer
from tests.app.test_oneshot import HANG_SECONDS, ROOT


def start(server: FakeServer, data_dir: Path, **popen: object) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LFM_CHAT_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "cli", "--server", server.url, "-p", "Hi"]
    return subprocess.Popen(argv, stderr=subprocess.PIPE, env=env, cwd=ROOT, **popen)  # type: ignore[call-overload]


def error_line(child: subprocess.Popen[bytes]) -> str:
    assert child.stderr is not None
    said = child.stderr.read().decode()
    assert child.wait(timeout=HANG_SECONDS) == 1
    [line] = said.splitlines()
    assert line.startswith("lfm-chat: error: ") and "Traceback" not in said
    return line


@pytest.mark.parametrize(
    ("stdout", "says"),
    [
        ("closed", "stdout is closed: there is nowhere to write the reply."),
        ("full", "the reply could not be written to stdout (No space left on device)."),
    ],
)
def test_a_closed_or_full_stdout_is_one_sentence(tmp_path: Path, stdout: str, says: str) -> None:
    with FakeServer() as server, open(os.devnull, "rb") as nothing:
        if stdout == "closed":
            child = start(server, tmp_path, stdin=nothing, preexec_fn=lambda: os.close(1))
        else:
            with open("/dev/full", "wb") as full:
                child = start(server, tmp_path, stdin=nothing, stdout=full)
        assert error_line(child) == f"lfm-chat: error: {says}"


def test_a_reader_that_hangs_up_ends_it_with_one_sentence(tmp_path: Path) -> None:
    with FakeServer(words=["word "] * 200) as server, open(os.devnull, "rb") as nothing:
        server.delay = 0.05
        child = start(server, tmp_path, stdin=nothing, stdout=subprocess.PIPE)
        assert child.stdout is not None
        assert child.stdout.read(5) == b"word "  # as `| head -c 5` does
        child.stdout.close()
        assert error_line(child) == "lfm-chat: error: stdout was closed before the reply ended."


def test_a_piped_stdin_left_open_is_said_then_read_when_closed(tmp_path: Path) -> None:
    with FakeServer() as server:
        child = start(server, tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert child.stdin is not None and child.stdout is not None and child.stderr is not None
        notice = child.stderr.readline().decode()  # comes while stdin is still open
        assert notice == (
            "lfm-chat: waiting for stdin to end (it is piped in and still open): "
            "close it (ctrl+d), or run with </dev/null to ask without it\n"
        )
        child.stdin.write(b"some notes")
        child.stdin.close()
        assert child.stdout.read() == b"Hello from the server.\n"
        assert child.wait(timeout=HANG_SECONDS) == 0
    assert "some notes" in server.bodies[0]["messages"][-1]["content"]
