"""A tool conversation as `serve` receives it (OpenAI's shapes) renders as transformers' apply_chat_template
renders the same conversation, in both template families: LFM2's (``<|tool_list_start|>`` JSON list,
``<|tool_response_start|>`` results) and LFM2.5's (a plain tool list, past calls written Pythonic).

OpenAI sends a past call's arguments as JSON text and a tool result's content as a string or as
text parts; transformers' templates read arguments as an object and content as a string. The
server converts one into the other, so the prompt is the one the model was trained on.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from model.text.tokenizer import Tokenizer
from server.protocol import Limits, parse_chat
from tests.model.test_chat_template import FIXTURES, TEMPLATES, WEATHER, _reference, _with_template

NOW = {
    "type": "function",
    "function": {"name": "clock.now", "parameters": {"type": "object", "properties": {}}},
}
ARGUMENTS = {"city": "Paris", "days": 2, "units": {"temp": "C"}, "alerts": True}
# (what an OpenAI client sends, what a transformers user passes for the same conversation)
ASSISTANT_CALL = (
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps(ARGUMENTS)},
            },
            {"id": "call_2", "type": "function", "function": {"name": "clock.now", "arguments": "{}"}},
        ],
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ARGUMENTS}},
            {"id": "call_2", "type": "function", "function": {"name": "clock.now", "arguments": {}}},
        ],
    },
)
RESULTS = (
    [
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": '{"temp": 21}'}]},
        {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
    ],
    [
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
        {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
    ],
)
HEAD = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris, and the time?"},
]
TAIL = [{"role": "assistant", "content": "21 °C at noon."}, {"role": "user", "content": "Thanks"}]


def _conversations() -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """(OpenAI's, transformers') messages for each case."""
    sent, passed = ASSISTANT_CALL
    return {
        "tools only": (HEAD, HEAD),
        "call made": ([*HEAD, sent], [*HEAD, passed]),
        "results back": ([*HEAD, sent, *RESULTS[0]], [*HEAD, passed, *RESULTS[1]]),
        "next turn": ([*HEAD, sent, *RESULTS[0], *TAIL], [*HEAD, passed, *RESULTS[1], *TAIL]),
    }


@pytest.mark.parametrize("template", TEMPLATES)
@pytest.mark.parametrize("case", list(_conversations()))
def test_a_tool_conversation_renders_as_transformers_renders_it(
    tiny_ckpt: Path, tmp_path: Path, template: str, case: str
) -> None:
    sent, passed = _conversations()[case]
    ckpt = _with_template(tiny_ckpt, tmp_path, (FIXTURES / template).read_text(encoding="utf-8"))
    tools = [WEATHER, NOW]
    chat = parse_chat({"messages": copy.deepcopy(sent), "tools": copy.deepcopy(tools)}, Limits(max_tokens=16))
    assert chat.tools is not None
    ours = Tokenizer.from_pretrained(ckpt).render_chat(chat.messages, tools=chat.tools.tools)
    expected = _reference(ckpt).apply_chat_template(
        passed, tools=tools, tokenize=False, add_generation_prompt=True
    )
    assert ours == expected
    if case != "tools only" and template == "lfm2.5.jinja":  # the family that writes past calls
        assert (
            '<|tool_call_start|>[get_weather(city="Paris", days=2, units={"temp": "C"}, alerts=True)' in ours
        )
