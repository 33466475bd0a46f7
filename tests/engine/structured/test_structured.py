"""Constrained decoding (SamplingParams.structure) through the real engine on a tiny random checkpoint:
outputs match their structure, greedy output is batch invariant and identical with speculation
(n-gram and draft model) on and off and under preemption, and unconstrained neighbours are untouched."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from engine import SamplingParams, Structure
from tests.engine.conftest import random_prompt

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "tags", "ok"],
    "additionalProperties": False,
}
REGEX = r"[a-z]{2,6}-[0-9]{1,3}( [a-z]{1,5}){0,3}"
CHOICES = ["yes", "no", "perhaps not"]
# a regex whose replies repeat themselves, so n-gram drafts are both accepted and rejected
LOOPING = r"([a-e]{1,3} ){4,30}\."


def structures() -> list[Structure]:
    return [
        Structure("json_schema", SCHEMA),
        Structure("json_object"),
        Structure("regex", REGEX),
        Structure("choice", CHOICES),
        Structure("grammar", 'start: "x=" NUM ("," NUM)*\nNUM: /[0-9]{1,3}/\n'),
    ]


def assert_matches(structure: Structure, text: str) -> None:
    if structure.kind == "json_schema":
        jsonschema.validate(json.loads(text), structure.value)
    elif structure.kind == "json_object":
        assert isinstance(json.loads(text), dict)
    elif structure.kind == "regex":
        assert re.fullmatch(structure.value, text), text
    elif structure.kind == "choice":
        assert text in structure.value
    else:
        assert re.fullmatch(r"x=\d{1,3}(,\d{1,3})*", text), text


@pytest.fixture(scope="module")
def engine(tiny_ckpt, make_engine):
    return make_engine(tiny_ckpt, speculative="off")


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_outputs_match_their_structure_and_stop(engine, temperature):
    batch = structures()
    params = [SamplingParams(temperature=temperature, max_tokens=200, seed=3, structure=s) for s in batch]
    outs = engine.generate([random_prompt(12, i) for i in range(len(batch))], params)
    for structure, out in zip(batch, outs, strict=True):
        if structure.kind == "json_object" and out.finish_reason == "length":
            assert out.text.startswith("{")  # a random model may write one key forever: bounded by nothing
            continue
        assert out.finish_reason == "stop", (structure.kind, out.text)
        assert_matches(structure, out.text)


def test_a_structure_ends_the_reply_even_with_ignore_eos(engine):
    params = SamplingParams(
        temperature=0.0, max_tokens=50, ignore_eos=True, structure=Structure("choice", CHOICES)
    )
    out = engine.generate([random_prompt(8, 1)], params)[0]
    assert out.finish_reason == "stop" and out.text in CHOICES


def test_greedy_constrained_output_is_batch_invariant(engine):
    prompts = [random_prompt(n, 40 + n) for n in (5, 17, 9, 30, 12)]
    params = [SamplingParams(temperature=0.0, max_tokens=60, structure=s) for s in structures()]
    alone = [engine.generate([p], q)[0].token_ids for p, q in zip(prompts, params, strict=True)]
    plain = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    neighbours = [random_prompt(n, 90 + n) for n in (3, 21)]
    together = engine.generate(prompts + neighbours, [*params, plain, plain])
    assert [out.token_ids for out in together[: len(prompts)]] == alone
    # and the unconstrained rows are what they are without constrained neighbours
    assert [out.token_ids for out in together[len(prompts) :]] == [
        o.token_ids for o in engine.generate(neighbours, plain)
    ]


def test_a_constrained_neighbour_leaves_sampled_rows_unchanged(engine):
    sampled = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=30, seed=7, ignore_eos=True)
    prompt = random_prompt(10, 5)
    alone = engine.generate([prompt], sampled)[0].token_ids
    constrained = SamplingParams(temperature=1.0, max_tokens=30, seed=8, structure=Structure("json_object"))
    beside = engine.generate([prompt, random_prompt(10, 6)], [sampled, constrained])[0].token_ids
    assert beside == alone


def echo_prompts(engine, params: list[SamplingParams]) -> list[list[int]]:
    """P + R + P with R the constrained greedy reply to P: a tiny model mostly repeats R after the
    second P, so drafts are accepted and (where it strays, or the grammar forbids) rejected."""
    firsts = [random_prompt(n, 300 + n) for n in (14, 6, 23, 9)]
    replies = [out.token_ids for out in engine.generate(firsts, params)]
    return [p + r + p for p, r in zip(firsts, replies, strict=True)]


SPECULATION = {
    "ngram": {"speculative": "ngram", "max_num_seqs": 4, "max_num_batched_tokens": 64},
    "ngram-preempting": {
        "speculative": "ngram",
        "max_num_seqs": 4,
        "max_num_batched_tokens": 48,
        "block_size": 8,
        "num_kv_blocks": 24,
    },
    "draft-model": {"draft_model": "self", "max_num_seqs": 4, "max_num_batched_tokens": 64},
}


@pytest.mark.parametrize("setup", sorted(SPECULATION))
def test_greedy_constrained_output_is_identical_with_speculation_on_and_off(setup, tiny_ckpt, make_engine):
    config = dict(SPECULATION[setup])
    if config.get("draft_model") == "self":
        config["draft_model"] = str(tiny_ckpt)
    kinds = [Structure("regex", LOOPING), Structure("json_schema", SCHEMA), Structure("regex", LOOPING)]
    params = [SamplingParams(temperature=0.0, max_tokens=48, structure=s) for s in [*kinds, kinds[0]]]
    off = make_engine(tiny_ckpt, speculative="off", **{k: v for k, v in config.items() if k == "block_size"})
    batch = echo_prompts(off, params)
    expected = [out.token_ids for out in off.generate(batch, params)]
    on = make_engine(tiny_ckpt, **config)
    outs = on.generate(batch, params)
    assert [out.token_ids for out in outs] == expected
    assert [out.error for out in outs] == [None] * len(outs)
    metrics = on.metrics
    assert metrics.spec_accepted_tokens > 0
    if setup != "draft-model":  # the draft model is the target itself: its masked picks are all accepted
        assert metrics.spec_draft_tokens > metrics.spec_accepted_tokens  # rejected drafts too
    if setup.endswith("preempting"):
        assert metrics.preemptions > 0
    assert on.block_manager.num_used_blocks == 0


def test_every_branch_of_n_matches_the_structure(engine):
    """The branches draw their first token from their parent's masked row, then go on alone."""
    structure = Structure("json_schema", SCHEMA)
    params = SamplingParams(temperature=1.0, max_tokens=200, seed=5, structure=structure)
    request_id = engine.add_request(random_prompt(9, 7), params, n=3)
    finals = {}
    while engine.has_unfinished():
        finals.update((out.request_id, out) for out in engine.step() if out.finished)
    assert len(finals) == 3 and request_id in finals
    for out in finals.values():
        assert out.error is None and out.finish_reason == "stop", out.text
        jsonschema.validate(json.loads(out.text), SCHEMA)
