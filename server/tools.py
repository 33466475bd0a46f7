"""OpenAI's tools on /v1/chat/completions: the request's tools and tool_choice, the tool turns of the
conversation, and the reply's calls.

    tools, tool_choice          -> ToolPlan: what the template lists, and what the reply may hold
    assistant tool_calls, tool  -> messages as transformers hands them to a chat template
    reply text                  -> ToolReply: content and tool-call deltas, whole or streamed

``auto`` lets the model answer or call (its ``<|tool_call_start|>`` blocks are parsed, as vLLM's
and SGLang's ``lfm2`` parsers do); ``none`` lists the tools but parses nothing; ``required`` and a
named function constrain the reply (SamplingParams.structure) as vLLM does: ``required`` to a
JSON list of ``{"name", "parameters"}`` of the offered tools, a named function to its arguments
object. Everything here is the client's, so it is bounded and checked before the template or the
engine sees it, and every refusal names the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine import IndexedCall, ToolCall, ToolCallStream, calls_schema, new_call_id
from server.errors import bad_request

MAX_TOOLS = 128  # OpenAI's own limit
MAX_TOOLS_BYTES = 256 * 2**10  # all tool definitions, as JSON: they are rendered into every prompt
MAX_ARGUMENTS_BYTES = 64 * 2**10  # one past call's arguments in a request
# OpenAI allows letters, digits, '_' and '-' (64 at most); LFM2's own tools use dotted names too.
TOOL_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
CHOICES = ("none", "auto", "required")


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """The request's tools (as the template gets them) and its tool_choice: a mode or a function name."""

    tools: list[dict[str, Any]]
    choice: str  # "none", "auto", "required", or the name of the function the reply must call
    parallel: bool = True

    @property
    def parses_calls(self) -> bool:
        return self.choice != "none"

    @property
    def named(self) -> str | None:
        return None if self.choice in CHOICES else self.choice

    def schemas(self) -> dict[str, dict[str, Any]]:
        """Each offered function's parameters schema, by name."""
        return {
            t["function"]["name"]: t["function"].get("parameters", {"type": "object"}) for t in self.tools
        }

    def constraint(self) -> dict[str, Any] | None:
        """The JSON schema the reply must match, for ``required`` and a named function (else None)."""
        schemas = self.schemas()
        if self.named is not None:
            return schemas[self.named]
        if self.choice != "required":
            return None
        return calls_schema(schemas, self.parallel)


def _bool(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"{name} must be true or false", name)
    return value


