"""Constrained replies through `serve`, as the `openai` SDK asks for them, on a random-weight checkpoint:
whatever the weights, `tool_choice="required"` gives calls of the offered tools whose arguments
validate against their schemas, `response_format=SomeModel` parses, vLLM's `structured_outputs`
give what they name, and a structure the engine cannot compile is a 400 naming the field.

Random weights write any string a schema allows, at length, so the schemas here leave no free
text (enums, bounded integers, no additional properties): every reply ends well within max_tokens.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel

import engine
from tests.server.conftest import MODEL
from tests.server.test_bad_input import assert_error

pytestmark = pytest.mark.skipif(
    "Structure" not in engine.__all__,
    reason="needs the engine's constrained decoding (SamplingParams.structure)",
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"enum": ["Paris", "Oslo"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}
NOW = {
    "type": "function",
    "function": {
        "name": "clock.now",
        "parameters": {
            "type": "object",
            "properties": {"utc": {"type": "boolean"}},
            "required": ["utc"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, NOW]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture
def client(server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0)


def _valid_calls(calls: list[tuple[str, str]]) -> None:
    assert calls
    for name, arguments in calls:
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])


@pytest.mark.slow  # a random model decodes up to 200 constrained tokens
@pytest.mark.parametrize("seed", [0, 1])
def test_required_gives_valid_calls_of_the_offered_tools(client: openai.OpenAI, seed: int) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=200, seed=seed
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    _valid_calls([(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []])


@pytest.mark.slow  # a random model decodes up to 200 constrained tokens
def test_required_streams_valid_calls(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        max_tokens=200,
        stream=True,
        parallel_tool_calls=False,
    )
    calls: dict[int, list[str]] = {}
    finish = None
    for chunk in stream:
        for part in chunk.choices[0].delta.tool_calls or []:
            if part.id:
                calls[part.index] = [part.function.name, ""]
            calls[part.index][1] += part.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    _valid_calls([(name, arguments) for name, arguments in calls.values()])


@pytest.mark.slow  # a random model decodes up to 200 constrained tokens
def test_a_named_function_gives_its_arguments(client: openai.OpenAI) -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    reply = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=200
    )
    [call] = reply.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    _valid_calls([(call.function.name, call.function.arguments)])


class Verdict(BaseModel):
    ok: bool
    kind: Literal["cat", "dog"]


@pytest.mark.slow  # a random model decodes up to 200 constrained tokens
def test_response_format_from_a_pydantic_model_parses(client: openai.OpenAI) -> None:
    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
    reply = parse(model=MODEL, messages=ASK, response_format=Verdict, max_tokens=100)
    assert isinstance(reply.choices[0].message.parsed, Verdict)


@pytest.mark.slow  # a random model decodes up to 200 constrained tokens
def test_vllm_choice_on_completions(client: openai.OpenAI) -> None:
    text = client.completions.create(
        model=MODEL,
        prompt="Yes or no?",
        max_tokens=20,
        extra_body={"structured_outputs": {"choice": ["yes", "no"]}},
    )
    assert text.choices[0].text in ("yes", "no")


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"structured_outputs": {"choice": [str(i) for i in range(5000)]}}, "structured_outputs.choice"),
        ({"structured_outputs": {"regex": "(unclosed"}}, "structured_outputs.regex"),
        ({"guided_grammar": "start: NOT A GRAMMAR ((("}, "guided_grammar"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_a_structure_the_engine_refuses_is_a_400(
    server: str, extra: dict[str, Any], param: str, stream: bool
) -> None:
    body = {"messages": ASK, "max_tokens": 5, "stream": stream, **extra}
    assert_error(httpx.post(f"{server}/v1/chat/completions", json=body), 400, param)
