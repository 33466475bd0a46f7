"""`lfm-chat -p "question"`: one reply streamed to stdout, then exit, as `llm` and `aichat` do.

It runs on the chat's own backends (a local engine or --server), so the model, sampling and server
flags mean the same; piped stdin is attached to the question, bounded and cleaned by app.attachment.
Exit codes: 0 the reply ended, 1 a failure (one sentence on stderr), 130 Ctrl+C. Nothing is saved
unless --save asks; loading progress goes to stderr only when someone is watching it (a terminal).
"""

from __future__ import annotations

import os
import queue
import select
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

from app.backend.startup import STARTUP_ERRORS, load_backend
from app.core.attachment import AttachmentError, read_stream, with_attachments
from app.core.conversation import ChatMessage, Conversation
from app.core.options import AppOptions
from app.core.sanitize import StreamStripper, strip_control
from cli.terminal_reply import TerminalReply

if TYPE_CHECKING:
    from app.backend.base import Backend
    from app.store.database import Store
    from cli.oneshot_tools import ToolUse
    from engine import Structure, TokenEvent, ToolCallStream

PROG = "lfm-chat"
STDIN_NAME = "stdin"
INTERRUPTED = 130  # what shells report for a command ended by SIGINT
STDIN_NOTICE_AFTER = 1.0  # seconds of silence on a piped stdin before saying what we wait for
STDIN_HELP = "close it (ctrl+d), or run with </dev/null to ask without it"


class OneShotError(Exception):
    """The reply could not be made or finished: one sentence for stderr, exit code 1."""


class StdoutFailed(Exception):
    """Writing the reply failed (stdout closed, its reader gone, its disk full): one sentence."""


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


def stream_reply(
    backend: Backend,
    conversation: Conversation,
    out: TextIO,
    structure: Structure | None = None,
    *,
    tools: list[dict[str, Any]] | None = None,
    calls: ToolCallStream | None = None,
) -> None:
    """Write the reply to `out` as it comes and add it to `conversation`; OneShotError on failure.
    Ctrl+C cancels the request before the KeyboardInterrupt goes on. With ``tools`` offered, the
    reply's calls go to ``calls`` (not to `out`), and the message keeps them as LFM2 writes them."""
    try:
        prompt = backend.prepare(conversation, tools) if tools else backend.prepare(conversation)
    except ValueError as exc:  # the tokenizer's ChatTemplateError
        raise OneShotError(f"The model's chat template refused this prompt: {exc}") from None
    settings, limit, used = conversation.settings, backend.max_model_len, prompt.tokens
    room = settings.max_tokens if limit is None or used is None else limit - used
    if room < 1:
        raise OneShotError(f"The prompt is {used:,} tokens and the model's context is {limit:,}: shorten it.")
    events: queue.SimpleQueue[TokenEvent] = queue.SimpleQueue()
    max_tokens = min(settings.max_tokens, room)
    handle = backend.submit(prompt, settings, max_tokens, "one-shot", events.put, structure=structure)
    try:
        reply, ids, last = print_stream(events, out, calls, render=structure is None and out.isatty())
    except BaseException:  # Ctrl+C, or a closed stdout: the engine must not go on for no one
        handle.cancel()
        raise
    if last.finish_reason == "error":
        raise OneShotError(last.error or "the request failed")
    if calls is not None:  # the text shown is not the text generated: the prompt cache cannot key it
        from engine import render_tool_calls

        made = [(call.name, call.argument_values) for call in calls.calls]
        block = render_tool_calls(made) if made else ""
        conversation.messages.append(ChatMessage("assistant", reply + block))
        return
    conversation.messages.append(ChatMessage("assistant", reply))
    backend.remember(conversation, prompt, reply, ids)


def print_stream(
    events: queue.SimpleQueue[TokenEvent],
    out: TextIO,
    calls: ToolCallStream | None = None,
    render: bool = False,
) -> tuple[str, list[int], TokenEvent]:
    """Print events up to the final one, cleaned as they come; (the reply cleaned, its ids, the final
    event). The printed text is the returned reply, ended by a newline. With ``calls``, the text goes
    through it first: its calls are kept there, only its content is printed. ``render`` (a person
    reads a terminal): Markdown drawn and thinking folded instead (cli/terminal_reply.py)."""
    raw, ids, stripper = "", [], StreamStripper()
    terminal = TerminalReply(out) if render else None
    while True:
        event = events.get()
        text = event.text if calls is None else _content(calls.feed(event.text))
        if event.finished and calls is not None:
            text += _content(calls.finish())
        raw += text
        ids.extend(event.token_ids)
        if terminal is not None:
            terminal.feed(text)
            if event.finished:
                terminal.finish()
        elif shown := stripper.feed(text) + (stripper.finish() if event.finished else ""):
            write(out, shown)
        if event.finished:
            break
    reply = strip_control(raw)
    if terminal is None and reply and not reply.endswith("\n"):
        write(out, "\n")
    return reply, ids, event


def _content(events: list[Any]) -> str:
    """The text among a ToolCallStream's events (the others are calls, which it keeps)."""
    return "".join(event for event in events if isinstance(event, str))


def write(out: TextIO, text: str) -> None:
    """Write and flush `text`; StdoutFailed says why it could not be."""
    try:
        out.write(text)
        out.flush()
    except BrokenPipeError:
        raise StdoutFailed("stdout was closed before the reply ended.") from None
    except OSError as exc:
        raise StdoutFailed(f"the reply could not be written to stdout ({exc.strerror or exc}).") from None