def tool_plan(body: Mapping[str, Any]) -> ToolPlan | None:
    """The request's tools and tool_choice, checked; None when it offers no tools."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    parallel = _bool(body, "parallel_tool_calls", True)
    if tools is None or tools == []:
        if choice not in (None, "none", "auto"):
            raise bad_request("tool_choice names a tool, but the request offers no tools", "tool_choice")
        return None
    if not isinstance(tools, list):
        raise bad_request("tools must be a list of {type: function, function: {...}} objects", "tools")
    if len(tools) > MAX_TOOLS:
        raise bad_request(f"tools has {len(tools)} entries; at most {MAX_TOOLS} are allowed", "tools")
    size = len(json.dumps(tools, ensure_ascii=False).encode())
    if size > MAX_TOOLS_BYTES:
        raise bad_request(f"tools is {size} bytes of JSON; at most {MAX_TOOLS_BYTES} are allowed", "tools")
    checked = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools)]
    names = [t["function"]["name"] for t in checked]
    duplicate = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if duplicate is not None:
        raise bad_request(f"tools offers the function {duplicate!r} twice", "tools")
    return ToolPlan(checked, _choice(choice, names), parallel)


def _tool(tool: Any, where: str) -> dict[str, Any]:
    function = tool.get("function") if isinstance(tool, dict) else None
    if (
        not isinstance(tool, dict)
        or tool.get("type", "function") != "function"
        or not isinstance(function, dict)
    ):
        raise bad_request(f'{where} must be {{"type": "function", "function": {{"name": ...}}}}', "tools")
    name = function.get("name")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        shown = json.dumps(name)[:80] if isinstance(name, str) else type(name).__name__
        raise bad_request(
            f"{where}.function.name must be 1 to 64 letters, digits, '_', '.' or '-', not {shown}", "tools"
        )
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise bad_request(f"{where}.function.description must be a string", "tools")
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise bad_request(f"{where}.function.parameters must be a JSON schema object", "tools")
    return {"type": "function", "function": {k: v for k, v in function.items() if v is not None}}


def _choice(choice: Any, names: list[str]) -> str:
    if choice is None:
        return "auto"
    if choice in CHOICES:
        return choice
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise bad_request(
            'tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name"}}',
            "tool_choice",
        )
    if name not in names:
        raise bad_request(
            f"tool_choice names {json.dumps(name)[:80]}, which is not among the tools", "tool_choice"
        )
    return name


# ---------------------------------------------------------------------------------------------- messages
def message_fields(message: Mapping[str, Any], role: str, where: str) -> dict[str, Any]:
    """A message's tool fields as a template reads them: an assistant's ``tool_calls`` (arguments as
    objects, as transformers' templates expect, not OpenAI's JSON text), a tool result's ``tool_call_id``
    and ``name``."""
    fields: dict[str, Any] = {}
    if role == "assistant" and message.get("tool_calls"):
        calls = message["tool_calls"]
        if not isinstance(calls, list):
            raise bad_request(f"{where}.tool_calls must be a list", "messages")
        fields["tool_calls"] = [_past_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls)]
    if role == "tool":
        for key in ("tool_call_id", "name"):
            value = message.get(key)
            if value is not None and not isinstance(value, str):
                raise bad_request(f"{where}.{key} must be a string", "messages")
            if value is not None:
                fields[key] = value
    return fields


def _past_call(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise bad_request(
            f'{where} must be {{"id", "type": "function", "function": {{"name", "arguments"}}}}', "messages"
        )
    arguments = function.get("arguments", "{}")
    if isinstance(arguments, str):
        if len(arguments.encode()) > MAX_ARGUMENTS_BYTES:
            raise bad_request(
                f"{where}.function.arguments is longer than {MAX_ARGUMENTS_BYTES} bytes", "messages"
            )
        try:
            arguments = json.loads(arguments or "{}")
        except (ValueError, RecursionError):
            raise bad_request(f"{where}.function.arguments is not JSON", "messages") from None
    if not isinstance(arguments, dict):
        raise bad_request(f"{where}.function.arguments must be a JSON object", "messages")
    past = {"type": "function", "function": {"name": function["name"], "arguments": arguments}}
    if isinstance(call.get("id"), str):
        past["id"] = call["id"]
    return past


# ---------------------------------------------------------------------------------------------- replies
def call_deltas(index: int, call: ToolCall) -> list[dict[str, Any]]:
    """A call as OpenAI streams it: index, id and name first, then the arguments."""
    head = {
        "index": index,
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": ""},
    }
    return [
        {"tool_calls": [head]},
        {"tool_calls": [{"index": index, "function": {"arguments": call.arguments}}]},
    ]


def as_message_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


@dataclass(slots=True)
class ToolReply:
    """One reply of a request with tools: its text deltas in, OpenAI's message deltas out.

    A named function's reply is its arguments, streamed as they come; the other modes go through
    LFM2's parser (``required`` without markers: the constraint writes the bare list).
    """

    plan: ToolPlan
    calls: list[ToolCall] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    _parser: ToolCallStream = field(init=False)
    _arguments: list[str] | None = None  # a named function's arguments so far (None before the first)
    _named_id: str = field(default_factory=new_call_id)

    def __post_init__(self) -> None:
        self._parser = ToolCallStream(in_block=self.plan.choice == "required")

    def feed(self, text: str) -> list[dict[str, Any]]:
        """Message deltas for this text: ``{"content": ...}`` or ``{"tool_calls": [...]}``."""
        if self.plan.named is None:
            return self._deltas(self._parser.feed(text))
        deltas = []
        if self._arguments is None:
            self._arguments = []
            deltas.append(call_deltas(0, ToolCall(self.plan.named, "", self._named_id))[0])
        if text:
            self._arguments.append(text)
            deltas.append({"tool_calls": [{"index": 0, "function": {"arguments": text}}]})
        return deltas

    def finish(self) -> list[dict[str, Any]]:
        if self.plan.named is None:
            return self._deltas(self._parser.finish())
        deltas = self.feed("")
        self.calls = [ToolCall(self.plan.named, "".join(self._arguments or []), self._named_id)]
        return deltas

    def _deltas(self, events: list[str | IndexedCall]) -> list[dict[str, Any]]:
        deltas: list[dict[str, Any]] = []
        for event in events:
            if isinstance(event, str):
                self.content.append(event)
                deltas.append({"content": event})
            else:
                self.calls.append(event.call)
                deltas += call_deltas(event.index, event.call)
        return deltas

    def finish_reason(self, engine_reason: str | None) -> str | None:
        """OpenAI's: "tool_calls" when the model called (a forced function keeps "stop", as OpenAI does)."""
        if engine_reason == "stop" and self.calls and self.plan.named is None:
            return "tool_calls"
        return engine_reason

    def message(self) -> tuple[str | None, list[dict[str, Any]]]:
        """The whole reply (after ``finish``): its content (None beside calls when empty) and calls."""
        content = "".join(self.content)
        return (content or (None if self.calls else "")), [as_message_call(c) for c in self.calls]
