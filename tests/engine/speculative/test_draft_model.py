"""A draft model (EngineConfig.draft_model) drafts for speculative decoding without changing a token.

Its drafts must be exactly the draft model's own greedy continuation of each request's tokens
(the shadow cache holds the committed tokens only, so a rejected draft leaves nothing behind),
greedy output must be the same with it as without it, and its cache must be given back.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch

from engine import Engine, EngineConfig, SamplingParams
from engine.sample.sampler import SamplingRow
from engine.speculative.draft_model import CATCH_UP_TOKENS, ModelDrafter
from model.arch.lfm2 import Lfm2ForCausalLM
from model.checkpoint.loader import load_model
from model.errors import CheckpointError
from model.text.tokenizer import Tokenizer
from tests.engine.conftest import random_prompt
from tests.engine.speculative.test_speculative import SCHEDULES

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
DRAFT_PRESET = "lfm2_like"  # another model with the tiny LFM2 checkpoints' tokenizer
# another model with each preset's tokenizer (LFM3's tiny checkpoints have their own)
DRAFT_PRESETS = {"default": DRAFT_PRESET, "moe": DRAFT_PRESET, "lfm3": "lfm3_plain"}


class Draft(NamedTuple):
    model: Lfm2ForCausalLM
    tokenizer: Tokenizer


@pytest.fixture
def draft(tiny_ckpt_factory) -> Draft:
    path = tiny_ckpt_factory(DRAFT_PRESET)
    return Draft(load_model(path, "float32"), Tokenizer.from_pretrained(path))


def greedy_continuation(
    draft: Draft, tokens: list[int], count: int, params: SamplingParams | None = None
) -> list[int]:
    """``count`` argmax tokens after ``tokens`` from a fresh engine on the draft model (no speculation)."""
    engine = Engine(draft.model, draft.tokenizer, EngineConfig(dtype="float32", speculative="off"))
    params = params or SamplingParams(temperature=0.0, max_tokens=count, ignore_eos=True)
    return engine.generate([tokens], params)[0].token_ids


def make_drafter(draft: Draft, num_blocks: int = 64, block_size: int = 4) -> ModelDrafter:
    return ModelDrafter(draft.model, num_blocks, block_size, max_shadows=4)


def test_drafts_are_the_draft_models_own_greedy_continuation(draft):
    drafter = make_drafter(draft)
    tokens = random_prompt(23, seed=1)
    assert drafter.propose("a", tokens, 5) == greedy_continuation(draft, tokens, 5)


def test_with_penalties_drafts_follow_the_penalized_greedy_continuation(draft):
    """A repetition penalty changes the target's pick, so the drafts rank tokens after it too, the
    history running on through the drafts."""
    params = SamplingParams(temperature=0.0, repetition_penalty=1.8, max_tokens=6, ignore_eos=True)
    tokens = random_prompt(9, seed=10)
    penalized = SamplingRow(params, torch.Generator(), tokens, [])
    expected = greedy_continuation(draft, tokens, 6, params)
    assert expected != greedy_continuation(draft, tokens, 6)  # the penalty matters here
    assert make_drafter(draft).propose("a", tokens, 6, penalized) == expected


@pytest.mark.slow
def test_after_rejected_drafts_the_shadow_holds_only_the_kept_tokens(draft):
    """The target kept other tokens than the drafts, twice: each next proposal is still the greedy
    continuation of the tokens as they are, as if nothing had been drafted before."""
    drafter = make_drafter(draft)
    tokens = random_prompt(17, seed=2)
    for step, kept in enumerate([[7, 300], [41], [9, 9, 9]]):
        drafts = drafter.propose("a", tokens, 4)
        assert drafts == greedy_continuation(draft, tokens, 4), f"round {step}"
        tokens = tokens + kept
    # every draft accepted, then the bonus token: the shadow catches up through all of them
    drafts = drafter.propose("a", tokens, 3)
    tokens = tokens + drafts + [5]
    assert drafter.propose("a", tokens, 3) == greedy_continuation(draft, tokens, 3)


def test_a_long_context_is_read_over_several_steps_before_drafting(draft):
    drafter = make_drafter(draft, num_blocks=256)
    tokens = random_prompt(2 * CATCH_UP_TOKENS + 40, seed=3)
    assert drafter.propose("a", tokens, 3) == []
    assert drafter.propose("a", tokens, 3) == []
    assert drafter.propose("a", tokens, 3) == greedy_continuation(draft, tokens, 3)


def test_a_short_pool_drops_the_least_recent_shadow_and_stays_exact(draft):
    """Room for one 20-token context: each request evicts the other and catches up again."""
    drafter = make_drafter(draft, num_blocks=6, block_size=4)
    first, second = random_prompt(18, seed=4), random_prompt(19, seed=5)
    for _ in range(2):
        assert drafter.propose("a", first, 3) == greedy_continuation(draft, first, 3)
        assert drafter.propose("b", second, 3) == greedy_continuation(draft, second, 3)
    assert drafter.propose("c", random_prompt(40, seed=6), 3) == []  # more than the whole pool
    drafter.release("a")
    drafter.release("b")
    assert drafter.free_blocks == drafter.num_blocks


# every schedule on LFM2; the other architectures on the schedule their layers make hardest
CASES = [("default", schedule) for schedule in sorted(SCHEDULES)]
CASES += [("moe", "preempting"), ("lfm3", "chunked")]


@pytest.mark.parametrize(("preset", "schedule"), CASES)
@pytest.mark.parametrize("drafting", ["itself", "another"])
def test_greedy_tokens_are_identical_with_a_draft_model(
    preset, schedule, drafting, tiny_ckpt_factory, make_engine
):
    """Drafting from the target itself accepts every draft; from another model, nearly none."""
    path = tiny_ckpt_factory(preset)
    draft_path = path if drafting == "itself" else tiny_ckpt_factory(DRAFT_PRESETS[preset])
    config = SCHEDULES[schedule]
    batch = [random_prompt(n, seed=10 + i) for i, n in enumerate([20, 9, 100, 3])]
    plain = [o.token_ids for o in make_engine(path, speculative="off", **config).generate(batch, GREEDY)]
    engine = make_engine(path, draft_model=str(draft_path), **config)
    assert [o.token_ids for o in engine.generate(batch, GREEDY)] == plain
    metrics = engine.metrics
    assert metrics.spec_draft_tokens > 0
    if draft_path == path:
        assert metrics.spec_accepted_tokens == metrics.spec_draft_tokens
    else:
        assert metrics.spec_accepted_tokens < metrics.spec_draft_tokens
    drafter = engine.runner.proposer
    assert drafter.free_blocks == drafter.num_blocks
    assert engine.block_manager.num_used_blocks == 0


def test_drafting_from_itself_with_penalties_accepts_every_draft(tiny_ckpt, make_engine):
    params = SamplingParams(temperature=0.0, repetition_penalty=1.3, max_tokens=24, ignore_eos=True)
    batch = [random_prompt(n, seed=20 + n) for n in (12, 30)]
    plain = [o.token_ids for o in make_engine(tiny_ckpt, speculative="off").generate(batch, params)]
    engine = make_engine(tiny_ckpt, draft_model=str(tiny_ckpt))
    assert [o.token_ids for o in engine.generate(batch, params)] == plain
    assert 0 < engine.metrics.spec_accepted_tokens == engine.metrics.spec_draft_tokens


def test_an_aborted_request_gives_back_its_shadow(tiny_ckpt, make_engine):
    engine = make_engine(tiny_ckpt, draft_model=str(tiny_ckpt))
    request_id = engine.add_request(random_prompt(30, seed=7), GREEDY)
    while engine.metrics.spec_draft_tokens == 0:
        engine.step()
    drafter = engine.runner.proposer
    assert drafter.free_blocks < drafter.num_blocks
    engine.abort(request_id)
    assert drafter.free_blocks == drafter.num_blocks


def test_an_engine_built_from_a_loaded_model_loads_the_draft_its_config_names(tiny_ckpt):
    model = load_model(tiny_ckpt, "float32")
    config = EngineConfig(dtype="float32", draft_model=str(tiny_ckpt))
    engine = Engine(model, Tokenizer.from_pretrained(tiny_ckpt), config)
    assert isinstance(engine.runner.proposer, ModelDrafter)
    engine.generate([random_prompt(12, seed=30)], GREEDY)
    assert 0 < engine.metrics.spec_accepted_tokens == engine.metrics.spec_draft_tokens


def test_a_draft_model_with_another_tokenizer_is_refused(tiny_ckpt, tiny_ckpt_factory, make_engine):
    other = tiny_ckpt_factory("default", vocab_size=640)
    with pytest.raises(CheckpointError, match="another tokenizer"):
        make_engine(tiny_ckpt, draft_model=str(other))


def test_a_draft_model_needs_speculation_on(tiny_ckpt):
    with pytest.raises(ValueError, match="speculative on"):
        EngineConfig(speculative="off", draft_model=str(tiny_ckpt))


def test_the_zero_conv_row_stays_zero(draft):
    """Every shadow starts from row 0's zeros, so drafting must write only its own rows."""
    drafter = make_drafter(draft)
    drafter.propose("a", random_prompt(12, seed=8), 4)
    assert all(torch.count_nonzero(state[0]) == 0 for state in drafter.cache.conv)
