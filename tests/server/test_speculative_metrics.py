"""/metrics counts speculative decoding under vLLM's names, and `speculative="off"` drafts nothing."""

from __future__ import annotations

import httpx
import pytest

from engine import SamplingParams
from tests.engine.conftest import random_prompt
from tests.server.conftest import MODEL
from tests.server.helpers import idle, scrape
from tests.waiting import wait_for

NAMES = {
    "vllm:spec_decode_num_drafts_total": "spec_drafts",
    "vllm:spec_decode_num_draft_tokens_total": "spec_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens_total": "spec_accepted_tokens",
}


@pytest.fixture(scope="module")
def echo_prompt(make_engine) -> list[int]:
    """P + C + P, C the greedy reply to P: the tiny model mostly repeats C, so drafts are accepted."""
    first = random_prompt(20, 31)
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    reply = make_engine(speculative="off").generate([first], params)[0].token_ids
    return first + reply + first


@pytest.mark.parametrize("speculative", ["ngram", "off"])
def test_metrics_export_the_engines_draft_counts(serve, make_engine, echo_prompt, speculative) -> None:
    engine = make_engine(speculative=speculative)
    with serve(engine) as url:
        body = {"model": MODEL, "prompt": echo_prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
        assert httpx.post(f"{url}/v1/completions", json=body, timeout=60).status_code == 200
        wait_for(lambda: idle(url), "the server to go idle")
        samples = scrape(url)
    counts = {name: getattr(engine.metrics, field) for name, field in NAMES.items()}
    assert {name: samples[name] for name in NAMES} == counts
    if speculative == "off":
        assert set(counts.values()) == {0}
    else:
        drafts, drafted, accepted = counts.values()
        assert 0 < drafts <= drafted and accepted > 0
