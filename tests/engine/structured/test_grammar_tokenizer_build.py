"""llguidance's tokenizer is built off the engine's step: while it builds, constrained requests wait in
the engine and everything else decodes; a structure is still refused at once, and an aborted waiting
request leaves nothing behind. The build is held by an Event (the real build runs once it is set)."""

from __future__ import annotations

import json
import threading

import jsonschema
import pytest

from engine import SamplingParams, Structure, StructureError
from engine.structured.compiler import GrammarCompiler
from tests.engine.conftest import random_prompt

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}},
    "required": ["id", "ok"],
    "additionalProperties": False,
}


class HeldBuild(GrammarCompiler):
    """The engine's compiler, whose tokenizer build starts only once ``release`` is set."""

    def __init__(self, *args: object, release: threading.Event) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.release = release

    def _build_lltokenizer(self) -> None:
        self.release.wait()
        super()._build_lltokenizer()


@pytest.fixture
def held(tiny_ckpt, make_engine):
    """An engine whose grammar tokenizer is still building, and the Event that lets it finish."""
    engine = make_engine(tiny_ckpt, speculative="off")
    release = threading.Event()
    engine.grammars = HeldBuild(engine.tokenizer, engine.model_config.vocab_size, release=release)
    yield engine, release
    release.set()  # the build thread ends with the test


def test_an_unconstrained_request_decodes_while_the_grammar_tokenizer_builds(held):
    engine, release = held
    constrained = SamplingParams(temperature=0.0, max_tokens=40, structure=Structure("json_schema", SCHEMA))
    waiting = engine.add_request(random_prompt(10, 1), constrained)
    plain = engine.add_request(
        random_prompt(10, 2), SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    )
    seen: dict[str, list[int]] = {waiting: [], plain: []}
    finished = set()
    while plain not in finished:
        for out in engine.step():
            seen[out.request_id] += out.new_token_ids
            if out.finished:
                finished.add(out.request_id)
    assert len(seen[plain]) == 8 and seen[waiting] == []
    assert engine.has_unfinished()  # the constrained request waits for the build, not lost
    release.set()
    while engine.has_unfinished():
        for out in engine.step():
            seen[out.request_id] += out.new_token_ids
            if out.finished:
                final = out
    assert final.request_id == waiting and final.finish_reason == "stop"
    jsonschema.validate(json.loads(final.text), SCHEMA)


def test_a_bad_structure_is_refused_at_once_while_the_tokenizer_builds(held):
    engine, _ = held
    with pytest.raises(StructureError, match="regex structure does not compile"):
        engine.add_request([20, 21, 22], SamplingParams(structure=Structure("regex", "(a")))
    assert not engine.has_unfinished()


def test_samples_aborted_while_they_wait_for_the_build_leave_nothing(held):
    engine, release = held
    params = SamplingParams(temperature=0.0, max_tokens=5, structure=Structure("choice", ["yes", "no"]))
    request_id = engine.add_request(random_prompt(6, 3), params, n=2)
    assert engine.abort(request_id).finish_reason == "abort"
    assert engine.has_unfinished()  # its second sample still waits for the build
    release.set()
    finals = []
    while engine.has_unfinished():
        finals += [out for out in engine.step() if out.finished]
    assert [(out.request_id, out.text in ("yes", "no")) for out in finals] == [(f"{request_id}/1", True)]
    assert engine.abort(f"{request_id}/1") is None
