"""One reply streamed to a text stream for `lfm-chat -p`: the request sent, its text printed as it
comes (cleaned, or drawn for a person at a terminal), the reply kept in the conversation. Both the
plain one-shot (cli/oneshot.py) and the tool turns (cli/oneshot_tools.py) stream through here."""

from __future__ import annotations

import queue
from typing import TYPE_CHECKING, Any, TextIO

from app.core.conversation import ChatMessage, Conversation
from app.core.sanitize import StreamStripper, strip_control
from cli.terminal_reply import TerminalReply

if TYPE_CHECKING:
    from app.backend.base import Backend
    from engine import Structure, TokenEvent, ToolCallStream


class OneShotError(Exception):
    """The reply could not be made or finished: one sentence for stderr, exit code 1."""


class StdoutFailed(Exception):
    """Writing the reply failed (stdout closed, its reader gone, its disk full): one sentence."""


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
