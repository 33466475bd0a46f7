"""A Hub chat template, rendered exactly as transformers' ``apply_chat_template`` renders it.

A chat template is code from the internet, so it runs in transformers' sandbox (an immutable
sandboxed Jinja environment whose namespaces refuse underscore attributes) with transformers'
helpers: the ``generation`` tag (it marks the assistant's span for training masks and renders its
body), ``tojson`` with json.dumps' arguments, ``strftime_now`` and ``raise_exception``. The inputs
go through the same normalisation (keys set to None dropped, reasoning aliased to ``thinking``,
plain JSON data only), so the same conversation gives the same text, and therefore the same
tokens.

The sandbox stops a template reaching Python's internals, not a template computing or allocating
without end, so a render is bounded three ways:

- time: a deadline (``RENDER_TIME_LIMIT``), checked at every loop step and every call;
- size: every operator, method and filter that can grow a value is priced before it runs
  (model/text/template_limits.py), because one such operation is one C call that holds the GIL
  (``(10*n)**(10**8)`` runs for minutes, ``'a'*3000000000`` allocates 3 GB) and no deadline can
  interrupt it; the output, and each ``{{ value }}`` and ``~``, are priced the same way;
- a backstop: the render runs in a worker process (model/text/template_worker.py) with an address-space
  limit, killed if it outlives its deadline, so a bomb the pricing misses costs that process and
  a clear error, never this one. Where no process can be started, renders fall back to the first
  two bounds in this process (said once, in the log).

An attribute a sandbox refuses (``__class__``, ``__globals__``...) is an error at once, rather than
transformers' silent empty string: only a hostile template reaches for one.
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
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from jinja2.utils import Namespace, generate_lorem_ipsum

from model.errors import ChatTemplateError, TemplateRefusal
from model.text import template_limits as limits
from model.text import template_worker

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
_CONCAT = "__concat"  # the template global every ``a ~ b`` calls
# A failure's message is one line for the user; a template can make its exception's text any size.
MESSAGE_LIMIT = 500


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
    raise TemplateRefusal(_one_line(str(message)))


def _one_line(message: str) -> str:
    line = " ".join(message.split())
    return line if len(line) <= MESSAGE_LIMIT else line[: MESSAGE_LIMIT - 1] + "…"


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' ``tojson``: json.dumps with its arguments in transformers' order, no HTML escaping."""
    limits.check_json_layout(indent, separators)
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    limits.check_strftime(format)
    return datetime.now().strftime(format)


def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    limits.check_lipsum(n, html, min, max)
    return generate_lorem_ipsum(n, html, min, max)


def _concat(*values: Any) -> str:
    """``a ~ b ~ ...`` as Jinja joins it (str of each), priced first: doubling a string in a loop stops."""
    limits.check_text(sum(limits.text_size(value) for value in values), "a joined string")
    return "".join(map(str, values))


def _finalize(value: Any) -> Any:
    """Each ``{{ value }}``, priced before Jinja makes it text (a list of a million copies of a string)."""
    limits.check_text(limits.text_size(value), "an output value")
    return value


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
    """transformers' sandbox, plus the clock and the prices of what a template computes.

    Every call a template makes checks the render's deadline (with the loop guard, which checks it
    at every loop step, this covers what can run long in template code: loops, and macros calling
    macros); operators, calls and attributes are checked as the module docstring says.
    """

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        _check_deadline()
        limits.check_method_call(obj, args, kwargs)
        return limits.check_result(super().call(context, obj, *args, **kwargs), "a call's result")

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        limits.check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__!r} is unsafe")


