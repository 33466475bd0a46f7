"""The engine dashboard explains a queue beside free slots, and uses the width it is given: at 160
columns seven requests are all listed, not three and "+4 more" beside 100 empty columns."""

from __future__ import annotations

import itertools
from pathlib import Path

import torch
from textual.app import App, ComposeResult

import app
from app.app import LfmChatApp
from app.ui.widgets.dashboard import WAIT_WORDS, Dashboard, one_line
from engine.core.config import EngineConfig
from engine.core.metrics import EngineMetrics, RequestMetrics
from engine.core.request import Request
from engine.core.sampling_params import SamplingParams
from engine.kv.block_manager import BlockManager
from engine.loop.scheduler import WAIT_REASONS, Scheduler
from engine.loop.snapshot import EngineSnapshot, take_snapshot

ARRIVALS = itertools.count()


def engine_state(requests: int, max_num_seqs: int, num_blocks: int = 64) -> EngineSnapshot:
    """A real scheduler after one step (no model: the scheduler never touches tensors)."""
    config = EngineConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=64, block_size=4)
    scheduler = Scheduler(BlockManager(num_blocks, 4, max_num_seqs, False), max_num_seqs, 64)
    for n in range(requests):
        arrival = next(ARRIVALS)
        prompt = list(range(20, 20 + 6 + n))
        scheduler.add(
            Request(
                request_id=f"r{arrival}",
                prompt_token_ids=prompt,
                params=SamplingParams(max_tokens=8),
                arrival=arrival,
                max_tokens=8,
                stop_token_ids=frozenset(),
                generator=torch.Generator(),
                metrics=RequestMetrics(arrival_time=0.0, prompt_tokens=len(prompt)),
                tag=f"p{n}",
            )
        )
    scheduler.update(scheduler.schedule())
    return take_snapshot(0.0, EngineMetrics(0.0), scheduler, scheduler.block_manager, config)


class Host(App[None]):
    CSS_PATH = str(Path(app.__file__).parent / LfmChatApp.CSS_PATH)  # the dashboard's real widths

    def compose(self) -> ComposeResult:
        yield Dashboard(id="dashboard")


def table_text(dashboard: Dashboard) -> list[str]:
    return [" ".join(row) for row in dashboard.table.rows]


async def test_every_wait_reason_has_words() -> None:
    assert set(WAIT_WORDS) == set(WAIT_REASONS)


async def test_a_queue_beside_free_slots_says_why_it_waits() -> None:
    snap = engine_state(requests=3, max_num_seqs=8, num_blocks=4)  # blocks run out before slots do
    assert snap.waiting and snap.running < snap.max_num_seqs
    assert WAIT_WORDS["kv_blocks"] in one_line(snap)
    async with Host().run_test(size=(160, 12)) as pilot:
        dashboard = pilot.app.query_one(Dashboard)
        dashboard.show(snap, {})
        await pilot.pause()
        assert f"1 queued: {WAIT_WORDS['kv_blocks']}" in str(dashboard.border_subtitle)


async def test_seven_requests_are_all_listed_at_160_columns() -> None:
    snap = engine_state(requests=7, max_num_seqs=8)
    labels = {f"p{n}": f"pane {n + 1}" for n in range(7)}
    async with Host().run_test(size=(160, 12)) as pilot:
        dashboard = pilot.app.query_one(Dashboard)
        dashboard.show(snap, labels)
        await pilot.pause()
        dashboard.show(snap, labels)  # laid out now: the table knows its width
        await pilot.pause()
        text = " ".join(table_text(dashboard))
        assert all(f"pane {n}" in text for n in range(1, 8)) and "more" not in text
        assert len(dashboard.table.rows) <= 4  # the table's height did not change
