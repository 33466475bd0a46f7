"""Hostile structures end in a StructureError naming the problem, quickly, and leave the engine serving:
a schema bomb (deep nesting, a huge enum), a pathological regex, a huge grammar, nonsense."""

from __future__ import annotations

import pytest

from engine import SamplingParams, Structure, StructureError
from engine.core.structure import MAX_STRUCTURE_CHARS
from tests.engine.conftest import random_prompt


def nested_schema(depth: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}, "required": ["x"]}
    return schema


def rule_chain(rules: int) -> str:
    """A grammar of ``rules`` rules each calling the next: deep enough to overflow a thread's usual stack
    inside llguidance, which is why compiles run on a big one."""
    body = "\n".join(f'r{i}: "w" r{i + 1}?' for i in range(rules))
    return f'start: r0\n{body}\nr{rules}: "z"\n'


UNCOMPILABLE = [
    (Structure("json_schema", nested_schema(400)), "json_schema structure does not compile"),
    (Structure("json_schema", {"type": "wat"}), "json_schema structure does not compile"),
    (Structure("regex", "(" * 5000 + "a" + ")" * 5000), "regex structure does not compile"),
    (Structure("regex", "(a"), "regex structure does not compile"),
    (Structure("grammar", "start: missing_rule\n"), "grammar structure does not compile"),
    (
        Structure("grammar", "start: " + "(" * 20000 + '"a"' + ")" * 20000 + "\n"),
        "grammar structure does not compile",
    ),
]


@pytest.fixture(scope="module")
def engine(tiny_ckpt, make_engine):
    return make_engine(tiny_ckpt, speculative="off")


@pytest.mark.parametrize(
    ("structure", "message"), UNCOMPILABLE, ids=[str(i) for i in range(len(UNCOMPILABLE))]
)
def test_an_uncompilable_structure_is_a_structure_error_and_changes_nothing(engine, structure, message):
    with pytest.raises(StructureError, match=message):
        engine.add_request([20, 21, 22], SamplingParams(structure=structure))
    assert not engine.has_unfinished()


def test_bombs_over_the_size_caps_never_reach_the_compiler():
    with pytest.raises(StructureError, match="the limit is"):
        Structure("json_schema", {"enum": [f"value-{i}" for i in range(100_000)]})
    with pytest.raises(StructureError, match="the limit is"):
        Structure("grammar", rule_chain(MAX_STRUCTURE_CHARS // 10))


def test_a_long_rule_chain_compiles_without_crashing(engine):
    """A few thousand chained rules segfault llguidance on an 8 MiB stack."""
    out = engine.generate(
        [random_prompt(6, 2)], SamplingParams(max_tokens=4, structure=Structure("grammar", rule_chain(6000)))
    )
    assert out[0].error is None and out[0].text.startswith("w")


def test_a_pathological_regex_compiles_lazily_and_decodes(engine):
    """Nested counted repetitions are a classic regex bomb; llguidance builds its lexer lazily under fuel."""
    structure = Structure("regex", "((a{1,50}){1,50}){1,50}b")
    out = engine.generate(
        [random_prompt(6, 3)], SamplingParams(temperature=0, max_tokens=8, structure=structure)
    )[0]
    assert out.error is None and set(out.text) <= {"a", "b"}


def test_the_engine_serves_after_refusing(engine):
    with pytest.raises(StructureError):
        engine.add_request([20, 21], SamplingParams(structure=Structure("regex", "(a")))
    out = engine.generate(
        [random_prompt(5, 4)],
        SamplingParams(temperature=0, max_tokens=6, structure=Structure("choice", ["ok"])),
    )
    assert out[0].text == "ok" and out[0].finish_reason == "stop"
