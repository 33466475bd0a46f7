"""How much a request drafts: its draft length follows its acceptance, and a busy batch drafts less."""

from __future__ import annotations

from pathlib import Path

from engine import SamplingParams
from engine.core.drafting import (
    DISABLE_BY_BATCH_SIZE,
    FIRST_DRAFT_TOKENS,
    MAX_DRAFT_TOKENS,
    MAX_PAUSE_TOKENS,
    PAUSE_TOKENS,
    WINDOW_STEPS,
    DraftState,
)
from engine.speculative.ngram import NgramIndex

LOOP = [7, 8, 9] * 40  # a history that repeats: the drafter always has a match


def propose(state: DraftState, generated: int, limit: int) -> list[int]:
    """LOOP's n-gram drafts, as many as a request with ``state`` may take under ``limit``."""
    return NgramIndex().draft(LOOP, state.allowance(generated, limit))


def test_whole_acceptance_doubles_the_draft_and_a_rejection_shrinks_it_to_what_held() -> None:
    state = DraftState()
    assert len(propose(state, generated=0, limit=100)) == FIRST_DRAFT_TOKENS
    lengths = []
    for _ in range(5):
        drafted = len(propose(state, generated=0, limit=100))
        state.record(drafted, drafted, generated=0)
        lengths.append(state.length)
    assert lengths == sorted(lengths) and lengths[-1] == MAX_DRAFT_TOKENS
    state.record(MAX_DRAFT_TOKENS, 3, generated=0)
    assert len(propose(state, generated=0, limit=100)) == 4
    assert len(propose(state, generated=0, limit=2)) == 2  # the caller's limit still holds


def _verify_steps_until_paused(state: DraftState, generated: int, accept: bool) -> tuple[int, int]:
    """(verify steps, the generated count reached) drafting on LOOP until a draft is refused."""
    steps = 0
    while drafts := propose(state, generated, limit=100):
        state.record(len(drafts), len(drafts) if accept else 0, generated)
        steps, generated = steps + 1, generated + 1
    return steps, generated


def test_drafts_that_never_hold_pause_after_a_few_steps_for_longer_each_time() -> None:
    """A context that never repeats the same way costs a few verify steps, then ever fewer."""
    state, generated, pauses = DraftState(), 0, []
    for _ in range(6):
        steps, generated = _verify_steps_until_paused(state, generated, accept=False)
        assert steps == WINDOW_STEPS
        pauses.append(state.paused_until - generated + 1)
        generated = state.paused_until
    assert pauses == [min(MAX_PAUSE_TOKENS, PAUSE_TOKENS << i) for i in range(6)]
    for _ in range(WINDOW_STEPS):  # a window that pays brings the pause back to its first length
        drafts = propose(state, generated, limit=100)
        state.record(len(drafts), len(drafts), generated)
        generated += 1
    assert state.pause == PAUSE_TOKENS and propose(state, generated, limit=100)


def test_a_full_batch_drafts_nothing_and_one_stream_may_draft(make_engine, tiny_ckpt: Path) -> None:
    engine = make_engine(tiny_ckpt, max_num_seqs=8, max_num_batched_tokens=256)
    params = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    for _ in range(DISABLE_BY_BATCH_SIZE):
        engine.add_request(LOOP[:30], params)
    while engine.has_unfinished():
        engine.step()
    assert engine.metrics.spec_draft_tokens == 0  # every step decoded a busy batch
    single = make_engine(tiny_ckpt, max_num_seqs=8, max_num_batched_tokens=256)
    single.add_request(LOOP[:30], params)
    while single.has_unfinished():
        single.step()
    assert single.metrics.spec_draft_tokens > 0
