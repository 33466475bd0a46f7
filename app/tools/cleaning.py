"""What a server says about its tools and what a call returns, made safe to show and to send to a
model: no control sequence, sizes capped (the cap named where text is cut), names a model and an
OpenAI-compatible server accept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from mcp import types

from app.core.sanitize import strip_control

MAX_NAME = 64  # OpenAI's limit on a function name
MAX_DESCRIPTION = 1024
MAX_SCHEMA_BYTES = 16 * 2**10  # one tool's parameters: every tool is rendered into every prompt
MAX_SCHEMA_DEPTH = 16
_NOT_NAME = re.compile(r"[^A-Za-z0-9_\-]+")


class SchemaRefused(ValueError):
    """A tool's input schema cannot be offered to a model: why, in a few words."""


def tool_name(raw: str) -> str:
    """A function name a model and an OpenAI server accept: letters, digits, '_' and '-', at most 64."""
    return _NOT_NAME.sub("_", strip_control(raw)).strip("_")[:MAX_NAME] or "tool"


def description(raw: str | None) -> str:
    text = " ".join(strip_control(raw or "").split())
    return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 1] + "…"


def parameters(schema: Any) -> dict[str, Any]:
    """The tool's input schema with every string cleaned; SchemaRefused when it is not an object
    schema, nests deeper than MAX_SCHEMA_DEPTH or is bigger than MAX_SCHEMA_BYTES as JSON."""
    if not isinstance(schema, dict):
        raise SchemaRefused("its input schema is not a JSON object")
    cleaned = _clean(schema, 0)
    if cleaned.get("type", "object") != "object":
        raise SchemaRefused("its input schema does not describe an object")
    size = len(json.dumps(cleaned, ensure_ascii=False).encode())
    if size > MAX_SCHEMA_BYTES:
        raise SchemaRefused(f"its input schema is {size:,} bytes of JSON; the limit is {MAX_SCHEMA_BYTES:,}")
    return {"type": "object", **cleaned}


def _clean(value: Any, depth: int) -> Any:
    if depth > MAX_SCHEMA_DEPTH:
        raise SchemaRefused(f"its input schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
    if isinstance(value, str):
        return strip_control(value)
    if isinstance(value, dict):
        return {strip_control(str(k)): _clean(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v, depth + 1) for v in value]
    return value  # numbers, booleans, null


def result_pieces(result: types.CallToolResult) -> Iterator[str]:
    """A call's content as text pieces, in order; binary content is named, never inlined."""
    for block in result.content:
        if isinstance(block, types.TextContent):
            yield block.text
        elif isinstance(block, types.ImageContent | types.AudioContent):
            yield f"[{block.type}: {block.mime_type}, {len(block.data) * 3 // 4:,} bytes, not shown]"
        elif isinstance(block, types.ResourceLink):
            yield f"[resource: {block.uri}]"
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                yield resource.text
            else:
                yield f"[resource {resource.uri}: {len(resource.blob) * 3 // 4:,} bytes, not shown]"
    if not result.content and result.structured_content is not None:
        yield json.dumps(result.structured_content, ensure_ascii=False)


def bounded_text(pieces: Iterable[str], max_chars: int) -> tuple[str, int | None]:
    """(the pieces joined by newlines, cleaned and cut to `max_chars`, the original size when cut).

    Only what is kept is copied and cleaned: a 50 MB result costs its own size once, not twice. The
    cut text ends with a line saying so, for the user and for the model."""
    kept: list[str] = []
    room, total = max_chars, 0
    for i, piece in enumerate(pieces):
        piece_size = len(piece) + (1 if i else 0)
        total += piece_size
        if room > 0:
            part = ("\n" if i else "") + piece[: max(room - (1 if i else 0), 0)]
            kept.append(part)
            room -= len(part)
    text = strip_control("".join(kept))
    if total <= max_chars:
        return text, None
    return f"{text}\n[cut: the result is {total:,} characters; the first {max_chars:,} are shown]", total
