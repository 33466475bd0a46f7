"""The published LFM2 / LFM2.5 chat templates render token for token as transformers renders them.

Each fixture in tests/model/fixtures is a template LiquidAI published (its header says where it
came from). A tiny checkpoint carries it as chat_template.jinja; transformers' AutoTokenizer and
lfm-chat's Tokenizer load the same directory, render the same conversations (system prompt,
several turns, tools and tool calls, thinking) and must agree on every id.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from engine import Engine, EngineConfig, SamplingParams
from model.errors import ChatTemplateError, CheckpointError
from model.text.tokenizer import Tokenizer

FIXTURES = Path(__file__).parent / "fixtures"
TEMPLATES = ["lfm2-350m.jinja", "lfm2.5-1.2b-instruct.jinja", "lfm2.5.jinja"]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city — °C",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
TOOLS = [WEATHER, {"name": "now", "description": "The time", "parameters": {"type": "object"}}]
SYSTEM = {"role": "system", "content": "You are terse. Answer in one line."}
MULTI_TURN = [
    SYSTEM,
    {"role": "user", "content": "Name a prime 🙂"},
    {"role": "assistant", "content": "7 — 素数"},
    {"role": "user", "content": "And one above 10?"},
]
TOOL_TURNS = [
    SYSTEM,
    {"role": "user", "content": "Weather in Paris for 2 days?"},
    {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}],
    },
    {"role": "tool", "content": '{"temp": 21, "sky": "clear"}'},
    {"role": "assistant", "content": "21 °C and clear."},
    {"role": "user", "content": "Thanks"},
]
THINKING = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
    {"role": "user", "content": "and 3+3?"},
    {"role": "assistant", "content": "6", "reasoning_content": "three and three"},
    {"role": "user", "content": "and 4+4?"},
]
# (conversation, tools, template variables)
CASES: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None, dict[str, Any]]] = {
    "system+multi-turn": (MULTI_TURN, None, {}),
    "tools": (MULTI_TURN, TOOLS, {}),
    "tool-calls": (TOOL_TURNS, TOOLS, {}),
    "thinking": (THINKING, None, {}),
    "keep-past-thinking": (THINKING, None, {"keep_past_thinking": True}),
    "no-system": (MULTI_TURN[1:], None, {}),
}


def _with_template(tiny_ckpt: Path, tmp_path: Path, template: str) -> Path:
    ckpt = Path(shutil.copytree(tiny_ckpt, tmp_path / "ckpt"))
    (ckpt / "chat_template.jinja").write_text(template, encoding="utf-8")
    return ckpt


def _reference(ckpt: Path) -> Any:
    """transformers' tokenizer for ``ckpt``: the reference (a test dependency; its tests skip without it)."""
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(ckpt)


