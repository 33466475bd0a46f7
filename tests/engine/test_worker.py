"""The engine on its background thread: concurrent streams from asyncio and threads, cancel, errors."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from engine import EngineWorker, SamplingParams

TIMEOUT = 120.0  # a hang guard only; nothing here is timed
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


def wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


async def test_concurrent_async_streams_each_equal_their_own_solo_run(tiny_ckpt, make_engine, worker):
    solo = [make_engine(tiny_ckpt).generate([text], p)[0] for text, p in zip(TEXTS, PARAMS, strict=True)]

    async def consume(handle):
        events = [event async for event in handle]
        return "".join(e.text for e in events), [t for e in events for t in e.token_ids], events[-1]

    handles = [worker.submit(text, p, tag=i) for i, (text, p) in enumerate(zip(TEXTS, PARAMS, strict=True))]
    results = await asyncio.wait_for(asyncio.gather(*(consume(h) for h in handles)), TIMEOUT)

    for (text, ids, last), expected, handle in zip(results, solo, handles, strict=True):
        assert (text, ids) == (expected.text, expected.token_ids)
        assert last.finished and last.finish_reason == expected.finish_reason
        assert last.tag == handle.tag and last.metrics.ttft is not None
        assert list(handle.events()) == []  # each event is handed out once, then dropped
    assert worker.snapshot().steps > 0


def test_a_late_blocking_consumer_still_sees_every_event(worker):
    handle = worker.submit(TEXTS[0], PARAMS[0])
    out = handle.result(timeout=TIMEOUT)  # finished before anyone iterated
    events = list(handle.events(timeout=TIMEOUT))
    assert events[-1].finished and [t for e in events for t in e.token_ids] == out.token_ids
    assert "".join(e.text for e in events) == out.text


def test_on_event_callback_runs_on_the_worker_thread_and_is_the_only_consumer(worker):
    seen, threads = [], set()

    def on_event(event):
        seen.append(event)
        threads.add(threading.current_thread().name)

    handle = worker.submit(TEXTS[0], PARAMS[0], on_event=on_event)
    out = handle.result(timeout=TIMEOUT)
    assert seen[-1].finished and out.token_ids == [t for e in seen for t in e.token_ids]
    assert threads == {"lfm-engine"}
    with pytest.raises(RuntimeError, match="on_event callback"):
        next(handle.events(timeout=TIMEOUT))  # nothing is queued for it: it would wait forever


def test_cancel_from_another_thread_ends_the_stream_and_frees_its_blocks(worker):
    handle = worker.submit(TEXTS[1], LONG)
    first = next(handle.events(timeout=TIMEOUT))
    threading.Thread(target=handle.cancel).start()
    out = handle.result(timeout=TIMEOUT)
    assert out.finish_reason == "abort" and first.token_ids and len(out.token_ids) < LONG.max_tokens
    wait_until(
        lambda: worker.snapshot().kv_blocks_used == 0 and not worker.snapshot().requests, "blocks freed"
    )


def test_cancel_right_after_submit_takes_effect_before_any_step(tiny_ckpt, make_engine, prompts):
    engine = make_engine(tiny_ckpt, max_num_batched_tokens=16)
    worker = EngineWorker(engine)  # not started yet: submit and cancel queue up in order
    handle = worker.submit(prompts([400], seed=20)[0], LONG)
    handle.cancel()
    worker.start()
    try:
        out = handle.result(timeout=TIMEOUT)
        assert out.finish_reason == "abort" and out.token_ids == []
        wait_until(lambda: worker.snapshot().kv_blocks_used == 0, "blocks freed")
    finally:
        worker.shutdown()


def test_bad_requests_get_an_error_event_while_others_stream_on(worker):
    good = worker.submit(TEXTS[0], PARAMS[0])
    empty = worker.submit("", PARAMS[0])
    huge = worker.submit([20] * 5000, PARAMS[0])
    wrong = worker.submit([20, 21], params="greedy please")
    for handle, message in [(empty, "empty"), (huge, "context"), (wrong, "SamplingParams")]:
        (event,) = list(handle.events(timeout=TIMEOUT))
        assert event.finished and event.finish_reason == "error" and message in event.error
    assert good.result(timeout=TIMEOUT).finish_reason == "length"


def test_shutdown_aborts_streams_in_flight_and_later_submits_fail_cleanly(worker):
    handle = worker.submit(TEXTS[2], LONG)
    next(handle.events(timeout=TIMEOUT))
    worker.shutdown()
    assert handle.result(timeout=TIMEOUT).finish_reason == "abort"
    late = worker.submit(TEXTS[0], PARAMS[0])
    assert late.result(timeout=TIMEOUT).error == "the engine worker has shut down"


def test_idle_worker_sleeps_instead_of_spinning(worker):
    """CPU ticks of the worker thread while idle, from /proc: a spinning loop would use them all."""
    worker.submit(TEXTS[0], PARAMS[0]).result(timeout=TIMEOUT)
    stat = Path(f"/proc/self/task/{worker._thread.native_id}/stat")

    def cpu_ticks() -> int:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    before = cpu_ticks()
    time.sleep(0.5)  # about 50 ticks of wall time
    assert cpu_ticks() - before <= 2
