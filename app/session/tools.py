"""A pane's tools: which it offers, what the user has agreed to, and what goes back to the model.

The calls themselves run in `PaneSession` (a turn that calls tools is a loop of model replies and
tool results); this module holds the pieces that need no session: the pane's choices, the user's
answer to "run this call?", and the text a result, a refusal or a cancel becomes for the model.
A waiting pane has no request in the backend: the engine never waits on a tool.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from app.core.conversation import ChatSettings
from engine import ToolCall, ToolCallStream

if TYPE_CHECKING:
    from app.tools.toolbox import ToolBox, ToolResult, ToolSpec

STEP_LIMIT = 8  # tool steps (rounds of calls run) in one turn before the pane stops and asks
CALL_TIMEOUT = 120.0  # seconds one call may run; the tool's result then says it timed out
RESULT_CHARS = (
    16_000  # of a result, the most sent back (~4k tokens): the model and the user are told of a cut
)
SHOWN_LINES = 6  # of a result, the lines shown before it folds
ANSWERS = "y (run it once), a (always run {name} in this pane) or n and a reason (deny)"

Decision = Literal["once", "always", "deny"]


@dataclass(frozen=True, slots=True)
class Approval:
    """The user's answer to a call: run it once, always run this tool here, or deny (with a reason)."""

    decision: Decision
    reason: str = ""


def parse_answer(text: str) -> Approval | None:
    """An answer typed in the input box (`y`, `a`, `n REASON`); None when the text is not one."""
    word, _, rest = text.strip().partition(" ")
    word = word.lower()
    if word in ("y", "yes") and not rest.strip():
        return Approval("once")
    if word in ("a", "always") and not rest.strip():
        return Approval("always")
    if word in ("n", "no"):
        return Approval("deny", " ".join(rest.split()))
    return None


@dataclass(slots=True)
class PaneTools:
    """What a pane agreed to and how its replies may call, given the toolbox all panes share (None:
    no MCP server is configured, or not yet known). `required` makes every reply call a tool
    (OpenAI's tool_choice="required" on each request), which lets random weights be tested."""

    always: set[str] = field(default_factory=set)  # tools this pane runs without asking
    choice: Literal["auto", "required"] = "auto"
    step_limit: int = STEP_LIMIT

    def forked(self) -> PaneTools:
        """A fork's: what this pane agreed to, in a set of its own (an "always" given in the fork
        stays there, as one given here stays here)."""
        return replace(self, always=set(self.always))

    @staticmethod
    async def offered(toolbox: ToolBox | None, settings: ChatSettings) -> list[ToolSpec]:
        """The tools for the next prompt (their servers start now if they have not)."""
        if toolbox is None:
            return []
        servers = [state.name for state in toolbox.servers() if settings.offers(state.name)]
        return await toolbox.tools(servers) if servers else []

    @staticmethod
    def starting(toolbox: ToolBox | None, settings: ChatSettings) -> bool:
        """Some server this pane offers has yet to start (the first prompt with its tools waits)."""
        states = toolbox.servers() if toolbox is not None else []
        return any(s.state in ("stopped", "starting") and settings.offers(s.name) for s in states)

    @staticmethod
    def summary(toolbox: ToolBox | None, settings: ChatSettings) -> str:
        """For the pane's border: "3 tools", "1 tool", "tools" before the servers have started, ""
        for none."""
        offered = [s for s in toolbox.servers() if settings.offers(s.name)] if toolbox is not None else []
        if not offered:
            return ""
        known = sum(len(s.tools) for s in offered if s.state == "ready")
        pending = any(s.state in ("stopped", "starting") for s in offered)
        if not known:
            return "tools"
        return "1 tool" if known == 1 and not pending else f"{known}{'+' if pending else ''} tools"


def calls_in(reply: str) -> list[ToolCall]:
    """The calls a finished reply made (its text keeps the model's markers)."""
    stream = ToolCallStream()
    return [e.call for e in [*stream.feed(reply), *stream.finish()] if not isinstance(e, str)]


def pretty_arguments(call: ToolCall) -> str:
    """The call's arguments as indented JSON, as the user reads them before approving."""
    try:
        return json.dumps(call.argument_values, indent=2, ensure_ascii=False)
    except ValueError:
        return call.arguments


def arguments_of(call: ToolCall) -> dict[str, Any]:
    values = call.argument_values  # the parser writes a JSON object's text
    return values if isinstance(values, dict) else {}


def result_text(result: ToolResult) -> str:
    """What the model is sent: the result, with a failure and a cut said in words."""
    text = f"Error: {result.text}" if result.is_error else result.text
    if result.truncated_from is not None:
        text += (
            f"\n[lfm-chat: the result was {result.truncated_from:,} characters; "
            f"only the first {len(result.text):,} are here]"
        )
    return text


def denied_text(reason: str) -> str:
    return "The user denied this call." + (f" Their reason: {reason}" if reason else "")


CANCELLED = "The call was stopped before it finished (the user pressed Esc, closed the pane or quit)."
NOT_RUN = "Not run: this turn reached its limit of {limit} tool steps. The user may let it continue."
LEFT_OPEN = "Not run: lfm-chat stopped, or the chat was forked, before this call was answered."


def folded(text: str, lines: int = SHOWN_LINES) -> tuple[str, int]:
    """(the first `lines` lines of a result, how many more there are), for the pane."""
    all_lines = text.splitlines() or [""]
    return "\n".join(all_lines[:lines]), max(0, len(all_lines) - lines)
