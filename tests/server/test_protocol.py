"""Request bodies -> engine inputs, without HTTP: defaults, the fields clients really send, refusals."""

from __future__ import annotations

import pytest

from engine import SamplingParams
from server.errors import ApiError
from server.protocol import Limits, parse_chat, parse_completion, parse_json

CARD = {"temperature": 0.3, "min_p": 0.15, "repetition_penalty": 1.05}
LIMITS = Limits(max_tokens=512, sampling=CARD)
HELLO = [{"role": "user", "content": "hi"}]


def test_omitted_fields_take_the_card_defaults_and_given_ones_win() -> None:
    chat = parse_chat({"messages": HELLO}, LIMITS)
    assert chat.params == SamplingParams(**CARD, max_tokens=512)
    assert not chat.stream and not chat.include_usage and chat.model is None
    chat = parse_chat(
        {"messages": HELLO, "temperature": 0, "max_completion_tokens": 9, "stop": "END"}, LIMITS
    )
    assert (chat.params.temperature, chat.params.max_tokens, chat.params.stop) == (0, 9, ["END"])
    assert chat.params.min_p == 0.15


def test_nulls_count_as_not_given() -> None:
    body = {
        "messages": HELLO,
        "temperature": None,
        "max_tokens": None,
        "n": None,
        "stream": None,
        "stop": None,
    }
    body |= {"stream_options": None, "logprobs": None, "tools": None, "seed": None}
    assert parse_chat(body, LIMITS).params == SamplingParams(**CARD, max_tokens=512)


def test_message_forms() -> None:
    messages = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "name": "bot"},
    ]
    assert parse_chat({"messages": messages}, LIMITS).messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": ""},
    ]


def test_stream_options_and_defaults_for_unsupported_fields() -> None:
    body = {"messages": HELLO, "stream": True, "stream_options": {"include_usage": True}, "n": 1}
    body |= {"logprobs": False, "response_format": {"type": "text"}, "user": "me", "unknown_field": 1}
    chat = parse_chat(body, LIMITS)
    assert chat.stream and chat.include_usage


def test_completion_prompts() -> None:
    assert parse_completion({"prompt": "x"}, LIMITS).prompt == "x"
    assert parse_completion({"prompt": ["x"]}, LIMITS).prompt == "x"
    assert parse_completion({"prompt": [1, 2]}, LIMITS).prompt == [1, 2]
    assert parse_completion({"prompt": [[1, 2]]}, LIMITS).prompt == [1, 2]
    with pytest.raises(ApiError, match="one string"):
        parse_completion({"prompt": [True]}, LIMITS)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"{", "not valid JSON"),
        (b"3", "JSON object"),
        (b"\xff", "not valid JSON"),
        (b"[" * 10**5, "not valid JSON"),
    ],
)
def test_bodies_that_are_no_json_object(raw: bytes, says: str) -> None:
    with pytest.raises(ApiError, match=says) as caught:
        parse_json(raw)
    assert caught.value.status == 400


def test_sampling_errors_name_the_field_as_the_client_spelled_it() -> None:
    with pytest.raises(ApiError) as caught:
        parse_chat({"messages": HELLO, "top_p": 2}, LIMITS)
    assert caught.value.param == "top_p"
    assert caught.value.message.startswith("top_p must be a number in (0, 1]")
    with pytest.raises(ApiError, match="at most 512") as caught:
        parse_chat({"messages": HELLO, "max_tokens": 513}, LIMITS)
    assert caught.value.param == "max_tokens"
