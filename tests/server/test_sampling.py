"""logprobs, logit_bias, n and seed through `serve`, with the official `openai` client: OpenAI's
shapes, streamed and not, equal to what the engine gives for the same request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from engine import Engine, SamplingParams
from engine.core.sampling_params import MAX_LOGIT_BIAS_ENTRIES
from tests.server.conftest import MODEL

MESSAGES = [{"role": "user", "content": "Name three colours."}]
TOL = 1e-4


@pytest.fixture
def client(server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0)


def engine_reply(reference: Engine, params: SamplingParams, prompt: list[int] | None = None):
    ids = prompt if prompt is not None else reference.tokenizer.encode_chat(MESSAGES)
    return reference.generate([ids], params)[0]


def test_chat_logprobs_are_the_engines_in_openais_shape_streamed_and_not(
    client: openai.OpenAI, reference: Engine
) -> None:
    ask = {"model": MODEL, "messages": MESSAGES, "temperature": 0, "max_tokens": 8, "logprobs": True}
    reply = client.chat.completions.create(**ask, top_logprobs=3)
    expected = engine_reply(reference, SamplingParams(temperature=0, max_tokens=8, logprobs=3))
    content = reply.choices[0].logprobs.content
    shown = expected.logprobs[: len(content)]
    assert len(content) == len(expected.token_ids) - (reply.choices[0].finish_reason == "stop")
    for entry, mine in zip(content, shown, strict=True):
        assert entry.token == reference.tokenizer.decode([mine.token_id], skip_special_tokens=False)
        assert entry.bytes == list(
            reference.tokenizer.token_bytes(mine.token_id)
        )  # part of a character or not
        assert entry.logprob == pytest.approx(mine.logprob, abs=TOL)
        assert [top.logprob for top in entry.top_logprobs] == pytest.approx([v for _, v in mine.top], abs=TOL)
        assert len(entry.top_logprobs) == 3
    assert "".join(entry.token for entry in content) == reply.choices[0].message.content

    chunks = list(client.chat.completions.create(**ask, top_logprobs=3, stream=True))
    streamed = [
        e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content
    ]
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in content]

    plain = client.chat.completions.create(**{**ask, "logprobs": False})
    assert plain.choices[0].logprobs is None
    bare = client.chat.completions.create(**ask)
    assert all(entry.top_logprobs == [] for entry in bare.choices[0].logprobs.content)


def test_logprob_bytes_are_each_tokens_own_where_tokens_split_a_character(client: openai.OpenAI) -> None:
    """The tiny vocabulary spells these characters byte by byte: each such token shows U+FFFD (as
    vLLM does) but its bytes are its own, so the joined bytes are the reply (OpenAI's contract)."""
    text = "世界🦀"
    ask = {
        "model": MODEL,
        "messages": MESSAGES,
        "max_tokens": 20,
        "logprobs": True,
        "top_logprobs": 2,
        "extra_body": {"structured_outputs": {"regex": text}},
    }
    reply = client.chat.completions.create(**ask)
    assert reply.choices[0].message.content == text
    content = reply.choices[0].logprobs.content
    assert any(entry.token == "\ufffd" for entry in content)
    assert b"".join(bytes(entry.bytes) for entry in content) == text.encode()
    for entry in content:
        assert all(
            bytes(top.bytes) == top.token.encode() or top.token == "\ufffd" for top in entry.top_logprobs
        )
    chunks = client.chat.completions.create(**ask, stream=True)
    streamed = [
        e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content
    ]
    assert b"".join(bytes(entry.bytes) for entry in streamed) == text.encode()


def test_completion_logprobs_streamed_and_not(client: openai.OpenAI, reference: Engine) -> None:
    ask = {"model": MODEL, "prompt": "Once upon a time", "temperature": 0, "max_tokens": 6, "logprobs": 2}
    reply = client.completions.create(**ask)
    logprobs = reply.choices[0].logprobs
    prompt = reference.tokenizer.encode("Once upon a time", add_special_tokens=True)
    expected = engine_reply(reference, SamplingParams(temperature=0, max_tokens=6, logprobs=2), prompt)
    shown = expected.logprobs[: len(logprobs.tokens)]
    assert logprobs.token_logprobs == pytest.approx([e.logprob for e in shown], abs=TOL)
    assert all(len(top) <= 2 for top in logprobs.top_logprobs)
    offsets = [0]
    for token in logprobs.tokens[:-1]:
        offsets.append(offsets[-1] + len(token))
    assert logprobs.text_offset == offsets

    chunks = list(client.completions.create(**ask, stream=True))
    merged: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for chunk in chunks:
        if chunk.choices[0].logprobs:
            for key, values in merged.items():
                values += getattr(chunk.choices[0].logprobs, key)
    assert merged == logprobs.model_dump()


def test_n_choices_share_one_prompt_read_streamed_and_not(
    serve: Callable[..., Any], make_engine: Callable[..., Engine], reference: Engine
) -> None:
    engine = make_engine()
    ask = {"model": MODEL, "messages": MESSAGES, "temperature": 1.0, "seed": 11, "max_tokens": 10}
    with serve(engine=engine) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(**ask, n=4)
        assert engine.metrics.prefill_tokens == reply.usage.prompt_tokens  # the prompt computed once

        chunks = list(
            client.chat.completions.create(**ask, n=4, stream=True, stream_options={"include_usage": True})
        )
    assert [choice.index for choice in reply.choices] == [0, 1, 2, 3]
    texts = [choice.message.content for choice in reply.choices]
    assert len(set(texts)) > 1, "seeded branches draw differently"
    generated = 0
    for index, text in enumerate(texts):
        alone = engine_reply(reference, SamplingParams(temperature=1.0, seed=11 + index, max_tokens=10))
        assert text == alone.text  # branch i is the request seeded 11 + i
        generated += len(alone.token_ids)
    streamed = [
        "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
        for i in range(4)
    ]
    assert streamed == texts
    finishes = [c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason]
    assert sorted(finishes) == [0, 1, 2, 3]
    usage = chunks[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        reply.usage.prompt_tokens,
        reply.usage.completion_tokens,
    )
    assert usage.prompt_tokens == len(reference.tokenizer.encode_chat(MESSAGES))
    assert usage.completion_tokens == generated  # summed over the choices


def test_seed_gives_the_same_reply_and_completions_take_n(client: openai.OpenAI) -> None:
    ask = {"model": MODEL, "prompt": "The sea", "temperature": 1.2, "seed": 5, "max_tokens": 12, "n": 2}
    first, second = client.completions.create(**ask), client.completions.create(**ask)
    assert [c.text for c in first.choices] == [c.text for c in second.choices]
    assert [c.index for c in first.choices] == [0, 1]


def test_logit_bias_forces_a_token(client: openai.OpenAI, reference: Engine) -> None:
    forced = reference.tokenizer.encode(" blue")[0]
    reply = client.completions.create(
        model=MODEL, prompt="Sky:", max_tokens=5, temperature=1.0, logit_bias={str(forced): 100}, logprobs=0
    )
    tokens = reply.choices[0].logprobs.tokens
    assert tokens == [reference.tokenizer.decode([forced], skip_special_tokens=False)] * 5


def test_hostile_values_are_a_400_naming_the_field_and_the_server_stays_responsive(
    client: openai.OpenAI, server: str, reference: Engine
) -> None:
    calls = {
        "n": {"n": 10000},
        "top_logprobs": {"logprobs": True, "top_logprobs": 1000},
        "logit_bias": {"logit_bias": {str(i): 1 for i in range(MAX_LOGIT_BIAS_ENTRIES + 1)}},
    }
    for param, extra in calls.items():
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2, **extra)
        assert caught.value.body["param"] == param
        assert param in caught.value.body["message"]
    # a bias on every token of the vocabulary is legal, and bounded
    every = {str(i): -1 for i in range(reference.model_config.vocab_size)}
    reply = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3, logit_bias=every)
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert httpx.get(f"{server}/v1/models").status_code == 200
