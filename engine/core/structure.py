"""What a request's output must match: the `Structure` a caller puts on `SamplingParams.structure`.

Torch-free and llguidance-free, so the app and the server can build and validate one without
loading the engine. The size caps are checked here, at construction, because a structure comes
from outside (an HTTP body, a schema file): a bomb is refused before anything compiles it.
engine/structured/compiler.py turns a valid one into a grammar; docs/ENGINE_API.md has examples.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import llguidance  # loaded by the compiler (engine/structured/) with the first structure

StructureKind = Literal["json_schema", "json_object", "regex", "choice", "grammar"]
KINDS: tuple[str, ...] = ("json_schema", "json_object", "regex", "choice", "grammar")

# A real schema, regex or grammar is a few KiB; past these the structure is an attack or a mistake,
# and compiling it would cost the engine seconds and memory every other request waits on.
MAX_STRUCTURE_CHARS = 2**17  # a json_schema's serialised text, a regex, a grammar, all choices together
MAX_CHOICES = 1024


class StructureError(ValueError):
    """A structure the engine cannot compile or that exceeds the limits; the message names the problem."""


def _schema_text(schema: object) -> str:
    """The schema as canonical JSON (its size checked, its compile cached by it)."""
    if not isinstance(schema, Mapping):
        raise StructureError(f"a json_schema structure's value must be a dict, got {type(schema).__name__}")
    try:
        return json.dumps(schema, sort_keys=True, ensure_ascii=False, allow_nan=False)
    except RecursionError:
        raise StructureError("the JSON schema is nested too deeply") from None
    except (TypeError, ValueError) as exc:
        raise StructureError(f"the JSON schema is not JSON: {exc}") from None


def _choice_text(choices: object) -> str:
    if not isinstance(choices, list | tuple) or not choices:
        raise StructureError("a choice structure's value must be a non-empty list of strings")
    if len(choices) > MAX_CHOICES:
        raise StructureError(f"a choice structure may list at most {MAX_CHOICES} strings, got {len(choices)}")
    if not all(isinstance(choice, str) for choice in choices):
        raise StructureError("a choice structure's value must be a non-empty list of strings")
    return json.dumps(list(choices), ensure_ascii=False)


def _text(kind: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise StructureError(f"a {kind} structure's value must be a non-empty string")
    return value


def canonical_text(kind: str, value: object) -> str:
    """The text that identifies the structure: validated for its kind, not yet size-checked."""
    if kind == "json_schema":
        return _schema_text(value)
    if kind == "json_object":
        if value is not None:
            raise StructureError("a json_object structure takes no value")
        return ""
    if kind == "choice":
        return _choice_text(value)
    return _text(kind, value)


@dataclass(frozen=True, slots=True)
class Structure:
    """What a request's output must match; compiled by the engine into a token mask per step.

    ``value`` by ``kind``: json_schema, the schema (a dict); json_object, None (any JSON object);
    regex, a pattern the whole output matches; choice, a list of strings the output is one of;
    grammar, a Lark grammar in llguidance's dialect (it may embed ``%json{...}``).
    Invalid or oversized: StructureError naming the problem.
    """

    kind: StructureKind
    value: Any = None
    # canonical text of `value` (the schema as sorted JSON): what compiles, so a caller mutating its
    # dict later cannot reach the request, and the key of the engine's compiled-grammar cache
    text: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise StructureError(f"Structure.kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        text = canonical_text(self.kind, self.value)
        if len(text) > MAX_STRUCTURE_CHARS:
            raise StructureError(
                f"the {self.kind} structure is {len(text)} characters; the limit is {MAX_STRUCTURE_CHARS}"
            )
        object.__setattr__(self, "text", text)


@dataclass(slots=True)
class RequestGrammar:
    """One request's matcher (advanced by the tokens it emitted) and its masks' width in 32-bit words
    (llguidance writes exactly one bit per id its tokenizer knows)."""

    matcher: llguidance.LLMatcher
    mask_words: int

    def allowed_prefix(self, drafts: list[int]) -> list[int]:
        """``drafts`` up to the first one the grammar rejects: a rejected draft costs its row for nothing."""
        return drafts[: self.matcher.validate_tokens(drafts)] if drafts else drafts
