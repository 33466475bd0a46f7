"""The official `openai` client against lfm-chat serve: what other tools will talk to it with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from engine import Engine, SamplingParams
from tests.server.conftest import MODEL

MESSAGES = [{"role": "user", "content": "Write a haiku about the sea."}]


@pytest.fixture
def client(server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0)


def expected(reference: Engine, max_tokens: int) -> str:
    ids = reference.tokenizer.encode_chat(MESSAGES)
    return reference.generate([ids], SamplingParams(temperature=0.0, max_tokens=max_tokens))[0].text


def test_non_streaming_chat(client: openai.OpenAI, reference: Engine) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0, max_tokens=20)
    assert reply.choices[0].message.content == expected(reference, 20)
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage is not None and reply.usage.prompt_tokens > 0
    assert reply.usage.prompt_tokens_details is not None


def test_streaming_chat_with_usage(client: openai.OpenAI, reference: Engine) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        temperature=0,
        max_completion_tokens=20,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected(reference, 20)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_vllm_sampling_fields_go_in_extra_body(client: openai.OpenAI, reference: Engine) -> None:
    extra = {"top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2}
    reply = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, temperature=0.8, seed=3, max_tokens=12, extra_body=extra
    )
    ids = reference.tokenizer.encode_chat(MESSAGES)
    params = SamplingParams(temperature=0.8, seed=3, max_tokens=12, **extra)
    assert reply.choices[0].message.content == reference.generate([ids], params)[0].text


def test_completions_and_models(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [MODEL]
    reply = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8, temperature=0)
    assert reply.choices[0].text
    streamed = client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=8, temperature=0, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == reply.choices[0].text


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda c: c.chat.completions.create(model="nope", messages=MESSAGES), openai.NotFoundError),
        (lambda c: c.chat.completions.create(model=MODEL, messages=MESSAGES, n=17), openai.BadRequestError),
    ],
)
def test_errors_arrive_as_the_clients_exceptions(
    client: openai.OpenAI, call: Callable[[openai.OpenAI], Any], error: type[Exception]
) -> None:
    with pytest.raises(error) as caught:
        call(client)
    assert isinstance(caught.value, openai.APIStatusError)
    assert caught.value.body is not None  # OpenAI's error object, parsed by the client


def test_a_wrong_key_is_an_authentication_error(serve: Callable[..., Any]) -> None:
    with serve(api_key="sesame") as url:
        wrong = openai.OpenAI(base_url=f"{url}/v1", api_key="guess", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
        right = openai.OpenAI(base_url=f"{url}/v1", api_key="sesame", max_retries=0)
        assert [m.id for m in right.models.list()] == [MODEL]
