"""`lfm-chat -p "question" --mcp FILE [--yes]`: the reply may call the tools of FILE's MCP servers.

    reply -> its calls -> approval -> each call runs -> its result as a `tool` message -> reply ...

up to STEP_LIMIT rounds of calls. The reply's text goes to stdout as without tools; each call, its
approval and a line about its result go to stderr. A call runs when --yes approves them all, or
when the user answers on the terminal (/dev/tty, so piped stdin and stdout still work) as in a pane:
y (once), a (always this tool, for the rest of the run) or n with a reason, which goes back to the
model; with neither, it is refused, the model is told so, and so is the user. `--tool-choice
required` makes the first reply a call (constrained, as OpenAI's tool_choice="required"); later
ones may answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from app.core.conversation import ChatMessage, Conversation
from app.core.sanitize import strip_control
from app.session.tools import Approval, denied_text, parse_answer
from app.tools.toolbox import ToolBox, ToolResult, ToolSpec
from cli.reply_stream import stream_reply

if TYPE_CHECKING:
    from app.backend.base import Backend
    from engine import ToolCall

PROG = "lfm-chat"
STEP_LIMIT = 8  # rounds of calls in one -p run: a model that keeps calling is stopped
CALL_TIMEOUT = 120.0  # seconds for one call
RESULT_CHARS = 16_000  # of one result, sent to the model (the rest is cut, and it is told)
SHOWN_CHARS = 200  # of a call's arguments or a result's first line, on stderr
ANSWER_CHARS = 1_000  # of a line typed at the prompt: a reason longer than this is cut
TRIES = 3  # answers that are none of y, a, n before the call counts as denied
CHOICES = "[y once / a always / N and a reason]"
WHY = "Why? (sent to the model; Enter for no reason) "

# The user's answer to "run this call?"; None when no one can be asked.
Ask = Callable[[str], "Approval | None"]


@dataclass(slots=True)
class ToolUse:
    """What -p was told about tools."""

    toolbox: ToolBox
    approve_all: bool = False  # --yes
    required: bool = False  # --tool-choice required: the first reply must call a tool
    always: set[str] = field(default_factory=set)  # tools the user answered "a" for: not asked again


def ask_on_terminal(question: str) -> Approval | None:
    """The answer typed on the controlling terminal, whatever stdin and stdout are; None when there
    is none. Read and written through two files: a terminal cannot seek, so one opened "r+" fails."""
    try:
        with (
            open("/dev/tty", encoding="utf-8", errors="replace") as keys,
            open("/dev/tty", "w", encoding="utf-8", errors="replace") as screen,
        ):
            return ask_in(keys, screen, question)
    except OSError:
        return None


def ask_in(keys: TextIO, screen: TextIO, question: str) -> Approval:
    """Ask on `screen` until the answer read from `keys` is y, a or n (with its reason on the line
    or on the next one); Enter, the end of input or TRIES other answers deny."""
    for _ in range(TRIES):
        line = _read(keys, screen, f"{question} {CHOICES} ")
        if not line.strip():
            return Approval("deny")
        if (approval := parse_answer(line)) is None:
            screen.write("Answer y, a, or n and a reason.\n")
            continue
        if approval.decision == "deny" and not approval.reason:
            return Approval("deny", " ".join(_read(keys, screen, WHY).split()))
        return approval
    return Approval("deny")


def _read(keys: TextIO, screen: TextIO, prompt: str) -> str:
    """One line typed after `prompt`, its control characters dropped and its length bounded."""
    screen.write(prompt)
    screen.flush()
    line = rest = keys.readline(ANSWER_CHARS)
    while rest and not rest.endswith("\n"):  # the rest of a line too long: dropped, so the next
        rest = keys.readline(ANSWER_CHARS)  # answer starts afresh
    return strip_control(line)


def run_tool_turns(
    backend: Backend,
    conversation: Conversation,
    out: TextIO,
    use: ToolUse,
    err: TextIO,
    ask: Ask = ask_on_terminal,
) -> None:
    """Replies and calls until a reply calls nothing (or STEP_LIMIT); OneShotError as stream_reply."""
    from engine import Structure, ToolCallStream, calls_schema

    specs = asyncio.run(use.toolbox.tools())
    for server in use.toolbox.servers():
        if server.state == "failed":
            err.write(f"{PROG}: the MCP server {server.name} failed: {server.reason}\n")
    offered = [spec.as_openai() for spec in specs]
    if not offered:
        stream_reply(backend, conversation, out)
        return
    for step in range(STEP_LIMIT + 1):
        forced = use.required and step == 0
        structure = Structure("json_schema", calls_schema(_parameters(specs))) if forced else None
        calls = ToolCallStream(in_block=forced)
        stream_reply(backend, conversation, out, structure, tools=offered, calls=calls)
        if not calls.calls:
            if forced:
                err.write(f"{PROG}: the reply ended before its tool call did (a larger --max-tokens?)\n")
            return
        if step == STEP_LIMIT:
            err.write(f"{PROG}: stopped after {STEP_LIMIT} rounds of tool calls; the last ones did not run\n")
            return
        for call in calls.calls:
            result = run_call(call, use, err, ask).text
            conversation.messages.append(ChatMessage("tool", result, tool_call_id=call.id, name=call.name))


def _parameters(specs: list[ToolSpec]) -> dict[str, dict[str, object]]:
    return {spec.name: spec.parameters for spec in specs}


def run_call(call: ToolCall, use: ToolUse, err: TextIO, ask: Ask) -> ToolResult:
    """The call's result, or why it did not run: what the model is told either way."""
    shown = f"{call.name}({_bounded(strip_control(call.arguments))})"
    err.write(f"{PROG}: tool call {shown}\n")
    err.flush()
    if not use.approve_all and call.name not in use.always:
        answer = ask(f"{PROG}: run {shown}?")
        if answer is None:
            err.write(f"{PROG}: refused {call.name}: no --yes, and no terminal to ask on\n")
            return ToolResult("The user's approval could not be asked for, so the call did not run.", True)
        if answer.decision == "deny":
            err.write(f"{PROG}: denied {call.name}\n")
            return ToolResult(denied_text(answer.reason), True)
        if answer.decision == "always":
            use.always.add(call.name)
    result = asyncio.run(
        use.toolbox.call(call.name, call.argument_values, timeout=CALL_TIMEOUT, max_chars=RESULT_CHARS)
    )
    first = result.text.strip().split("\n", 1)[0]
    size = f"{result.truncated_from or len(result.text):,} characters"
    outcome = "failed" if result.is_error else "returned"
    err.write(f"{PROG}: {call.name} {outcome} {size}: {_bounded(first)}\n")
    return result


def _bounded(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
