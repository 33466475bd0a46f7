"""Structure validates its kind, value and size at construction, naming the problem, and is exported
from `engine` without importing torch or llguidance."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine import SamplingParams, SamplingParamsError, Structure, StructureError
from engine.core.structure import MAX_CHOICES, MAX_STRUCTURE_CHARS

VALID = [
    Structure("json_schema", {"type": "object", "properties": {"a": {"type": "integer"}}}),
    Structure("json_object"),
    Structure("regex", r"[a-z]{3}\d"),
    Structure("choice", ["yes", "no"]),
    Structure("choice", ("yes",)),
    Structure("grammar", 'start: "a" | "b"'),
]

INVALID = [
    (("yaml", "a: 1"), "Structure.kind must be one of json_schema, json_object, regex, choice, grammar"),
    (("json_schema", "{}"), "value must be a dict, got str"),
    (("json_schema", {"x": float("nan")}), "not JSON"),
    (("json_schema", {"x": object()}), "not JSON"),
    (("json_object", {"type": "object"}), "takes no value"),
    (("regex", ""), "non-empty string"),
    (("regex", 3), "non-empty string"),
    (("grammar", None), "non-empty string"),
    (("choice", []), "non-empty list of strings"),
    (("choice", "yes"), "non-empty list of strings"),
    (("choice", ["a", 1]), "non-empty list of strings"),
    (("choice", ["x"] * (MAX_CHOICES + 1)), f"at most {MAX_CHOICES} strings"),
    (("regex", "a" * (MAX_STRUCTURE_CHARS + 1)), f"the limit is {MAX_STRUCTURE_CHARS}"),
    (("json_schema", {"enum": list(range(100_000))}), "the limit is"),
]


@pytest.mark.parametrize("structure", VALID, ids=lambda s: s.kind)
def test_valid_structures_go_on_sampling_params(structure):
    assert SamplingParams(structure=structure).structure is structure


@pytest.mark.parametrize(("args", "message"), INVALID, ids=[str(i) for i in range(len(INVALID))])
def test_invalid_structure_names_the_problem(args, message):
    with pytest.raises(StructureError, match=message):
        Structure(*args)


def test_deeply_nested_schema_is_refused():
    schema: dict = {}
    for _ in range(100_000):
        schema = {"type": "array", "items": schema}
    with pytest.raises(StructureError, match="nested too deeply"):
        Structure("json_schema", schema)


def test_structure_is_a_value_error_and_sampling_params_checks_the_type():
    assert issubclass(StructureError, ValueError)
    with pytest.raises(SamplingParamsError, match=r"SamplingParams\.structure must be None or a Structure"):
        SamplingParams(structure={"type": "object"})


def test_later_changes_to_the_callers_schema_do_not_reach_the_structure():
    schema = {"type": "object"}
    structure = Structure("json_schema", schema)
    schema["type"] = "array"
    assert '"object"' in structure.text


def test_importing_structure_loads_neither_torch_nor_llguidance():
    code = "import sys, engine; engine.Structure('json_object'); "
    code += "print('torch' in sys.modules, 'llguidance' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