def _guard_tree(template: nodes.Template) -> nodes.Template:
    """Rewrite every ``{% for x in items %}`` as ``{% for x in __loop_guard(items) %}``, and every
    ``a ~ b`` as ``__concat(a, b)``."""
    for loop in template.find_all(nodes.For):
        guard = nodes.Name(_LOOP_GUARD, "load", lineno=loop.lineno)
        loop.iter = nodes.Call(guard, [loop.iter], [], None, None, lineno=loop.lineno)
    for concat in template.find_all(nodes.Concat):
        joined = nodes.Call(nodes.Name(_CONCAT, "load"), concat.nodes, [], None, None, lineno=concat.lineno)
        concat.nodes = [joined]  # a Concat of one item: that item's text
    return template


def _environment() -> _ChatSandbox:
    extensions = [_GenerationTag, "jinja2.ext.loopcontrols"]
    env = _ChatSandbox(trim_blocks=True, lstrip_blocks=True, extensions=extensions, finalize=_finalize)
    env.filters["tojson"] = _tojson
    env.filters = limits.priced_filters(env.filters)
    env.globals.update(
        raise_exception=_raise_exception,
        strftime_now=_strftime_now,
        dict=_TemplateDict(),
        namespace=_TemplateNamespace,
        lipsum=_lipsum,
    )
    env.globals[_LOOP_GUARD] = _loop_guard
    env.globals[_CONCAT] = _concat
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
    """One compiled chat template; jinja2's TemplateError if the source does not parse.

    ``origin`` names the template in every error a render gives (its file, or "LFM2's template").
    """

    def __init__(self, source: str, origin: str = "the built-in template") -> None:
        env = _environment()
        self.source = source
        self.origin = origin
        self._template = env.from_string(_guard_tree(env.parse(source)))

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

        ChatTemplateError if the template refuses the conversation, fails, builds more than the
        caps allow, or runs longer than ``time_limit`` seconds (a render is normally well under
        1 ms); apart from a refusal (the template's own words), the message names ``origin``.
        """
        if tools is not None and not all(isinstance(tool, Mapping) for tool in tools):
            raise ChatTemplateError("tools must be JSON schemas (mappings)")
        context = {
            "messages": template_messages(messages),
            "tools": plain_data(None if tools is None else list(tools)),
            "documents": plain_data(None if documents is None else list(documents)),
            "add_generation_prompt": add_generation_prompt,
            **plain_data(variables),
        }
        try:
            return self._render_isolated(context, time_limit)
        except TemplateRefusal:
            raise
        except ChatTemplateError as exc:
            raise ChatTemplateError(f"{exc}, in {self.origin}") from None

    def _render_isolated(self, context: dict[str, Any], time_limit: float) -> str:
        """In a worker process; in this one where no worker can start (the module docstring says why)."""
        try:
            return template_worker.render(self.source, context, time_limit)
        except template_worker.WorkerUnavailable:
            return self.render_here(context, time_limit)

    def render_here(self, context: Mapping[str, Any], time_limit: float) -> str:
        """The render in this process, bounded by the deadline and the prices (the worker runs this).

        ChatTemplateError whose message does not name the template yet (the caller knows its origin).
        """
        token = _deadline.set(time.monotonic() + time_limit)
        try:
            return self._bounded_output(context)
        except ChatTemplateError:
            raise
        except _TimeUp:
            raise ChatTemplateError(f"the chat template took longer than {time_limit:g} s") from None
        except limits.RenderLimitError as exc:
            raise ChatTemplateError(f"the chat template was stopped: {exc}") from None
        except MemoryError:
            raise ChatTemplateError("the chat template needed more memory than a render may use") from None
        except Exception as exc:  # anything else the template's code raised: still the template's fault
            reason = _one_line(f"{type(exc).__name__}: {exc}")
            raise ChatTemplateError(f"the chat template failed ({reason})") from None
        finally:
            _deadline.reset(token)

    def _bounded_output(self, context: Mapping[str, Any]) -> str:
        parts, size = [], 0
        for part in self._template.generate(context):
            size += len(part)
            limits.check_text(size, "the rendered prompt")
            parts.append(part)
        return "".join(parts)
