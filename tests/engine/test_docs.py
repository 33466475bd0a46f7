"""The engine's docs against the code, so that neither can change without the other.

docs/ENGINE_API.md's ```python blocks hold each public dataclass as `class Name:` with one
annotated line per field. EngineConfig and SamplingParams are compared field by field, in order,
with types and defaults; the other documented dataclasses by their fields' names and types.
docs/ARCHITECTURE.md's engine file map lists every module of engine/.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

import engine
from engine import (
    EngineConfig,
    EngineSnapshot,
    RequestMetrics,
    RequestOutput,
    RequestSnapshot,
    SamplingParams,
    TokenEvent,
)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ENGINE_API.md"
NO_DEFAULT = "(no default)"
# A class line, then every following line that is indented or blank.
CLASS_BLOCK = re.compile(r"^class \w+.*\n(?:(?:[ \t]+.*)?\n)*", re.MULTILINE)


def code_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def documented_classes() -> dict[str, ast.ClassDef]:
    """Every `class Name:` block of the doc's python code, parsed."""
    classes = {}
    for block in code_blocks():
        for match in CLASS_BLOCK.finditer(block):
            (node,) = ast.parse(match.group(0)).body
            classes[node.name] = node
    return classes


def _default(value: ast.expr | None) -> str:
    """The default as written: a literal's repr, `factory:list` for field(default_factory=list)."""
    if value is None:
        return NO_DEFAULT
    if isinstance(value, ast.Call) and ast.unparse(value.func) == "field":
        (factory,) = (kw.value for kw in value.keywords if kw.arg == "default_factory")
        return f"factory:{ast.unparse(factory)}"
    return repr(ast.literal_eval(value))


def documented_fields(name: str) -> list[tuple[str, str, str]]:
    """(name, type, default) of every annotated line of the documented class, in order."""
    node = documented_classes()[name]
    return [
        (stmt.target.id, ast.unparse(stmt.annotation), _default(stmt.value))
        for stmt in node.body
        if isinstance(stmt, ast.AnnAssign)
    ]


def code_fields(cls: type) -> list[tuple[str, str, str]]:
    """(name, type, default) of the dataclass's fields, written as `documented_fields` writes them."""
    fields = []
    for field in dataclasses.fields(cls):
        if field.default_factory is not dataclasses.MISSING:
            default = f"factory:{field.default_factory.__name__}"
        elif field.default is not dataclasses.MISSING:
            default = repr(field.default)
        else:
            default = NO_DEFAULT
        fields.append((field.name, field.type, default))
    return fields


@pytest.mark.parametrize("cls", [EngineConfig, SamplingParams])
def test_documented_fields_types_and_defaults_are_the_dataclass(cls):
    assert documented_fields(cls.__name__) == code_fields(cls)


@pytest.mark.parametrize("cls", [RequestOutput, RequestMetrics, TokenEvent, EngineSnapshot, RequestSnapshot])
def test_documented_fields_and_types_are_the_dataclass(cls):
    documented = {(name, kind) for name, kind, _ in documented_fields(cls.__name__)}
    assert documented == {(name, kind) for name, kind, _ in code_fields(cls)}


def test_the_documented_import_names_the_whole_public_api():
    (statement,) = ast.parse(code_blocks()[0].split("\n\n")[0]).body
    assert statement.module == "engine"
    assert sorted(alias.name for alias in statement.names) == sorted(engine.__all__)


def test_the_architecture_file_map_lists_every_engine_module():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    mapped = set(re.findall(r"^(engine/[\w/]+\.py) ", text, re.MULTILINE))
    modules = {path for path in (ROOT / "engine").rglob("*.py") if path.name != "__init__.py"}
    assert mapped == {"engine/__init__.py"} | {str(path.relative_to(ROOT)) for path in modules}


def test_every_file_the_architecture_names_exists():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    named = set(
        re.findall(r"\b((?:engine|app|model|server|cli|bench|tests)/[\w/]+\.(?:py|cpp|h|tcss))", text)
    )
    missing = sorted(path for path in named if not (ROOT / path).is_file())
    assert not missing, f"docs/ARCHITECTURE.md names files that do not exist: {missing}"
