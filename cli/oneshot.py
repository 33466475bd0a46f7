"""`lfm-chat -p "question"`: one reply streamed to stdout, then exit, as `llm` and `aichat` do.

It runs on the chat's own backends (a local engine or --server), so the model, sampling and server
flags mean the same; piped stdin is attached to the question, bounded and cleaned by app.attachment.
Exit codes: 0 the reply ended, 1 a failure (one sentence on stderr), 130 Ctrl+C. Nothing is saved
unless --save asks; loading progress goes to stderr only when someone is watching it (a terminal).
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO, TextIO

from app.backend.startup import STARTUP_ERRORS, load_backend
from app.core.attachment import AttachmentError, read_stream, with_attachments
from app.core.conversation import ChatMessage, Conversation
from app.core.options import AppOptions
from cli.reply_stream import OneShotError, StdoutFailed, stream_reply

if TYPE_CHECKING:
    from app.store.database import Store
    from cli.oneshot_tools import ToolUse
    from engine import Structure

PROG = "lfm-chat"
STDIN_NAME = "stdin"
INTERRUPTED = 130  # what shells report for a command ended by SIGINT
STDIN_NOTICE_AFTER = 1.0  # seconds of silence on a piped stdin before saying what we wait for
STDIN_HELP = "close it (ctrl+d), or run with </dev/null to ask without it"


def question_text(question: str, stdin: BinaryIO | None, stderr: TextIO = sys.stderr) -> str:
    """The message: piped stdin (if any) as an attachment, then the question; "" for the caller to
    refuse when both are empty.

    Piped stdin is read to its end, as `cat notes.md | lfm-chat -p "summarise"` needs. A pipe that
    stays open and silent (a parent that never closes it) would wait unseen forever: after
    STDIN_NOTICE_AFTER seconds without a byte, stderr says what it waits for and how to go on."""
    if stdin is None or os.isatty(stdin.fileno()):
        return question
    if not select.select([stdin], [], [], STDIN_NOTICE_AFTER)[0]:
        stderr.write(f"{PROG}: waiting for stdin to end (it is piped in and still open): {STDIN_HELP}\n")
        stderr.flush()
    try:
        attached = read_stream(stdin, STDIN_NAME)
    except AttachmentError as exc:
        raise OneShotError(str(exc)) from None
    return with_attachments(question, [attached] if attached.text.strip() else [])


def loading_progress(stderr: TextIO) -> Callable[[str, float | None], None]:
    """Loading stages on one stderr line when it is a terminal; silence in a pipe or a log."""
    if not stderr.isatty():
        return lambda stage, fraction: None

    def show(stage: str, fraction: float | None) -> None:
        percent = "" if fraction is None else f" {fraction:.0%}"
        stderr.write(f"\r\x1b[K{stage}{percent}")
        stderr.flush()

    return show


def run_oneshot(
    options: AppOptions,
    message: str,
    store: Store | None,
    structure: Structure | None = None,
    tools: ToolUse | None = None,
) -> int:
    """Load, stream one reply to stdout, save it if asked; the exit code. ``structure`` (--json-schema)
    constrains the reply; with ``tools`` (--mcp) the reply may call them (cli/oneshot_tools.py)."""
    if sys.stdout is None:  # started with stdout closed (>&-)
        return fail("stdout is closed: there is nowhere to write the reply.")
    try:
        backend = load_backend(options, loading_progress(sys.stderr))
        if sys.stderr.isatty():
            sys.stderr.write("\r\x1b[K")
        try:
            conversation = Conversation([ChatMessage("user", message)], options.chat)
            if tools is None:
                stream_reply(backend, conversation, sys.stdout, structure)
            else:
                from cli.oneshot_tools import run_tool_turns

                run_tool_turns(backend, conversation, sys.stdout, tools, sys.stderr)
        finally:
            backend.close()
            if tools is not None:
                tools.toolbox.close()
    except KeyboardInterrupt:
        return INTERRUPTED
    except STARTUP_ERRORS as exc:
        return fail(str(exc))
    except OneShotError as exc:
        return fail(str(exc))
    except StdoutFailed as exc:  # `lfm-chat -p ... | head`: the reader has what it wanted; or a full disk
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return fail(str(exc))
    if store is not None:
        store.save(conversation)
    return 0


def fail(sentence: str) -> int:
    print(f"{PROG}: error: {' '.join(sentence.split())}", file=sys.stderr)
    return 1
