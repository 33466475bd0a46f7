"""A Hub chat template, rendered exactly as transformers' ``apply_chat_template`` renders it.

A chat template is code from the internet, so it runs in transformers' sandbox (an immutable
sandboxed Jinja environment whose namespaces refuse underscore attributes) with transformers'
helpers: the ``generation`` tag (it marks the assistant's span for training masks and renders its
body), ``tojson`` with json.dumps' arguments, ``strftime_now`` and ``raise_exception``. The inputs
go through the same normalisation (keys set to None dropped, reasoning aliased to ``thinking``,
plain JSON data only), so the same conversation gives the same text, and therefore the same
tokens. On top of the sandbox a render has a deadline: a template that loops for hours is an error
after ``RENDER_TIME_LIMIT`` seconds, not a frozen app.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.runtime import Context, Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from model.errors import ChatTemplateError

RENDER_TIME_LIMIT = 2.0  # seconds a chat template may run before a render gives up on it
# The names a message's reasoning comes under; templates read "thinking" (transformers fills both).
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")

# LFM2's own ChatML template (tool lists included), used when a checkpoint ships none.
LFM2_CHAT_TEMPLATE = """\
{{- bos_token -}}
{%- set ns = namespace(system_prompt="") -%}
{%- if messages and messages[0]["role"] == "system" -%}
    {%- set ns.system_prompt = messages[0]["content"] -%}
    {%- set messages = messages[1:] -%}
{%- endif -%}
{%- if tools -%}
    {%- set ns.system_prompt = ns.system_prompt + ("\\n" if ns.system_prompt else "") + \
"List of tools: <|tool_list_start|>[" -%}
    {%- for tool in tools -%}
        {%- if tool is not string -%}
            {%- set tool = tool | tojson -%}
        {%- endif -%}
        {%- set ns.system_prompt = ns.system_prompt + tool -%}
        {%- if not loop.last -%}
            {%- set ns.system_prompt = ns.system_prompt + ", " -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set ns.system_prompt = ns.system_prompt + "]<|tool_list_end|>" -%}
{%- endif -%}
{%- if ns.system_prompt -%}
    {{- "<|im_start|>system\\n" + ns.system_prompt + "<|im_end|>\\n" -}}
{%- endif -%}
{%- for message in messages -%}
    {{- "<|im_start|>" + message["role"] + "\\n" -}}
    {%- set content = message["content"] -%}
    {%- if content is not string -%}
        {%- set content = content | tojson -%}
    {%- endif -%}
    {%- if message["role"] == "tool" -%}
        {%- set content = "<|tool_response_start|>" + content + "<|tool_response_end|>" -%}
    {%- endif -%}
    {{- content + "<|im_end|>\\n" -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- "<|im_start|>assistant\\n" -}}
{%- endif -%}
"""

# When the render running in this thread (or task) must stop; no limit outside a render.
_deadline: ContextVar[float] = ContextVar("chat_template_deadline", default=math.inf)
_LOOP_GUARD = "__loop_guard"  # the template global every {% for %} iterates through


class _TimeUp(Exception):
    """Raised inside a template that ran past its deadline; ChatTemplate.render reports it."""


def _check_deadline() -> None:
    if time.monotonic() > _deadline.get():
        raise _TimeUp


def _loop_guard(iterable: Iterable[Any]) -> Iterator[Any]:
    """A template loop's items, with the deadline checked before each: nested loops cannot run forever."""
    for item in iterable:
        _check_deadline()
        yield item


def _raise_exception(message: str) -> None:
    """Hub templates call this to refuse a conversation ("roles must alternate"): the message is the error."""
    raise ChatTemplateError(str(message))


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' ``tojson``: json.dumps with its arguments in transformers' order, no HTML escaping."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _TemplateDict:
    """``dict(...)`` for templates, without the class itself (and its attributes) in reach."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(Namespace):
    """transformers' namespace: no underscore attributes, the way in to CPython internals."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # Namespace's signature trick: namespace(self=1) works
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise ChatTemplateError(f"a chat template cannot store {name!r} on a namespace (underscore)")


