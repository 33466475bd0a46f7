"""`serve` with tools, as the `openai` SDK calls it: calls parsed from what the model writes, streamed
as OpenAI streams them, tool turns sent back, and every bad or hostile tools field a 400 naming it.

The model is tests/app/scripted.py's: a tiny checkpoint whose every reply is one script, here an
LFM2 call block with text around it, so the whole path (engine, detokenizer keeping the markers,
parser, response shapes) runs for real.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from engine import Engine, EngineConfig
from server.tools import ToolReply, tool_plan
from tests.app.scripted import write_scripted_checkpoint
from tests.server.conftest import ENGINE, MODEL
from tests.server.test_bad_input import assert_error

REPLY = 'Hm<|tool_call_start|>[weather(city="Oslo")]<|tool_call_end|> Done.'
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK = [{"role": "user", "content": "Weather in Oslo?"}]
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def scripted_server(
    tmp_path_factory: pytest.TempPathFactory, serve: Callable[..., contextlib.AbstractContextManager[str]]
) -> Iterator[str]:
    ckpt = write_scripted_checkpoint(tmp_path_factory.mktemp("tool-reply"), REPLY)
    engine = Engine.from_pretrained(ckpt, EngineConfig(**ENGINE), progress=lambda stage, fraction: None)
    with serve(engine) as url:
        yield url


@pytest.fixture
def client(scripted_server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{scripted_server}/v1", api_key="unused", max_retries=0)


def test_a_call_comes_back_as_tool_calls(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], temperature=0)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Hm\nDone."
    [call] = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert (call.function.name, json.loads(call.function.arguments)) == ("weather", {"city": "Oslo"})


def test_a_streamed_call_comes_as_delta_tool_calls(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="auto", temperature=0, stream=True
    )
    chunks = [c for c in stream if c.choices]
    deltas = [c.choices[0].delta for c in chunks]
    content = "".join(d.content or "" for d in deltas)
    assert "<|" not in content and content.startswith("Hm") and content.endswith("Done.")
    parts = [part for d in deltas for part in d.tool_calls or []]
    assert parts[0].index == 0 and parts[0].id and parts[0].function.name == "weather"
    arguments = "".join(p.function.arguments or "" for p in parts if p.index == 0)
    assert json.loads(arguments) == {"city": "Oslo"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_choice_none_leaves_the_text_alone(scripted_server: str) -> None:
    body = {"messages": ASK, "tools": [WEATHER], "tool_choice": "none", "temperature": 0}
    reply = httpx.post(f"{scripted_server}{CHAT}", json=body).json()
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert "tool_calls" not in reply["choices"][0]["message"]


def test_a_tool_result_goes_back_through_the_template(client: openai.OpenAI) -> None:
    """The whole agent turn: the call made, its result as content parts, the model's next reply."""
    first = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], temperature=0)
    call = (first.choices[0].message.tool_calls or [])[0]
    messages: list[Any] = [
        *ASK,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": [{"type": "text", "text": '{"temp": 3}'}]},
    ]
    second = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER], temperature=0)
    assert second.choices[0].finish_reason == "tool_calls"
    assert second.usage is not None and second.usage.prompt_tokens > first.usage.prompt_tokens  # type: ignore[union-attr]


