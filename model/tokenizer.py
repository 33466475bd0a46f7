"""A checkpoint's tokenizer: ``tokenizer.json`` through ``tokenizers`` plus its Jinja chat template.

We do not use ``transformers`` at run time, so this module reproduces the two parts of its
tokenizer that a chat app needs: rendering the chat template exactly as
``apply_chat_template`` does (same sandbox, same whitespace rules, same helpers) and
streaming detokenization that never shows half a character.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import Template, TemplateError, nodes
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as BackendTokenizer

from model.config import read_json_object
from model.errors import ChatTemplateError, CheckpointError

Message = Mapping[str, Any]

BOS_TOKEN = "<|startoftext|>"
IM_END = "<|im_end|>"
# LFM2's special tokens, in id order 0..13 (the same in every LFM2 checkpoint).
LFM2_SPECIAL_TOKENS = (
    "<|pad|>",
    BOS_TOKEN,
    "<|endoftext|>",
    "<|fim_pre|>",
    "<|fim_mid|>",
    "<|fim_suf|>",
    "<|im_start|>",
    IM_END,
    "<|tool_list_start|>",
    "<|tool_list_end|>",
    "<|tool_call_start|>",
    "<|tool_call_end|>",
    "<|tool_response_start|>",
    "<|tool_response_end|>",
)

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

# Special-token variables that transformers exposes to chat templates.
_TEMPLATE_TOKEN_NAMES = ("bos_token", "eos_token", "pad_token", "unk_token")


RENDER_TIME_LIMIT = 2.0  # seconds a chat template may run before render_chat gives up on it

# When the render running in this thread (or task) must stop; no limit outside render_chat.
_deadline: ContextVar[float] = ContextVar("chat_template_deadline", default=math.inf)
_LOOP_GUARD = "__loop_guard"  # the template global every {% for %} iterates through


class _TimeUp(Exception):
    """Raised inside a template that ran past its deadline; render_chat turns it into ChatTemplateError."""


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
    value: Any, ensure_ascii: bool = False, indent: int | None = None, sort_keys: bool = False
) -> str:
    """transformers' ``tojson``: plain JSON, without Jinja's HTML escaping."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, sort_keys=sort_keys)


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


