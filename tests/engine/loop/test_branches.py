"""n samples of one prompt (Engine.add_request(..., n=...)): the prompt is computed once, the
branches continue from its exact cache state, and each behaves as a request of its own."""

from __future__ import annotations

import pytest

from engine import EngineWorker, RequestError, SamplingParams
from engine.loop.branches import MAX_N, branch_id
from tests.engine.streams import Stream

SAMPLED = SamplingParams(temperature=1.0, max_tokens=12, ignore_eos=True)


def run(engine, prompt, params, n):
    """Add one request of n samples and step to the end: the final outputs by index."""
    request_id = engine.add_request(prompt, params, n=n)
    finals = {}
    while engine.has_unfinished():
        finals.update((out.index, out) for out in engine.step() if out.finished)
    assert sorted(finals) == list(range(n))
    assert [finals[i].request_id for i in range(n)] == [branch_id(request_id, i) for i in range(n)]
    return [finals[i] for i in range(n)]


@pytest.mark.parametrize("preset", ["default", "lfm3"])
def test_seeded_branch_i_is_the_request_seeded_seed_plus_i_and_the_prompt_is_computed_once(
    preset, tiny_ckpt_factory, make_engine, prompts
):
    """A branch continues from a copy of the prompt's state (shared full blocks, the partly filled
    last block and the conv row copied), so it samples exactly what a request of its own would."""
    path = tiny_ckpt_factory(preset)
    prompt = prompts([43], seed=50)[0]  # 43 tokens: five full blocks of 8 and a partial one
    params = SamplingParams(temperature=1.0, seed=7, max_tokens=12, ignore_eos=True, logprobs=2)
    engine = make_engine(path, block_size=8)
    branches = run(engine, prompt, params, n=4)

    assert engine.metrics.prefill_tokens == len(prompt)
    assert engine.metrics.prompt_tokens == len(prompt)
    assert len({tuple(out.token_ids) for out in branches}) == 4, "sampled branches differ"
    single = make_engine(path, block_size=8)
    for index, out in enumerate(branches):
        alone = single.generate([prompt], SamplingParams(**{**_fields(params), "seed": 7 + index}))[0]
        assert out.token_ids == alone.token_ids
        assert [e.logprob for e in out.logprobs] == pytest.approx(
            [e.logprob for e in alone.logprobs], abs=1e-4
        )
    assert [out.metrics.prompt_tokens for out in branches] == [len(prompt)] * 4
    assert engine.block_manager.num_used_blocks == 0


def test_greedy_branches_are_identical_and_seeded_requests_reproduce(tiny_ckpt, make_engine, prompts):
    prompt = prompts([20], seed=51)[0]
    engine = make_engine(tiny_ckpt)
    greedy = run(engine, prompt, SamplingParams(temperature=0, max_tokens=10, ignore_eos=True), n=3)
    assert len({tuple(out.token_ids) for out in greedy}) == 1
    seeded = SamplingParams(**{**_fields(SAMPLED), "seed": 99})
    first = [out.token_ids for out in run(engine, prompt, seeded, n=3)]
    assert [out.token_ids for out in run(make_engine(tiny_ckpt), prompt, seeded, n=3)] == first


def test_branches_beyond_the_free_slots_wait_and_still_finish(tiny_ckpt, make_engine, prompts):
    """max_num_seqs 2: two branches fork, the others queue and resume from the prefix cache."""
    prompt = prompts([37], seed=52)[0]
    params = SamplingParams(**{**_fields(SAMPLED), "seed": 3})
    crowded = run(make_engine(tiny_ckpt, max_num_seqs=2), prompt, params, n=4)
    roomy = run(make_engine(tiny_ckpt), prompt, params, n=4)
    assert [out.token_ids for out in crowded] == [out.token_ids for out in roomy]


