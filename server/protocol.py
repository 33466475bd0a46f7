"""OpenAI request bodies -> what the engine takes: chat messages or a prompt, and SamplingParams.

Everything a client can get wrong is an ApiError (400) naming the field, raised here before the
engine sees the request. Unknown fields are ignored, as vLLM ignores them; fields that would
change the answer in a way this server cannot honour (echo, best_of...) are refused rather
than silently dropped. A JSON null counts as "not given" (several clients send them). Tools are
server/tools.py's, response_format and vLLM's structured outputs server/structured_outputs.py's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine import MAX_LOGIT_BIAS_ENTRIES, MAX_LOGPROBS, SamplingParams, SamplingParamsError
from server.errors import ApiError, bad_request
from server.structured_outputs import requested_structure, structure
from server.tools import ToolPlan, message_fields, tool_plan

# OpenAI's and vLLM's names for what SamplingParams calls the same (max_tokens is handled apart).
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop_token_ids",
    "ignore_eos",
)
ROLES = ("system", "developer", "user", "assistant", "tool")
# Choices one request may ask for: each is a running sequence of its own once the prompt is read.
MAX_N = 16
_TOKEN_ID = re.compile(r"[0-9]{1,9}")


def _off(value: Any) -> bool:
    return value is None or value is False or value == 0 or value in ([], {}, "")


# Fields that would change the reply in a way the engine cannot: refused unless left at their default.
_UNSUPPORTED: dict[str, Callable[[Any], bool]] = {
    "functions": _off,
    "echo": _off,
    "suffix": _off,
    "best_of": lambda v: v is None or v == 1,
    # vLLM's extras for extending the last assistant message: refused, so a client that relies on them
    # (the TUI's continue) learns it cannot continue here instead of getting a new turn glued on
    "continue_final_message": _off,
    "add_generation_prompt": lambda v: v is None or v is True,
}


@dataclass(frozen=True, slots=True)
class Limits:
    """What a request may ask for here and what it gets when it asks nothing."""

    max_tokens: int  # the most new tokens one request may ask for; also the default
    sampling: Mapping[str, float | int] = field(default_factory=dict)  # the model card's defaults


@dataclass(slots=True)
class Generation:
    """The parts common to both endpoints."""

    model: str | None
    params: SamplingParams
    stream: bool
    include_usage: bool
    structure_param: str | None  # the field whose structure constrains the output, if any
    n: int  # choices, all from one read of the prompt


@dataclass(slots=True)
class ChatRequest(Generation):
    messages: list[dict[str, Any]]
    tools: ToolPlan | None = None


@dataclass(slots=True)
class CompletionRequest(Generation):
    prompt: str | list[int]


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 that says what is wrong with it."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        reason = str(exc).splitlines()[0][:200] if isinstance(exc, ValueError) else "nested too deeply"
        raise bad_request(f"the request body is not valid JSON ({reason})") from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


def parse_chat(body: Mapping[str, Any], limits: Limits) -> ChatRequest:
    messages = _messages(body.get("messages"))
    max_tokens = _given(body, "max_completion_tokens", _given(body, "max_tokens"))
    tools = tool_plan(body)
    constrained = requested_structure(body, chat=True)
    constraint = tools.constraint() if tools is not None else None
    if constraint is not None:
        if constrained is not None:
            message = f"tool_choice {tools.choice!r} and {constrained[1]} both constrain the output"  # type: ignore[union-attr]
            raise bad_request(message, "tool_choice")
        constrained = structure("json_schema", constraint, "tools"), "tools"
    generation = _generation(body, limits, max_tokens, constrained, _chat_logprobs(body))
    return ChatRequest(messages=messages, tools=tools, **generation)


def parse_completion(body: Mapping[str, Any], limits: Limits) -> CompletionRequest:
    prompt = _prompt(body.get("prompt"))
    logprobs = _given(body, "logprobs")
    if logprobs is not None and not _is_count(logprobs, MAX_LOGPROBS):
        raise bad_request(f"logprobs must be an int in [0, {MAX_LOGPROBS}] (null: none)", "logprobs")
    constrained = requested_structure(body, chat=False)
    generation = _generation(body, limits, _given(body, "max_tokens"), constrained, logprobs)
    return CompletionRequest(prompt=prompt, **generation)


def _is_count(value: Any, most: int, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and least <= value <= most


def _chat_logprobs(body: Mapping[str, Any]) -> int | None:
    """Chat's `logprobs` (a bool) and `top_logprobs` (0..20) as the engine's top count (None: off)."""
    wanted, top = _given(body, "logprobs", False), _given(body, "top_logprobs")
    if not isinstance(wanted, bool):
        raise bad_request("logprobs must be true or false", "logprobs")
    if top is not None and not _is_count(top, MAX_LOGPROBS):
        raise bad_request(f"top_logprobs must be an int in [0, {MAX_LOGPROBS}]", "top_logprobs")
    if top and not wanted:
        raise bad_request("top_logprobs needs logprobs set to true", "top_logprobs")
    return (top or 0) if wanted else None


def _logit_bias(value: Any) -> dict[int, float]:
    """OpenAI's {"token id": bias} with its keys as ints; the values are SamplingParams' to check."""
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_LOGIT_BIAS_ENTRIES:
        allowed = f"an object of at most {MAX_LOGIT_BIAS_ENTRIES} token ids to numbers"
        raise bad_request(f"logit_bias must be {allowed}", "logit_bias")
    bad = next((key for key in value if not _TOKEN_ID.fullmatch(key)), None)
    if bad is not None:
        raise bad_request(
            f"logit_bias keys must be token ids (decimal digits), not {bad[:40]!r}", "logit_bias"
        )
    return {int(key): bias for key, bias in value.items()}


def _given(body: Mapping[str, Any], name: str, default: Any = None) -> Any:
    value = body.get(name)
    return default if value is None else value


def _generation(
    body: Mapping[str, Any],
    limits: Limits,
    max_tokens: Any,
    constrained: tuple[Any, str] | None,
    logprobs: int | None,
) -> dict[str, Any]:
    for name, is_default in _UNSUPPORTED.items():
        if not is_default(body.get(name)):
            raise bad_request(f"{name} is not supported by lfm-chat serve", name)
    n = _given(body, "n", 1)
    if not _is_count(n, MAX_N, least=1):
        raise bad_request(f"n must be an int in [1, {MAX_N}] on this server", "n")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request("model must be a string", "model")
    stream = _given(body, "stream", False)
    if not isinstance(stream, bool):
        raise bad_request("stream must be true or false", "stream")
    options = _given(body, "stream_options", {})
    include_usage = options.get("include_usage") if isinstance(options, dict) else "not an object"
    if not isinstance(include_usage, bool | None):
        raise bad_request('stream_options must be an object like {"include_usage": true}', "stream_options")
    return {
        "model": model,
        "params": _sampling(body, limits, max_tokens, constrained[0] if constrained else None, logprobs),
        "stream": stream,
        "include_usage": bool(include_usage),
        "structure_param": constrained[1] if constrained else None,
        "n": n,
    }


def _sampling(
    body: Mapping[str, Any], limits: Limits, max_tokens: Any, structure: Any, logprobs: int | None
) -> SamplingParams:
    if max_tokens is None:
        max_tokens = limits.max_tokens
    elif isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > limits.max_tokens:
        raise bad_request(f"max_tokens must be at most {limits.max_tokens} on this server", "max_tokens")
    stop = _given(body, "stop", [])
    given = {name: body[name] for name in SAMPLING_FIELDS if body.get(name) is not None}
    if structure is not None:
        given["structure"] = structure
    try:
        return SamplingParams(
            **{**limits.sampling, **given},
            max_tokens=max_tokens,
            stop=[stop] if isinstance(stop, str) else stop,
            logprobs=logprobs,
            logit_bias=_logit_bias(body.get("logit_bias")),
        )
    except SamplingParamsError as exc:
        raise sampling_error(exc) from None


def sampling_error(exc: SamplingParamsError) -> ApiError:
    """The 400 for a SamplingParams field the engine refused, naming the field as the client sent it."""
    name = re.search(r"SamplingParams\.(\w+)", str(exc))
    return bad_request(str(exc).replace("SamplingParams.", ""), name[1] if name else None)


def _messages(value: Any) -> list[dict[str, Any]]:
    """Role, text and tool fields of each message; the chat template renders them as transformers does."""
    if not isinstance(value, list) or not value:
        raise bad_request("messages must be a non-empty list of {role, content} objects", "messages")
    messages = []
    for index, message in enumerate(value):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise bad_request(f"{where} must be an object with a role and a content", "messages")
        role = message.get("role")
        if role not in ROLES:
            raise bad_request(f"{where}.role must be one of {', '.join(ROLES)}, not {role!r}", "messages")
        content = _text(message.get("content"), where)
        fields = message_fields(message, role, where)
        messages.append({"role": "system" if role == "developer" else role, "content": content, **fields})
    return messages


def _unicode(text: str, param: str) -> str:
    """JSON may spell an unpaired surrogate ("\\ud800"); no tokenizer can encode that."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise bad_request(f"{param} has an unpaired surrogate at character {exc.start}", param) from None
    return text


def _text(content: Any, where: str) -> str:
    """A message's content: a string, null, or a list of text parts (joined by newlines, as vLLM does)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return _unicode(content, "messages")
    if isinstance(content, list):
        parts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise bad_request(f"{where}.content: only text parts are supported, not {kind!r}", "messages")
            parts.append(part["text"])
        return _unicode("\n".join(parts), "messages")
    raise bad_request(f"{where}.content must be a string or a list of text parts", "messages")


def _prompt(value: Any) -> str | list[int]:
    """One prompt: text, or token ids. A list of several prompts would be several choices: refused."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str | list):
        value = value[0]
    if isinstance(value, str):
        if not value:  # the tokenizer would make it a lone BOS: nothing to continue
            raise bad_request("prompt is empty", "prompt")
        return _unicode(value, "prompt")
    if isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return value
    raise bad_request("prompt must be one string or one list of token ids", "prompt")
