"""Drafts are proposed in the runner, beside the forward; the scheduler only trims the proposed ids.

The scheduler decides how many drafts a request may verify and never makes one (it imports no
torch and no model code); the runner's proposer fills `Request.spec_token_ids` before each step
is scheduled, and the step verifies a prefix of them. A preempted request's proposals are dropped.
"""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from engine import SamplingParams
from engine.core.drafting import DISABLE_BY_BATCH_SIZE, MAX_DRAFT_TOKENS, draft_rows
from engine.core.request import Request, RequestStatus
from engine.kv.block_manager import BlockManager
from engine.loop.scheduler import Scheduler
from engine.speculative.ngram import NgramIndex, NgramProposer
from tests.engine.conftest import random_prompt
from tests.engine.loop.test_scheduler import step

ROOT = Path(__file__).resolve().parents[3]
BS = 4
PROPOSED = list(range(100, 100 + MAX_DRAFT_TOKENS))


def scheduler(num_blocks: int = 64, max_num_seqs: int = 4, budget: int = 64) -> Scheduler:
    manager = BlockManager(num_blocks, BS, max_num_seqs, False, draft_rows=MAX_DRAFT_TOKENS)
    return Scheduler(manager, max_num_seqs, budget, max_drafts=MAX_DRAFT_TOKENS)


def decoding(s: Scheduler, new_request, count: int, prompt_len: int = 3, **params) -> list[Request]:
    """`count` requests prefilled and sampled once: each decodes next, allowed the longest drafts."""
    params = {"max_tokens": 64, **params}
    requests = [new_request([20 + i] + [21] * (prompt_len - 1), **params) for i in range(count)]
    for request in requests:
        s.add(request)
    step(s)
    for request in requests:
        request.drafting.length = MAX_DRAFT_TOKENS
    return requests


def test_the_scheduler_imports_no_torch_and_no_model_code() -> None:
    source = (ROOT / "engine" / "loop" / "scheduler.py").read_text(encoding="utf-8")
    names = []
    for node in ast.walk(ast.parse(source)):  # nested and TYPE_CHECKING imports count too
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    assert not [name for name in names if name.partition(".")[0] in ("torch", "model")]
    # nor does anything it imports, however deep
    probe = "import engine.loop.scheduler, sys; print(sorted(m.split('.')[0] for m in sys.modules))"
    run = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert not {"torch", "model"} & set(ast.literal_eval(run.stdout))


def test_a_step_verifies_a_prefix_of_the_proposals_trimmed_to_the_shared_rows(new_request) -> None:
    s = scheduler()
    older, newer = decoding(s, new_request, 2)
    older.spec_token_ids, newer.spec_token_ids = list(PROPOSED), list(PROPOSED)
    drafts = {chunk.request: chunk.drafts for chunk in s.schedule().chunks}
    rows = draft_rows(2)  # 14: the older request takes them all, oldest first
    assert drafts == {older: PROPOSED[:rows], newer: []}


def test_a_request_near_its_length_limit_verifies_only_what_it_may_still_emit(new_request) -> None:
    s = scheduler()
    (request,) = decoding(s, new_request, 1, max_tokens=5)  # 1 generated: 4 more, the fed token's among them
    request.spec_token_ids = list(PROPOSED)
    (chunk,) = s.schedule().chunks
    assert chunk.drafts == PROPOSED[:3]


def test_a_preempted_request_drops_its_proposals(new_request) -> None:
    s = scheduler(num_blocks=2)  # two 4-token prompts fill a block each: the next token preempts
    older, newer = decoding(s, new_request, 2, prompt_len=BS)
    older.spec_token_ids, newer.spec_token_ids = list(PROPOSED), list(PROPOSED)
    out = s.schedule()
    assert out.preempted == [newer] and newer.status is RequestStatus.PREEMPTED
    assert newer.spec_token_ids == []
    assert list(s.draft_allowances()) == [older]  # newer recomputes first: no drafts for it yet


def test_allowances_cover_the_decoding_requests_and_a_busy_batch_drafts_only_if_seeded(new_request) -> None:
    s = scheduler(max_num_seqs=8)
    busy = decoding(s, new_request, DISABLE_BY_BATCH_SIZE - 1)
    seeded = decoding(s, new_request, 1, seed=3)[0]
    prefilling = new_request(list(range(20, 200)))  # longer than the budget: it samples nothing yet
    s.add(prefilling)
    step(s)
    # a busy batch drafts nothing, but a seeded request drafts by its own state alone
    assert s.draft_allowances() == {**dict.fromkeys(busy, 0), seeded: MAX_DRAFT_TOKENS}
    assert prefilling.status is RequestStatus.RUNNING  # still prefilling: no drafts


def test_a_step_verifies_what_the_runner_proposed_for_it(make_engine, tiny_ckpt) -> None:
    """Drafting from the model itself: every proposal is verified whole and accepted whole, from
    the first decode step on."""
    engine = make_engine(tiny_ckpt, draft_model=str(tiny_ckpt))
    params = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    engine.add_request(random_prompt(30, seed=40), params)
    (request,) = engine.scheduler.waiting
    engine.step()  # the prompt's prefill samples the first token
    assert request.spec_token_ids == []
    for _ in range(4):
        drafted, generated = engine.metrics.spec_draft_tokens, request.num_output_tokens
        engine.step()
        proposed = request.spec_token_ids
        assert proposed and engine.metrics.spec_draft_tokens - drafted == len(proposed)  # alone: none trimmed
        assert request.output_token_ids[generated:-1] == proposed


@given(st.lists(st.integers(0, 3), min_size=1, max_size=40), st.integers(0, 16), st.integers(0, 16))
def test_ngram_drafts_for_fewer_tokens_are_a_prefix_of_those_for_more(tokens, fewer, more) -> None:
    """The scheduler's trim must leave exactly what a smaller proposal would have been."""
    fewer, more = sorted((fewer, more))
    assert NgramIndex().draft(tokens, fewer) == NgramIndex().draft(tokens, more)[:fewer]
    grown = NgramIndex()
    grown.draft(tokens[: len(tokens) // 2], more)  # an index that read a shorter history first
    assert grown.draft(tokens, more) == NgramIndex().draft(tokens, more)


def test_a_request_id_used_again_after_release_drafts_from_its_own_tokens(new_request) -> None:
    """The engine releases a finished request's proposer state: an index built on another history
    would point past the new one's tokens."""
    proposer = NgramProposer()
    first = new_request([1, 2, 3] * 10 + [4, 1, 2])
    proposer.propose_for(first, 4)
    proposer.release(first.request_id)
    again = dataclasses.replace(new_request([4, 1, 2, 3, 4, 1, 2]), request_id=first.request_id)
    assert proposer.propose_for(again, 4) == [3, 4, 1, 2]