def test_aborting_a_branch_frees_only_its_blocks(tiny_ckpt, make_engine, prompts):
    prompt = prompts([40], seed=53)[0]
    params = SamplingParams(**{**_fields(SAMPLED), "seed": 4, "max_tokens": 20})
    expected = [out.token_ids for out in run(make_engine(tiny_ckpt), prompt, params, n=3)]

    engine = make_engine(tiny_ckpt)
    request_id = engine.add_request(prompt, params, n=3)
    while not any(out.index == 1 for out in engine.step()):
        pass
    used = engine.block_manager.num_used_blocks
    aborted = engine.abort(branch_id(request_id, 1))
    assert aborted.finished and aborted.finish_reason == "abort" and aborted.index == 1
    # the branch held only its copy of the last, partly filled block: the shared ones stay
    assert engine.block_manager.num_used_blocks == used - 1
    finals = {}
    while engine.has_unfinished():
        finals.update((out.index, out.token_ids) for out in engine.step() if out.finished)
    assert finals == {0: expected[0], 2: expected[2]}
    assert engine.block_manager.num_used_blocks == 0


def test_aborting_the_first_branch_before_the_prompt_hands_it_to_the_next(tiny_ckpt, make_engine, prompts):
    prompt = prompts([60], seed=54)[0]
    params = SamplingParams(**{**_fields(SAMPLED), "seed": 8})
    expected = [out.token_ids for out in run(make_engine(tiny_ckpt), prompt, params, n=3)]

    engine = make_engine(tiny_ckpt, max_num_batched_tokens=16)
    request_id = engine.add_request(prompt, params, n=3)
    engine.step()  # a first chunk of the prompt
    assert engine.abort(request_id).finish_reason == "abort"
    finals = {}
    while engine.has_unfinished():
        finals.update((out.index, out.token_ids) for out in engine.step() if out.finished)
    assert finals == {1: expected[1], 2: expected[2]}
    assert engine.block_manager.num_used_blocks == 0


def test_bad_n_is_refused_and_changes_nothing(tiny_ckpt, make_engine):
    engine = make_engine(tiny_ckpt)
    for n in (0, -1, MAX_N + 1, 2.0, True, "2"):
        with pytest.raises(RequestError, match=r"^n must be an int in \[1, "):
            engine.add_request([5, 6, 7], SamplingParams(), n=n)
    engine.add_request([5, 6, 7], SamplingParams(), request_id="a/1")
    with pytest.raises(RequestError, match="'a/1' is already in use"):
        engine.add_request([5, 6, 7], SamplingParams(), request_id="a", n=2)
    assert len(engine.scheduler.waiting) == 1


def test_the_worker_streams_each_sample_with_its_index_and_cancels_them_all(tiny_ckpt, make_engine, prompts):
    prompt = prompts([25], seed=55)[0]
    params = SamplingParams(**{**_fields(SAMPLED), "seed": 2, "logprobs": 1})
    expected = [out.token_ids for out in run(make_engine(tiny_ckpt), prompt, params, n=2)]
    worker = EngineWorker(make_engine(tiny_ckpt)).start()
    try:
        stream = Stream()
        worker.submit(prompt, params, on_event=stream.put, n=2)
        events = [stream.next()]
        while sum(event.finished for event in events) < 2:
            events.append(stream.next())
        for index in (0, 1):
            mine = [event for event in events if event.index == index]
            assert [t for event in mine for t in event.token_ids] == expected[index]
            assert [e.token_id for event in mine for e in event.logprobs] == expected[index]
            assert [event.finished for event in mine].count(True) == 1 and mine[-1].finished

        stream = Stream()
        handle = worker.submit(
            prompt, SamplingParams(max_tokens=10_000, ignore_eos=True), on_event=stream.put, n=3
        )
        stream.next()
        handle.cancel()
        finals = []
        while len(finals) < 3:
            event = stream.next()
            if event.finished:
                finals.append((event.index, event.finish_reason))
        assert sorted(finals) == [(0, "abort"), (1, "abort"), (2, "abort")]

        stream = Stream()
        worker.submit(prompt, SamplingParams(logit_bias={10**6: 1.0}), on_event=stream.put, n=2)
        rejected = [stream.next(), stream.next()]
        assert [(e.index, e.finish_reason) for e in rejected] == [(0, "error"), (1, "error")]
        assert "SamplingParams.logit_bias has token id 1000000" in rejected[0].error
    finally:
        worker.shutdown()


def _fields(params: SamplingParams) -> dict:
    return {name: getattr(params, name) for name in params.__slots__}