def _reference_ids(reference: Any, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
    ids = reference.apply_chat_template(messages, tokenize=True, **kwargs)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


@pytest.fixture(params=TEMPLATES)
def published(request: pytest.FixtureRequest, tiny_ckpt: Path, tmp_path: Path) -> Path:
    return _with_template(tiny_ckpt, tmp_path, (FIXTURES / request.param).read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("generation_prompt", [True, False], ids=["gen", "no-gen"])
def test_published_templates_match_transformers_token_for_token(
    published: Path, case: str, generation_prompt: bool
) -> None:
    messages, tools, variables = CASES[case]
    reference = _reference(published)
    ours = Tokenizer.from_pretrained(published)
    kwargs = {"add_generation_prompt": generation_prompt, "tools": tools, **variables}
    text = reference.apply_chat_template(messages, tokenize=False, **kwargs)
    assert ours.render_chat(messages, generation_prompt, tools=tools, **variables) == text
    expected = _reference_ids(reference, messages, **kwargs)
    assert ours.encode_chat(messages, generation_prompt, tools=tools, **variables) == expected


def test_the_engine_loads_the_lfm25_template_and_prompts_with_transformers_ids(
    tiny_ckpt: Path, tmp_path: Path
) -> None:
    """The acceptance check: through Engine.from_pretrained (the real loader), prompt ids as transformers'."""
    ckpt = _with_template(tiny_ckpt, tmp_path, (FIXTURES / "lfm2.5.jinja").read_text(encoding="utf-8"))
    reference = _reference(ckpt)
    engine = Engine.from_pretrained(ckpt, EngineConfig(dtype="float32", num_kv_blocks=64, block_size=16))
    greedy = SamplingParams(temperature=0.0, max_tokens=1)
    for messages, tools in [(MULTI_TURN, None), (MULTI_TURN, TOOLS), (TOOL_TURNS, TOOLS)]:
        prompt = engine.tokenizer.render_chat(messages, tools=tools)
        [output] = engine.generate([prompt], greedy)
        expected = _reference_ids(reference, messages, tools=tools, add_generation_prompt=True)
        assert output.prompt_token_ids == expected


TOJSON = (
    "{{ data | tojson }}|{{ data | tojson(indent=2) }}|{{ data | tojson(separators=(',', ':')) }}|"
    "{{ data | tojson(ensure_ascii=true, sort_keys=true) }}|{{ data | tojson(true) }}|"
    "{{ data | tojson(false, 1, (';', '=')) }}"
)
HELPERS = {
    "tojson": TOJSON,
    "generation": "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}",
    "generation-trimmed": (
        "{%- for m in messages -%}\n  {%- generation -%}\n  {{ m.content }}\n  {%- endgeneration -%}\n"
        "{%- endfor -%}"
    ),
    "strftime_now": "{{ strftime_now('%Y-%m-%d') }}",
    "dict": "{{ dict(a=1, b=[2]) | tojson }}{{ dict.fromkeys(['x'], 0) | tojson }}",
    "loopcontrols": "{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "none-dropped": "{% for m in messages %}{{ m.tool_calls is defined }}{% endfor %}",
    "reasoning-aliases": "{% for m in messages %}{{ m.thinking }}/{{ m.reasoning_content }}{% endfor %}",
}


@pytest.mark.parametrize("name", HELPERS)
def test_helpers_render_as_in_transformers(name: str, tiny_ckpt: Path, tmp_path: Path) -> None:
    ckpt = _with_template(tiny_ckpt, tmp_path, HELPERS[name])
    messages = [
        {"role": "user", "content": "é 🙂", "tool_calls": None},
        {"role": "assistant", "content": "ok", "reasoning": "why"},
    ]
    data = {"b": "é 🙂 <tag>&", "a": [1, 2.5, None, True], "c": {}}
    reference = _reference(ckpt)
    expected = reference.apply_chat_template(messages, tokenize=False, data=data)
    assert Tokenizer.from_pretrained(ckpt).render_chat(messages, data=data) == expected


def test_a_named_tool_use_template_is_chosen_when_tools_are_given(tiny_ckpt: Path, tmp_path: Path) -> None:
    ckpt = _with_template(tiny_ckpt, tmp_path, "plain {{ messages[0].content }}")
    (ckpt / "additional_chat_templates").mkdir()
    (ckpt / "additional_chat_templates" / "tool_use.jinja").write_text("tools {{ tools | length }}")
    reference = _reference(ckpt)
    ours = Tokenizer.from_pretrained(ckpt)
    for tools in (None, TOOLS):
        expected = reference.apply_chat_template(MULTI_TURN, tools=tools, tokenize=False)
        assert ours.render_chat(MULTI_TURN, tools=tools) == expected


def test_the_sandbox_refuses_underscore_namespace_attributes(tiny_ckpt: Path, tmp_path: Path) -> None:
    ckpt = _with_template(tiny_ckpt, tmp_path, "{% set ns = namespace(_x=1) %}{{ ns._x }}")
    with pytest.raises(ChatTemplateError, match="underscore"):
        Tokenizer.from_pretrained(ckpt).render_chat(MULTI_TURN)


def test_a_generation_block_left_open_is_a_checkpoint_error(tiny_ckpt: Path, tmp_path: Path) -> None:
    ckpt = _with_template(tiny_ckpt, tmp_path, "{% generation %}never closed")
    with pytest.raises(CheckpointError, match="does not compile"):
        Tokenizer.from_pretrained(ckpt)


def test_tools_must_be_schemas(tiny_ckpt: Path) -> None:
    with pytest.raises(ChatTemplateError, match="JSON schemas"):
        Tokenizer.from_pretrained(tiny_ckpt).render_chat(MULTI_TURN, tools=[print])  # type: ignore[list-item]
