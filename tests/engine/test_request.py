"""Request-level stopping and streaming text: stop tokens, stop strings, max_tokens, deltas."""

from __future__ import annotations

import pytest

from engine.request import RequestStatus
from model.tokenizer import IncrementalDetokenizer, Tokenizer

TEXT = "Hello! How are you today? I am fine, thank you. 🙂 The end."


@pytest.fixture(scope="module")
def tokenizer(tiny_ckpt) -> Tokenizer:
    return Tokenizer.from_pretrained(tiny_ckpt)


def feed(request, ids: list[int]) -> list[str]:
    """Append ids one by one as steps would; return the text delta reported after each."""
    deltas = []
    for token in ids:
        request.append_token(token, now=0.0)
        deltas.append(request.take_output().new_text)
        if request.is_finished:
            break
    return deltas


def make(new_request, tokenizer, **params):
    return new_request(
        [20, 21],
        max_tokens=params.pop("max_tokens", 100),
        detokenizer=IncrementalDetokenizer(tokenizer, [20, 21]),
        **params,
    )


def test_streamed_deltas_add_up_to_the_decoded_text(new_request, tokenizer):
    ids = tokenizer.encode(TEXT)
    request = make(new_request, tokenizer)
    deltas = feed(request, ids)
    assert "".join(deltas) == TEXT == request.text
    assert not request.is_finished


@pytest.mark.parametrize("stop", ["you", "thank you.", "🙂", "!"])
def test_stop_string_cuts_the_text_before_it_and_never_streams_part_of_it(new_request, tokenizer, stop):
    request = make(new_request, tokenizer, stop=["zzz", stop])
    deltas = feed(request, tokenizer.encode(TEXT))
    expected = TEXT[: TEXT.index(stop)]
    assert request.status is RequestStatus.FINISHED_STOPPED
    assert request.text == expected and "".join(deltas) == expected


def test_stop_token_finishes_without_becoming_text(new_request, tokenizer):
    im_end = tokenizer.token_to_id("<|im_end|>")
    request = make(new_request, tokenizer, stop_ids={im_end})
    feed(request, [*tokenizer.encode("Hello"), im_end, *tokenizer.encode(" more")])
    assert request.status is RequestStatus.FINISHED_STOPPED
    assert request.text == "Hello" and request.output_token_ids[-1] == im_end


def test_max_tokens_finishes_with_length_and_flushes_a_split_character(new_request, tokenizer):
    ids = tokenizer.encode("ab🙂")
    assert len(tokenizer.encode("🙂")) > 1  # the emoji spans several byte tokens
    request = make(new_request, tokenizer, max_tokens=len(ids) - 1)
    deltas = feed(request, ids)
    assert request.status is RequestStatus.FINISHED_LENGTH
    assert "".join(deltas) == request.text == tokenizer.decode(ids[:-1])
    assert request.metrics.generated_tokens == len(ids) - 1