class _GenerationTag(Extension):
    """``{% generation %}…{% endgeneration %}``: marks the assistant's span for training; renders its body."""

    tags = {"generation"}  # noqa: RUF012 (jinja2's Extension declares it a plain class attribute)

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Macro) -> str:
        return caller()


class _ChatSandbox(ImmutableSandboxedEnvironment):
    """transformers' sandbox, plus the clock: every call a template makes checks the render's deadline.

    With the loop guard (every loop step checks it too) this covers what can run long in template
    code: loops, and macros calling macros.
    """

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        _check_deadline()
        return super().call(context, obj, *args, **kwargs)


def _guard_loops(template: nodes.Template) -> nodes.Template:
    """Rewrite every ``{% for x in items %}`` as ``{% for x in __loop_guard(items) %}``."""
    for loop in template.find_all(nodes.For):
        guard = nodes.Name(_LOOP_GUARD, "load", lineno=loop.lineno)
        loop.iter = nodes.Call(guard, [loop.iter], [], None, None, lineno=loop.lineno)
    return template


def _environment() -> _ChatSandbox:
    extensions = [_GenerationTag, "jinja2.ext.loopcontrols"]
    env = _ChatSandbox(trim_blocks=True, lstrip_blocks=True, extensions=extensions)
    env.filters["tojson"] = _tojson
    env.globals.update(
        raise_exception=_raise_exception,
        strftime_now=_strftime_now,
        dict=_TemplateDict(),
        namespace=_TemplateNamespace,
    )
    env.globals[_LOOP_GUARD] = _loop_guard
    return env


def plain_data(value: Any) -> Any:
    """``value`` rebuilt from plain JSON types, as transformers does before a template sees it.

    A template must not reach methods of rich objects (some write files); anything that is not
    JSON-like becomes an inert placeholder naming its type, which is all a template ever checks.
    """
    if value is None or type(value) in (str, int, float, bool):
        return value
    for base in (bool, str, int, float):  # subclasses (enums, numpy scalars) back to the base type
        if isinstance(value, base):
            return base(value)
    if isinstance(value, Mapping):
        return {plain_data(key): plain_data(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_data(item) for item in value]
    if isinstance(value, tuple):
        return tuple(plain_data(item) for item in value)
    return f"<{type(value).__name__}>"


def template_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages as transformers hands them to a template: None-valued keys dropped, reasoning aliased."""
    result = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise ChatTemplateError(f"chat messages must be mappings, got {type(message).__name__}")
        plain = plain_data({key: value for key, value in message.items() if value is not None})
        reasoning = next((plain[k] for k in REASONING_FIELDS if plain.get(k) is not None), None)
        if reasoning is not None:
            plain = {"thinking": reasoning, **plain, "reasoning_content": reasoning}
        result.append(plain)
    return result


class ChatTemplate:
    """One compiled chat template; jinja2's TemplateError if the source does not parse."""

    def __init__(self, source: str) -> None:
        env = _environment()
        self.source = source
        self._template = env.from_string(_guard_loops(env.parse(source)))

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        time_limit: float = RENDER_TIME_LIMIT,
        **variables: Any,
    ) -> str:
        """The prompt text; ``variables`` are the template's own (special tokens, ``keep_past_thinking``...).

        ChatTemplateError if the template refuses the conversation, fails, or runs longer than
        ``time_limit`` seconds (a render is normally well under 1 ms).
        """
        if tools is not None and not all(isinstance(tool, Mapping) for tool in tools):
            raise ChatTemplateError("tools must be JSON schemas (mappings)")
        token = _deadline.set(time.monotonic() + time_limit)
        try:
            return self._template.render(
                messages=template_messages(messages),
                tools=plain_data(None if tools is None else list(tools)),
                documents=plain_data(None if documents is None else list(documents)),
                add_generation_prompt=add_generation_prompt,
                **plain_data(variables),
            )
        except ChatTemplateError:
            raise
        except _TimeUp:
            raise ChatTemplateError(f"the chat template took longer than {time_limit:g} s") from None
        except Exception as exc:  # anything else the template's code raised: still the template's fault
            raise ChatTemplateError(f"the chat template failed ({type(exc).__name__}: {exc})") from None
        finally:
            _deadline.reset(token)
