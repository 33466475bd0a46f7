"""The engine on its background thread: concurrent streams, cancel, errors, shutdown, idling."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from engine import EngineWorker, PromptTooLong, RequestError, SamplingParams, Structure, StructureError
from tests.engine.streams import joined, submit
from tests.waiting import wait_for

TEXTS = ["Hello! How are you", "def fibonacci(n", "Once upon a time, there was", "🙂 你好"]
PARAMS = [
    SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True),
    SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True),
    SamplingParams(temperature=0.9, top_p=0.9, seed=5, max_tokens=30, ignore_eos=True),
    SamplingParams(temperature=0.0, max_tokens=16, stop=["e"]),
]
LONG = SamplingParams(temperature=0.0, max_tokens=1500, ignore_eos=True)


@pytest.fixture
def worker(tiny_ckpt, make_engine):
    worker = EngineWorker(make_engine(tiny_ckpt, max_num_seqs=4, max_num_batched_tokens=32)).start()
    yield worker
    worker.shutdown()


def test_concurrent_streams_each_equal_their_own_solo_run_and_arrive_on_the_worker_thread(
    tiny_ckpt, make_engine, worker
):
    solo = [make_engine(tiny_ckpt).generate([text], p)[0] for text, p in zip(TEXTS, PARAMS, strict=True)]
    streams = [submit(worker, text, p, tag=i) for i, (text, p) in enumerate(zip(TEXTS, PARAMS, strict=True))]
    for (handle, stream), expected in zip(streams, solo, strict=True):
        events = stream.until_finished()
        assert joined(events) == (expected.text, expected.token_ids)
        last = events[-1]
        assert last.finish_reason == expected.finish_reason and last.request_id == handle.request_id
        assert last.tag == handle.tag and last.metrics.ttft is not None
        assert stream.threads == {"lfm-engine"}
    assert worker.snapshot().steps > 0


def test_a_failing_callback_does_not_stop_the_worker(worker):
    def broken(event):
        raise RuntimeError("a consumer bug")

    worker.submit(TEXTS[0], PARAMS[0], on_event=broken)
    _, stream = submit(worker, TEXTS[1], PARAMS[1])
    assert stream.until_finished()[-1].finish_reason == "length"


def test_cancel_from_another_thread_ends_the_stream_and_frees_its_blocks(worker):
    handle, stream = submit(worker, TEXTS[1], LONG)
    first = stream.next()
    threading.Thread(target=handle.cancel).start()
    events = [first, *stream.until_finished()]
    assert events[-1].finish_reason == "abort" and first.token_ids
    assert len(joined(events)[1]) < LONG.max_tokens
    wait_for(lambda: worker.snapshot().kv_blocks_used == 0 and not worker.snapshot().requests, "blocks freed")


def test_cancel_right_after_submit_takes_effect_before_any_step(tiny_ckpt, make_engine, prompts):
    engine = make_engine(tiny_ckpt, max_num_batched_tokens=16)
    worker = EngineWorker(engine)  # not started yet: submit and cancel queue up in order
    handle, stream = submit(worker, prompts([400], seed=20)[0], LONG)
    handle.cancel()
    worker.start()
    try:
        (event,) = stream.until_finished()
        assert event.finish_reason == "abort" and event.token_ids == ()
        wait_for(lambda: worker.snapshot().kv_blocks_used == 0, "blocks freed")
    finally:
        worker.shutdown()


def test_bad_requests_get_an_error_event_while_others_stream_on(worker):
    _, good = submit(worker, TEXTS[0], PARAMS[0])
    _, empty = submit(worker, "", PARAMS[0])
    _, huge = submit(worker, [20] * 5000, PARAMS[0])
    _, wrong = submit(worker, [20, 21], params="greedy please")
    _, unparsable = submit(worker, TEXTS[1], SamplingParams(structure=Structure("regex", "(unclosed")))
    refusals = [
        (empty, "empty", RequestError),
        (huge, "context", PromptTooLong),
        (wrong, "SamplingParams", RequestError),
        (unparsable, "regex", StructureError),
    ]
    for stream, message, kind in refusals:
        (event,) = stream.until_finished()
        assert event.finished and event.finish_reason == "error" and message in event.error
        assert event.rejected_by is not None and issubclass(
            event.rejected_by, kind
        )  # a caller tests the type
    events = good.until_finished()
    assert events[-1].finish_reason == "length" and all(e.rejected_by is None for e in events)


def test_shutdown_aborts_streams_in_flight_and_later_submits_fail_cleanly(worker):
    _, stream = submit(worker, TEXTS[2], LONG)
    stream.next()
    worker.shutdown()
    assert stream.until_finished()[-1].finish_reason == "abort"
    _, late = submit(worker, TEXTS[0], PARAMS[0])
    (event,) = late.until_finished()
    assert event.error == "the engine worker has shut down" and event.rejected_by is RequestError
    assert late.threads == {threading.current_thread().name}  # rejected at once, on the caller's thread


def test_an_asyncio_stream_yields_what_a_callback_gets_and_observes_each_event_on_the_loop(worker):
    _, reference = submit(worker, TEXTS[0], PARAMS[0])
    expected = joined(reference.until_finished())

    async def read() -> tuple[list, list[bool]]:
        loop_thread = threading.current_thread()
        observed: list[bool] = []
        stream = worker.stream(
            TEXTS[0], PARAMS[0], observe=lambda e: observed.append(threading.current_thread() is loop_thread)
        )
        return [event async for event in stream], observed

    events, observed = asyncio.run(read())
    assert joined(events) == expected and events[-1].finish_reason == "length"
    assert observed and all(observed) and len(observed) == len(events)


def test_cancelling_an_asyncio_stream_aborts_every_sample_and_its_final_events_are_still_observed(worker):
    async def cancel_after_first() -> list:
        finals: list = []
        done = asyncio.Event()

        def observe(event) -> None:
            if event.finished:
                finals.append(event)
                if len(finals) == 2:
                    done.set()

        stream = worker.stream(TEXTS[1], LONG, n=2, observe=observe)
        await anext(aiter(stream))
        stream.cancel()
        stream.cancel()  # a second cancel is harmless
        assert [event async for event in stream] == []  # a cancelled stream ends at once
        await done.wait()
        return finals

    finals = asyncio.run(cancel_after_first())
    assert sorted(event.index for event in finals) == [0, 1]
    assert {event.finish_reason for event in finals} == {"abort"}
    wait_for(lambda: worker.snapshot().kv_blocks_used == 0 and not worker.snapshot().requests, "blocks freed")


def test_idle_worker_sleeps_instead_of_spinning(worker):
    """CPU ticks of the worker thread while idle, from /proc: a spinning loop would use them all."""
    submit(worker, TEXTS[0], PARAMS[0])[1].until_finished()
    stat = Path(f"/proc/self/task/{worker._thread.native_id}/stat")

    def cpu_ticks() -> int:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    before = cpu_ticks()
    time.sleep(0.5)  # about 50 ticks of wall time
    assert cpu_ticks() - before <= 2


def test_a_long_prompt_streams_its_prefill_progress_before_its_tokens(tiny_ckpt, make_engine, prompts):
    """The pane's one feed: each prompt chunk computed is an event (no tokens) saying how far the
    prefill got, then the tokens come as decode events."""
    worker = EngineWorker(make_engine(tiny_ckpt, max_num_batched_tokens=16)).start()
    try:
        _, stream = submit(worker, prompts([100], seed=21)[0], PARAMS[0])
        events = stream.until_finished()
    finally:
        worker.shutdown()
    progress = [e for e in events if not e.token_ids and not e.finished]
    assert [(e.phase, e.prompt_done) for e in progress] == [("prefill", done) for done in range(16, 100, 16)]
    assert all(e.text == "" and e.metrics.prompt_tokens == 100 for e in progress)
    first_token = events[len(progress)]
    assert first_token.token_ids and first_token.phase == "decode" and first_token.prompt_done == 100
    assert events[-1].phase == "finished" and len(joined(events)[1]) == PARAMS[0].max_tokens


def test_a_preempted_request_says_so_and_only_streaming_steps_report_progress(
    tiny_ckpt, make_engine, prompts
):
    """Preemption is news for the stream (an event in phase "preempted"); `Engine.step()` without
    `report_progress` keeps returning only outputs that carry tokens or end a request."""
    config = {"block_size": 8, "num_kv_blocks": 20, "max_num_seqs": 4, "max_num_batched_tokens": 48}
    batch = prompts([40, 90, 25, 60, 10, 75, 33], seed=6)
    plain, streaming = make_engine(tiny_ckpt, **config), make_engine(tiny_ckpt, **config)
    streaming.report_progress = True
    for engine in (plain, streaming):
        for prompt in batch:
            engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True))
    while plain.has_unfinished():
        assert all(out.new_token_ids or out.finished for out in plain.step())
    phases = set()
    while streaming.has_unfinished():
        phases.update(out.phase for out in streaming.step() if not out.new_token_ids)
    assert streaming.snapshot().preemptions > 0 and phases == {"preempted", "prefill"}
