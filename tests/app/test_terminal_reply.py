"""`lfm-chat -p` on a terminal: Markdown drawn and thinking folded to one line; plain in a pipe."""

from __future__ import annotations

import io
import os
import pty
import select
import sys
import time

from cli.terminal_reply import TerminalReply, whole_blocks_end
from tests.app.fake_openai import FakeServer
from tests.app.test_oneshot import HANG_SECONDS, ROOT

REPLY = "<think>Plan it well</think># Title\n\nSome **bold** text.\n\n```py\nx = 1\n\ny = 2\n```\nDone."


def drawn(chunks: list[str]) -> str:
    out = io.StringIO()
    terminal = TerminalReply(out)
    for chunk in chunks:
        terminal.feed(chunk)
    terminal.finish()
    return out.getvalue()


def test_markdown_is_drawn_and_thinking_is_one_line_however_the_text_is_cut() -> None:
    whole = drawn([REPLY])
    assert "▸ Thought · 3 words" in whole and "Plan it" not in whole and "<think>" not in whole
    assert "Title" in whole and "# Title" not in whole
    assert "Some bold text." in whole and "**" not in whole
    assert "x = 1" in whole and "y = 2" in whole and "```" not in whole
    assert drawn(list(REPLY)) == whole  # a character at a time: the same blocks, drawn once each


def test_a_block_is_drawn_only_once_it_is_whole() -> None:
    assert whole_blocks_end("one\n\ntwo") == 3
    assert whole_blocks_end("one\n\n```\na\n\nb") == 3  # the blank line inside the fence ends nothing
    assert whole_blocks_end("one") == -1


def test_p_on_a_terminal_draws_the_reply_and_folds_its_thinking() -> None:
    """A real `lfm-chat -p` whose stdout is a terminal."""
    with FakeServer(words=["# Title\n\n", "Some **bold**", " text."]) as server:
        server.thinking = ["Plan", " it"]
        pid, leader = pty.fork()
        if pid == 0:
            os.environ["PYTHONPATH"] = str(ROOT)
            os.chdir(ROOT)
            os.execv(sys.executable, [sys.executable, "-m", "cli", "--server", server.url, "-p", "Hi"])
        out = b""
        deadline = time.monotonic() + HANG_SECONDS
        while time.monotonic() < deadline:
            if select.select([leader], [], [], 1.0)[0]:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # the child ended and closed the terminal
                    break
                if not data:
                    break
                out += data
        _, status = os.waitpid(pid, 0)
        os.close(leader)
    text = out.decode("utf-8", "replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert "▸ Thought · 2 words" in text and "Plan it" not in text
    assert "Title" in text and "# Title" not in text and "**" not in text and "Some" in text
