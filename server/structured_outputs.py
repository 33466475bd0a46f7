"""What a request's output must match, as OpenAI and vLLM spell it, mapped onto the engine's Structure.

    response_format  {"type": "json_object"}                        -> Structure("json_object")
                     {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
                                                                    -> Structure("json_schema", schema)
    structured_outputs (vLLM) {"json": schema | text, "regex", "choice", "grammar", "json_object": true}
    guided_json, guided_regex, guided_choice, guided_grammar (vLLM's older names, same meaning)

A request may ask for one structure. The schema is checked against its metaschema here, so a
mistake is a 400 naming the field rather than a grammar the engine fails to compile; the engine's
own caps (size, choices) come with Structure itself and name the field the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jsonschema import SchemaError
from jsonschema.validators import validator_for

from server.errors import bad_request

# A schema's JSON, checked before its metaschema validation (which takes time in proportion, on the
# event loop); the engine's Structure has its own, equal cap for every kind.
MAX_SCHEMA_CHARS = 2**17
# vLLM's structured_outputs keys (and their guided_* spellings) -> the Structure kind they ask for.
_VLLM_KINDS = {"json": "json_schema", "regex": "regex", "choice": "choice", "grammar": "grammar"}


def requested_structure(body: Mapping[str, Any], *, chat: bool) -> tuple[Any, str] | None:
    """The Structure the body asks for and the field that asked (for errors later), or None."""
    found = [found for found in (_response_format(body, chat), *_vllm_fields(body)) if found is not None]
    if len(found) > 1:
        names = " and ".join(param for _, _, param in found)
        raise bad_request(f"{names} both constrain the output: give one of them", found[1][2])
    if not found:
        return None
    kind, value, param = found[0]
    if kind == "json_schema":
        value = _schema(value, param)
    return structure(kind, value, param), param


def structure(kind: str, value: Any, param: str) -> Any:
    """engine.Structure(kind, value), its StructureError a 400 naming ``param``."""
    from engine import Structure, StructureError  # here until the structured branch is on main

    try:
        return Structure(kind, value)  # type: ignore[arg-type]
    except StructureError as exc:
        raise bad_request(f"{param}: {exc}", param) from None


def _response_format(body: Mapping[str, Any], chat: bool) -> tuple[str, Any, str] | None:
    value = body.get("response_format")
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return "json_object", None, "response_format"
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise bad_request(
                "response_format.json_schema.schema must be a JSON schema object", "response_format"
            )
        return "json_schema", schema, "response_format"
    raise bad_request(
        'response_format must be {"type": "text"}, {"type": "json_object"} or '
        '{"type": "json_schema", "json_schema": {"name", "schema"}}',
        "response_format",
    )


def _vllm_fields(body: Mapping[str, Any]) -> list[tuple[str, Any, str] | None]:
    """vLLM's structured_outputs object and its older guided_* fields."""
    asked: list[tuple[str, Any, str] | None] = []
    options = body.get("structured_outputs")
    if options is not None:
        if not isinstance(options, dict):
            raise bad_request(
                'structured_outputs must be an object like {"json": {...}}', "structured_outputs"
            )
        if options.get("json_object"):
            asked.append(("json_object", None, "structured_outputs.json_object"))
        asked += [
            (kind, options[key], f"structured_outputs.{key}")
            for key, kind in _VLLM_KINDS.items()
            if options.get(key) is not None
        ]
    asked += [
        (kind, body[f"guided_{key}"], f"guided_{key}")
        for key, kind in _VLLM_KINDS.items()
        if body.get(f"guided_{key}") is not None
    ]
    return asked


def _schema(value: Any, param: str) -> dict[str, Any]:
    """A JSON schema (vLLM also takes one as JSON text), valid against its own metaschema."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise bad_request(f"{param} is not JSON", param) from None
    if not isinstance(value, dict):
        raise bad_request(f"{param} must be a JSON schema object", param)
    size = len(json.dumps(value, ensure_ascii=False))
    if size > MAX_SCHEMA_CHARS:
        raise bad_request(
            f"{param} is {size} characters of JSON; at most {MAX_SCHEMA_CHARS} are allowed", param
        )
    try:
        validator_for(value).check_schema(value)
    except SchemaError as exc:
        where = "/".join(map(str, exc.path))
        raise bad_request(
            f"{param} is not a valid JSON schema ({exc.message}{' at ' + where if where else ''})", param
        ) from None
    except RecursionError:
        raise bad_request(f"{param} is nested too deeply", param) from None
    return value