def _tool(name: str, **extra: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, **extra}}


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"tools": [_tool(f"t{i}") for i in range(5000)]}, "tools", "at most 128"),
        ({"tools": [_tool("big", description="x" * 300_000)]}, "tools", "bytes"),
        ({"tools": [_tool("bad\x1b[2Jname")]}, "tools", "tools[0].function.name"),
        ({"tools": [_tool("")]}, "tools", "tools[0].function.name"),
        ({"tools": [_tool("a"), _tool("a")]}, "tools", "twice"),
        ({"tools": [{"type": "function"}]}, "tools", "tools[0]"),
        ({"tools": "weather"}, "tools", "list"),
        ({"tools": [_tool("a", parameters=[1])]}, "tools", "parameters"),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice", "tool_choice"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "tool_choice",
            "not among",
        ),
        ({"tool_choice": "required"}, "tool_choice", "no tools"),
        ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "true or false"),
        (
            {
                "messages": [
                    *ASK,
                    {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]},
                ]
            },
            "messages",
            "messages[1].tool_calls[0].function.arguments is not JSON",
        ),
        (
            {
                "messages": [
                    *ASK,
                    {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]},
                ]
            },
            "messages",
            "JSON object",
        ),
        ({"messages": [*ASK, {"role": "assistant", "tool_calls": "f()"}]}, "messages", "list"),
        (
            {"messages": [*ASK, {"role": "tool", "tool_call_id": 7, "content": "x"}]},
            "messages",
            "tool_call_id",
        ),
        ({"response_format": {"type": "yaml"}}, "response_format", "json_schema"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format",
            "schema",
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "tuple"}},
                }
            },
            "response_format",
            "not a valid JSON schema",
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"enum": ["x" * 99] * 2000}},
                }
            },
            "response_format",
            "at most",
        ),
        ({"structured_outputs": {"json": "{not json"}}, "structured_outputs.json", "not JSON"),
        ({"structured_outputs": [1]}, "structured_outputs", "object"),
        (
            {"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a+"}},
            "structured_outputs.regex",
            "both",
        ),
    ],
)
def test_bad_tools_and_formats_are_400_naming_the_field(
    server: str, body: dict[str, Any], param: str, words: str
) -> None:
    error = assert_error(httpx.post(f"{server}{CHAT}", json={"messages": ASK, **body}), 400, param)
    assert words in error["message"]


def test_the_server_stays_responsive_after_hostile_tools(server: str) -> None:
    hostile = {
        "messages": ASK,
        "tools": [_tool(f"t{i}", parameters={"type": "object"}) for i in range(20_000)],
    }
    for _ in range(3):
        assert httpx.post(f"{server}{CHAT}", json=hostile, timeout=30).status_code == 400
    reply = httpx.post(
        f"{server}{CHAT}", json={"messages": ASK, "max_tokens": 2, "temperature": 0}, timeout=30
    )
    assert reply.status_code == 200


def test_the_tools_reach_the_template(scripted_server: str) -> None:
    """`tools` goes to the template (LFM2.5's lists them in the system turn): the prompt grows by them."""
    plain = httpx.post(f"{scripted_server}{CHAT}", json={"messages": ASK, "max_tokens": 1}).json()
    tooled = httpx.post(
        f"{scripted_server}{CHAT}", json={"messages": ASK, "max_tokens": 1, "tools": [WEATHER]}
    ).json()
    assert tooled["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"] + 10


NOW = {"type": "function", "function": {"name": "clock.now"}}


def test_what_required_constrains_to_parses_as_the_calls() -> None:
    """The constraint's JSON (any text the grammar allows) is what ToolReply reads back as calls."""
    plan = tool_plan({"tools": [WEATHER, NOW], "tool_choice": "required"})
    assert plan is not None and plan.constraint() is not None
    output = [{"name": "weather", "parameters": {"city": "Oslo"}}, {"name": "clock.now", "parameters": {}}]
    jsonschema.validate(output, plan.constraint())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "rm", "parameters": {}}], plan.constraint())
    reply = ToolReply(plan)
    text = json.dumps(output)
    deltas = [d for i in range(0, len(text), 4) for d in reply.feed(text[i : i + 4])] + reply.finish()
    assert all("content" not in d for d in deltas)
    assert reply.message()[0] is None and reply.finish_reason("stop") == "tool_calls"
    assert [(c.name, c.argument_values) for c in reply.calls] == [
        (o["name"], o["parameters"]) for o in output
    ]
    single = tool_plan({"tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False})
    assert single is not None and (single.constraint() or {})["maxItems"] == 1


def test_a_named_function_streams_its_arguments_as_they_come() -> None:
    plan = tool_plan(
        {"tools": [WEATHER, NOW], "tool_choice": {"type": "function", "function": {"name": "weather"}}}
    )
    assert plan is not None and plan.constraint() == WEATHER["function"]["parameters"]
    reply = ToolReply(plan)
    deltas = reply.feed('{"city":') + reply.feed(' "Oslo"}') + reply.finish()
    head, *rest = [d["tool_calls"][0] for d in deltas]
    assert head["function"] == {"name": "weather", "arguments": ""} and head["id"].startswith("call_")
    assert "".join(part["function"]["arguments"] for part in rest) == '{"city": "Oslo"}'
    content, calls = reply.message()
    assert content is None and calls[0]["id"] == head["id"] and reply.finish_reason("stop") == "stop"