def compile_chat_template(source: str) -> Template:
    """Compile a Hub chat template in the sandbox, with the options and helpers transformers provides."""
    env = _ChatSandbox(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals[_LOOP_GUARD] = _loop_guard
    return env.from_string(_guard_loops(env.parse(source)))


def _token_content(value: Any) -> str | None:
    """A special token as tokenizer_config.json spells it: a string or a serialised AddedToken."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_chat_template(root: Path, tokenizer_config: Mapping[str, Any]) -> str:
    """The template source: chat_template.jinja (newer repos) wins over tokenizer_config.json."""
    jinja_file = root / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        template = named.get("default")
    return template if isinstance(template, str) else LFM2_CHAT_TEMPLATE


class Tokenizer:
    """Text <-> ids and chat rendering for one checkpoint."""

    def __init__(
        self,
        backend: BackendTokenizer,
        chat_template: str,
        template_tokens: Mapping[str, str],
        extra_stop_ids: Iterable[int] = (),
    ) -> None:
        self._backend = backend
        try:
            self._template = compile_chat_template(chat_template)
        except TemplateError as exc:
            raise CheckpointError(f"the checkpoint's chat template does not compile ({exc})") from None
        self._template_tokens = dict(template_tokens)
        self._special_ids = frozenset(
            i for i, tok in backend.get_added_tokens_decoder().items() if tok.special
        )
        self.bos_token_id = self._id_of(template_tokens.get("bos_token"))
        stops = {self._id_of(IM_END), self._id_of(template_tokens.get("eos_token")), *extra_stop_ids}
        self.stop_token_ids: frozenset[int] = frozenset(i for i in stops if i is not None)

    @classmethod
    def from_pretrained(cls, checkpoint_dir: str | Path, extra_stop_ids: Iterable[int] = ()) -> Tokenizer:
        """Load tokenizer.json, tokenizer_config.json and the chat template from a checkpoint directory.

        ``extra_stop_ids`` are the model config's eos ids: generation stops on those too.
        """
        root = Path(checkpoint_dir)
        path = root / "tokenizer.json"
        if not path.is_file():
            raise CheckpointError(f"{path} is missing: the checkpoint has no tokenizer")
        try:
            backend = BackendTokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception for any parse error
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise CheckpointError(f"{path} is not a valid tokenizer file ({reason})") from None
        config_path = root / "tokenizer_config.json"
        config = read_json_object(config_path) if config_path.is_file() else {}
        tokens = {name: _token_content(config.get(name)) for name in _TEMPLATE_TOKEN_NAMES}
        if tokens["bos_token"] is None and backend.token_to_id(BOS_TOKEN) is not None:
            tokens["bos_token"] = BOS_TOKEN
        present = {name: tok for name, tok in tokens.items() if tok is not None}
        return cls(backend, _read_chat_template(root, config), present, extra_stop_ids)

    # ------------------------------------------------------------------ vocabulary
    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special_ids

    def _id_of(self, token: str | None) -> int | None:
        return None if token is None else self._backend.token_to_id(token)

    # ------------------------------------------------------------------ text
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; special-token strings inside it become their special ids."""
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    # ------------------------------------------------------------------ chat
    def render_chat(
        self,
        messages: Sequence[Message],
        add_generation_prompt: bool = True,
        time_limit: float = RENDER_TIME_LIMIT,
    ) -> str:
        """The prompt text for a conversation, exactly as transformers' ``apply_chat_template`` renders it.

        The template is the checkpoint's code: ChatTemplateError if it refuses the conversation,
        fails, or runs longer than ``time_limit`` seconds (a render is normally well under 1 ms).
        """
        token = _deadline.set(time.monotonic() + time_limit)
        try:
            return self._template.render(
                messages=[dict(m) for m in messages],
                tools=None,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **self._template_tokens,
            )
        except ChatTemplateError:
            raise
        except _TimeUp:
            raise ChatTemplateError(f"the chat template took longer than {time_limit:g} s") from None
        except Exception as exc:  # anything else the template's code raised: still the template's fault
            raise ChatTemplateError(f"the chat template failed ({type(exc).__name__}: {exc})") from None
        finally:
            _deadline.reset(token)

    def encode_chat(
        self,
        messages: Sequence[Message],
        add_generation_prompt: bool = True,
        time_limit: float = RENDER_TIME_LIMIT,
    ) -> list[int]:
        """Prompt ids for a conversation. The BOS is part of the template text, so none is added here."""
        text = self.render_chat(messages, add_generation_prompt, time_limit)
        return self.encode(text, add_special_tokens=False)


class IncrementalDetokenizer:
    """Turns a stream of generated ids into text deltas, one call per step.

    Decoding only the new ids would be wrong (byte-level BPE splits a character across
    tokens, and some decoders change a token's text depending on what precedes it), and
    decoding everything again each step is quadratic. Like vLLM, we decode a short window
    twice: ``ids[prefix:read]`` (already emitted) and ``ids[prefix:]``; the difference is the
    delta. While the window's text ends in U+FFFD a character is incomplete, so we emit
    nothing and wait for more bytes. Only the window is kept, so each call costs O(window).

        ids:   ... | prefix ... read | new ids
                     \\_ emitted _/    \\_ delta once it decodes cleanly
    """

    PROMPT_CONTEXT = 5  # prompt ids kept as decoding context for the first generated token

    def __init__(self, tokenizer: Tokenizer, prompt_ids: Sequence[int] | None = None) -> None:
        self._tokenizer = tokenizer
        self._ids = list(prompt_ids[-self.PROMPT_CONTEXT :]) if prompt_ids else []
        self._prefix = 0
        self._read = len(self._ids)
        self._parts: list[str] = []

    @property
    def text(self) -> str:
        """All text emitted so far (equal to decoding all generated ids, once flushed)."""
        return "".join(self._parts)

    def add(self, token_ids: int | Iterable[int]) -> str:
        """Append generated ids; return the new text, or "" while a character is still incomplete."""
        self._ids.extend([token_ids] if isinstance(token_ids, int) else token_ids)
        return self._emit(final=False)

    def flush(self) -> str:
        """At the end of a stream, emit whatever is held back (an unfinished character shows as U+FFFD)."""
        return self._emit(final=True)

    def _emit(self, final: bool) -> str:
        decode = self._tokenizer.decode
        emitted = decode(self._ids[self._prefix : self._read])
        window = decode(self._ids[self._prefix :])
        if len(window) <= len(emitted) or (window.endswith("\ufffd") and not final):
            return ""
        delta = window[len(emitted) :]
        self._parts.append(delta)
        del self._ids[: self._read]  # the newly emitted ids become the next window's context
        self._prefix, self._read = 0, len(self._ids)
        return delta
