"""Hypothesis-generated JSON schemas (objects, arrays, enums, nesting, required fields): every reply
the engine writes under one validates with `jsonschema`. Strings, numbers and arrays are bounded so a
random model's reply always ends within max_tokens."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import SamplingParams, Structure
from tests.engine.conftest import random_prompt

NAMES = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)

LEAVES = st.one_of(
    st.just({"type": "boolean"}),
    st.builds(
        lambda low, span: {"type": "integer", "minimum": low, "maximum": low + span},
        st.integers(-99, 99),
        st.integers(0, 200),
    ),
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 6)),
    st.lists(st.text(alphabet="xyz é", min_size=1, max_size=4), min_size=1, max_size=4, unique=True).map(
        lambda v: {"enum": v}
    ),
    st.just({"type": "null"}),
)


def objects(children: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    def with_required(properties: dict) -> st.SearchStrategy[dict]:
        required = st.lists(st.sampled_from(sorted(properties)), unique=True)
        return required.map(
            lambda names: {
                "type": "object",
                "properties": properties,
                "required": names,
                "additionalProperties": False,
            }
        )

    return st.dictionaries(NAMES, children, min_size=1, max_size=3).flatmap(with_required)


def arrays(children: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    return st.builds(
        lambda items, n: {"type": "array", "items": items, "maxItems": n}, children, st.integers(0, 3)
    )


SCHEMAS = st.recursive(LEAVES, lambda children: st.one_of(objects(children), arrays(children)), max_leaves=5)


@pytest.fixture(scope="module")
def engine(tiny_ckpt, make_engine):
    return make_engine(tiny_ckpt, speculative="off")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=SCHEMAS, seed=st.integers(0, 2**32), temperature=st.sampled_from([0.0, 1.0]))
def test_replies_validate_against_generated_schemas(engine, schema, seed, temperature):
    params = SamplingParams(
        temperature=temperature, seed=seed, max_tokens=600, structure=Structure("json_schema", schema)
    )
    out = engine.generate([random_prompt(8, seed % 1000)], params)[0]
    assert out.finish_reason == "stop", out.text
    jsonschema.validate(json.loads(out.text), schema)
