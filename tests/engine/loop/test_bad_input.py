"""Bad input fails that request alone, with a message that says what is wrong; serving goes on."""

from __future__ import annotations

import shutil

import pytest

import engine.loop.snapshot as snapshot_module
from engine import EngineWorker, RequestError, SamplingParams, SamplingParamsError
from engine.loop.snapshot import SNAPSHOT_REQUESTS
from model.tiny.lfm2 import tiny_tokenizer_json
from tests.engine.streams import submit

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def engine(tiny_ckpt, make_engine):
    return make_engine(tiny_ckpt, max_model_len=64)


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ([], "empty"),
        ("", "empty"),
        (list(range(20, 84)), "64 tokens but the context holds 64"),
        ([20, 512, 21], "512 is outside the vocabulary"),
        ([20, -1], "-1 is outside the vocabulary"),
        ([20, 1.5], "string or a list of token ids"),
        ("fine \ud800 text", "unpaired surrogate at character 5"),
        (b"\x14\x15", "not bytes"),
        (bytearray(b"\x14\x15"), "not bytes"),
    ],
)
def test_bad_prompts_are_rejected_with_a_clear_message(engine, prompt, message):
    with pytest.raises(RequestError, match=message):
        engine.add_request(prompt, GREEDY)


def test_invalid_sampling_values_are_rejected_even_if_set_after_construction(engine):
    with pytest.raises(SamplingParamsError, match="temperature"):
        SamplingParams(temperature=-1.0)
    params = SamplingParams()
    params.top_p = 1.5
    with pytest.raises(SamplingParamsError, match="top_p"):
        engine.add_request([20, 21], params)
    with pytest.raises(RequestError, match="SamplingParams"):
        engine.add_request([20, 21], {"temperature": 0.0})


def test_rejections_leave_running_requests_and_later_ones_unharmed(tiny_ckpt, engine, make_engine, prompts):
    good, later = prompts([30, 20], seed=15)
    expected = make_engine(tiny_ckpt).generate([good, later], GREEDY)
    rid = engine.add_request(good, GREEDY)
    engine.step()
    for bad in ([], list(range(20, 90)), [9999]):
        with pytest.raises(RequestError):
            engine.add_request(bad, GREEDY)
    finals = {}
    while engine.has_unfinished():
        finals.update((o.request_id, o) for o in engine.step() if o.finished)
    assert finals[rid].token_ids == expected[0].token_ids
    assert engine.generate([later], GREEDY)[0].token_ids == expected[1].token_ids


def test_prompt_that_just_fits_generates_up_to_the_context_end(engine):
    out = engine.generate([list(range(20, 83))], GREEDY)[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 1


def test_a_failing_step_fails_only_that_batch_and_the_engine_keeps_serving(engine, monkeypatch, prompts):
    """Fault injection: the model raising mid-step (e.g. out of memory) is the one thing we must fake."""
    first, second, after = prompts([10, 12, 14], seed=16)
    before = engine.generate([after], GREEDY)[0].token_ids
    engine.add_request(first, GREEDY, request_id="x1")
    engine.add_request(second, GREEDY, request_id="x2")
    real_run = engine.runner.run

    def broken(chunks):
        monkeypatch.setattr(engine.runner, "run", real_run)
        raise RuntimeError("simulated out of memory")

    monkeypatch.setattr(engine.runner, "run", broken)
    outs = engine.step()
    assert {o.request_id for o in outs} == {"x1", "x2"}
    assert all(o.finish_reason == "error" and "simulated out of memory" in o.error for o in outs)
    assert not engine.has_unfinished() and engine.block_manager.num_used_blocks == 0
    assert engine.generate([after], GREEDY)[0].token_ids == before


@pytest.fixture(scope="module")
def big_tokenizer_ckpt(tiny_ckpt, tmp_path_factory):
    """The tiny model (512 embedding rows) with a tokenizer of 1024 ids: text can encode past the model."""
    path = shutil.copytree(tiny_ckpt, tmp_path_factory.mktemp("big-tokenizer") / "ckpt")
    (path / "tokenizer.json").write_text(tiny_tokenizer_json(1024), encoding="utf-8")
    return path


def test_an_out_of_vocab_text_prompt_fails_alone_in_its_batch(big_tokenizer_ckpt, make_engine, prompts):
    """Issue 17, item 6: such an id used to reach the embedding inside the batched step and fail it all."""
    engine = make_engine(big_tokenizer_ckpt)
    bad_text = "The quick brown fox"
    assert max(engine.tokenizer.encode(bad_text)) >= engine.model_config.vocab_size  # the case under test
    goods = prompts([12, 20, 7], seed=17)
    alone = [make_engine(big_tokenizer_ckpt).generate([p], GREEDY)[0].token_ids for p in goods]
    worker = EngineWorker(engine)  # not started: all four are added before the first step batches them
    streams = [submit(worker, p, GREEDY)[1] for p in (goods[0], goods[1], bad_text, goods[2])]
    worker.start()
    try:
        events = [stream.until_finished() for stream in streams]
    finally:
        worker.shutdown()
    (bad,) = events.pop(2)
    assert bad.finish_reason == "error" and "outside the vocabulary [0, 512)" in bad.error
    assert [[t for e in stream for t in e.token_ids] for stream in events] == alone


def test_a_flood_of_queued_requests_keeps_the_snapshot_small(engine, monkeypatch):
    """Issue 17, item 9: listing every one of 10k queued requests cost ~100 ms in every step."""
    ids = [engine.add_request([20 + i % 400, 21], GREEDY) for i in range(3 * SNAPSHOT_REQUESTS)]
    looked_at = []

    def counting(request):
        looked_at.append(request)
        return request_snapshot(request)

    request_snapshot = snapshot_module.request_snapshot
    monkeypatch.setattr(snapshot_module, "request_snapshot", counting)
    try:
        snap = engine.snapshot()
        assert snap.waiting == len(ids) and snap.running == 0
        assert [r.request_id for r in snap.requests] == ids[:SNAPSHOT_REQUESTS]
        assert len(looked_at) == SNAPSHOT_REQUESTS  # the rest were never touched
    finally:
        for request_id in ids:
            engine.abort(request_id)
